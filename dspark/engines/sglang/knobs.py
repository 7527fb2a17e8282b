"""SGLang's own knobs (dspark.core.knob): the KV pool pinned in tokens, or sized as a static share of GPU memory.

Light on purpose: the settings table (dspark.config.knobs) reads every engine's knobs without its planner.
"""

from __future__ import annotations

from collections.abc import Mapping

from dspark.core.knob import Knob, fraction, tokens

KNOBS: tuple[Knob, ...] = (
    Knob(
        "max_total_tokens",
        "DSPARK_KV_CACHE_TOKENS",
        None,
        "kv_cache.tokens",
        tokens,
        "a positive number of tokens",
        slot="kv_pin",
    ),
    Knob(
        "mem_fraction_static",
        "DSPARK_MEM_FRACTION_STATIC",
        None,
        "kv_cache.mem_fraction_static",
        fraction(upper_inclusive=False),
        "a fraction between 0 and 1 (e.g. 0.85)",
        slot="kv_share",
    ),
)

TITLE = "SGLang"  # how the docs name the engine
# Flags that set a knob through a field of another name (the flag reader derives the knob from them), for the docs.
DERIVED_FLAGS: Mapping[str, tuple[str, ...]] = {}
