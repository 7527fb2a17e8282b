"""A release whose scheduler runs and cannot replay is an error naming it, never dspark's model in its place.

The engine here is a stand-in interpreter answering the replay as vLLM 0.25.0 answered on the GPU host before
the tool read its ModelConfig (or as a release dspark does not model, or with no answer at all).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dspark.advise.replay import EngineReplayError, ReplayFailedError, failed_release_error
from dspark.cli import main
from dspark.core.errors import ExitCode, InputError

MODELLED = ("0.25.0", "0.26.0", "0.32.0", "0.33.0")
ARGS = ["advise", "flash-next-vllm", "--seats", "8,16", "--clients", "32", "--requests", "40", "--json"]
ERROR = "AttributeError: 'ModelConfig' object has no attribute 'model_arch_config'"


def test_a_modelled_release_that_fails_is_dsparks_bug_exit_3() -> None:
    err = failed_release_error(ReplayFailedError(ERROR, "0.25.0"), "vllm", MODELLED)
    assert isinstance(err, EngineReplayError) and err.exit_code == ExitCode.INTERNAL
    assert err.message.startswith("vllm 0.25.0's scheduler could not replay the workload: AttributeError")
    assert err.code == "engine_replay_error" and "please report" in (err.hint or "")


def test_an_unmodelled_release_is_the_input_exit_2_with_the_releases_that_replay() -> None:
    err = failed_release_error(ReplayFailedError(ERROR, "0.20.1"), "vllm", MODELLED)
    assert isinstance(err, InputError) and err.exit_code == ExitCode.USAGE
    assert "vllm 0.20.1's scheduler" in err.message
    assert all(v in (err.hint or "") for v in MODELLED) and "--simulator dspark" in (err.hint or "")


def test_no_answer_at_all_is_exit_3_without_a_release() -> None:
    err = failed_release_error(ReplayFailedError("no answer (exit 139)"), "vllm", MODELLED)
    assert err.exit_code == ExitCode.INTERNAL and "its release unread" in err.message


def _engine(tmp_path: Path, answer: dict[str, object] | None) -> Path:
    """A stand-in engine interpreter: its version probe says 0.25.0; the replay tool answers `answer`."""
    script = tmp_path / "python"
    body = ("print('DSPARK_INSIDE ' + json.dumps([ANSWER] * len(req) if isinstance(req, list) else ANSWER))"
            if answer is not None else "sys.exit(139)")
    script.write_text(f"#!{sys.executable}\nimport json, sys\nANSWER = {answer!r}\n"
                      "if '-c' in sys.argv:\n    print('0.25.0')\n"
                      "elif 'dspark_inside.vllm.replay_scheduler' in sys.argv:\n"
                      f"    req = json.loads(sys.stdin.read())\n    {body}\n"
                      "else:\n    sys.exit(9)\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(("version", "rc", "code"), [("0.25.0", 3, "engine_replay_error"),
                                                     ("0.19.0", 2, "input_error")])
@pytest.mark.parametrize("extra", [[], ["--warm"]])
def test_advise_stops_naming_the_release_instead_of_falling_back(
        version: str, rc: int, code: str, extra: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    python = _engine(tmp_path, {"ok": False, "engine_version": version, "error": ERROR})
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(python))
    assert main([*ARGS, *extra]) == rc
    out = capsys.readouterr().out
    error = json.loads(out)["error"]
    assert error["code"] == code
    assert error["message"].startswith(f"vllm {version}'s scheduler could not replay the workload: {ERROR}")
    assert "predictions" not in out


def test_an_engine_that_dies_without_an_answer_is_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(_engine(tmp_path, None)))
    assert main(ARGS) == 3
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "engine_replay_error" and "no answer from the engine's scheduler" in error["message"]


def test_an_interpreter_without_the_engine_is_the_not_installed_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The tool ran but vLLM did not import (no release read): dspark's model, and --warm refused."""
    python = _engine(tmp_path, {"ok": False, "error": "ModuleNotFoundError: No module named 'vllm'"})
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(python))
    assert main(ARGS) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(p["simulator"].startswith("dspark model: the engine's scheduler could not be used (the engine "
                                         "does not import in") for p in data["predictions"])
    assert main([*ARGS, "--warm"]) == 2
    assert "--warm need(s) the engine's own scheduler" in json.loads(capsys.readouterr().out)["error"]["message"]
