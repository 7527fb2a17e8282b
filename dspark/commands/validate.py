"""The validate command: run the core, then print the report as a table (rich) or one JSON object.

render_report, make_console and the notice printers are shared with `start` (dspark.commands.start), which shows
the same report before its plan.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING

from dspark.core.errors import ExitCode
from dspark.core.findings import Finding, verdict_of
from dspark.core.words import seats as seat_count
from dspark.planning.validate import ValidateRequest, ValidationReport, validate

if TYPE_CHECKING:  # rich loads only for the table, not for --json
    from rich.console import Console

    from dspark.capacity import CapacitySummary

_STYLE = {"info": "dim", "warn": "yellow", "fail": "bold red", "ok": "green"}


def run_validate(request: ValidateRequest, *, as_json: bool, explain: bool, out: IO[str] | None = None) -> int:
    """Print the report; exit 0 when it fits (ok or warn), 1 when it does not."""
    if request.engine_check:
        from dspark.commands.progress import working  # noqa: PLC0415

        with working("validate --engine-check: the installed engine imports and plans (20-30 s)"):
            report = validate(request)
    else:
        report = validate(request)
    stream = out or sys.stdout
    print_notices(report)
    if as_json:
        stream.write(json.dumps(report.to_json(), default=str) + "\n")
        explain_on_stderr(report, explain)
    elif (text := plain_report(report, stream, explain=explain)) is not None:
        stream.write(text)
        stream.flush()
    else:
        render_report(report, make_console(stream), explain=explain)
    return int(ExitCode.REFUSED if report.verdict == "fail" else ExitCode.OK)


# Off a terminal (a pipe, a file, CI's log) the table is laid out for COLUMNS when it is set, else for 120 columns,
# as `dspark probe` does: its longest rows (predicted · observed pools) then stay one line each, and grep finds them.
PIPE_WIDTH = 120


def output_width(stream: IO[str], environ: Mapping[str, str] | None = None) -> int | None:
    """The width the table is laid out for: None on a terminal (rich reads it, and COLUMNS, itself); off one,
    COLUMNS when it is a positive whole number, else PIPE_WIDTH. Lines of text (the header, findings, the exec
    line) are never cut at any width: they are printed whole, and a terminal wraps them."""
    if stream.isatty():
        return None
    columns = (os.environ if environ is None else environ).get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else PIPE_WIDTH


def make_console(stream: IO[str]) -> Console:
    """A rich console on `stream`, as wide as output_width says; text lines are never wrapped or cut."""
    from rich.console import Console  # noqa: PLC0415
    from rich.highlighter import NullHighlighter  # noqa: PLC0415

    width = output_width(stream)
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


def _budget_source(report: ValidationReport) -> str:
    """pinned / estimate / observed; a recorded boot's figure is the engine's own, said so."""
    return "observed on this host, exact" if report.boot_record is not None else report.capacity.kv_budget_source


def _boot_rows(report: ValidationReport) -> list[tuple[str, str]]:
    """Where a recorded boot stands in for the estimate: which boot, and the engine's own terms."""
    rec = report.boot_record
    if rec is None:
        return []
    terms = ", ".join(f"{k.removesuffix('_gib')} {v:g} GiB" if k.endswith("_gib") else f"{k} {v:g}"
                      for k, v in rec.terms.items())
    return [("observed on this host", f"{rec.engine} {rec.engine_version} boot of {rec.recorded_at} "
             f"({rec.boots} boot(s), record {rec.key}; `dspark observations show {rec.key}`)"),
            *([("engine's memory terms", terms)] if terms else [])]


def report_parts(report: ValidationReport, *, extra: tuple[Finding, ...] = ()) -> list[str | list[tuple[str, str]]]:
    """What the report shows, in order: a str is a line of rich markup, a list the rows of a two-column table."""
    cap = report.capacity
    version = report.engine_version
    installed = f", installed {version.installed}" if version.installed and version.source != "installed" else ""
    header = (f"[bold]{report.serve.engine}[/] {version.label()} ({version.source}{installed}) · "
              f"{report.architecture.source} · {report.hardware.description}")
    rows: list[tuple[str, str]] = [
        ("KV bytes per token (per GPU)", _bytes_per_token(cap)),
        (
            "KV budget (per GPU)",
            f"{cap.kv_budget_bytes:,} B ({cap.kv_budget_bytes / (1 << 30):.2f} GiB, "
            f"{_budget_source(report)})",
        ),
        *_pool_rows(cap),
        *_boot_rows(report),
        ("seats (max_num_seqs)", f"{cap.max_num_seqs} ({report.settings.max_num_seqs.source})"),
        ("safe seats (full windows)", str(cap.safe_max_num_seqs) + (
            f" (the lower of predicted {cap.observed.predicted_safe_max_num_seqs} and observed "
            f"{cap.observed.safe_max_num_seqs})" if cap.observed is not None else "")),
        *([(f"seats at a typical {cap.typical_context:,} tokens", str(cap.typical_context_seats))]
          if cap.typical_context_seats is not None and cap.typical_context is not None else []),
        (f"average context at {seat_count(cap.max_num_seqs)}", f"≤ {cap.avg_context_at_max_num_seqs:,} tokens" + (
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
    findings = (*report.findings, *extra)
    verdict = verdict_of(findings)
    return [
        header,
        rows,
        *(f"  [dim]assumes: {note}[/]" for note in cap.kv_budget_assumptions),
        *(f"[{_STYLE[f.level]}]{f.level:>4}[/] {f.code}: {f.message}" for f in findings),
        f"verdict: [{_STYLE[verdict]}]{verdict}[/]",
    ]


def render_report(
    report: ValidationReport, console: Console, *, explain: bool, extra: tuple[Finding, ...] = ()
) -> None:
    """The capacity figures, the findings (validate's, then `extra` from planning a launch) and the verdict."""
    from rich.table import Table  # noqa: PLC0415

    for part in report_parts(report, extra=extra):
        if isinstance(part, str):
            console.print(part)
            continue
        table = Table(show_header=False, box=None, pad_edge=False)
        for name, value in part:
            table.add_row(name, value)
        console.print(table)
    if explain:
        console.print(report.settings.explain(), markup=False)


def plain_report(
    report: ValidationReport, stream: IO[str], *, explain: bool, extra: tuple[Finding, ...] = ()
) -> str | None:
    """What render_report writes on `stream` off a terminal, drawn without rich (dspark.commands.plain_text);
    None where rich must draw it (a terminal, colour asked for, or text the plain drawing does not cover)."""
    from dspark.commands.plain_text import draws_plain, markup_text, table_lines, unmarked_text  # noqa: PLC0415

    width = output_width(stream)
    if width is None or not draws_plain(stream):
        return None
    lines: list[str] = []
    for part in report_parts(report, extra=extra):
        drawn = [markup_text(part)] if isinstance(part, str) else table_lines(part, width)
        if drawn is None or None in drawn:
            return None
        lines.extend(line for line in drawn if line is not None)
    if explain:
        text = unmarked_text(report.settings.explain())
        if text is None:
            return None
        lines.append(text)
    return "".join(f"{line}\n" for line in lines)
