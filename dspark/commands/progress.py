"""A spinner with the seconds elapsed, on stderr and only on a terminal, while a slow step runs.

`validate --engine-check` (the installed engine imports, then plans: 20-30 s) and `start` with the engine
installed (its parser and planner, 15-30 s) say what they wait for, as bench and sweep show their progress bars.
Nothing is drawn when stderr is not a terminal (pipes, CI logs, `2>file`), and stdout (the table, `--json`'s one
object) is never touched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO


@contextmanager
def working(message: str, stream: IO[str] | None = None) -> Iterator[Callable[[], None]]:
    """Show `message` with a spinner and the elapsed time until the block ends or the yielded stop() is called."""
    err = stream if stream is not None else sys.stderr
    if not err.isatty():
        yield lambda: None
        return
    from rich.console import Console  # noqa: PLC0415 - only a terminal draws it
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=Console(file=err), transient=True)
    progress.add_task(message, total=None)
    progress.start()
    try:
        yield progress.stop
    finally:
        progress.stop()
