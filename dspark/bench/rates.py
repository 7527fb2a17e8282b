"""`dspark bench --profile sweep`: a request-rate sweep as guidellm runs one: a synchronous run (one request at a
time) first, then a throughput run (every --concurrency stream busy), then N open-loop rates spaced evenly
between the two measured request rates; each point a bench of its own, reported as `dspark bench` reports one,
with fresh synthetic prompts of the same lengths (the earlier points' are in the server's prefix cache).

The rates are guidellm's SweepProfile: linspace(synchronous rate, throughput rate, N + 2) without its ends, each
sent with Poisson arrivals (--burstiness) and at most --concurrency requests in flight, as `vllm bench serve
--request-rate R --max-concurrency C` sends them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.table import Table

from dspark.bench.load import LoadOptions, bench_spec
from dspark.bench.report import fmt_value, to_text
from dspark.bench.results import METRICS, BenchResult, jsonable
from dspark.core.errors import InputError

SWEEP_KIND = "dspark-bench-sweep"
MAX_SWEEP_POINTS = 50


@dataclass(frozen=True)
class RatePoint:
    """One point of the sweep: its label, how it was loaded, and its bench."""

    label: str
    mode: str  # "synchronous", "throughput" or "rate"
    target_rate: float | None  # requests/s asked for (None: closed loop)
    concurrency: int
    result: BenchResult


@dataclass(frozen=True)
class RateSweep:
    """Every point in the order run; partial when a signal or a failed point ended it early."""

    points: tuple[RatePoint, ...]
    partial: bool = False
    partial_reason: str | None = None

    @property
    def clean(self) -> bool:
        """Every point ran without errors, and the sweep was not cut short."""
        return not self.partial and all(not p.result.summary.get("errors") for p in self.points)


def sweep_rates(synchronous: float, throughput: float, points: int) -> list[float]:
    """`points` rates evenly between the two measured rates, neither end included (guidellm's sweep)."""
    if points < 1 or not (math.isfinite(synchronous) and math.isfinite(throughput)):
        return []
    lo, hi = sorted((synchronous, throughput))
    step = (hi - lo) / (points + 1)
    return [lo + step * (i + 1) for i in range(points)]


def check_points(points: int) -> None:
    """--sweep-points: 1..MAX_SWEEP_POINTS."""
    if not 1 <= points <= MAX_SWEEP_POINTS:
        raise InputError(f"--sweep-points must be within 1..{MAX_SWEEP_POINTS}, got {points}",
                         hint="guidellm's default sweep has 10 points; dspark's 5")


RunOne = Callable[[LoadOptions, str], BenchResult]  # a point's load and label -> its bench


def run_rate_sweep(load: LoadOptions, url: str, points: int, run_one: RunOne) -> RateSweep:
    """The synchronous run, the throughput run, then `points` rates between their request rates."""
    check_points(points)
    if load.request_rate is not None:
        raise InputError("--profile sweep chooses the request rates itself: leave out --request-rate")
    bench_spec(load, url)  # every option checked before the first request
    done: list[RatePoint] = []

    def run(label: str, mode: str, one: LoadOptions) -> RatePoint | None:
        # Fresh synthetic prompts at every point (the same lengths and arrivals): the earlier points' prompts
        # are in the server's prefix cache, and re-sent they measure the cache (97% hits on an H200, 2026-12-02).
        one = dataclasses.replace(one, prompt_offset=load.prompt_offset + len(done) * load.reps)
        result = run_one(one, label)
        done.append(RatePoint(label, mode, one.request_rate, one.concurrency, result))
        return None if result.partial else done[-1]

    def cut(reason: str) -> RateSweep:
        return RateSweep(tuple(done), partial=True, partial_reason=reason)

    sync = run("synchronous", "synchronous", dataclasses.replace(load, concurrency=1, request_rate=None))
    if sync is None:
        return cut(done[-1].result.partial_reason or "interrupted")
    thr = run("throughput", "throughput", dataclasses.replace(load, request_rate=None))
    if thr is None:
        return cut(done[-1].result.partial_reason or "interrupted")
    lo, hi = sync.result.request_throughput, thr.result.request_throughput
    if lo is None or hi is None or not (lo > 0 and hi > 0):
        return cut("the synchronous or throughput run completed no request: no rates to sweep between")
    for rate in sweep_rates(lo, hi, points):
        if run(f"{rate:.3g} req/s", "rate", dataclasses.replace(load, request_rate=rate)) is None:
            return cut(done[-1].result.partial_reason or "interrupted")
    return RateSweep(tuple(done))


def sweep_json(sweep: RateSweep) -> dict[str, Any]:
    """The sweep as one JSON object: each point's load and its bench result as `dspark bench --json` writes it."""
    return {"kind": SWEEP_KIND, "profile": "sweep", "clean": sweep.clean, "partial": sweep.partial,
            "partial_reason": sweep.partial_reason,
            "points": [{"label": p.label, "mode": p.mode, "target_rate": p.target_rate, "concurrency": p.concurrency,
                        "result": {**jsonable(p.result), "clean": p.result.clean}} for p in sweep.points]}


# (summary key, column head, scale): vllm bench serve's figures, TTFT in ms as it prints it.
_COLUMNS = (("request_throughput", "req/s", 1.0), ("aggregate_decode_tps", "out tok/s", 1.0),
            ("ttft_mean_s", "TTFT ms", 1e3), ("tpot_mean_ms", "TPOT ms", 1.0), ("itl_mean_ms", "ITL ms", 1.0),
            ("e2e_mean_ms", "E2E ms", 1.0), ("request_goodput", "goodput req/s", 1.0),
            ("goodput_fraction", "met SLOs", 1.0), ("errors", "errors", 1.0))


def sweep_table_text(sweep: RateSweep) -> str:
    """One row per point: request rate asked and measured, throughput, latencies, goodput, errors."""
    goodput = any(p.result.goodput is not None for p in sweep.points)
    cols = [c for c in _COLUMNS if goodput or c[0] not in ("request_goodput", "goodput_fraction")]
    table = Table(box=box.MARKDOWN, show_edge=True)
    for i, head in enumerate(["point", "asked req/s", *(c[1] for c in cols)]):
        table.add_column(head, justify="left" if i == 0 else "right", no_wrap=True)
    for p in sweep.points:
        asked = "closed loop" if p.target_rate is None else f"{p.target_rate:.3g}"
        cells = []
        for key, _head, scale in cols:
            value = p.result.summary.get(key)
            cells.append(fmt_value(METRICS[key], None if value is None else value * scale))
        table.add_row(f"{p.label} (c={p.concurrency})", asked, *cells)
    lines = [f"Request-rate sweep (guidellm's profile): synchronous, throughput, then {max(len(sweep.points) - 2, 0)} "
             "rates between", *([f"PARTIAL: {sweep.partial_reason}"] if sweep.partial else []), "",
             to_text(table).rstrip()]
    slos = next((p.result.goodput for p in sweep.points if p.result.goodput is not None), None)
    if slos is not None:
        lines.append("SLOs (ms): " + ", ".join(f"{k} ≤ {v:g}" for k, v in slos["slos_ms"].items()))
    for p in sweep.points:
        errors = int(p.result.summary.get("errors") or 0)
        if errors:
            msgs = sorted({m for ps in p.result.passes for m in ps.stats.error_messages})
            lines.append(f"{p.label}: {errors} request(s) failed: " + " | ".join(msgs[:3]))
    return "\n".join(lines) + "\n"


def rates_of(sweep: RateSweep) -> Sequence[float | None]:
    """The rates asked for, point by point (None: closed loop)."""
    return [p.target_rate for p in sweep.points]
