"""The suite's own settings: every test runs under a timeout, so a hang fails one named test, not the whole run."""

from __future__ import annotations

import pytest


def test_every_test_has_a_timeout(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout (the test extra) is not installed"
    seconds = float(request.config.getini("timeout") or 0)
    assert 600 <= seconds <= 1800  # room for an engine start with compilation on a shared 2-core box, not forever
