"""vLLM's start-up lines dspark reads: the KV pool and the non-default arguments. Pure."""

from __future__ import annotations

import ast
import re

# kv_cache_utils.update_kv_cache_capacity:
# "CPU KV cache size: 16,384 tokens, Maximum concurrency for 1,024 tokens per request: 16.00x"
KV_POOL_PATTERN = (
    r"KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x)?"
)
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")


def engine_args(line: str) -> dict[str, object] | None:
    """`non-default args: {...}` (only values that differ from vLLM's defaults), by dest name; None otherwise."""
    m = _NON_DEFAULT.search(line)
    if m is None:
        return None
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None
