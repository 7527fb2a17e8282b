"""Helpers shared by the bench tests (importable, unlike conftest)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

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
