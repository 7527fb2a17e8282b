"""Runtime fixtures: a free loopback port for a supervised fake engine."""

from __future__ import annotations

import pytest

from tests.bench.helpers import free_port


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()
