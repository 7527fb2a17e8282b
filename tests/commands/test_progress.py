"""dspark.commands.progress: slow commands say what they wait for on a terminal, and nothing elsewhere (issue 26
item 23: `validate --engine-check` took 22-29 s and `start --dry-run` with the engine 16-21 s in silence)."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from dspark.commands import progress as progress_module
from dspark.commands.progress import working


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_step_and_its_seconds_and_a_pipe_sees_nothing() -> None:
    tty = _Terminal()
    with working("validate --engine-check: the engine imports", tty):
        time.sleep(0.3)
    assert "validate --engine-check: the engine imports" in tty.getvalue()
    pipe = io.StringIO()
    with working("anything", pipe) as stop:
        stop()
    assert pipe.getvalue() == ""


def test_stop_clears_the_line_before_the_output_and_may_be_called_twice() -> None:
    tty = _Terminal()
    with working("start: planning", tty) as stop:
        stop()
        written = tty.getvalue()
        stop()
    assert tty.getvalue() == written  # nothing drawn after stop


@pytest.mark.parametrize("argv", [["validate", "--engine-check", "--json"], ["start", "--dry-run", "--json",
                                                                             "--master-addr", "10.0.0.1"]])
def test_the_slow_commands_wrap_their_wait_and_keep_stdout_to_the_json(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from dspark.cli import main  # noqa: PLC0415

    said: list[str] = []
    real = progress_module.working

    def spy(message: str, stream: Any = None) -> Any:
        said.append(message)
        return real(message, _Terminal())

    monkeypatch.setattr(progress_module, "working", spy)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", "/nonexistent/python")
    main(argv)
    out = capsys.readouterr().out
    assert len(said) == 1 and argv[0] in said[0]
    assert out.startswith("{") and out.count("\n") == 1  # one JSON object: the spinner never reaches stdout
