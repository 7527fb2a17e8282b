"""Seat advice from a KV pool: memory-safe and typical-context seat counts, average-context bound, expert coverage."""

from __future__ import annotations

import math


def default_seats(safe_seats: int, engine_default: int) -> int:
    """Seats when nothing sets them: the safe count (every seat holds a full window), capped by the engine's own
    default (EngineSpec.default_max_num_seqs), which the computed default never exceeds."""
    return max(1, min(safe_seats, engine_default))


def safe_seats_full_window(max_concurrency: float) -> int:
    """Seats such that every seat can hold a full window at once: floor of full contexts (6.52 -> 6), at least 1."""
    return max(1, math.floor(max_concurrency + 1e-9))


def seats_for_typical_context(pool_tokens: int, typical_context: int, prefix_reserve_tokens: int = 0) -> int:
    """Largest seat count with seats * typical context + a prefix-cache reserve <= pool (0 if none fit)."""
    if typical_context <= 0:
        raise ValueError("typical_context must be positive")
    room = pool_tokens - prefix_reserve_tokens
    return max(0, room // typical_context)


def average_context_bound(pool_tokens: int, seats: int) -> int:
    """Largest average context per seat when all seats are busy: floor(pool / seats) (181,777 / 8 -> 22,722)."""
    if seats <= 0:
        raise ValueError("seats must be positive")
    return pool_tokens // seats


def expert_coverage(num_experts: int, top_k: int, tokens: int) -> float:
    """Expected share of routed experts one step of `tokens` tokens touches: 1 - (1 - k/E)^T (uniform routing)."""
    if num_experts <= 0 or not 0 < top_k <= num_experts:
        raise ValueError("need 0 < top_k <= num_experts")
    return 1.0 - (1.0 - top_k / num_experts) ** tokens


def tokens_for_expert_coverage(num_experts: int, top_k: int, share: float) -> int:
    """Fewest tokens per step whose expected expert coverage reaches `share` (E=512, k=10, 90% -> 117)."""
    if not 0 < share < 1:
        raise ValueError("share must be between 0 and 1")
    return math.ceil(math.log(1 - share) / math.log(1 - top_k / num_experts))
