"""What dspark hands vLLM's own scheduler for the workload replay (dspark_inside.vllm.replay_scheduler); pure.

The KV-cache part is the witness's planner request (the same layer specs, budget and settings, so the same
KVCacheConfig); the scheduler part is the plan's settings for the target platform: the block size, batched-token
budget, chunked prefill, prefix caching, mamba cache mode and speculative method dspark resolved for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

REPLAY_TOOL = "vllm.replay_scheduler"  # dspark_inside.vllm.replay_scheduler, run in the engine's interpreter
KV_USAGE_METRIC = "BlockPool.get_usage (the engine's scheduler)"  # what vllm:kv_cache_usage_perc reads
# vLLM plans each seat count's pool itself, from the plan's KV-cache part: no per-seat part from validate.
replay_seat_part: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None


class ReplayNotPossibleError(ValueError):
    """The plan gives the scheduler nothing it can be built on (no layer specs for the planner)."""


def simulator_name(version: str | None) -> str:
    """The `simulator` label of a replay through this engine's scheduler."""
    return f"vllm {version or '?'} scheduler"


def replay_notes(answer: Mapping[str, Any]) -> list[str]:
    """Nothing to add: the replay ran vLLM's own scheduler over its own KV-cache config."""
    del answer
    return []


def replay_engine_part(witness_request: Mapping[str, Any] | None, details: Mapping[str, Any], max_model_len: int,
                       mtp_layers: int) -> dict[str, Any]:
    """The replay request's plan and engine settings, from validate's witness request and capacity details."""
    if not witness_request or witness_request.get("engine") != "vllm":
        raise ReplayNotPossibleError("vLLM's scheduler is built on its planner's KVCacheConfig, and dspark hands "
                                     "its planner no layer specs for this model")
    method = details.get("speculative_method")
    tokens = details.get("num_speculative_tokens") or 0
    speculative = ({"method": method, "num_speculative_tokens": int(tokens), "mtp_layers": max(1, mtp_layers)}
                   if method and tokens else None)
    chunked = details.get("enable_chunked_prefill")
    return {
        "plan": dict(witness_request),
        "engine": {
            "max_model_len": int(max_model_len),
            "block_size": int(details["block_size"]),
            "max_num_batched_tokens": int(details["max_num_batched_tokens"]),
            "enable_chunked_prefill": True if chunked is None else bool(chunked),
            "enable_prefix_caching": bool(details.get("enable_prefix_caching")),
            "mamba_cache_mode": details.get("mamba_cache_mode") or "none",
            "speculative": speculative,
            # AsyncScheduler and the batch queue, as the plan's platform sets them (resolve.async_scheduling).
            "async_scheduling": bool(details.get("async_scheduling")),
            "max_concurrent_batches": int(details.get("max_concurrent_batches") or 1),
        },
    }
