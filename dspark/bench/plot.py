"""The sweep plot: decode rates and TTFT against seats (mean over reps, min–max bars), running requests over time."""

from __future__ import annotations

import io
from collections.abc import Sequence

from dspark.bench.results import pass_values
from dspark.bench.sweep import SweepResult
from dspark.core.extras import require_extra


def _series(result: SweepResult, metric: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Seats, means and the distances down to the lowest and up to the highest rep, for settings that measured it."""
    xs: list[int] = []
    means: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    for s in result.settings:
        if s.bench is None:
            continue
        vals = [v for v in (pass_values(p)[metric] for p in s.bench.reps) if v is not None]
        mean = s.bench.summary.get(metric)
        if not vals or mean is None:
            continue
        xs.append(s.seats)
        means.append(mean)
        lo.append(mean - min(vals))
        hi.append(max(vals) - mean)
    return xs, means, lo, hi


def sweep_png(result: SweepResult, title: str = "") -> bytes:
    """The PNG bytes (matplotlib, Agg backend: no display needed); MissingExtraError without dspark[plot]."""
    require_extra("plot", "drawing sweep.png")
    import matplotlib  # noqa: PLC0415 - imported only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax_dec, ax_ttft, ax_run) = plt.subplots(1, 3, figsize=(15, 4.6))
    seats: Sequence[int] = [s.seats for s in result.settings]

    # Per-stream decode is an order of magnitude below the aggregate: it gets its own axis on the right.
    ax_stream = ax_dec.twinx()
    for metric, label, axis, style, color in (
        ("aggregate_decode_tps", "aggregate (left)", ax_dec, "o-", "C0"),
        ("per_stream_decode_tps", "per stream (right)", ax_stream, "s--", "C1"),
        ("ttft_mean_s", "mean", ax_ttft, "o-", "C0"),
        ("ttft_p99_s", "p99", ax_ttft, "s--", "C1"),
    ):
        xs, ys, lo, hi = _series(result, metric)
        if xs:
            axis.errorbar(xs, ys, yerr=[lo, hi], fmt=style, capsize=4, label=label, color=color)
    ax_dec.set(title="Decode throughput", xlabel="seats", ylabel="aggregate tok/s")
    ax_stream.set(ylabel="per-stream tok/s")
    ax_stream.set_ylim(bottom=0)
    ax_ttft.set(title="Time to first token", xlabel="seats", ylabel="s")
    for ax in (ax_dec, ax_ttft):
        ax.set_xticks(list(seats))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    handles = ax_dec.get_legend_handles_labels()[0] + ax_stream.get_legend_handles_labels()[0]
    if handles:
        ax_dec.legend(handles=handles, loc="lower right")
    if ax_ttft.get_legend_handles_labels()[0]:
        ax_ttft.legend()

    for s in result.settings:
        if s.bench is None or not s.bench.reps or s.bench.reps[0].engine is None:
            continue
        pts = [(p.t, p.running) for p in s.bench.reps[0].engine.samples if p.running is not None]
        if pts:
            ax_run.step([t for t, _ in pts], [r for _, r in pts], where="post", label=s.label)
    ax_run.set(title="Running requests (engine /metrics, rep 1)", xlabel="s since the pass started", ylabel="requests")
    ax_run.set_ylim(bottom=0)
    ax_run.grid(alpha=0.3)
    if ax_run.lines:
        ax_run.legend()

    fig.suptitle(title or f"Seat sweep: {', '.join(str(n) for n in seats)} seats, {result.reps} reps each")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
