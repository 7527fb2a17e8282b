"""Seats for typical requests: how many requests of T tokens (plus a prefix-cache reserve) the engine seats at once.

Pure. Token arithmetic (pool ÷ T) holds where the pool is tokens of attention only; an engine whose requests
also hold blocks of their own that do not grow with their length (vLLM: a hybrid model's linear-state blocks,
a sliding window's ring), or that caps running requests below what the pool holds (SGLang: a hybrid's state
slots), counts in its own units, through its capacity figures (CapacityDetail).
"""

from __future__ import annotations

from dspark.capacity.result import CapacityDetail
from dspark.capacity.seats import seats_for_typical_context


def typical_context_seats(detail: CapacityDetail | None, pool_tokens: int, typical: int, reserve: int) -> int:
    """Largest seat count whose requests of `typical` tokens, plus `reserve` cached tokens, fit at once (0 if none).

    detail None (an observed pool, no engine figures): token arithmetic over the pool.
    """
    if detail is None:
        return seats_for_typical_context(pool_tokens, typical, reserve)
    return detail.typical_context_seats(pool_tokens, typical, reserve)
