"""SIGINT and SIGTERM end a bench or a sweep early, and what was measured is kept (marked partial)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal ended the run (a BaseException, as KeyboardInterrupt: no `except Exception` swallows it)."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def raising_on_signals() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise Interrupted in the main thread (synchronous code: starting and stopping
    engines between benches); elsewhere a no-op. The previous handlers come back on the way out."""
    if not _main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class SignalStop:
    """In a running event loop: the first SIGINT or SIGTERM cancels the current task and is remembered
    (`signame`), so the task can catch the cancellation and return what it measured."""

    def __init__(self) -> None:
        self.signame: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous: dict[int, Callable[..., Any] | int | None] = {}

    def __enter__(self) -> SignalStop:
        if not _main_thread():
            return self
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            return self
        self._loop = loop
        for s in SIGNALS:
            self._previous[s] = signal.getsignal(s)
            loop.add_signal_handler(s, self._trip, s, task)
        return self

    def _trip(self, signum: int, task: asyncio.Task[Any]) -> None:
        if self.signame is None:
            self.signame = signal.Signals(signum).name
            task.cancel()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._loop is None:
            return
        for s, previous in self._previous.items():
            self._loop.remove_signal_handler(s)
            signal.signal(s, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        self._loop = None
