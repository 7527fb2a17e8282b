"""The CLI boundary: one JSON object on --json failures, --debug anywhere, 130 on Ctrl-C, env vars in --help."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from dspark import cli
from dspark.config.knobs import KNOBS
from dspark.core.errors import ExitCode


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    yield


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "code", "error_code"),
    [
        (["validate", "--json", "--hardware", "nope"], 2, "input_error"),
        (["validate", "--json", "--max-num-seqs", "0"], 2, "settings_error"),
        (["validate", "--json", "--no-such-flag"], 2, "usage_error"),
        (["validate", "--json", "--typical-context", "abc"], 2, "usage_error"),  # built inside the boundary
        (["validate", "--json", "--", "--block-size", "0"], 2, "settings_error"),
        (["recipes", "show", "no-such-recipe", "--json"], 2, "recipe_error"),
    ],
)
def test_json_failures_print_one_error_object(capsys: pytest.CaptureFixture[str], argv: list[str], code: int,
                                              error_code: str) -> None:
    got, out, err = _run(capsys, *argv)
    assert got == code
    document = json.loads(out)
    assert document["exit_code"] == code
    assert document["error"]["code"] == error_code
    assert document["error"]["message"] and document["error"]["message"] in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--debug", "validate", "--max-num-seqs", "0"],
                                  ["validate", "--max-num-seqs", "0", "--debug"]])
def test_debug_works_before_and_after_the_subcommand(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert "Traceback" in err


def test_without_debug_there_is_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "validate", "--max-num-seqs", "0")
    assert code == 2
    assert "Traceback" not in err
    assert "--max-num-seqs '0': out of range" in err


def test_ctrl_c_is_130_and_named(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark.commands import validate as validate_command  # noqa: PLC0415

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_command, "run_validate", interrupted)
    code, out, err = _run(capsys, "validate", "--json")
    assert code == ExitCode.INTERRUPTED == 130
    assert json.loads(out)["error"]["code"] == "interrupted"
    assert "interrupted" in err


def test_env_vars_are_listed_beside_their_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "validate", "--help")
    assert code == 0
    text = " ".join(out.split())  # click wraps the help text
    for flags, knob, _, _ in cli._KNOB_FLAGS:
        env = next(k.env for k in KNOBS if k.name == knob)
        assert f"[env: {env}]" in text, (flags, env)
    assert "[env: DSPARK_RECIPE]" in text
    assert "[env: DSPARK_ENGINE]" in text


@pytest.mark.parametrize(
    ("env", "argv", "named"),
    [
        ({"DSPARK_HARDWARE": "abc"}, ["validate"], "DSPARK_HARDWARE='abc' is neither a built-in profile"),
        ({"DSPARK_ENGINE": "abc"}, ["validate"], "DSPARK_ENGINE='abc': not an engine dspark knows"),
        ({"DSPARK_ENGINE": " "}, ["validate"], "DSPARK_ENGINE=' ': empty"),
        ({"DSPARK_RECIPE": ""}, ["validate"], "DSPARK_RECIPE='': empty"),
        ({}, ["validate", ""], "RECIPE '': empty"),
        ({}, ["validate", "--platform", "cpu", "--hardware", "zz"], "--hardware 'zz' does not apply with platform cpu"),
        ({"DSPARK_HARDWARE": "zz"}, ["validate", "--platform", "cpu"], "DSPARK_HARDWARE 'zz' does not apply"),
    ],
)
def test_messages_name_the_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 env: dict[str, str], argv: list[str], named: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert named in err
