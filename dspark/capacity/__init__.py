"""Capacity as each engine computes it: pure functions, same inputs give the same numbers, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


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
    safe_max_num_seqs: int  # memory-safe default: every seat can hold a full window
    avg_context_at_max_num_seqs: int  # largest average context the seat count allows: pool // seats
    expert_coverage: float | None  # share of experts one decode step touches (MoE only)
    details: dict[str, object] = field(default_factory=dict)  # engine-specific figures (blocks, groups, ...)
    # Typical-context policy, when asked for: seats x typical context + a prefix-cache reserve <= pool.
    typical_context: int | None = None
    prefix_cache_reserve: int | None = None
    typical_context_seats: int | None = None  # engine-specific figures (blocks, groups, ...)
