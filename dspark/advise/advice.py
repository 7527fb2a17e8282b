"""Predictions per seat count and the recommendation under the sweep's decision rule; pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dspark.advise.calibrate import Calibration
from dspark.advise.kv_usage import KVCounting, token_counting
from dspark.advise.model import StepCosts, StepShape, Workload, simulate
from dspark.bench.decision import DecisionRule, Setting, decide
from dspark.capacity.seats import expert_coverage


@dataclass(frozen=True)
class Prediction:
    """What the model says a bench of the workload would measure at one seat count."""

    seats: int  # the seats the engine runs (simulated)
    seats_asked: int  # what --seats asked: more than `seats` where the engine caps them
    aggregate_decode_tps: float
    per_stream_decode_tps: float
    ttft_s: float  # mean, the wait for a seat included
    wall_time_s: float
    decode_step_ms: float  # every seat decoding, at the workload's mean context
    kv_pool_tokens: int
    kv_peak_tokens: int
    kv_peak_fraction: float  # the engine's KV-usage metric at the busiest step, counted as kv_usage_metric says
    kv_usage_metric: str
    pool_holds_workload: bool  # seats × (input + output) + the prefix reserve fit the pool
    expert_coverage: float | None
    prefill_share: float
    # What simulated the workload: "vllm 0.33.0 scheduler" (the engine's own, replayed), or "dspark model: why".
    simulator: str = "dspark model"
    # The engine scheduler's own figures; None from dspark's model, which has no prefix cache and no preemption.
    prefix_cache_queries: int | None = None
    prefix_cache_hits: int | None = None
    prefix_cache_hit_rate: float | None = None
    preemptions: int | None = None
    kv_mean_fraction: float | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_mean_ms: float | None = None
    warm: dict[str, Any] | None = None  # the re-sent pass (--warm): the same keys as above
    # TTFT's engine part as vLLM's request_queue_time / request_prefill_time histograms split it (means; dspark's
    # model only): reaching the engine core to first scheduled, first scheduled to first token.
    queue_mean_s: float | None = None
    prefill_mean_s: float | None = None

    def summary(self) -> dict[str, float | None]:
        """The figures in the names the decision rule judges (dspark.bench.results.METRICS)."""
        warm = self.warm or {}
        return {"aggregate_decode_tps": self.aggregate_decode_tps, "per_stream_decode_tps": self.per_stream_decode_tps,
                "ttft_mean_s": self.ttft_s, "ttft_p50_s": self.ttft_p50_s, "ttft_p99_s": self.ttft_p99_s,
                "wall_time_s": self.wall_time_s, "tpot_mean_ms": self.tpot_mean_ms,
                "kv_usage_peak": self.kv_peak_fraction, "prefix_hit_rate": self.prefix_cache_hit_rate,
                "warm_prefix_hit_rate": warm.get("prefix_cache_hit_rate"), "warm_wall_time_s": warm.get("wall_time_s"),
                "preemptions": float(self.preemptions) if self.preemptions is not None else None}


@dataclass(frozen=True)
class Recommendation:
    """The seat count the rule picks, and why, in one sentence."""

    seats: int | None
    reason: str
    rule: str
    verdicts: tuple[dict[str, Any], ...]


def predict(costs: StepCosts, shape: StepShape, load: Workload, pools: Sequence[tuple[int, int]],
            prefix_reserve: int = 0, countings: Mapping[int, KVCounting] | None = None,
            asked: Mapping[int, int] | None = None) -> list[Prediction]:
    """One prediction per (seats, KV pool tokens); KV usage as `countings[seats]` counts, else tokens / pool.

    asked: seats run -> the seats asked for them, where the engine caps what was asked.
    """
    out = []
    for seats, pool in pools:
        counting = (countings or {}).get(seats) or token_counting(pool)
        sim = simulate(costs, shape, load, seats, counting)
        held = min(seats, load.clients) * (load.input_len + load.output_len) + prefix_reserve
        coverage = None
        if shape.num_experts and shape.top_k:
            coverage = expert_coverage(shape.num_experts, shape.top_k, min(seats, load.clients) * shape.query_len)
        out.append(Prediction(
            seats=seats, seats_asked=(asked or {}).get(seats, seats), aggregate_decode_tps=sim.aggregate_decode_tps,
            per_stream_decode_tps=sim.per_stream_decode_tps, ttft_s=sim.ttft_mean_s, wall_time_s=sim.wall_time_s,
            decode_step_ms=sim.decode_step_s * 1e3, kv_pool_tokens=pool, kv_peak_tokens=sim.kv_peak_tokens,
            kv_peak_fraction=sim.kv_peak_usage if sim.kv_peak_usage is not None else float("inf"),
            kv_usage_metric=counting.metric,
            pool_holds_workload=held <= pool, expert_coverage=coverage, prefill_share=sim.prefill_share,
            queue_mean_s=sim.queue_mean_s, prefill_mean_s=sim.prefill_mean_s,
        ))
    return out


def _problems(p: Prediction, prefix_reserve: int) -> tuple[str, ...]:
    if p.preemptions is not None:  # the engine's own scheduler said whether it preempts
        warm = (p.warm or {}).get("preemptions") or 0
        if p.preemptions or warm:
            return (f"the engine's scheduler preempts {p.preemptions + warm} time(s) at {p.seats} seats "
                    f"({p.simulator})",)
        return ()
    if p.pool_holds_workload:
        return ()
    reserve = f" plus {prefix_reserve:,} cached-prefix tokens" if prefix_reserve else ""
    return (f"the {p.kv_pool_tokens:,}-token pool does not hold every seat's request{reserve}: the engine "
            "would preempt",)


def recommend(predictions: Sequence[Prediction], rule: DecisionRule, prefix_reserve: int = 0) -> Recommendation:
    """Apply the rule to the predictions, the first seat count as the baseline, as `dspark sweep` does."""
    settings = [Setting(label=f"{p.seats} seats", summary=p.summary(), problems=_problems(p, prefix_reserve))
                for p in predictions]
    decision = decide(dataclasses.replace(rule, require_clean=True), settings)
    by_label = {f"{p.seats} seats": p.seats for p in predictions}
    chosen = by_label.get(decision.chosen) if decision.chosen else None
    verdicts = tuple({"seats": by_label[v.label], "adopt": v.adopt, "reasons": list(v.reasons)}
                     for v in decision.verdicts)
    reason = decision.summary
    if chosen == predictions[0].seats and decision.verdicts:
        # Name what held the best candidate back, so the sentence says why the baseline stays.
        best = max(decision.verdicts, key=lambda v: v.comparisons[0].improvement or float("-inf"))
        reason += f" ({best.label}: {best.reasons[0]})" if best.reasons else ""
    return Recommendation(seats=chosen, reason=f"predicted, not measured: {reason}", rule=decision.rule_text,
                          verdicts=verdicts)


@dataclass(frozen=True)
class Advice:
    """Everything `dspark advise` prints; to_json() is its --json object."""

    workload: Workload
    shape: StepShape
    costs: StepCosts
    cost_lines: tuple[str, ...]
    calibration: Calibration | None
    predictions: tuple[Prediction, ...]
    recommendation: Recommendation
    assumptions: tuple[str, ...]
    context: dict[str, Any]  # engine, model, hardware, capacity figures the prediction rests on
    warnings: tuple[str, ...] = ()  # a calibration that misses its points or leaves physical bounds

    def to_json(self) -> dict[str, Any]:
        """One JSON object: predictions[], recommendation, the cost terms and what was fitted, assumptions."""
        cal = self.calibration
        return {
            **self.context,
            "workload": dataclasses.asdict(self.workload),
            "predictions": [dataclasses.asdict(p) for p in self.predictions],
            "recommendation": dataclasses.asdict(self.recommendation),
            "model": {
                "costs": dataclasses.asdict(self.costs),
                "shape": dataclasses.asdict(self.shape),
                "terms": list(self.cost_lines),
                "fitted": list(cal.fitted) if cal else [],
                "calibration_points": cal.points if cal else 0,
                "calibration_seats": list(cal.seat_counts) if cal else [],
                "residuals": [dict(dataclasses.asdict(r), error=r.error) for r in cal.residuals] if cal else [],
                "prior_residuals": ([dict(dataclasses.asdict(r), error=r.error) for r in cal.prior_residuals]
                                    if cal else []),
                "fit_rms_log_error": cal.fit_error if cal else None,
                "prior_rms_log_error": cal.prior_error if cal else None,
                "calibration_refused": cal.refused if cal else None,
                # the fit judged on held-out runs (calibrate.HeldOut); None: fewer than three runs, or no fit
                "calibration_held_out": dataclasses.asdict(cal.held_out) if cal and cal.held_out else None,
            },
            "assumptions": list(self.assumptions),
            "warnings": list(self.warnings),
        }
