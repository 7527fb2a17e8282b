"""Shared fixtures: the engines' interpreters installed by scripts/install-engines.sh (never skipped)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# Ray reads its switch for single-host clusters (every address on loopback) when first imported, and under
# pytest-xdist any test of a worker may be the first to import it (dspark.hardware.ray_nodes does, in process):
# set before any test runs, as tests/deploy/test_ray_cluster.py's local cluster needs it.
RAY_LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(RAY_LOOPBACK)

ROOT = Path(__file__).resolve().parents[1]
ENGINES = Path(os.environ.get("DSPARK_ENGINES_DIR", ROOT / ".engines"))


def _engine_python(name: str) -> str:
    python = ENGINES / name / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/install-engines.sh (the test command does)", pytrace=False)
    return str(python)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The python of the vLLM CPU build's virtualenv."""
    return _engine_python("vllm")


@pytest.fixture(scope="session")
def sglang_python() -> str:
    """The python of SGLang's virtualenv (parser and sizing code)."""
    return _engine_python("sglang")


@pytest.fixture(scope="session")
def vllm033_python() -> str:
    """The python where vLLM 0.33.0's planning code imports (its CUDA wheel, no deps, beside CPU torch)."""
    return _engine_python("vllm033")


RECIPES = ROOT / "dspark" / "data" / "recipes"


@pytest.fixture(autouse=True)
def _empty_boot_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test reads and writes its own empty store of recorded boots, never the user's (DSPARK_DATA_DIR, and
    XDG_DATA_HOME for the tests that clear every DSPARK_ variable)."""
    data = tmp_path_factory.mktemp("dspark-data")
    monkeypatch.setenv("DSPARK_DATA_DIR", str(data))
    monkeypatch.setenv("XDG_DATA_HOME", str(data / "xdg"))  # where tests that drop DSPARK_* variables look
    return data


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without COLUMNS and LINES, as a pipe in CI sees it: pytest-xdist's workers set them to
    80 x 24, and output laid out for them differs from output laid out for a pipe (tests that want a width set it)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def unpinned_recipe(tmp_path: Path) -> Callable[[str], str]:
    """A copy of a shipped recipe without its kv_cache block: the engine then estimates the KV budget."""
    def make(name: str) -> str:
        lines = (RECIPES / f"{name}.yaml").read_text().splitlines()
        start = lines.index("kv_cache:")
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
        path = tmp_path / f"{name}-unpinned.yaml"
        text = "\n".join(lines[:start] + lines[end:]) + "\n"
        path.write_text(text.replace(f"name: {name}", f"name: {name}-unpinned"))
        return str(path)
    return make
