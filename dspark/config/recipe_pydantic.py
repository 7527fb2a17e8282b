"""The recipe's annotated value types for pydantic: strict numbers, sizes and token counts, with their JSON Schema.

Read where pydantic builds the recipe's schema (dspark.config.recipe_schema), never when a recipe loads: the
annotations of dspark.config.recipe_model name these types, and stay text until that schema is built.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, Strict, WithJsonSchema

from dspark.config.recipe_values import count_value, size_value
from dspark.core.units import SIZE_PATTERN, SIZE_UNITS_HELP

__all__ = ["AfterValidator", "Annotated", "BeforeValidator", "ByteSize", "Field", "Real", "TokenCount", "Whole"]

# Strict numbers: YAML reads `true` as a bool, which lax validation would take as the count 1.
Whole = Annotated[int, Strict()]
Real = Annotated[float, Strict()]
# A positive strict int inside the before-validator, so the compiled schema checks it with pydantic-core's own int
# validator (no pydantic function in the schema to load at run time).
_Positive = Annotated[int, Strict(), Field(gt=0)]



def _int_or_text(pattern: str, description: str) -> WithJsonSchema:
    """What editors are told such a value may be: a positive int, or text the before-validator reads."""
    choices = [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string", "pattern": pattern}]
    return WithJsonSchema({"anyOf": choices, "description": description})


ByteSize = Annotated[
    _Positive,
    BeforeValidator(size_value),
    _int_or_text(SIZE_PATTERN, f"A size: {SIZE_UNITS_HELP.removeprefix('use ')}."),
]
TokenCount = Annotated[
    _Positive,
    BeforeValidator(count_value),
    _int_or_text(r"^\s*\d+(\.\d+)?[kKmMgG]?\s*$", "Tokens: an int, or vLLM's suffixes (8k = 8,000, 8K = 8,192)."),
]
