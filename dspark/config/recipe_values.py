"""How a recipe's values are read before pydantic-core checks them: sizes, token counts, the name, `env:`. Pure.

The recipe's schema (dspark.config.recipe_schema) calls these by name, so they load with the recipe and cost no
pydantic.
"""

from __future__ import annotations

import re

from dspark.core.units import parse_count, parse_size

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")


def size_value(value: object) -> object:
    """Bytes for a size written as "28GB", before pydantic checks the int; other types fall through to its error."""
    if isinstance(value, str | int) and not isinstance(value, bool):
        return parse_size(value)
    return value


def count_value(value: object) -> object:
    """An int for a token count written as "256K" (bounded, as an int is), before pydantic checks it; other types
    fall through."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return parse_count(value)
    return value


def name_is_a_slug(value: str) -> str:
    """The recipe's name, or ValueError when it could not also be a file name."""
    if not _NAME_RE.fullmatch(value):
        raise ValueError("use lower-case letters, digits, '.', '_' and '-' (it is also a file name)")
    return value


def env_scalars_as_text(value: object) -> object:
    """Numbers in `env:` as the text an environment holds; other values fall through to pydantic's checks."""
    # YAML reads `VLLM_X: 4` as an int; an environment only holds text, and "4" is what was meant.
    # Booleans are not converted: "True" is rarely what a program expects for true.
    if isinstance(value, dict):
        return {k: (str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v) for k, v in value.items()}
    return value
