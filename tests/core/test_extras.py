"""dspark's extras ([plot], [hub]): a command that needs a missing one stops before its work, exit 2, saying how."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dspark.cli import main
from dspark.core.errors import ExitCode, MissingExtraError
from dspark.core.extras import EXTRAS, require_extra


def _uninstall(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    # A None entry in sys.modules is how Python spells "not importable": find_spec answers None, import raises.
    monkeypatch.setitem(sys.modules, module, None)


def test_require_extra_names_the_extra_and_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _uninstall(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError) as err:
        require_extra("plot", "drawing sweep.png")
    assert err.value.exit_code == ExitCode.USAGE
    assert err.value.message == ("drawing sweep.png needs matplotlib, which is not installed: it comes with "
                                 "dspark's [plot] extra")
    assert err.value.hint == "pip install 'dspark[plot]' (from a clone: pip install -e '.[plot]')"


def test_require_extra_passes_when_installed() -> None:
    for extra in EXTRAS:
        require_extra(extra, "a test")  # the test extra installs every extra


def test_pyproject_declares_each_extra_with_its_module() -> None:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    extras = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    core = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    for extra, module in EXTRAS.items():
        distribution = module.replace("_", "-")
        assert f'\n{extra} = ["{distribution}>=' in extras
        assert distribution not in core  # an extra, not a dependency of every install
    # The test extra installs every extra a command asks for (scripts/test installs '.[test]').
    assert f'"dspark[{",".join(EXTRAS)}]"' in extras


ADVISE = ["advise", "flash-next-vllm", "--seats", "6,8", "--clients", "8", "--input-len", "256", "--output-len", "64"]


def test_advise_plot_without_matplotlib_is_exit_2_before_any_work(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _uninstall(monkeypatch, "matplotlib")
    plot = tmp_path / "advice.png"
    assert main([*ADVISE, "--plot", str(plot), "--json"]) == 2
    out, _ = capsys.readouterr()
    document = json.loads(out)
    assert document["error"]["code"] == "missing_extra_error"
    assert "pip install 'dspark[plot]'" in document["error"]["hint"]
    assert not plot.exists()
    assert main(ADVISE) == 0  # without --plot the advice needs no extra


def test_sweep_without_matplotlib_is_exit_2_before_any_engine_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _uninstall(monkeypatch, "matplotlib")
    code = main(["sweep", "flash-next-vllm", "--seats", "2,4", "--out-dir", str(tmp_path), "--json"])
    out, _ = capsys.readouterr()
    assert code == 2
    assert json.loads(out)["error"]["message"].startswith("dspark sweep (it draws sweep.png) needs matplotlib")
    assert list(tmp_path.iterdir()) == []  # no plan built, no engine log, nothing written


def test_a_repo_id_without_huggingface_hub_is_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    _uninstall(monkeypatch, "huggingface_hub")
    assert main(["validate", "--model", "Qwen/Qwen3-8B", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "missing_extra_error"
    assert error["message"].startswith("model 'Qwen/Qwen3-8B' is not a directory; finding it as a repo id")
    assert error["hint"].startswith("pip install 'dspark[hub]'")


def test_validate_needs_no_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command: `pip install -e . && dspark validate`, with no extra installed."""
    for module in (*EXTRAS.values(), "safetensors", "numpy"):
        _uninstall(monkeypatch, module)
    assert main(["validate", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] in ("ok", "warn")
