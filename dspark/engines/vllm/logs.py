"""vLLM's start-up lines dspark reads: the KV pool and the non-default arguments. Pure."""

from __future__ import annotations

import ast
import re

# kv_cache_utils.update_kv_cache_capacity:
# "CPU KV cache size: 16,384 tokens, Maximum concurrency for 1,024 tokens per request: 16.00x"
KV_POOL_PATTERN = (
    r"KV cache size: ([\d,]+) tokens(?:, Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x)?"
)
# The patterns stay text, compiled by re (and cached there) when a line is first read: a plan reads no log.
_NON_DEFAULT = r"non-default args: (\{.*\})\s*$"


def engine_args(line: str) -> dict[str, object] | None:
    """`non-default args: {...}` (only values that differ from vLLM's defaults), by dest name; None otherwise."""
    m = re.search(_NON_DEFAULT, line)
    if m is None:
        return None
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


# The engine's own memory accounting, as its start-up lines print it (GiB, two decimals: format_gib).
# gpu_model_runner.load_model (0.32: "... took 15.27 GiB memory and 2.12 seconds"; 0.25's V2 runner: "... took
# 15.27 GiB and 2.12 seconds"), gpu_worker.determine_available_memory, profile_cudagraph_memory, and the CPU
# worker's determine_available_memory ("Auto set (X/Y) GiB for KV cache ...", "Explicitly set (X/Y) GiB ...").
_MODEL_LOADING = r"Model loading took ([\d.]+) GiB"
_AVAILABLE_KV = r"Available KV cache memory: ([\d.]+) GiB"
_CUDA_GRAPHS = r"Estimated CUDA graph memory: ([\d.]+) GiB total"
_GRAPHS_TAKEN = r"Graph capturing finished in [\d.]+ secs?, took ([-\d.]+) GiB"
_RESERVED_KV = r"Initial free memory ([\d.]+) GiB, reserved ([\d.]+) GiB memory for KV Cache"
_CPU_KV = (r"(Auto|Explicitly) set \(([\d.]+)/([\d.]+)\) GiB for KV cache on node \d+"
           r"(?:, with ([\d.]+) GiB requested memory for the worker\. ([\d.]+) GiB memory was consumed)?")
# MemoryProfilingResult.__repr__ (a debug line): "Memory profiling takes 1.2 seconds. Total non KV cache memory:
# 54.2GiB; torch peak memory increase: 2.93GiB; non-torch forward increase memory: 0.25GiB; weights memory: ..."
# (0.32 says "total consumed (from mem_get_info)" where 0.25 says "non-torch forward increase memory").
_PROFILE = r"Memory profiling takes [\d.]+ seconds\. (.*)$"
_PROFILE_TERM = r"([A-Za-z][A-Za-z ()_-]*?): ([\d.]+) ?GiB"
_PROFILE_NAMES = {
    "Total non KV cache memory": "non_kv_gib",
    "torch peak memory increase": "torch_peak_increase_gib",
    "non-torch forward increase memory": "non_torch_increase_gib",
    "total consumed (from mem_get_info)": "total_consumed_gib",
    "weights memory": "profiled_weights_gib",
}


def memory_terms(line: str) -> dict[str, float] | None:
    """The memory figures one start-up line states, by term (GiB as printed); None for any other line."""
    out: dict[str, float] = {}
    if m := re.search(_MODEL_LOADING, line):
        out["weights_gib"] = float(m.group(1))
    elif m := re.search(_AVAILABLE_KV, line):
        out["available_kv_gib"] = float(m.group(1))
    elif m := re.search(_CUDA_GRAPHS, line):
        out["cudagraph_estimate_gib"] = float(m.group(1))
    elif m := re.search(_GRAPHS_TAKEN, line):
        out["cudagraph_captured_gib"] = float(m.group(1))
    elif m := re.search(_RESERVED_KV, line):
        out |= {"initial_free_gib": float(m.group(1)), "available_kv_gib": float(m.group(2))}
    elif m := re.search(_CPU_KV, line):
        out |= {"available_kv_gib": float(m.group(2)), "node_total_gib": float(m.group(3))}
        if m.group(4) is not None:
            out |= {"requested_gib": float(m.group(4)), "non_kv_gib": float(m.group(5))}
    elif m := re.search(_PROFILE, line):
        for term in re.finditer(_PROFILE_TERM, m.group(1)):
            name = _PROFILE_NAMES.get(term.group(1).strip())
            if name is not None:
                out[name] = float(term.group(2))
    return out or None
