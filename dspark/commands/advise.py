"""`dspark advise`: the advice (dspark.advise.build) as a table or one JSON object, and its plot."""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Sequence
from typing import IO, Any

from dspark.advise.advice import Advice, Prediction
from dspark.advise.build import AdviseOptions, build_advice, first_plan
from dspark.core.errors import ExitCode
from dspark.core.extras import require_extra
from dspark.planning.validate import ValidateRequest


def _fmt(value: float, digits: int = 1) -> str:
    return "–" if not math.isfinite(value) else f"{value:,.{digits}f}"


def advice_text(advice: Advice) -> str:
    """The table of predictions, the cost terms, the assumptions and the recommendation."""
    from rich import box  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    from dspark.bench.report import to_text  # noqa: PLC0415

    table = Table(box=box.MARKDOWN)
    engine = any(p.preemptions is not None for p in advice.predictions)
    warm = any(p.warm for p in advice.predictions)
    heads = ["seats", "aggregate tok/s", "per-stream tok/s", "TTFT s", "wall s", "step ms", "KV peak", "pool holds",
             "experts/step", "prefill share"]
    heads += ["prefix hits", "preemptions"] if engine else []
    heads += ["warm hits", "warm KV peak", "warm wall s"] if warm else []
    for head in heads:
        table.add_column(head, justify="right")
    for p in advice.predictions:
        seats = str(p.seats) if p.seats_asked == p.seats else f"{p.seats} ({p.seats_asked} asked)"
        row = [seats, _fmt(p.aggregate_decode_tps), _fmt(p.per_stream_decode_tps), _fmt(p.ttft_s),
               _fmt(p.wall_time_s), _fmt(p.decode_step_ms), f"{p.kv_peak_fraction:.1%}",
               "yes" if p.pool_holds_workload else "no",
               f"{p.expert_coverage:.0%}" if p.expert_coverage is not None else "–", f"{p.prefill_share:.0%}"]
        if engine:
            rate = p.prefix_cache_hit_rate
            row += [f"{rate:.1%}" if rate is not None else "–",
                    str(p.preemptions) if p.preemptions is not None else "–"]
        if warm:
            wp = p.warm or {}
            rate = wp.get("prefix_cache_hit_rate")
            row += [f"{rate:.1%}" if rate is not None else "–",
                    f"{wp['kv_peak_fraction']:.1%}" if wp.get("kv_peak_fraction") is not None else "–",
                    _fmt(wp["wall_time_s"]) if wp.get("wall_time_s") is not None else "–"]
        table.add_row(*row)
    w = advice.workload
    c = advice.context
    lines = [f"{c['engine']} {c['engine_version']} · {c['model']} · {c['hardware']}",
             f"simulated by: {advice.predictions[0].simulator}",
             f"workload: {w.clients} clients, {w.requests} requests, {w.input_len} prompt tokens "
             f"({w.prefix_hit_rate:.0%} cached), {w.output_len} out", "",
             to_text(table).rstrip(), "", "cost terms:"]
    lines += [f"  {line}" for line in advice.cost_lines]
    cal = advice.calibration
    if cal is not None:
        for r in cal.residuals:
            lines.append(f"  fit: {r.metric} at {r.seats} seats: measured {r.measured:.4g}, model {r.predicted:.4g} "
                         f"({r.error:+.1%}) [{r.source}]")
    lines += [f"warn: {w}" for w in advice.warnings]
    lines.append("assumptions:")
    lines += [f"  {a}" for a in advice.assumptions]
    lines.append(f"rule: {advice.recommendation.rule}")
    rec = advice.recommendation
    lines.append(f"recommendation: {rec.seats if rec.seats is not None else 'none'} seats — {rec.reason}")
    return "\n".join(lines) + "\n"


def advice_png(predictions: Sequence[Prediction]) -> bytes:
    """Predicted decode rates and TTFT against seats (matplotlib, Agg backend); MissingExtraError without [plot]."""
    require_extra("plot", "advise --plot")
    import matplotlib  # noqa: PLC0415 - only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    seats = [p.seats for p in predictions]
    fig, (ax, ax_ttft) = plt.subplots(1, 2, figsize=(11, 4.4))
    ax.plot(seats, [p.aggregate_decode_tps for p in predictions], "o-", label="aggregate (left)")
    right = ax.twinx()
    right.plot(seats, [p.per_stream_decode_tps for p in predictions], "s--", color="C1", label="per stream (right)")
    ax.set(title="Predicted decode throughput", xlabel="seats", ylabel="aggregate tok/s")
    right.set(ylabel="per-stream tok/s")
    ax_ttft.plot(seats, [p.ttft_s for p in predictions], "o-")
    ax_ttft.set(title="Predicted time to first token (mean)", xlabel="seats", ylabel="s")
    for a in (ax, right, ax_ttft):
        a.set_ylim(bottom=0)
    ax.legend(loc="lower right", handles=[*ax.get_lines(), *right.get_lines()])
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def explain_settings(request: ValidateRequest, seats: str) -> str:
    """--explain for advise and sweep: each setting and its source, as the first seat count's plan resolves them."""
    first, report = first_plan(request, seats)
    notes = "".join(f"note: {line}\n" for line in report.settings.notices())
    return f"settings at {first} seats:\n{report.settings.explain()}\n{notes}"


def run_advise(request: ValidateRequest, opts: AdviseOptions, *, as_json: bool = False, explain: bool = False,
               out: IO[str] | None = None) -> int:
    """Print the advice (table or one JSON object), write the plot; exit 0, or 1 when no seat count fits.

    explain: also each setting's source (on stderr under --json, where stdout holds exactly one object).
    """
    if opts.plot is not None:
        require_extra("plot", "advise --plot")  # before the work, not after it
    advice = build_advice(request, opts)
    if opts.plot is not None:
        from dspark.bench.report import write_atomic  # noqa: PLC0415

        write_atomic(opts.plot, advice_png(advice.predictions))
    stream = out or sys.stdout
    data: dict[str, Any] = advice.to_json()
    stream.write(json.dumps(data, default=str, allow_nan=False) + "\n" if as_json else advice_text(advice))
    if explain:
        (sys.stderr if as_json else stream).write(explain_settings(request, opts.seats))
    return int(ExitCode.OK if advice.recommendation.seats is not None else ExitCode.REFUSED)
