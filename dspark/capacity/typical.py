"""Seats for typical requests: how many requests of T tokens (plus a prefix-cache reserve) the pool seats at once.

Pure. Token arithmetic (pool ÷ T) holds where the pool is tokens of attention only; on vLLM every request
also holds blocks of its own that do not grow with its length (a hybrid model's linear-state blocks, a
sliding window's ring), so the count comes from the engine's block groups, as its "Maximum concurrency" does
(vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config: blocks ÷ blocks per request).
"""

from __future__ import annotations

import math
from typing import Any

from dspark.capacity.seats import seats_for_typical_context


def typical_context_seats(detail: Any, pool_tokens: int, typical: int, reserve: int) -> int:
    """Largest seat count whose requests of `typical` tokens, plus `reserve` cached tokens, fit at once (0 if none)."""
    groups = getattr(detail, "groups", None)
    num_blocks = getattr(detail, "num_blocks", None)
    if not groups or num_blocks is None:
        seats = seats_for_typical_context(pool_tokens, typical, reserve)
        # SGLang hybrids: the state pool caps running requests however short they are.
        slot_cap = getattr(detail, "slot_cap", None)
        return min(seats, slot_cap) if isinstance(slot_cap, int) and slot_cap > 0 else seats
    per_request = 0
    reserved = 0
    for group in groups:
        if group.kind == "mamba":
            per_request += group.blocks_per_request  # fixed per request: its state, not its length
        elif group.kind == "sliding":
            per_request += min(math.ceil(typical / group.block_size), group.blocks_per_request)
        else:
            per_request += math.ceil(typical / group.block_size)
            reserved += math.ceil(reserve / group.block_size)  # cached prefixes live in the growing groups
    return max(0, int(num_blocks - reserved) // per_request)
