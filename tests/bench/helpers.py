"""Helpers shared by the bench tests (importable, unlike conftest)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
FAKE_SERVER = HERE / "fake_server.py"


def free_port() -> int:
    """A TCP port nothing listens on right now (loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fake_engine_argv(port: int, *extra: str) -> tuple[str, ...]:
    """The argv of the fake engine script (a vLLM look-alike) on `port`."""
    return (sys.executable, str(FAKE_SERVER), "--port", str(port), *extra)


@contextlib.contextmanager
def in_thread(server: Any) -> Iterator[Any]:
    """Run an asyncio server object (start()/stop(), e.g. FakeServer) on its own loop in a thread while inside:
    a test can then call dspark's synchronous entry points (the CLI) against it and read its state."""
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the test server did not start")
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
