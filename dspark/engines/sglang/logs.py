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


# The engine's own memory accounting, as its start-up lines print it (GB = GiB, two decimals):
# ModelRunner.load_model ("Load weight end. ... avail mem=X GB, mem usage=Y GB."), the KV pool
# (MHATokenToKVPool._log_kv_size: "KV Cache is allocated. dtype: ..., #tokens: N, K size: X GB, V size: Y GB";
# one "KV size" where K and V are one buffer), the configurator's "Memory pool end. avail mem=X GB" and the
# graph runners' "Capture cuda graph end. ... mem usage=X GB, avail mem=Y GB."
_WEIGHTS = re.compile(r"Load weight end\..*avail mem=([\d.]+) GB, mem usage=([\d.]+) GB")
_KV_ALLOCATED = re.compile(r"KV Cache is allocated\. .*#tokens: (\d+), (?:K size: ([\d.]+) GB, V size: ([\d.]+) GB"
                           r"|KV size: ([\d.]+) GB)")
_POOL_END = re.compile(r"Memory pool end\. avail mem=([\d.]+) GB")
_GRAPHS = re.compile(r"Capture ([\w ]+?) end\..*mem usage=([\d.]+) GB, avail mem=([\d.]+) GB")


def memory_terms(line: str) -> dict[str, float] | None:
    """The memory figures one start-up line states, by term (GiB as printed); None for any other line."""
    if m := _WEIGHTS.search(line):
        return {"weights_gib": float(m.group(2)), "avail_after_weights_gib": float(m.group(1))}
    if m := _KV_ALLOCATED.search(line):
        kv = float(m.group(4)) if m.group(4) else float(m.group(2)) + float(m.group(3))
        return {"kv_tokens": float(m.group(1)), "kv_gib": round(kv, 2)}
    if m := _POOL_END.search(line):
        return {"avail_after_pool_gib": float(m.group(1))}
    if m := _GRAPHS.search(line):
        words = [w for w in m.group(1).lower().split() if w not in ("cuda", "graph")]
        return {f"cudagraph_{'_'.join(words) or 'capture'}_gib": float(m.group(2))}
    return None
