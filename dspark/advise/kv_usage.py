"""The KV pool used, counted as the engine's own metric counts it (each engine's counting lives in its package,
dspark/engines/<engine>/kv_usage.py, and is found through the registry); tokens over the pool otherwise. Pure.
"""

from __future__ import annotations

from dspark.capacity import CapacitySummary
from dspark.capacity.usage import BlockGroup, KVCounting, KVPool, token_counting
from dspark.engines import ENGINE_NAMES, engine_spec

__all__ = ["BlockGroup", "KVCounting", "KVPool", "counting_for", "token_counting"]


def counting_for(capacity: CapacitySummary) -> KVCounting:
    """The engine's counting for this capacity; tokens over pool tokens when its groups are not exported."""
    if capacity.engine in ENGINE_NAMES:
        found = engine_spec(capacity.engine).kv_counting(capacity)
        if found is not None:
            return found
    return token_counting(capacity.kv_pool_tokens)
