"""`dspark bench`: stream requests at a running server, read its /metrics, print a table or one JSON object."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from dspark.bench.load import LoadOptions, bench_once, bench_spec
from dspark.bench.outputs import check_out_file, exclusive, lock_beside, write_atomic
from dspark.bench.rates import check_points, run_rate_sweep, sweep_json, sweep_table_text
from dspark.bench.report import bench_text, to_json
from dspark.bench.results import BenchResult
from dspark.bench.stats import RequestRecord
from dspark.core.errors import ExitCode


class RichProgress:
    """A progress bar per pass on stderr: requests done, output tokens per second so far."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tps]} tok/s · {task.fields[errors]} errors"),
            TimeElapsedColumn(),
            console=console or Console(file=sys.stderr),
            transient=False,
        )
        self._task: TaskID | None = None
        self._tokens = 0
        self._errors = 0
        self._t0 = 0.0

    def begin(self, label: str, total: int) -> None:
        """Show a new bar."""
        self._tokens = self._errors = 0
        self._t0 = time.perf_counter()
        if self._task is None:
            self._progress.start()
        self._task = self._progress.add_task(label, total=total, tps="0", errors=0)

    def record(self, rec: RequestRecord) -> None:
        """Advance the bar by one request."""
        if rec.ok:
            self._tokens += rec.output_tokens
        else:
            self._errors += 1
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        if self._task is not None:
            self._progress.update(self._task, advance=1, tps=f"{self._tokens / elapsed:,.0f}", errors=self._errors)

    def end(self) -> None:
        """Leave the finished bar on screen."""

    def close(self) -> None:
        """Stop drawing."""
        self._progress.stop()


def bench(load: LoadOptions, *, url: str, as_json: bool = False, out_file: Path | None = None,
          progress: bool = True, out: IO[str] | None = None, seats: int | None = None, profile: str = "single",
          sweep_points: int = 5) -> int:
    """Run the bench at `url`; print the table (or JSON), write JSON to out_file; exit 1 when a request failed.

    out_file is checked (and locked against another run writing it) before the first request. A SIGINT or
    SIGTERM during the run keeps what was measured: written and printed marked partial, exit 130.
    seats: the server's seat count, recorded in the result for `dspark advise --calibrate`.
    profile "sweep": guidellm's request-rate sweep (dspark.bench.rates), sweep_points rates between its ends.
    """
    if profile == "sweep":
        return _rate_sweep(load, url=url, as_json=as_json, out_file=out_file, progress=progress, out=out,
                           seats=seats, points=sweep_points)
    spec = bench_spec(load, url, argv=sys.argv, seats=seats)
    if out_file is not None:
        check_out_file(out_file)
    with exclusive(lock_beside(out_file), f"--out {out_file}") if out_file is not None else contextlib.nullcontext():
        observer = RichProgress() if progress else None
        try:
            result = bench_once(spec, observer)
        finally:
            if observer is not None:
                observer.close()
        text = to_json(result)
        if out_file is not None:
            write_atomic(out_file, text)
    stream = out or sys.stdout
    stream.write(text if as_json else bench_text(result))
    if result.partial:
        sys.stderr.write(f"dspark: {result.partial_reason}" + (f"; wrote {out_file}" if out_file else "") + "\n")
        return int(ExitCode.INTERRUPTED)
    return int(ExitCode.REFUSED if result.summary.get("errors") else ExitCode.OK)


def _rate_sweep(load: LoadOptions, *, url: str, as_json: bool, out_file: Path | None, progress: bool,
                out: IO[str] | None, seats: int | None, points: int) -> int:
    """`--profile sweep`: every point a bench; one JSON object (and table) for the whole sweep."""
    check_points(points)
    if out_file is not None:
        check_out_file(out_file)
    with exclusive(lock_beside(out_file), f"--out {out_file}") if out_file is not None else contextlib.nullcontext():
        observer = RichProgress() if progress else None

        def run_one(one: LoadOptions, label: str) -> BenchResult:
            spec = bench_spec(one, url, argv=sys.argv, seats=seats)
            spec = dataclasses.replace(spec, metadata={**spec.metadata, "sweep_point": label})
            return bench_once(spec, observer)

        try:
            sweep = run_rate_sweep(load, url, points, run_one)
        finally:
            if observer is not None:
                observer.close()
        text = json.dumps(sweep_json(sweep), indent=2, allow_nan=False) + "\n"
        if out_file is not None:
            write_atomic(out_file, text)
    (out or sys.stdout).write(text if as_json else sweep_table_text(sweep))
    if sweep.partial:
        sys.stderr.write(f"dspark: {sweep.partial_reason}" + (f"; wrote {out_file}" if out_file else "") + "\n")
        interrupted = any(p.result.partial for p in sweep.points)
        return int(ExitCode.INTERRUPTED if interrupted else ExitCode.REFUSED)
    return int(ExitCode.OK if sweep.clean else ExitCode.REFUSED)
