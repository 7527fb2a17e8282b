"""JSON files users hand to dspark (config.json, saved probes, safetensors indexes), read with bounds.

A config.json nested 100,000 levels deep, a number of 5,000 digits, or one that is not UTF-8, is bad input like a
syntax error: InputError naming the file, never a RecursionError, ValueError or UnicodeDecodeError escaping as an
internal error. The file itself is read by dspark.core.files (a regular file, within its kind's size limit).
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from dspark.core.errors import InputError
from dspark.core.files import MODEL_CONFIG, FileKind, read_text, shown_path

# Real configs nest a few levels (text_config.rope_scaling...); this is far above them and far below
# what would exhaust the stack in the code that walks the result.
MAX_JSON_DEPTH = 64
# Python's own cap on the digits of an integer read from text (sys.get_int_max_str_digits, 4,300 by default).
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300


def read_json_file(path: str | os.PathLike[str], kind: FileKind = MODEL_CONFIG, *, what: str = "",
                   hint: str | None = None) -> Any:
    """The file's JSON value; InputError naming the file (and line and column of a syntax error)."""
    label = f"{what} {shown_path(path)}".strip()
    text = read_text(path, kind)
    return parse_json_text(text, label, hint=hint)


def parse_json_text(text: str | bytes, label: str, *, hint: str | None = None, one_line: bool = False) -> Any:
    """JSON text to a value: no nesting past MAX_JSON_DEPTH, no NaN/Infinity, no integer of more digits than
    Python reads; InputError naming `label` (one_line: a line of a JSONL file, which `label` names)."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if one_line else f"line {exc.lineno}, column {exc.colno}"
        raise InputError(f"{label}: not JSON at {at}: {exc.msg}" if one_line
                         else f"{label}: not valid JSON at {at}: {exc.msg}", hint=hint) from None
    except RecursionError:
        raise InputError(f"{label}: JSON nested deeper than {MAX_JSON_DEPTH} levels", hint=hint) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{label}: not UTF-8 text (byte {exc.start})", hint=hint) from None
    except ValueError as exc:  # _no_constant, or an integer past Python's digit limit
        problem = str(exc)
        if "integer string conversion" in problem:
            problem = (f"a number with more than {_INT_DIGITS:,} digits (Python's limit for reading an integer); "
                       "no real value has that many")
        raise InputError(f"{label}: {problem}", hint=hint) from None
    shape = _shape_problem(value)
    if shape:
        raise InputError(f"{label}: {shape}", hint=hint)
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
