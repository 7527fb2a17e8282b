"""Fit the step-time model's coefficients to measured points (profiles, bench / sweep results, step times); pure.

A fit can only make the model better on its own points or it is not used: every coefficient stays within
physical bounds (no negative cost, no bandwidth or FLOP rate above the device's peak, efficiencies in (0, 1]),
coefficients the points say nothing about stay at their prior (a weak pull toward it keeps them there), the
residuals are recorded, and a fit that explains its points worse than the priors do is refused with the numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from dspark.advise.model import StepCosts, StepShape, Workload, decode_step_s, simulate
from dspark.capacity.seats import expert_coverage

TERM_LABELS: dict[str, str] = {
    "fixed_s": "engine CPU per step",
    "cpu_per_row_s": "engine CPU per request in a step",
    "bandwidth_bytes_per_s": "achieved memory bandwidth",
    "kv_bandwidth_bytes_per_s": "achieved bandwidth of paged KV reads",
    "flops_per_s": "GEMM rate of large GEMMs",
    "gemm_half_tokens": "tokens at half the GEMM rate",
    "attention_flops_per_s": "attention rate in prefill",
    "kernel_floor_s": "latency per kernel",
    "launch_s": "launch cost per kernel without CUDA graphs",
    "per_token_s": "sampler cost per row",
    "prefill_per_token_s": "prefill cost per prompt token",
    "routing_spread": "share of a step's tokens routed to experts independently",
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
    # the engine's own mean of first scheduled -> first token over the bench (vLLM's request_prefill_time_seconds)
    prefill_mean_s: float | None = None
    prefill_tokens: int = 0  # prefill-time points: one prompt of this many tokens computed alone
    prefill_s: float | None = None


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
class HeldOut:
    """The fit judged on runs it did not see: each of `runs` (a profile wave, a bench) predicted by a fit of the
    others, shrunk toward the priors by `weight` (1: the fit, 0: the priors), against the priors on the same
    figures (rms log errors over `figures` held-out figures)."""

    runs: int
    folds: int
    figures: int
    weight: float
    fit_error: float
    prior_error: float
    full_fit_error: float  # the unshrunk fit's held-out error (weight 1)


@dataclass(frozen=True)
class Calibration:
    """The fitted costs, which terms were fitted, from how many points, and how well they fit."""

    costs: StepCosts
    fitted: tuple[str, ...]
    points: int
    seat_counts: tuple[int, ...]
    residuals: tuple[Residual, ...]
    prior_residuals: tuple[Residual, ...] = ()
    refused: str | None = None  # why the fit is not used (then costs are the prior)
    held_out: HeldOut | None = None  # None: fewer than HELD_OUT_RUNS runs, judged on its own points alone

    @property
    def fit_error(self) -> float:
        """Root-mean-square of the log residuals of the fit."""
        return _rms(self.residuals)

    @property
    def prior_error(self) -> float:
        """Root-mean-square of the log residuals of the priors on the same points."""
        return _rms(self.prior_residuals)


def _rms(residuals: Sequence[Residual]) -> float:
    logs = [math.log(r.predicted / r.measured) for r in residuals if r.predicted > 0 and math.isfinite(r.predicted)]
    if len(logs) < len(residuals):
        return math.inf
    return math.sqrt(math.fsum(x * x for x in logs) / len(logs)) if logs else 0.0


def terms_to_fit(points: Sequence[Measured], pinned: Sequence[str] = (), shape: StepShape | None = None
                 ) -> tuple[str, ...]:
    """The coefficients the points can inform, less the pinned ones.

    Any point informs the per-step terms (CPU per step, bandwidth, kernel latency); two or more batch sizes also
    the per-request CPU cost, the GEMM rate and its rise with tokens; a time to first token or a prefill time the
    compute rates (or a measured prompt cost, where one is given); an eager engine its launch cost.
    """
    if shape is not None and shape.async_scheduling:
        return tuple(t for t in _async_terms(points, shape) if t not in pinned)
    distinct = len({p.seats for p in points})
    terms = ["fixed_s", "bandwidth_bytes_per_s", "kernel_floor_s"]
    if distinct >= 2:
        terms += ["cpu_per_row_s", "kv_bandwidth_bytes_per_s", "flops_per_s", "gemm_half_tokens"]
    if any(p.prefill_s or ((p.ttft_mean_s or p.prefill_mean_s) and p.workload is not None) for p in points):
        terms += [t for t in ("flops_per_s", "attention_flops_per_s") if t not in terms]
    if shape is not None and shape.eager:
        terms.append("launch_s")
    return tuple(t for t in terms if t not in pinned)


# A step of tokens whose even top-k coverage lies in this range informs how evenly they route; at or above the top
# every expert is read whatever the routing (the step pins the bandwidth alone).
_PARTIAL_COVERAGE = (0.3, 0.97)


def _coverage(shape: StepShape, tokens: int) -> float:
    """Even top-k coverage of a step of `tokens` (dspark.capacity.seats.expert_coverage; 1 without routed experts)."""
    experts, top_k = shape.num_experts or 0, shape.top_k or 0
    return expert_coverage(experts, top_k, tokens) if experts and top_k else 1.0


def _async_terms(points: Sequence[Measured], shape: StepShape) -> list[str]:
    """The terms a GPU engine's points pin when its CPU runs beside the GPU (async scheduling), so that per-step
    CPU time does not show in a step the GPU bounds:

    - the GPU's fixed cost per step (the kernels' floor: what a decode step costs beyond its reads), from any
      step or bench. A dense model reads its weights whole every step, so its steps cannot tell a slower read
      from a higher floor; the floor is what the H200 profiles show: their decode steps at 1, 4 and 16 rows and
      at 280- and 2,072-token contexts sit 0.1-0.2 ms above the priors at every row count and context
      (tests/device/results/2026-12-02-clock-D, -E), a constant, not a rate (a bandwidth fitted to it makes the
      KV-heavy steps of 32-128 streams slow);
    - for routed experts, the memory bandwidth (the paged-KV rate tied to it, calibrate._TIED) and how evenly
      tokens spread over the experts, from decode steps at a few rows (partial even coverage) beside one that
      reads every expert: the bytes read differ between them, which the dense steps' do not;
    - the GEMM rate (with the attention and fused-MoE rates tied to it: one clock), from the engine's prefill
      time of benches (a profile's closed loops), not from a client's TTFT (fit());
    - without CUDA graphs, the launch cost per kernel.

    Not fitted: the CPU per step and per row (hidden), a cost per row beyond the modelled reads (the profiles'
    steps show none from 1 to 16 rows; at 64 rows 0.4 ms more, and as much at 128: a step-size effect, not a
    per-row cost), the paged-KV rate apart from the bandwidth (KV is at most ~10% of a profile's decode steps:
    fitted alone it follows their noise), the GEMM's rise with tokens and the attention rate apart from the GEMM
    rate (prompt figures do not separate them).
    """
    steps = [p for p in points if p.step_s is not None]
    terms = ["kernel_floor_s" if shape.kernels_per_step > 0 else "bandwidth_bytes_per_s"]
    q = shape.query_len
    lo, hi = _PARTIAL_COVERAGE
    if any(lo <= _coverage(shape, p.seats * q) <= hi for p in steps if p.seats * q > 1) and any(
            _coverage(shape, p.seats * q) > hi for p in steps):
        terms += [t for t in ("bandwidth_bytes_per_s", "routing_spread") if t not in terms]
    if any(p.prefill_s or (p.prefill_mean_s and p.workload is not None) for p in points):
        terms.append("flops_per_s")  # the engine's prefill time; a client TTFT is not fitted to here (fit())
    if shape.eager:
        terms.append("launch_s")
    return terms


def prefill_seconds(costs: StepCosts, shape: StepShape, tokens: int, budget: int = 8192) -> float:
    """One prompt of `tokens` computed alone, in chunks of the step budget (vLLM's chunked prefill)."""
    done, total = 0, 0.0
    while done < tokens:
        take = min(budget, tokens - done)
        total += decode_step_s(costs, shape, 0, float(done), take, take * (done + take / 2))
        done += take
    return total


def predictions(costs: StepCosts, shape: StepShape, point: Measured) -> dict[str, float]:
    """The model's value of every figure the point measured."""
    out: dict[str, float] = {}
    if point.step_s is not None:
        out["step_s"] = decode_step_s(costs, shape, point.seats, point.seats * point.context_tokens)
    if point.prefill_s is not None and point.prefill_tokens > 0:
        out["prefill_s"] = prefill_seconds(costs, shape, point.prefill_tokens)
    if point.workload is not None:
        sim = simulate(costs, shape, point.workload, point.seats)
        for name in ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s", "prefill_mean_s"):
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


def bounds(prior: StepCosts, term: str) -> tuple[float, float]:
    """The physical range of a coefficient: positive, and rates no higher than the device's peak.

    A rate's ceiling is the datasheet peak the prior carries (`peak_flops_per_s` for the weights' precision,
    `peak_bandwidth_bytes_per_s`), not a multiple of the prior: the priors are per-GPU fractions of that peak
    (dspark.perf.gpus: GEMMs 0.49-0.80 of it by GPU and precision), so a fixed multiple capped an FP8 fit at about
    half its peak. A prior without a peak (a CPU placeholder) keeps the multiples: 1.25 × bandwidth, GEMMs ÷ 0.72,
    2 × attention.
    """
    bandwidth_peak = (prior.peak_bandwidth_bytes_per_s if math.isfinite(prior.peak_bandwidth_bytes_per_s)
                      else prior.bandwidth_bytes_per_s * 1.25)
    flops_peak = prior.peak_flops_per_s if math.isfinite(prior.peak_flops_per_s) else None
    if term == "bandwidth_bytes_per_s":
        return prior.bandwidth_bytes_per_s * 0.3, bandwidth_peak
    if term == "kv_bandwidth_bytes_per_s":  # a fraction of the same peak, never above it
        return prior.bandwidth_bytes_per_s * 0.2, bandwidth_peak
    if term == "flops_per_s":
        return prior.flops_per_s * 0.2, flops_peak or prior.flops_per_s / 0.72
    if term == "attention_flops_per_s":
        return prior.attention_flops_per_s * 0.2, flops_peak or prior.attention_flops_per_s * 2.0
    if term == "routing_spread":  # from every token on the same experts (~0) to even, independent routing
        return 0.05, 1.0
    return _ABSOLUTE[term]


# Seconds (or tokens) no engine step goes outside of; lower bounds are ~0, never below.
_ABSOLUTE: dict[str, tuple[float, float]] = {
    "fixed_s": (1e-6, 1.0), "cpu_per_row_s": (1e-8, 0.05), "per_token_s": (1e-9, 0.05),
    "kernel_floor_s": (1e-9, 50e-6), "launch_s": (1e-7, 200e-6), "gemm_half_tokens": (1.0, 2048.0),
    "prefill_per_token_s": (1e-8, 0.1),
}
# The pull toward the prior: small beside a residual, enough to keep a coefficient the points do not inform.
_PRIOR_WEIGHT = 3e-5


# Rates that move with a fitted one unless fitted themselves: the paged-KV and fused-MoE read rates with the memory
# bandwidth (the same memory), the fused-MoE and attention rates with the GEMM rate (the same tensor cores at the
# same clock).
_TIED: dict[str, tuple[str, ...]] = {"bandwidth_bytes_per_s": ("kv_bandwidth_bytes_per_s",
                                                               "expert_bandwidth_bytes_per_s"),
                                     "flops_per_s": ("expert_flops_per_s", "attention_flops_per_s")}


def _tied(prior: StepCosts, costs: StepCosts, terms: Sequence[str]) -> StepCosts:
    """costs with each rate tied to a fitted one (_TIED) moved by that one's ratio to its prior."""
    moved: dict[str, float] = {}
    for lead, follows in _TIED.items():
        base = float(getattr(prior, lead))
        if lead not in terms or not (0 < base < math.inf):
            continue
        for follower in follows:
            value = float(getattr(prior, follower))
            if follower not in terms and 0 < value < math.inf:
                moved[follower] = value * float(getattr(costs, lead)) / base
    return replace(costs, **moved) if moved else costs


def _effective(costs: StepCosts, term: str) -> float:
    """A coefficient's value as the step model reads it (a KV rate of 0 is the bandwidth's)."""
    if term == "kv_bandwidth_bytes_per_s":
        return costs.kv_bandwidth_bytes_per_s or costs.bandwidth_bytes_per_s
    return float(getattr(costs, term))


def _fit_terms(prior: StepCosts, shape: StepShape, points: Sequence[Measured], terms: Sequence[str]) -> StepCosts:
    """Minimise the squared log residuals over the terms, each mapped into its bounds (a logistic in log space)."""
    # A rate with no limit (no figure for the device) has nothing physical to be fitted within: it stays.
    terms = [t for t in terms if 0 < bounds(prior, t)[0] < bounds(prior, t)[1] < math.inf]
    if not terms:
        return prior
    box = [bounds(prior, t) for t in terms]
    spans = [(math.log(lo), math.log(hi)) for lo, hi in box]

    def value(x: float, span: tuple[float, float]) -> float:
        lo, hi = span
        return math.exp(lo + (hi - lo) / (1.0 + math.exp(-max(min(x, 50.0), -50.0))))

    def at(x: Sequence[float]) -> StepCosts:
        return _tied(prior, replace(prior, **{t: value(v, sp) for t, v, sp in zip(terms, x, spans, strict=True)}),
                     terms)

    def inverse(v: float, span: tuple[float, float]) -> float:
        lo, hi = span
        u = (min(max(math.log(v), lo), hi) - lo) / (hi - lo) if v > 0 else 0.05
        u = min(max(u, 0.02), 0.98)
        return math.log(u / (1.0 - u))

    start = [inverse(_effective(prior, t), sp) for t, sp in zip(terms, spans, strict=True)]

    def loss(x: Sequence[float]) -> float:
        pull = math.fsum((a - b) ** 2 for a, b in zip(x, start, strict=True))
        return _loss(at(x), shape, points) + _PRIOR_WEIGHT * pull

    best = nelder_mead(loss, start, iterations=300)
    value_best = loss(best)
    for step in (0.5, 0.2, 0.05):  # restarts from the best point: a simplex that collapsed early moves on
        again = nelder_mead(loss, best, step=step, iterations=200)
        if (value_again := loss(again)) < value_best:
            best, value_best = again, value_again
    return at(best)


# Runs (distinct point sources) from which a fit is judged on held-out runs, the weights it is shrunk by toward the
# priors, and what a held-out improvement must exceed to count (rms log error: 0.2%, the search's and the waves' own
# noise, not a better model).
HELD_OUT_RUNS = 3
HELD_OUT_FOLDS = 4
SHRINK_WEIGHTS: tuple[float, ...] = (1.0, 0.5, 0.25)
HELD_OUT_MARGIN = 0.002


def shrunk(prior: StepCosts, fitted: StepCosts, terms: Sequence[str], weight: float) -> StepCosts:
    """Each fitted coefficient moved `weight` of the way from its prior in log space (a geometric mean: a rate
    between two physical rates stays physical); weight 1 is the fit, 0 the priors."""
    if weight >= 1.0:
        return fitted
    moved = {t: math.exp((1.0 - weight) * math.log(_effective(prior, t)) + weight * math.log(_effective(fitted, t)))
             for t in terms if _effective(prior, t) > 0 and _effective(fitted, t) > 0}
    return _tied(prior, replace(prior, **moved), terms)


@lru_cache(maxsize=64)
def _fit_cached(search: Callable[..., StepCosts], prior: StepCosts, shape: StepShape, points: tuple[Measured, ...],
                terms: tuple[str, ...]) -> StepCosts:
    return search(prior, shape, points, terms)


def _fit_once(prior: StepCosts, shape: StepShape, points: Sequence[Measured], terms: tuple[str, ...]) -> StepCosts:
    """_fit_terms, memoised where the inputs hash (advise fits the same files once per seat count and command; the
    search itself is part of the key, so a replaced one is not answered from the cache)."""
    try:
        return _fit_cached(_fit_terms, prior, shape, tuple(points), terms)
    except TypeError:  # an unhashable field: fit afresh
        return _fit_terms(prior, shape, points, terms)


def runs_of(points: Sequence[Measured]) -> dict[str, list[Measured]]:
    """The points by the run that measured them (their source: one profile wave, one bench, one sweep setting)."""
    out: dict[str, list[Measured]] = {}
    for p in points:
        out.setdefault(p.source, []).append(p)
    return out


def held_out(prior: StepCosts, shape: StepShape, points: Sequence[Measured], terms: tuple[str, ...]
             ) -> HeldOut | None:
    """Leave runs out: each run predicted by a fit of the runs outside its fold (at each shrink weight) and by the
    priors.

    The weight kept is the one with the least held-out error; None where there are fewer than HELD_OUT_RUNS runs.
    """
    runs = runs_of(points)
    if len(runs) < HELD_OUT_RUNS:
        return None
    # At most HELD_OUT_FOLDS fits: run i of the runs in order of batch and prompt is held out in fold i mod k (a
    # profile's 8 runs: 4 fits, each blind to a short and a long or a small and a large batch).
    order = sorted(runs, key=lambda r: (min(p.seats for p in runs[r]), r))
    k = min(HELD_OUT_FOLDS, len(order))
    losses = dict.fromkeys(SHRINK_WEIGHTS, 0.0)
    prior_loss, figures = 0.0, 0
    for i in range(k):
        out = set(order[i::k])
        held = [p for p in points if p.source in out]
        rest = [p for p in points if p.source not in out]
        fold = _fit_once(prior, shape, rest, terms)
        prior_loss += _loss(prior, shape, held)
        figures += len(_residuals(prior, shape, held))
        for w in SHRINK_WEIGHTS:
            losses[w] += _loss(shrunk(prior, fold, terms, w), shape, held)
    if not figures:
        return None
    rms = {w: math.sqrt(v / figures) for w, v in losses.items()}
    weight = min(SHRINK_WEIGHTS, key=lambda w: (rms[w], -w))
    return HeldOut(runs=len(runs), folds=k, figures=figures, weight=weight, fit_error=rms[weight],
                   prior_error=math.sqrt(prior_loss / figures), full_fit_error=rms[1.0])


def fit(prior: StepCosts, shape: StepShape, points: Sequence[Measured], pinned: Sequence[str] = ()) -> Calibration:
    """Fit the coefficients the points inform, within bounds; judged on held-out runs where there are three or
    more (used at the shrink weight that predicts them best), refused (the prior kept) if it fits its own points
    worse than the priors or predicts the held-out runs no better.

    With async scheduling a bench's client TTFT is not fitted to: it carries the API server's intake and the wait
    before a request's first schedule (dspark_inside.frontend's part of the model, not a step cost: at 32-128
    streams on the H200 the engine's requests waited 0.09 s longer than the model's), and a GEMM rate fitted to
    it made the prompts 3.5-4.6% slow and every decode figure with them; the engine's own prefill time (a
    profile's closed loops) is what prices the prompts there.
    """
    if shape.async_scheduling:
        points = [replace(p, ttft_mean_s=None) if p.workload is not None and p.ttft_mean_s else p for p in points]
    terms = terms_to_fit(points, pinned, shape)
    if prior.prefill_per_token_s > 0 and "prefill_per_token_s" not in pinned and any(
            p.prefill_s or p.ttft_mean_s or p.prefill_mean_s for p in points):
        terms = (*terms, "prefill_per_token_s")  # a measured prompt cost is what the prompt points refit
    terms = tuple(t for t in terms if 0 < bounds(prior, t)[0] < bounds(prior, t)[1] < math.inf)
    costs = _fit_once(prior, shape, points, terms)
    prior_res = tuple(_residuals(prior, shape, points))
    residuals = tuple(_residuals(costs, shape, points))
    seat_counts = tuple(sorted({p.seats for p in points}))
    cal = Calibration(costs=costs, fitted=terms, points=len(points), seat_counts=seat_counts, residuals=residuals,
                      prior_residuals=prior_res)
    if not cal.fit_error <= cal.prior_error + 1e-4:  # 0.01%: the search's own noise, not a worse fit
        why = (f"the fit explains its {len(residuals)} measured figures worse than the priors (rms log error "
               f"{cal.fit_error:.3f} against {cal.prior_error:.3f}): it is not used")
        return replace(cal, costs=prior, fitted=(), residuals=prior_res, refused=why)
    judged = held_out(prior, shape, points, terms) if terms else None
    if judged is None:
        return cal
    cal = replace(cal, held_out=judged)
    if not judged.fit_error < judged.prior_error - HELD_OUT_MARGIN:
        why = (f"judged on the runs it did not see ({judged.runs} runs in {judged.folds} folds, each fold "
               f"predicted by a fit of the others: {judged.figures} figures), the fit predicts them no better than "
               "the priors (rms log error "
               f"{judged.full_fit_error:.3f} at full weight, {judged.fit_error:.3f} at best, shrunk to "
               f"{judged.weight:g}, against the priors' {judged.prior_error:.3f}): it is not used")
        return replace(cal, costs=prior, fitted=(), residuals=prior_res, refused=why)
    final = shrunk(prior, costs, terms, judged.weight)
    return replace(cal, costs=final, residuals=tuple(_residuals(final, shape, points)))


# A fitted model that misses a measured figure by more than this does not describe the measurements.
RESIDUAL_LIMIT = 0.25


def fit_warnings(cal: Calibration, peak_bytes_per_s: float | None, device: str) -> list[str]:
    """What makes a fit untrustworthy: figures it misses beyond ±25%, a bandwidth above the device's peak, a
    cost the points drive to zero (they ask for a negative one)."""
    out: list[str] = []
    if cal.refused:
        out.append(f"calibration refused: {cal.refused}; the predictions use the priors")
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
    for term in cal.fitted:
        if term in _ABSOLUTE and getattr(cal.costs, term) < _ABSOLUTE[term][0] * 1.5:
            out.append(f"fitted {TERM_LABELS[term]} is at its floor (~0): the points ask for less, which no engine "
                       "has")
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
    fix = "bench again with `dspark bench --seats N` (N: the server's max_num_seqs / --max-running-requests)"
    metrics_read = isinstance(running, (int, float))  # a peak was recorded, if only 0
    if metrics_read:
        # /metrics was read, but no sample caught a request running: a pass too short for its sampling.
        raise ValueError(
            f"{source}: the bench records no server seats, and the engine's /metrics, read, never showed a "
            f"request running (running peak {running}: too few samples in too short a pass), so its seat count "
            f"is unknown; {fix}, or a longer pass (more --requests)")
    raise ValueError(
        f"{source}: the bench records neither the server's seats nor the engine's running-request peak (its "
        f"/metrics was not read, e.g. behind a proxy), so its seat count is unknown; {fix}, or let bench read the "
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
    if data.get("kind") == PROFILE_KIND:
        _check_origin(data, source, plan)
        return profile_points(data, source, max_num_batched_tokens)
    raise ValueError(f"{source}: neither a `dspark bench --json` result, a sweep.json nor a `dspark profile` JSON")


PROFILE_KIND = "dspark-profile"  # dspark.bench.profile.PROFILE_KIND


def profile_points(data: Mapping[str, Any], source: str, max_num_batched_tokens: int = 8192) -> list[Measured]:
    """A `dspark profile` JSON's measured points: what its benches measure of the step costs, and nothing else.

    - Every point's decode step: the median inter-token gap where the profile records it (the steps without a
      prompt in them), else the mean gap where no summary is recorded (an old profile). These pin the weights'
      read (the step at one row), the cost a row adds and, for routed experts, how many a few rows read.
    - A closed-loop point (more requests than streams: prompts landing in decode steps, the GPU at its sustained
      clock) as the bench it is: its workload simulated as any bench is, against its aggregate and per-stream
      decode and its prompt figure, the engine's own where the profile read its /metrics (pooled inter-token
      gaps, request_prefill_time), else the client's (per-stream decode, TTFT).

    Not read: a one-wave point's aggregate, per-stream and prefill figures, and a lone prompt's prefill time. A
    wave's figures are set by how its requests reach the scheduler (how many the first step takes: on the H200
    the engine's prefill time of 4 × 256-token prompts was 40-53 ms where one 1,024-token step takes 27), which
    is the API server's and the scheduler's timing, not a step cost; a lone prompt of 2,048 tokens ran 11% faster
    than the same prompt under load (47 ms against 53: a short burst at a higher SM clock than the board sustains
    at its power cap), so a GEMM rate fitted to it makes loaded prompts fast: fitted to such figures, the H200
    profiles predicted their own held-out waves worse than the priors (tests/device/results/2026-12-02-clock-E).
    """
    out: list[Measured] = []
    for p in data.get("points") or []:
        if not isinstance(p, dict):
            continue
        batch, prompt, output = int(p.get("batch") or 0), int(p.get("input_len") or 0), int(p.get("output_len") or 0)
        if batch < 1:
            continue
        label = f"{source} (batch {batch}, {prompt}-token prompts, {p.get('source', '?')})"
        summary: Mapping[str, Any] = p["summary"] if isinstance(p.get("summary"), dict) else {}

        def figure(name: str, summary: Mapping[str, Any] = summary) -> float | None:
            v = summary.get(name)
            return float(v) if isinstance(v, (int, float)) and v > 0 and math.isfinite(v) else None

        engine = str(p.get("source") or "").startswith("engine")
        itl, prefill = p.get("itl_mean_s"), p.get("prefill_mean_s")
        requests = int(p.get("requests") or batch)
        aggregate, per_stream, ttft = (figure(m) for m in ("aggregate_decode_tps", "per_stream_decode_tps",
                                                            "ttft_mean_s"))
        engine_prefill: float | None = None
        if engine and isinstance(itl, (int, float)) and itl > 0 and math.isfinite(itl):
            per_stream = 1.0 / float(itl)  # the engine's own inter-token gaps, pooled as per-stream decode pools them
        if engine and isinstance(prefill, (int, float)) and prefill > 0 and math.isfinite(prefill):
            engine_prefill, ttft = float(prefill), None  # its own prefill time, not the client's TTFT (above)
        if requests > batch and prompt > 0 and output > 1 and any(
                f is not None for f in (aggregate, per_stream, ttft, engine_prefill)):
            hit = summary.get("prefix_hit_rate")
            load = Workload(clients=batch, requests=requests, input_len=prompt,
                            output_len=output, prefix_hit_rate=float(hit) if isinstance(hit, (int, float)) else 0.0,
                            max_num_batched_tokens=max_num_batched_tokens)
            out.append(Measured(seats=batch, source=label, workload=load, aggregate_decode_tps=aggregate,
                                per_stream_decode_tps=per_stream, ttft_mean_s=ttft, prefill_mean_s=engine_prefill))
        itl_ms: Mapping[str, Any] = p["itl_ms"] if isinstance(p.get("itl_ms"), dict) else {}
        median = itl_ms.get("p50")
        if isinstance(median, (int, float)) and median > 0 and math.isfinite(median):
            step: float | None = float(median) / 1e3
        elif not summary and isinstance(itl, (int, float)) and itl > 0 and math.isfinite(itl):
            step = float(itl)
        else:
            step = None
        if step is not None:
            out.append(Measured(seats=batch, source=label, step_s=step, context_tokens=prompt + output / 2))
    if not out:
        raise ValueError(f"{source}: a `dspark profile` JSON with no step figure to calibrate on")
    return out
