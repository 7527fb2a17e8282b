"""Capacity as each engine computes it: pure functions, same inputs give the same numbers, no I/O.

Capacity has three rooms: dspark.capacity (the engine-neutral results and seat arithmetic every engine
shares), dspark/engines/<engine>/capacity.py (each engine's own accounting) and dspark.planning.capacity
(resolved settings -> CapacityInputs -> the model the engine's EngineSpec names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class ObservedPool:
    """The engine's own logged pool for this very plan (a recipe observation that applies), beside the prediction.

    kv_pool_tokens is None when only the contexts were logged; max_concurrency is then the logged figure, else
    pool / window.
    """

    kv_pool_tokens: int | None
    max_concurrency: float
    safe_max_num_seqs: int  # floor(max_concurrency), at least 1
    avg_context_at_max_num_seqs: int  # largest average context the seats allow in the observed pool (≤ window)
    source: str
    predicted_safe_max_num_seqs: int  # the prediction's own safe count (the summary's is the lower of the two)


@dataclass(frozen=True)
class CapacitySummary:
    """The engine-independent figures `dspark validate --json` prints under "capacity".

    kv_pool_tokens and max_concurrency are the two numbers of the engine's own log line
    (vLLM: "KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx";
    SGLang: max_total_num_tokens, and pool / context_len).
    """

    engine: str
    engine_version: str
    kv_pool_tokens: int
    max_concurrency: float
    max_model_len: int
    kv_bytes_per_token: int  # per GPU, all layers that grow with context
    kv_budget_bytes: int  # per GPU
    kv_budget_source: Literal["pinned", "estimate", "observed"]  # observed: the engine is not modelled
    kv_budget_assumptions: tuple[str, ...]
    cudagraph_max_capture_size: int
    cudagraph_capture_sizes: tuple[int, ...]
    max_num_seqs: int  # the seat count these figures were computed for
    safe_max_num_seqs: int  # memory-safe default: every seat can hold a full window (predicted and observed)
    avg_context_at_max_num_seqs: int  # largest average context the seat count allows: pool // seats
    expert_coverage: float | None  # share of experts one decode step touches (MoE only)
    details: dict[str, object] = field(default_factory=dict)  # engine-specific figures (blocks, groups, ...)
    # Typical-context policy, when asked for: seats x typical context + a prefix-cache reserve <= pool.
    typical_context: int | None = None
    prefix_cache_reserve: int | None = None
    typical_context_seats: int | None = None  # requests of the typical context (+ reserve) the engine runs at once
    # Sliding-window layers (vLLM keeps only the window's tokens): the window in tokens, and what a token costs per
    # GPU while inside it (the sliding layers plus every layer that grows with context). None: no such layers, every
    # token costs kv_bytes_per_token.
    sliding_window: int | None = None
    kv_bytes_per_token_in_window: int | None = None
    observed: ObservedPool | None = None  # the engine's own log for this plan, where a recipe observation applies
