"""vLLM's own knobs (dspark.core.knob): the KV pool pinned in bytes, or sized as a share of GPU memory.

Light on purpose: the settings table (dspark.config.knobs) reads every engine's knobs without its planner.
"""

from __future__ import annotations

from collections.abc import Mapping

from dspark.core.knob import Knob, fraction, size
from dspark.core.units import SIZE_UNITS_HELP

KNOBS: tuple[Knob, ...] = (
    Knob(
        "kv_cache_memory_bytes",
        "DSPARK_KV_CACHE_MEMORY",
        "--kv-cache-memory",
        "kv_cache.memory",
        size,
        f"a positive size: {SIZE_UNITS_HELP.removeprefix('use ')}",
        computed=True,
        help="KV pin per GPU: 28GB, 28GiB, 1073741824 (vLLM --kv-cache-memory-bytes; SGLang: the tokens it buys, "
        "as --max-total-tokens).",
        metavar="SIZE",
        rank=50,
        slot="kv_pin",
    ),
    Knob(
        "gpu_memory_utilization",
        "DSPARK_GPU_MEMORY_UTILIZATION",
        None,
        "kv_cache.gpu_memory_utilization",
        fraction(upper_inclusive=True),
        "a fraction above 0 and at most 1 (e.g. 0.85)",
        slot="kv_share",
    ),
)

TITLE = "vLLM"  # how the docs name the engine
# Flags that set a knob through a field of another name (the flag reader derives the knob from them), for the docs.
DERIVED_FLAGS: Mapping[str, tuple[str, ...]] = {"distributed_runtime": ("--distributed-executor-backend",)}
