"""The witness: the installed engine's own KV planner, run in its interpreter on dspark's inputs, beside the model.

dspark/engines/_witness.py runs in the engine's interpreter (with the argv check at `start`, alone for
`validate --engine-check`); this module builds its request, runs it when asked, and judges the answer.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dspark.capacity import CapacitySummary
from dspark.capacity.seats import safe_seats_full_window
from dspark.core.errors import EngineNotInstalledError
from dspark.core.findings import Finding

WITNESS_SCRIPT = Path(__file__).with_name("_witness.py")
MARKER = "DSPARK_WITNESS "


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


@dataclass(frozen=True)
class PlannerInput:
    """What the engine's own planner is handed, or, when it cannot be handed anything, why (one is set)."""

    request: dict[str, Any] | None
    unavailable: str = ""


def witness_request(engine: str, detail: Any, argv: Sequence[str] = (), *, user_pinned: bool = False) -> PlannerInput:
    """The planner request for a computed capacity, or the reason there is none.

    vLLM: the layers' specs and the budget. SGLang: its launch flags (argv, the parser's part of the plan)
    and the memory readings; its sizing reads the model directory, which must exist here.
    """
    if detail is None:
        return PlannerInput(None, f"dspark computed no {engine} plan for the witness to check")
    if engine == "vllm":
        return _vllm_request(detail)
    if engine == "sglang":
        return _sglang_request(detail, list(argv), user_pinned)
    return PlannerInput(None, f"no witness for engine {engine}")


def _vllm_request(detail: Any) -> PlannerInput:
    from dspark.engines.vllm.witness_input import WitnessNotPossibleError, vllm_witness_request  # noqa: PLC0415

    if not getattr(detail, "engine_layers", None):
        return PlannerInput(None, "vLLM's planner is handed layer specs, and dspark builds none it can hand over "
                                  "for this model (its own cache layout, e.g. DeepSeek-V4's)")
    try:
        return PlannerInput(vllm_witness_request(detail))
    except WitnessNotPossibleError as exc:
        return PlannerInput(None, str(exc))


def _sglang_request(detail: Any, flags: list[str], user_pinned: bool) -> PlannerInput:
    from dspark.engines.sglang.witness_input import WitnessNotPossibleError, sglang_witness_request  # noqa: PLC0415

    model = flags[flags.index("--model-path") + 1] if "--model-path" in flags[:-1] else None
    if model is None or not (Path(model) / "config.json").is_file():
        return PlannerInput(None, f"SGLang's sizing reads config.json from the model directory, and {model!r} is "
                                  "not a local directory with one (a recipe's inline config, or a hub name not "
                                  "downloaded): point --model at a local copy")
    try:
        return PlannerInput(sglang_witness_request(detail, flags, user_pinned=user_pinned))
    except WitnessNotPossibleError as exc:
        return PlannerInput(None, f"SGLang's sizing cannot be run: {exc}")


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

    A list of requests is answered with a list, from one engine import.
    """
    try:
        proc = subprocess.run([python, str(WITNESS_SCRIPT)], input=json.dumps(request), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineNotInstalledError(f"cannot run the engine's planner in {python}: {exc}") from exc
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"ok": False, "error": f"no answer from {python} (exit {proc.returncode}): {' | '.join(tail)}"}
    return json.loads(line[len(MARKER):])


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
