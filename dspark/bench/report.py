"""Render bench and sweep results: tables (rich, markdown-style), JSON, and atomic file writes."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from dspark.bench.outputs import write_atomic
from dspark.bench.results import (
    GOODPUT_METRICS,
    METRICS,
    SPREAD_SUFFIX,
    VLLM_BENCH_METRICS,
    BenchResult,
    MetricInfo,
    jsonable,
    pass_values,
)
from dspark.bench.sweep import SweepResult

# write_atomic is re-exported: advise and the benchmarks write their files with it.
__all__ = ["MINUS", "bench_table", "bench_text", "fmt_change", "fmt_value", "latency_table", "prediction_lines",
           "spread_lines", "sweep_table", "sweep_text", "to_json", "to_text", "write_atomic"]

MINUS = "−"  # typographic minus, as in docs/deployment.md's tables


def fmt_value(info: MetricInfo, value: float | None) -> str:
    """A metric value for a table cell; '–' when not measured."""
    if value is None or math.isnan(value):
        return "–"
    if info.kind == "fraction":
        return "<1%" if 0 < value < 0.005 else f"{value:.0%}"
    if info.kind == "count":
        return f"{value:.0f}" if value == int(value) else f"{value:.1f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}" if abs(value) >= 0.001 or value == 0 else f"{value:.1e}"


def fmt_change(info: MetricInfo, base: float | None, new: float | None) -> str:
    """The change from base to new: relative % for rates and times, × for KV use, points for hit rates."""
    if base is None or new is None or math.isnan(base) or math.isnan(new):
        return ""
    if info.kind == "count":
        diff = new - base
        text = "" if diff == 0 else f"{diff:+.0f}" if diff == int(diff) else f"{diff:+.1f}"
        return text.replace("-", MINUS)
    if info.kind == "fraction":
        if "hit" in info.label.lower():
            return "" if new == base else f"{(new - base) * 100:+.0f} pp".replace("-", MINUS)
        return f"×{new / base:.2f}" if base > 0 else ""
    if base == 0:
        return ""
    return f"{(new - base) / base:+.0%}".replace("-", MINUS)


def _table(headers: Sequence[str]) -> Table:
    table = Table(box=box.MARKDOWN, show_edge=True)
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    return table


def to_text(*renderables: object, width: int = 160) -> str:
    """Render rich objects to plain text (no colour), the same on a terminal, in a file and in a test."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, soft_wrap=False)
    for r in renderables:
        console.print(r)
    # The markdown box draws its empty top and bottom edges as lines of spaces: drop them.
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines() if line.strip())


def bench_table(result: BenchResult) -> Table:
    """One column per repetition, their mean, and the warm re-run when there was one."""
    headers = ["", *(p.label for p in result.reps), "mean"] + (["warm re-run"] if result.warm else [])
    table = _table(headers)
    per = [pass_values(p) for p in result.reps]
    warm = pass_values(result.warm) if result.warm else None
    for name, info in METRICS.items():
        if name.startswith("warm_") or (name in GOODPUT_METRICS and result.goodput is None):
            continue
        mean = result.summary.get(name)
        row = [info.label, *(fmt_value(info, v.get(name)) for v in per), fmt_value(info, mean)]
        if warm is not None:
            row.append(fmt_value(info, warm.get(name)))
        table.add_row(*row)
    return table


def sweep_table(result: SweepResult) -> Table:
    """One column per seat count (means over reps) and a change column per candidate against the baseline."""
    settings = result.settings
    heads = [s.label for s in settings]
    deltas = ["Δ" if len(settings) == 2 else f"Δ {s.label}" for s in settings[1:]]
    table = _table(["", *heads, *deltas])
    summaries = [s.bench.summary if s.bench else {} for s in settings]
    for name, info in METRICS.items():
        if name in VLLM_BENCH_METRICS:
            continue
        vals = [summ.get(name) for summ in summaries]
        changes = [fmt_change(info, vals[0], v) for v in vals[1:]]
        table.add_row(info.label, *(fmt_value(info, v) for v in vals), *changes)
    pools = [s.launch.kv_pool_tokens if s.launch else None for s in settings]
    table.add_row("KV pool, tokens (engine log)", *(f"{p:,}" if p is not None else "–" for p in pools),
                  *([""] * len(deltas)))
    table.add_row("Launch as planned", *("yes" if s.launch and not s.launch.problems else "no" for s in settings),
                  *([""] * len(deltas)))
    table.add_row("Clean (0 errors, 0 preemptions)", *("yes" if s.clean else "no" for s in settings),
                  *([""] * len(deltas)))
    return table


def sweep_text(result: SweepResult) -> str:
    """The sweep table, then the rule, each verdict with its reasons, and every setting's problems."""
    if not result.settings:
        return (f"Seat sweep: no seat count ran\nPARTIAL: {result.partial_reason}\n"
                f"Decision: {result.decision.summary}\n")
    base = result.settings[0].label
    lines = [f"Seat sweep: {result.reps}-rep mean per setting; Δ against {base}",
             *([f"PARTIAL: {result.partial_reason}"] if result.partial else []), "",
             to_text(sweep_table(result)).rstrip(), ""]
    for extra in (spread_lines(result), prediction_lines(result)):
        lines += [*extra, ""] if extra else []
    lines.append(f"Decision rule (fixed before the runs): {result.rule_text}")
    for v in result.decision.verdicts:
        why = "; ".join(v.reasons) if v.reasons else "meets the rule"
        lines.append(f"  {v.label}: {'adopt' if v.adopt else 'do not adopt'} ({why})")
    lines.append(f"Decision: {result.decision.summary}")
    for s in result.settings:
        for p in s.problems:
            lines.append(f"  problem, {s.label}: {p}")
        for pass_ in s.bench.passes if s.bench else ():
            if pass_.metrics_warning:
                lines.append(f"  warning, {s.label}: {pass_.label}: {pass_.metrics_warning}")
    return "\n".join(lines) + "\n"


_SPREAD_SHOWN = (("aggregate_decode_tps", "aggregate"), ("per_stream_decode_tps", "per-stream"),
                 ("ttft_mean_s", "TTFT"), ("wall_time_s", "wall"))


def spread_lines(result: SweepResult) -> list[str]:
    """Each setting's between-rep spread of the judged metrics, (max − min) / mean; nothing for 1 rep."""
    if result.reps < 2:
        return []
    out = [f"Spread over {result.reps} reps ((max − min) / mean), the noise the rule must beat:"]
    for s in result.settings:
        summary = s.bench.summary if s.bench else {}
        parts = []
        for name, label in _SPREAD_SHOWN:
            v = summary.get(name + SPREAD_SUFFIX)
            parts.append(f"{label} {'–' if v is None else f'{v:.1%}'}")
        out.append(f"  {s.label}: " + ", ".join(parts))
    return out


def prediction_lines(result: SweepResult) -> list[str]:
    """What dspark advise predicted before the runs, beside what was measured."""
    pred = result.prediction
    if not pred:
        return []
    if "error" in pred:
        return [f"Prediction before the runs: none ({pred['error']})"]
    fitted = pred.get("model", {}).get("fitted") or []
    out = ["Predicted before the runs (dspark advise, " + (f"fitted: {', '.join(fitted)}" if fitted else
                                                          "uncalibrated") + ") against measured:"]
    measured = {s.seats: (s.bench.summary if s.bench else {}) for s in result.settings}
    for p in pred.get("predictions", []):
        m = measured.get(p["seats"], {})
        cells = []
        for key, mkey, label in (("aggregate_decode_tps", "aggregate_decode_tps", "aggregate tok/s"),
                                 ("per_stream_decode_tps", "per_stream_decode_tps", "per-stream tok/s"),
                                 ("ttft_s", "ttft_mean_s", "TTFT s")):
            got = m.get(mkey)
            err = f" ({p[key] / got - 1:+.0%})" if got else ""
            cells.append(f"{label} {p[key]:.3g} vs {'–' if got is None else f'{got:.3g}'}{err}")
        out.append(f"  {p['seats']} seats: " + "; ".join(cells))
        if p.get("prefix_cache_hit_rate") is not None:  # the engine's scheduler ran: its cache and pool figures
            out.append(f"    {p.get('simulator')}: " + "; ".join(_cache_cells(p, m, result.reps)))
    return out


def _cache_cells(p: dict[str, Any], m: dict[str, Any], reps: int) -> list[str]:
    """Prefix hits (both passes), KV peak and preemptions the engine's scheduler predicted, against /metrics."""

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{v:.1%}"

    warm = p.get("warm") or {}
    cells = [f"prefix hits {pct(p['prefix_cache_hit_rate'])} vs {pct(m.get('prefix_hit_rate'))}"]
    if warm:
        cells.append(f"warm re-run prefix hits {pct(warm.get('prefix_cache_hit_rate'))} vs "
                     f"{pct(m.get('warm_prefix_hit_rate'))}")
    cells.append(f"KV peak {pct(p.get('kv_peak_fraction'))} vs {pct(m.get('kv_usage_peak'))}")
    # The measured count sums every rep and the warm re-run; the prediction is per pass.
    predicted = int(p.get("preemptions") or 0) * reps + int(warm.get("preemptions") or 0)
    got = m.get("preemptions")
    cells.append(f"preemptions {predicted} vs {'–' if got is None else f'{got:.0f}'}")
    return cells


def bench_text(result: BenchResult) -> str:
    """The bench table and any errors or preemptions, never hidden."""
    meta = result.metadata
    engine = " ".join(str(v) for v in (meta.get("engine"), meta.get("engine_version")) if v) or "engine –"
    load = (f"open loop at {meta['request_rate']:g} req/s (burstiness {meta.get('burstiness', 1.0):g}), at most "
            f"{result.concurrency} in flight" if meta.get("request_rate") else f"{result.concurrency} clients")
    per_line = meta.get("max_tokens_per_line")
    tokens = (f"{per_line['min']}-{per_line['max']} (mean {per_line['mean']:.4g}) max tokens" if per_line
              else f"{result.max_tokens} max tokens")
    lines = [
        f"{result.model} at {result.url} ({result.endpoint}; {engine}): {result.requests} requests × {tokens}, "
        f"{load}; prompts: {result.prompt_source}",
        f"dspark {meta.get('dspark_version', '–')}, started {meta.get('started_at', '–')}",
        *([f"PARTIAL: {result.partial_reason}"] if result.partial else []),
        "",
        to_text(bench_table(result)).rstrip(),
        "",
        to_text(latency_table(result)).rstrip(),
    ]
    errors = int(result.summary.get("errors") or 0)
    if errors:
        msgs = sorted({m for p in result.passes for m in p.stats.error_messages})
        lines.append(f"{errors} request(s) failed: " + " | ".join(msgs[:5]))
    pre = result.summary.get("preemptions")
    if pre:
        lines.append(f"the engine preempted {int(pre)} time(s) during the bench")
    for p in result.passes:
        if p.metrics_error:
            lines.append(f"{p.label}: engine metrics unavailable ({p.metrics_error})")
        if p.metrics_warning:
            lines.append(f"warning: {p.label}: {p.metrics_warning}")
    if result.goodput is not None:
        g = result.goodput
        slos = ", ".join(f"{k} ≤ {v:g} ms" for k, v in g["slos_ms"].items())
        rate, frac = g.get("request_goodput"), g.get("fraction")
        lines.append(f"Goodput ({slos}, as vllm bench serve --goodput): "
                     + ("–" if rate is None else f"{rate:.3g} req/s")
                     + ("" if frac is None else f", {frac:.1%} of requests met every SLO"))
    lines += [f"hint: {h}" for h in result.hints]
    return "\n".join(lines) + "\n"


_LATENCIES = (("ttft_ms", "Time to first token"), ("tpot_ms", "Time per output token"),
              ("itl_ms", "Inter-token latency"), ("e2e_ms", "End-to-end latency"))


def latency_table(result: BenchResult) -> Table:
    """Each latency as `vllm bench serve` reports it: mean, p50, p90, p99 in ms (means over the repetitions)."""
    table = _table(["Latency, ms", "mean", "p50", "p90", "p99"])
    info = MetricInfo("", "lower", "seconds")
    for key, label in _LATENCIES:
        dist = getattr(result, key)
        cells = [fmt_value(info, getattr(dist, q)) if dist is not None else "–" for q in ("mean", "p50", "p90", "p99")]
        table.add_row(label, *cells)
    return table


def to_json(result: Any) -> str:
    """The result as one JSON object (nan as null), with its `clean` flag."""
    data = jsonable(result)
    data["clean"] = bool(result.clean)
    return json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n"
