"""The witness: the installed engine's own KV planner, run in its interpreter on dspark's inputs, beside the model.

dspark_inside.<engine>.witness runs in the engine's interpreter (in the argv check's process at `start`, alone for
`validate --engine-check`); this module builds its request, runs it when asked, and judges the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dspark.capacity import CapacitySummary
from dspark.capacity.result import CapacityDetail
from dspark.capacity.seats import safe_seats_full_window
from dspark.core.errors import EngineNotInstalledError
from dspark.core.findings import Finding
from dspark.engines import ENGINE_NAMES, engine_spec
from dspark.engines.spec import PlannerInput


@dataclass(frozen=True)
class Witness:
    """The engine planner's figures for dspark's budget, and whether they equal dspark's (pool, 2 decimals)."""

    engine_version: str | None
    kv_pool_tokens: int | None
    max_concurrency: float | None
    agrees: bool
    budget_source: str  # "pinned", or "estimate": the planner got dspark's estimated budget
    error: str | None = None
    seconds: float | None = None
    functions: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        """capacity.witness in --json."""
        return {
            "engine_version": self.engine_version, "kv_pool_tokens": self.kv_pool_tokens,
            "max_concurrency": self.max_concurrency, "agrees": self.agrees, "budget_source": self.budget_source,
            "error": self.error, "seconds": self.seconds, "functions": list(self.functions),
        }


def witness_request(engine: str, detail: CapacityDetail | None, argv: Sequence[str] = (), *,
                    user_pinned: bool = False) -> PlannerInput:
    """The planner request for a computed capacity, or the reason there is none (the engine's
    EngineSpec.witness_request builds it: what its planner is handed differs per engine).
    """
    if engine not in ENGINE_NAMES:
        return PlannerInput(None, f"dspark computed no {engine} plan for the witness to check" if detail is None
                            else f"no witness for engine {engine}")
    return engine_spec(engine).planner_input(detail, argv, user_pinned=user_pinned)


def judge(answer: Mapping[str, Any], summary: CapacitySummary) -> Witness:
    """The witness from the engine's answer: agrees when pool, window and printed concurrency are equal."""
    pool = answer.get("kv_pool_tokens")
    concurrency = answer.get("max_concurrency")
    agrees = bool(answer.get("ok")) and (pool, f"{concurrency:.2f}" if concurrency is not None else None,
                                         answer.get("max_model_len")) == (
        summary.kv_pool_tokens, f"{summary.max_concurrency:.2f}", summary.max_model_len)
    return Witness(
        engine_version=answer.get("engine_version"), kv_pool_tokens=pool, max_concurrency=concurrency,
        agrees=agrees, budget_source=summary.kv_budget_source, error=answer.get("error"),
        seconds=answer.get("seconds"), functions=tuple(answer.get("functions", ())),
    )


def run_witness(python: str, request: Mapping[str, Any] | list[Mapping[str, Any]], timeout: float = 180.0) -> Any:
    """Run the witness alone in the engine's interpreter (validate --engine-check) and return its answer.

    A list of requests (of one engine) is answered with a list, from one engine import.
    """
    from dspark.engines.inside import InsideFailure, run_inside  # noqa: PLC0415 - validate without --engine-check runs nothing

    first = request[0] if isinstance(request, list) and request else request
    if not isinstance(first, Mapping):
        return []  # an empty list of requests
    try:
        return run_inside(python, f"{first.get('engine')}.witness", request, timeout)
    except InsideFailure as failure:
        if failure.why == "no_answer":
            return {"ok": False, "error": f"no answer from {python} (exit {failure.returncode}): {failure.last(3)}"}
        raise EngineNotInstalledError(f"cannot run the engine's planner in {python}: {failure.detail}") from None


def witness_finding(witness: Witness, summary: CapacitySummary) -> Finding:
    """Say what the engine's planner found: agreement, disagreement with both numbers, or why it could not."""
    who = f"{summary.engine}{' ' + witness.engine_version if witness.engine_version else ''}'s own planner"
    budget = "dspark's pin" if witness.budget_source == "pinned" else f"dspark's {witness.budget_source} budget"
    if witness.error is not None:
        return Finding("warn", "witness-failed", f"{who} gave no figures on {budget}: {witness.error}")
    ours = (f"{summary.kv_pool_tokens:,} tokens, {summary.max_concurrency:.2f}x "
            f"({summary.engine} {summary.engine_version})")
    theirs = f"{witness.kv_pool_tokens:,} tokens, {witness.max_concurrency:.2f}x"
    if witness.agrees:
        return Finding("info", "witness-agrees", f"{who} agrees on {budget}: {theirs}")
    return Finding("warn", "witness-disagrees", f"{who} computes {theirs} on {budget}; dspark computed {ours}")


def with_engine_figures(summary: CapacitySummary, witness: Witness) -> CapacitySummary:
    """The summary on the engine planner's figures (its pool and concurrency, and the seats they make safe)."""
    if witness.kv_pool_tokens is None or witness.max_concurrency is None:
        return summary
    seats = summary.max_num_seqs
    return replace(
        summary, kv_pool_tokens=witness.kv_pool_tokens, max_concurrency=witness.max_concurrency,
        safe_max_num_seqs=min(summary.safe_max_num_seqs, safe_seats_full_window(witness.max_concurrency)),
        avg_context_at_max_num_seqs=witness.kv_pool_tokens // seats if seats > 0 else 0,
    )
