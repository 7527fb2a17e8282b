"""Bench fixtures: a free loopback port, a fake streaming server, the tiny model for the real engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.bench.helpers import BUILD_TINY, FIXTURES, free_port


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> Path:
    """A 4-layer random-weight Qwen3 (vocab 512) built once per session with the engine's transformers."""
    out = tmp_path_factory.mktemp("tiny-models")
    proc = subprocess.run(
        [vllm_python, str(BUILD_TINY), str(out), "dense-qwen3"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the tiny model failed: {proc.stderr[-2000:]}", pytrace=False)
    return out / "dense-qwen3"


@pytest.fixture
def metrics_text() -> dict[str, str]:
    """Real /metrics text captured from vLLM 0.32.0 (CPU build) serving a tiny model, by situation."""
    names = ("idle", "running", "preempted", "warm")
    return {name: (FIXTURES / f"vllm_metrics_{name}.txt").read_text() for name in names}
