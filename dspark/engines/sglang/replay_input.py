"""What dspark hands SGLang's own Scheduler for the workload replay (dspark_inside.sglang.replay_scheduler); pure.

SGLang's pools are sized by dspark's plan (its model of SGLang's sizing, the figures `dspark validate` shows):
max_total_num_tokens, max_running_requests and the Mamba state slots at each seat count, the page size, the
chunked-prefill size, the speculative algorithm and its sizes, the Mamba radix-cache strategy and the scheduling
flags of the launch. SGLang's own sizing is not run again: it needs the model directory and the memory readings,
which a recipe with an inline config does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REPLAY_TOOL = "sglang.replay_scheduler"  # dspark_inside.sglang.replay_scheduler, run in the engine's interpreter
# What the replay's kv_peak_fraction / kv_mean_fraction are.
KV_USAGE_METRIC = "sglang:token_usage (SchedulerPoolStatsObserver, the engine's scheduler)"
# The part of the engine the replay does not run (the simulator label and the notes say so).
DSPARK_PART = "forward pass by dspark"


class ReplayNotPossibleError(ValueError):
    """The plan gives the scheduler no pool to run on (SGLang would not start, or dspark could not size it)."""


def simulator_name(version: str | None) -> str:
    """The `simulator` label of a replay through this engine's scheduler."""
    return f"sglang {version or '?'} scheduler; {DSPARK_PART}"


def replay_notes(answer: Mapping[str, Any]) -> list[str]:
    """What of SGLang ran and what dspark did in its place, and what stood in for modules this host lacks."""
    kv = answer.get("kv") or {}
    tree = "+".join(kv.get("tree_components") or ()) or "FULL"
    notes = [f"SGLang's own code: the Scheduler without its model worker (get_next_batch_to_run: "
             f"{kv.get('schedule_policy') or 'its default'} schedule policy, PrefillAdder admission, chunked prefill, "
             f"retract_decode), the batch result processor, its {kv.get('req_to_token_pool', 'request')} pool, "
             f"{kv.get('allocator', 'KV allocator')} and {kv.get('tree_cache', 'radix cache')} ({tree}) sized to "
             "dspark's plan; dspark's: the forward pass (one token per decode step, or the accepted drafts of a "
             "verify step), the event loop around those calls (not overlapped) and the clock"]
    stood_in = answer.get("stood_in") or []
    if stood_in:
        notes.append(f"stood in on this host (no effect on a figure): {', '.join(map(str, stood_in))}")
    return notes


def _int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ReplayNotPossibleError(f"SGLang's scheduler needs the plan's {key}, and the plan has {value!r} "
                                     "(dspark validate shows why: a refusal, or no memory figures to size with)")
    return value


def replay_seat_part(details: Mapping[str, Any]) -> dict[str, Any]:
    """The pool at one seat count: max_total_tokens, max_running_requests, max_mamba_cache_size (hybrids)."""
    part: dict[str, Any] = {
        "max_total_tokens": _int(details.get("max_total_num_tokens"), "KV pool (max_total_num_tokens)"),
        "max_running_requests": _int(details.get("max_running_requests"), "seats (max_running_requests)"),
    }
    mamba = details.get("mamba")
    if isinstance(mamba, Mapping):
        part["max_mamba_cache_size"] = _int(mamba.get("max_mamba_cache_size"), "Mamba state slots")
    return part


def replay_engine_part(witness_request: Mapping[str, Any] | None, details: Mapping[str, Any], max_model_len: int,
                       mtp_layers: int) -> dict[str, Any]:
    """The replay request's engine settings and the first plan's pool, from validate's capacity details."""
    del witness_request, mtp_layers  # SGLang's own sizing is not rerun (it needs the model directory)
    first = replay_seat_part(details)
    algorithm = details.get("speculative_algorithm")
    speculative = ({"algorithm": str(algorithm), "num_steps": details.get("speculative_num_steps"),
                    "eagle_topk": details.get("speculative_eagle_topk"),
                    "num_draft_tokens": _int(details.get("speculative_num_draft_tokens"), "draft tokens")}
                   if algorithm else None)
    mamba = details.get("mamba")
    hybrid: dict[str, Any] | None = None
    overlap = True
    if isinstance(mamba, Mapping):
        strategy = str(mamba.get("strategy") or "no_buffer")
        # _calculate_mamba_ratio: 3 slots + 2 ping-pong tracking slots with the overlap scheduler, 1 without.
        ratio = mamba.get("ratio")
        overlap = not (strategy == "no_buffer" or (strategy == "extra_buffer" and ratio == 4))
        hybrid = {"strategy": "no_buffer" if strategy == "disabled" else strategy, "chunk_size": None}
    return {
        "engine": {
            "context_len": int(max_model_len),
            "page_size": _int(details.get("page_size"), "page size"),
            "chunked_prefill_size": int(details.get("chunked_prefill_size") or -1),
            "max_prefill_tokens": details.get("max_prefill_tokens"),
            "schedule_policy": details.get("schedule_policy"),
            "enable_mixed_chunk": bool(details.get("enable_mixed_chunk")),
            "disable_radix_cache": details.get("radix_cache") is False,
            "overlap_schedule": overlap,
            "speculative": speculative,
            "mamba": hybrid,
        },
        "plans": {str(first["max_running_requests"]): first},
    }
