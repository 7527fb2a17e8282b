"""Fit the step-cost terms to measured points (bench / sweep results, step times); pure.

Which terms are fitted follows from what the points can tell apart: one seat count fixes the fixed cost, two
also the per-token cost (the slope), three or more also the effective bandwidth (the curvature that expert
coverage and KV reads give); a measured time to first token with prompt tokens fixes the prefill cost. Terms
not fitted keep their prior, and the result says which is which and from how many points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dspark.advise.model import StepCosts, StepShape, Workload, decode_step_s, simulate

TERM_LABELS: dict[str, str] = {
    "fixed_s": "fixed cost per step",
    "per_token_s": "cost per decode token",
    "bandwidth_bytes_per_s": "effective bandwidth",
    "prefill_per_token_s": "prefill cost per prompt token",
}


@dataclass(frozen=True)
class Measured:
    """One measured point: a bench of a workload at a seat count, or one decode step's time."""

    seats: int
    source: str
    workload: Workload | None = None  # None for a step-time point
    context_tokens: float = 0.0  # step-time points: tokens of context each seat held
    step_s: float | None = None
    aggregate_decode_tps: float | None = None
    per_stream_decode_tps: float | None = None
    ttft_mean_s: float | None = None


@dataclass(frozen=True)
class Residual:
    """A measured figure beside what the fitted model gives for it."""

    source: str
    seats: int
    metric: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """(predicted − measured) / measured."""
        return (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class Calibration:
    """The fitted costs, which terms were fitted, from how many points, and how well they fit."""

    costs: StepCosts
    fitted: tuple[str, ...]
    points: int
    seat_counts: tuple[int, ...]
    residuals: tuple[Residual, ...]


def terms_to_fit(points: Sequence[Measured], pinned: Sequence[str] = ()) -> tuple[str, ...]:
    """The terms the points can determine (see the module docstring), less the pinned ones."""
    distinct = len({p.seats for p in points})
    order = ("fixed_s", "per_token_s", "bandwidth_bytes_per_s")[: min(distinct, 3)]
    terms = [t for t in order if t not in pinned]
    if "prefill_per_token_s" not in pinned and any(
        p.ttft_mean_s and p.workload is not None and p.workload.input_len > 0 for p in points
    ):
        terms.append("prefill_per_token_s")
    return tuple(terms)


def predictions(costs: StepCosts, shape: StepShape, point: Measured) -> dict[str, float]:
    """The model's value of every figure the point measured."""
    out: dict[str, float] = {}
    if point.step_s is not None:
        out["step_s"] = decode_step_s(costs, shape, point.seats, point.seats * point.context_tokens)
    if point.workload is not None:
        sim = simulate(costs, shape, point.workload, point.seats)
        for name in ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s"):
            if getattr(point, name) is not None:
                out[name] = getattr(sim, name)
    return out


def _residuals(costs: StepCosts, shape: StepShape, points: Sequence[Measured]) -> list[Residual]:
    out: list[Residual] = []
    for p in points:
        for name, value in predictions(costs, shape, p).items():
            measured = getattr(p, name)
            if measured is not None and measured > 0:
                out.append(Residual(p.source, p.seats, name, float(measured), value))
    return out


def _loss(costs: StepCosts, shape: StepShape, points: Sequence[Measured]) -> float:
    total = 0.0
    for r in _residuals(costs, shape, points):
        if not (r.predicted > 0 and math.isfinite(r.predicted)):
            return math.inf
        total += math.log(r.predicted / r.measured) ** 2
    return total


def nelder_mead(f: Callable[[list[float]], float], x0: Sequence[float], step: float = 1.0,
                iterations: int = 400, tolerance: float = 1e-10) -> list[float]:
    """Minimise f from x0 by the Nelder–Mead simplex (no derivatives; a few parameters)."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tolerance * (abs(values[0]) + tolerance):
            break
        centroid = [math.fsum(x[j] for x in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]

        def toward(t: float, centroid: list[float] = centroid, worst: list[float] = worst) -> list[float]:
            return [c + t * (w - c) for c, w in zip(centroid, worst, strict=True)]

        reflected = toward(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = toward(-2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward(0.5)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink toward the best point
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, xs, strict=True)] for xs in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


# A term whose prior is zero starts the search here (seconds): log space cannot start at zero.
_FLOOR = {"fixed_s": 1e-4, "per_token_s": 1e-6, "prefill_per_token_s": 1e-6, "bandwidth_bytes_per_s": 1e6}


def _fit_terms(prior: StepCosts, shape: StepShape, points: Sequence[Measured], terms: Sequence[str]) -> StepCosts:
    if not terms:
        return prior

    def at(x: Sequence[float]) -> StepCosts:
        return replace(prior, **{t: math.exp(v) for t, v in zip(terms, x, strict=True)})

    start = [math.log(max(getattr(prior, t), _FLOOR[t])) for t in terms]
    best = nelder_mead(lambda x: _loss(at(x), shape, points), start)
    # Polish from the best point: a restart escapes a simplex that collapsed early.
    return at(nelder_mead(lambda x: _loss(at(x), shape, points), best, step=0.3))


def fit(prior: StepCosts, shape: StepShape, points: Sequence[Measured], pinned: Sequence[str] = ()) -> Calibration:
    """Fit the determinable terms (in log space, so they stay positive) to the points; the rest keep the prior."""
    terms = terms_to_fit(points, pinned)
    costs = _fit_terms(prior, shape, points, terms)
    if "fixed_s" in terms and "bandwidth_bytes_per_s" not in terms and costs.fixed_s < 2 * _FLOOR["fixed_s"]:
        # The fit wanted a fixed cost below zero: the steps are faster than the prior bandwidth reads the
        # weights, so the prior bandwidth is what the points contradict. Fit it in the fixed cost's place.
        terms = tuple("bandwidth_bytes_per_s" if t == "fixed_s" else t for t in terms)
        costs = _fit_terms(prior, shape, points, terms)
    return Calibration(costs=costs, fitted=terms, points=len(points),
                       seat_counts=tuple(sorted({p.seats for p in points})),
                       residuals=tuple(_residuals(costs, shape, points)))


# A fitted model that misses a measured figure by more than this does not describe the measurements.
RESIDUAL_LIMIT = 0.25


def fit_warnings(cal: Calibration, peak_bytes_per_s: float | None, device: str) -> list[str]:
    """What makes a fit untrustworthy: figures it misses beyond ±25%, a bandwidth above the device's peak, a
    cost the points drive to zero (they ask for a negative one)."""
    out: list[str] = []
    missed = [r for r in cal.residuals if abs(r.error) > RESIDUAL_LIMIT]
    if missed:
        shown = "; ".join(f"{r.metric} at {r.seats} seats {r.error:+.0%}" for r in missed)
        out.append(f"the fit misses {len(missed)} of {len(cal.residuals)} measured figures beyond "
                   f"±{RESIDUAL_LIMIT:.0%} ({shown}): no one set of step costs explains these measurements (are they "
                   "all from this deployment, under this workload?); the predictions are not to be trusted")
    bandwidth = cal.costs.bandwidth_bytes_per_s
    if "bandwidth_bytes_per_s" in cal.fitted and peak_bytes_per_s and bandwidth > peak_bytes_per_s:
        out.append(f"fitted {TERM_LABELS['bandwidth_bytes_per_s']} {bandwidth / 1e9:,.4g} GB/s is "
                   f"{bandwidth / peak_bytes_per_s:,.3g}x above the {device}'s peak of {peak_bytes_per_s / 1e9:,.0f} "
                   "GB/s: no step reads memory that fast, so the measurements are not this model on this hardware")
    for term in ("fixed_s", "per_token_s", "prefill_per_token_s"):
        if term in cal.fitted and getattr(cal.costs, term) < 2 * _FLOOR[term]:
            out.append(f"fitted {TERM_LABELS[term]} is ~0: the points ask for a negative cost, which no engine has")
    return out


_SYNTHETIC_LEN = re.compile(r"(\d+) tokens")


def _bench_point(bench: Mapping[str, Any], source: str, seats: int | None, max_batched: int) -> Measured:
    """One bench result (dspark bench --json, or a sweep setting's bench) as a measured point."""
    summary = bench.get("summary") or {}
    reps = bench.get("reps") or []
    stats = [r.get("stats") or {} for r in reps]
    ok = sum(int(s.get("requests", 0)) - int(s.get("errors", 0)) for s in stats)
    out_tokens = sum(int(s.get("output_tokens", 0)) for s in stats)
    output_len = round(out_tokens / ok) if ok else int(bench.get("max_tokens") or 0)
    prompt_means = [float(v) for s in stats if isinstance(v := s.get("prompt_tokens_mean"), (int, float)) and v > 0]
    if prompt_means and len(prompt_means) == len(stats):
        input_len = round(math.fsum(prompt_means) / len(prompt_means))
    else:
        m = _SYNTHETIC_LEN.search(str(bench.get("prompt_source") or ""))
        if m is None:
            raise ValueError(f"{source}: the prompt length is not recorded (no prompt_tokens_mean)")
        input_len = int(m.group(1))
    clients = int(bench.get("concurrency") or 0)
    requests = int(bench.get("requests") or 0)
    if clients < 1 or requests < 1 or output_len < 1:
        raise ValueError(f"{source}: not a bench result with requests, clients and output tokens")
    seats = min(clients, _seats_of(bench, source, seats))
    hit = summary.get("prefix_hit_rate")
    load = Workload(clients=clients, requests=requests, input_len=input_len, output_len=output_len,
                    prefix_hit_rate=float(hit) if isinstance(hit, (int, float)) else 0.0,
                    max_num_batched_tokens=max_batched)

    def figure(name: str) -> float | None:
        v = summary.get(name)
        return float(v) if isinstance(v, (int, float)) and v > 0 and math.isfinite(v) else None

    return Measured(seats=seats, source=source, workload=load,
                    aggregate_decode_tps=figure("aggregate_decode_tps"),
                    per_stream_decode_tps=figure("per_stream_decode_tps"), ttft_mean_s=figure("ttft_mean_s"))


def _seats_of(bench: Mapping[str, Any], source: str, given: int | None) -> int:
    """The server's seats: given (a sweep set them), recorded by `bench --seats N`, or the engine's running peak.

    Never the client count: a 2-seat server benched with 8 clients fitted as 8 seats predicts 4 seats ~30% low.
    """
    if given is not None:
        return given
    recorded = bench.get("seats")
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 1:
        return recorded
    # More clients than seats: the engine's peak of running requests (its /metrics) is the seat count.
    running = (bench.get("summary") or {}).get("running_peak")
    if isinstance(running, (int, float)) and running >= 1:
        return int(running)
    raise ValueError(
        f"{source}: the bench records neither the server's seats nor the engine's running-request peak (its "
        "/metrics was not read, e.g. behind a proxy), so its seat count is unknown; bench again with `dspark "
        "bench --seats N` (N: the server's max_num_seqs / --max-running-requests), or let bench read the "
        "server's /metrics (--metrics-url URL)")


@dataclass(frozen=True)
class Deployment:
    """What a calibration must come from: the plan's engine and the names its model may be served under."""

    engine: str
    model_names: frozenset[str]


def _check_origin(bench: Mapping[str, Any], source: str, plan: Deployment | None) -> None:
    """A bench of another model or engine says nothing about this plan's step costs: refused, naming both."""
    if plan is None:
        return
    engine = (bench.get("metadata") or {}).get("engine")
    model = bench.get("model")
    if isinstance(engine, str) and engine and engine != plan.engine:
        raise ValueError(f"{source}: a bench of engine {engine!r}, but this plan runs {plan.engine}; calibrate on "
                         "a bench of this deployment")
    if isinstance(model, str) and model and model not in plan.model_names:
        raise ValueError(f"{source}: a bench of model {model!r}, but this plan serves "
                         f"{' / '.join(sorted(plan.model_names))}; calibrate on a bench of this deployment (or plan "
                         "for that model)")


def points_from_json(data: Mapping[str, Any], source: str, *, seats: int | None = None,
                     max_num_batched_tokens: int = 8192, plan: Deployment | None = None) -> list[Measured]:
    """The measured points of a `dspark bench --json` result or a `sweep.json` (clean settings only).

    plan: refuse a bench of another engine or model (ValueError) where the bench records them.
    """
    if isinstance(data.get("settings"), list):
        out = []
        for s in data["settings"]:
            if s.get("bench") and not s.get("problems"):
                label = f"{source} ({s.get('seats')} seats)"
                _check_origin(s["bench"], label, plan)
                out.append(_bench_point(s["bench"], label, int(s["seats"]), max_num_batched_tokens))
        if not out:
            raise ValueError(f"{source}: a sweep with no clean setting to calibrate on")
        return out
    if isinstance(data.get("reps"), list):
        _check_origin(data, source, plan)
        return [_bench_point(data, source, seats, max_num_batched_tokens)]
    raise ValueError(f"{source}: neither a `dspark bench --json` result nor a sweep.json")
