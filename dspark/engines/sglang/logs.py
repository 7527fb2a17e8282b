"""SGLang's start-up lines dspark reads: the KV pool and its ServerArgs. Pure."""

from __future__ import annotations

import ast
import contextlib
import re

# The scheduler's start-up log: "max_total_num_tokens=N, chunked_prefill_size=..., max_running_requests=..."
KV_POOL_PATTERN = r"max_total_num_tokens=(\d+)"
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)\s*$")


def engine_args(line: str) -> dict[str, object] | None:
    """`server_args=ServerArgs(...)` (every value): its keyword values that are Python literals; None otherwise."""
    m = _SERVER_ARGS.search(line)
    if m is None:
        return None
    try:
        call = ast.parse(f"f({m.group(1)})", mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(call, ast.Call):
        return None
    out: dict[str, object] = {}
    for kw in call.keywords:
        if kw.arg is None:
            continue
        with contextlib.suppress(ValueError, TypeError, SyntaxError, RecursionError):
            out[kw.arg] = ast.literal_eval(kw.value)
    return out
