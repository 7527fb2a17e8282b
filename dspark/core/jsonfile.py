"""JSON files users hand to dspark (config.json, saved probes, safetensors indexes), read with bounds.

A config.json nested 100,000 levels deep, or one that is not UTF-8, is bad input like a syntax error:
InputError naming the file, never a RecursionError or UnicodeDecodeError escaping as an internal error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dspark.core.errors import InputError

# Real configs nest a few levels (text_config.rope_scaling...); this is far above them and far below
# what would exhaust the stack in the code that walks the result.
MAX_JSON_DEPTH = 64


def read_json_file(path: Path, *, what: str = "", hint: str | None = None) -> Any:
    """The file's JSON value; InputError naming the file (and line and column of a syntax error)."""
    label = f"{what} {path}".strip()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{label}: no such file", hint=hint) from None
    except OSError as exc:
        raise InputError(f"{label}: cannot be read ({exc.strerror or exc})", hint=hint) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start})", hint=hint) from None
    return parse_json_text(text, label, hint=hint)


def parse_json_text(text: str, label: str, *, hint: str | None = None) -> Any:
    """JSON text to a value: no nesting past MAX_JSON_DEPTH, no NaN/Infinity; InputError naming `label`."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{label}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                         hint=hint) from None
    except RecursionError:
        raise InputError(f"{label}: JSON nested deeper than {MAX_JSON_DEPTH} levels", hint=hint) from None
    except ValueError as exc:  # _no_constant
        raise InputError(f"{label}: {exc}", hint=hint) from None
    problem = _shape_problem(value)
    if problem:
        raise InputError(f"{label}: {problem}", hint=hint)
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"not valid JSON: {name} is not a number JSON allows")


def _shape_problem(value: Any) -> str | None:
    """Nesting past MAX_JSON_DEPTH, or a number too large to be finite (1e400), walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(node, float) and not math.isfinite(node):
            return f"a number too large to be finite ({node!r})"
    return None
