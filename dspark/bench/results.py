"""Result values of a bench (passes, repetitions, warm re-run) and the metric registry; pure, JSON-ready."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dspark.bench.metrics import EngineDelta
from dspark.bench.stats import Distribution, PassStats, mean


@dataclass(frozen=True)
class MetricInfo:
    """How a summary metric is named, shown and judged."""

    label: str
    better: Literal["higher", "lower"] | None  # None: reported, never judged
    kind: Literal["rate", "seconds", "fraction", "count"]


# The summary of a setting: means over repetitions, plus the warm re-run. Order is the table's row order.
METRICS: dict[str, MetricInfo] = {
    "aggregate_decode_tps": MetricInfo("Aggregate decode, tok/s", "higher", "rate"),
    "per_stream_decode_tps": MetricInfo("Per-stream decode, tok/s", "higher", "rate"),
    "ttft_mean_s": MetricInfo("Time to first token, mean, s", "lower", "seconds"),
    "ttft_p50_s": MetricInfo("Time to first token, p50, s", "lower", "seconds"),
    "ttft_p99_s": MetricInfo("Time to first token, p99, s", "lower", "seconds"),
    "queue_time_mean_s": MetricInfo("Queueing time (engine), mean, s", "lower", "seconds"),
    "wall_time_s": MetricInfo("Wall time, s", "lower", "seconds"),
    "tpot_mean_ms": MetricInfo("Time per output token, mean, ms", "lower", "seconds"),
    "tpot_p99_ms": MetricInfo("Time per output token, p99, ms", "lower", "seconds"),
    "itl_mean_ms": MetricInfo("Inter-token latency, mean, ms", "lower", "seconds"),
    "itl_p99_ms": MetricInfo("Inter-token latency, p99, ms", "lower", "seconds"),
    "e2e_mean_ms": MetricInfo("End-to-end latency, mean, ms", "lower", "seconds"),
    "request_throughput": MetricInfo("Request throughput, req/s", "higher", "rate"),
    "request_goodput": MetricInfo("Request goodput (every SLO met), req/s", "higher", "rate"),
    "goodput_fraction": MetricInfo("Requests meeting every SLO", "higher", "fraction"),
    "total_token_throughput": MetricInfo("Total token throughput, tok/s", "higher", "rate"),
    "kv_usage_peak": MetricInfo("KV pool used, peak", None, "fraction"),
    "running_peak": MetricInfo("Running requests, peak", None, "count"),
    "prefix_hit_rate": MetricInfo("Prefix-cache hit rate", None, "fraction"),
    "warm_prefix_hit_rate": MetricInfo("Warm re-run: prefix hits", None, "fraction"),
    "warm_wall_time_s": MetricInfo("Warm re-run: wall time, s", "lower", "seconds"),
    "errors": MetricInfo("Errors (sum over reps)", None, "count"),
    "preemptions": MetricInfo("Preemptions (sum over reps)", None, "count"),
}


# `vllm bench serve`'s latency and throughput figures: in the bench table and JSON, not in the sweep's table.
VLLM_BENCH_METRICS = frozenset({"tpot_mean_ms", "tpot_p99_ms", "itl_mean_ms", "itl_p99_ms", "e2e_mean_ms",
                                "request_throughput", "total_token_throughput", "request_goodput",
                                "goodput_fraction"})
# Shown only where --goodput gave SLOs.
GOODPUT_METRICS = frozenset({"request_goodput", "goodput_fraction"})


@dataclass(frozen=True)
class PassResult:
    """One pass over the prompts: client statistics and what the engine's /metrics said about it."""

    label: str
    stats: PassStats
    engine: EngineDelta | None  # None when /metrics could not be read
    metrics_error: str | None = None
    # Set when the pass's gauge peaks (running, KV) rest on too few /metrics samples to be trusted.
    metrics_warning: str | None = None


@dataclass(frozen=True)
class BenchResult:
    """A bench run: its inputs, each repetition, the optional warm re-run, and the summary means."""

    url: str
    model: str
    endpoint: str
    concurrency: int
    requests: int
    max_tokens: int
    ignore_eos: bool
    prompt_source: str
    reps: tuple[PassResult, ...]
    warm: PassResult | None
    summary: dict[str, float | None]
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)  # versions, argv, start time, load mode
    # The server's seats (max_num_seqs / --max-running-requests) as `bench --seats N` said them: a calibration
    # needs them, and without /metrics (behind a proxy) nothing else tells them. None: not given.
    seats: int | None = None
    # `vllm bench serve`'s figures, means over the repetitions (one repetition: exactly its figures), in ms.
    tpot_ms: Distribution | None = None
    itl_ms: Distribution | None = None
    e2e_ms: Distribution | None = None
    ttft_ms: Distribution | None = None
    request_throughput: float | None = None
    total_token_throughput: float | None = None
    output_throughput: float | None = None
    # A signal ended the run early: the passes above are those that finished, and partial_reason says why.
    partial: bool = False
    partial_reason: str | None = None
    hints: tuple[str, ...] = ()  # what the figures suggest doing differently (e.g. a prefix cache already warm)
    # --goodput: the SLOs (ms, vLLM's names), the goodput (req/s) and the fraction of requests meeting them all,
    # means over the repetitions; None without SLOs.
    goodput: dict[str, Any] | None = None

    @property
    def passes(self) -> tuple[PassResult, ...]:
        """Every pass: the repetitions, then the warm re-run."""
        return (*self.reps, *((self.warm,) if self.warm else ()))

    @property
    def clean(self) -> bool:
        """0 errors and 0 preemptions in every pass (an unknown preemption count is not clean), and not partial."""
        return not self.partial and self.summary.get("errors") == 0 and self.summary.get("preemptions") == 0


PASS_METRICS = (
    "aggregate_decode_tps",
    "per_stream_decode_tps",
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "queue_time_mean_s",
    "wall_time_s",
    "tpot_mean_ms",
    "tpot_p99_ms",
    "itl_mean_ms",
    "itl_p99_ms",
    "e2e_mean_ms",
    "request_throughput",
    "total_token_throughput",
    "request_goodput",
    "goodput_fraction",
    "kv_usage_peak",
    "running_peak",
    "prefix_hit_rate",
)


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def pass_values(p: PassResult) -> dict[str, float | None]:
    """One pass's values of PASS_METRICS, errors and preemptions; None where not measured."""
    e = p.engine
    s = p.stats
    return {
        "aggregate_decode_tps": _finite(s.aggregate_decode_tps),
        "per_stream_decode_tps": _finite(s.per_stream_decode_tps),
        "ttft_mean_s": _finite(s.ttft_mean_s),
        "ttft_p50_s": _finite(s.ttft_p50_s),
        "ttft_p99_s": _finite(s.ttft_p99_s),
        "queue_time_mean_s": e.queue_time_mean_s if e else None,
        "wall_time_s": _finite(s.wall_time_s),
        "tpot_mean_ms": _finite(s.tpot_ms.mean),
        "tpot_p99_ms": _finite(s.tpot_ms.p99),
        "itl_mean_ms": _finite(s.itl_ms.mean),
        "itl_p99_ms": _finite(s.itl_ms.p99),
        "e2e_mean_ms": _finite(s.e2e_ms.mean),
        "request_throughput": _finite(s.request_throughput),
        "total_token_throughput": _finite(s.total_token_throughput),
        "request_goodput": _finite(s.request_goodput),
        "goodput_fraction": s.good_requests / s.requests if s.good_requests is not None and s.requests else None,
        "kv_usage_peak": e.kv_usage_peak if e else None,
        "running_peak": e.running_peak if e else None,
        "prefix_hit_rate": e.prefix_hit_rate if e else None,
        "errors": float(s.errors),
        "preemptions": e.preemptions if e else None,
    }


def _mean_present(values: Sequence[float | None]) -> float | None:
    """Mean of the values when every pass has one; None when any pass lacks it (never a partial mean)."""
    if not values or any(v is None for v in values):
        return None
    return mean([v for v in values if v is not None])


SPREAD_SUFFIX = "_spread"


def spread(values: Sequence[float | None]) -> float | None:
    """Between-rep spread of one metric: (max − min) / mean; None with fewer than 2 measured reps."""
    present = [v for v in values if v is not None]
    if len(present) < 2 or len(present) != len(values):
        return None
    m = mean(present)
    return (max(present) - min(present)) / abs(m) if m else None


def summarize_reps(reps: Sequence[PassResult], warm: PassResult | None) -> dict[str, float | None]:
    """Means over repetitions of PASS_METRICS, the warm re-run's hit rate and wall time, and sums of errors and
    preemptions over every pass (the warm one included; an unknown preemption count makes the sum unknown).
    Each judged metric also gets its between-rep spread under NAME_spread ((max − min) / mean)."""
    per = [pass_values(p) for p in reps]
    out: dict[str, float | None] = {name: _mean_present([v[name] for v in per]) for name in PASS_METRICS}
    for name in PASS_METRICS:
        if METRICS[name].better is not None:
            out[name + SPREAD_SUFFIX] = spread([v[name] for v in per])
    wv = pass_values(warm) if warm else None
    out["warm_prefix_hit_rate"] = wv["prefix_hit_rate"] if wv else None
    out["warm_wall_time_s"] = wv["wall_time_s"] if wv else None
    every = [*per, *([wv] if wv else [])]
    out["errors"] = math.fsum(v["errors"] or 0.0 for v in every)
    pre = [v["preemptions"] for v in every]
    out["preemptions"] = None if any(x is None for x in pre) else math.fsum(x for x in pre if x is not None)
    return out


def jsonable(value: Any) -> Any:
    """Dataclasses, tuples and dicts as plain JSON values; nan and infinities become null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def mean_distribution(stats: Sequence[PassStats], name: str) -> Distribution | None:
    """Each of mean, p50, p90, p99 averaged over passes; None when no pass measured it."""
    dists = [getattr(s, name) for s in stats if not math.isnan(getattr(s, name).mean)]
    if not dists:
        return None
    return Distribution(*(mean([getattr(d, f) for d in dists]) for f in ("mean", "p50", "p90", "p99")))
