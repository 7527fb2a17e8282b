"""The validate command: run the core, then print the report as a table (rich) or one JSON object.

render_report, make_console and the notice printers are shared with `start` (dspark.commands.start), which shows
the same report before its plan.
"""

from __future__ import annotations

import json
import sys
from typing import IO, TYPE_CHECKING

from dspark.core.errors import ExitCode
from dspark.core.findings import Finding, verdict_of
from dspark.planning.validate import ValidateRequest, ValidationReport, validate

if TYPE_CHECKING:  # rich loads only for the table, not for --json
    from rich.console import Console

    from dspark.capacity import CapacitySummary

_STYLE = {"info": "dim", "warn": "yellow", "fail": "bold red", "ok": "green"}


def run_validate(request: ValidateRequest, *, as_json: bool, explain: bool, out: IO[str] | None = None) -> int:
    """Print the report; exit 0 when it fits (ok or warn), 1 when it does not."""
    report = validate(request)
    stream = out or sys.stdout
    print_notices(report)
    if as_json:
        stream.write(json.dumps(report.to_json(), default=str) + "\n")
        explain_on_stderr(report, explain)
    else:
        render_report(report, make_console(stream), explain=explain)
    return int(ExitCode.REFUSED if report.verdict == "fail" else ExitCode.OK)


def make_console(stream: IO[str]) -> Console:
    """A rich console on `stream`; off a terminal, wide enough that provenance paths are never cut."""
    from rich.console import Console  # noqa: PLC0415
    from rich.highlighter import NullHighlighter  # noqa: PLC0415

    width = None if stream.isatty() else 200
    console = Console(file=stream, soft_wrap=True, width=width, emoji=False)
    if console.color_system is None:  # no colour is written: the number highlighter's regexes would style nothing
        console.highlighter = NullHighlighter()
    return console


def explain_on_stderr(report: ValidationReport, explain: bool) -> None:
    """Under --explain, where each value came from, on stderr (beside --json's one object)."""
    # Under --json stdout holds exactly one object (whose `settings` carry the sources); the table goes beside it.
    if explain:
        print(report.settings.explain(), file=sys.stderr)


def print_notices(report: ValidationReport) -> None:
    """The settings' notices on stderr."""
    # On stderr, like the deployment's scripts ("MAX_NUM_SEQS not set, using default: 6"), with --json too: the
    # object on stdout also lists them under "notices".
    for line in report.settings.notices():
        print(line, file=sys.stderr)


def _bytes_per_token(cap: CapacitySummary) -> str:
    """Bytes per token; with sliding windows, what a token costs inside the window and past it."""
    if cap.sliding_window is None or cap.kv_bytes_per_token_in_window is None:
        return f"{cap.kv_bytes_per_token:,}"
    return (f"{cap.kv_bytes_per_token_in_window:,} inside the {cap.sliding_window:,}-token sliding window, "
            f"{cap.kv_bytes_per_token:,} past it")


def _pool_rows(cap: CapacitySummary) -> list[tuple[str, str]]:
    """The pool and full contexts; where the engine's own log for this plan is known, predicted and observed."""
    obs = cap.observed
    window = f" for {cap.max_model_len:,} tokens per request"
    if obs is None:
        return [("KV cache size", f"{cap.kv_pool_tokens:,} tokens"),
                ("Maximum concurrency", f"{cap.max_concurrency:.2f}x{window}")]
    pool = f" · {obs.kv_pool_tokens:,} observed" if obs.kv_pool_tokens is not None else ""
    return [("KV cache size", f"{cap.kv_pool_tokens:,} tokens predicted{pool}"),
            ("Maximum concurrency",
             f"{cap.max_concurrency:.2f}x predicted · {obs.max_concurrency:.2f}x observed{window}"),
            ("observed in", obs.source)]


def render_report(
    report: ValidationReport, console: Console, *, explain: bool, extra: tuple[Finding, ...] = ()
) -> None:
    """The capacity figures, the findings (validate's, then `extra` from planning a launch) and the verdict."""
    from rich.table import Table  # noqa: PLC0415

    cap = report.capacity
    version = report.engine_version
    installed = f", installed {version.installed}" if version.installed and version.source != "installed" else ""
    console.print(
        f"[bold]{report.serve.engine}[/] {version.label()} ({version.source}{installed}) · "
        f"{report.architecture.source} · {report.hardware.description}"
    )
    table = Table(show_header=False, box=None, pad_edge=False)
    rows: list[tuple[str, str]] = [
        ("KV bytes per token (per GPU)", _bytes_per_token(cap)),
        (
            "KV budget (per GPU)",
            f"{cap.kv_budget_bytes:,} B ({cap.kv_budget_bytes / (1 << 30):.2f} GiB, {cap.kv_budget_source})",
        ),
        *_pool_rows(cap),
        ("seats (max_num_seqs)", f"{cap.max_num_seqs} ({report.settings.max_num_seqs.source})"),
        ("safe seats (full windows)", str(cap.safe_max_num_seqs) + (
            f" (the lower of predicted {cap.observed.predicted_safe_max_num_seqs} and observed "
            f"{cap.observed.safe_max_num_seqs})" if cap.observed is not None else "")),
        *([(f"seats at a typical {cap.typical_context:,} tokens", str(cap.typical_context_seats))]
          if cap.typical_context_seats is not None and cap.typical_context is not None else []),
        (f"average context at {cap.max_num_seqs} seats", f"≤ {cap.avg_context_at_max_num_seqs:,} tokens" + (
            f" predicted · ≤ {cap.observed.avg_context_at_max_num_seqs:,} observed"
            if cap.observed is not None else "")),
        ("CUDA graph max capture size", str(cap.cudagraph_max_capture_size) if cap.cudagraph_max_capture_size else
         ("does not apply (CPU build)" if report.serve.platform == "cpu" else "none (no graphs captured)")),
    ]
    if report.witness is not None and report.witness.kv_pool_tokens is not None:
        w = report.witness
        rows.append((f"engine's own planner ({w.engine_version})",
                     f"{w.kv_pool_tokens:,} tokens, {w.max_concurrency or 0:.2f}x "
                     f"({'agrees' if w.agrees else 'DISAGREES'})"))
    if cap.expert_coverage is not None:
        rows.append(("experts touched per decode step", f"{cap.expert_coverage:.1%}"))
    if report.weights is not None:
        rows.append(
            (
                "weights per GPU",
                f"{report.weights.per_gpu_bytes / (1 << 30):.2f} GiB "
                f"({'exact' if report.weights.exact else 'estimate'})",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for note in cap.kv_budget_assumptions:
        console.print(f"  [dim]assumes: {note}[/]")
    findings = (*report.findings, *extra)
    for f in findings:
        console.print(f"[{_STYLE[f.level]}]{f.level:>4}[/] {f.code}: {f.message}")
    verdict = verdict_of(findings)
    console.print(f"verdict: [{_STYLE[verdict]}]{verdict}[/]")
    if explain:
        console.print(report.settings.explain(), markup=False)
