"""Run a tool of dspark_inside (dspark/_inside_root/: code for the engine's interpreter) and read its answer.

`run_inside(python, "vllm.witness", request, timeout)` runs `python -m dspark_inside.vllm.witness` with
_inside_root alone put ahead on PYTHONPATH, the request as JSON on stdin, and returns the JSON of its one answer
line (dspark_inside.protocol). The tool runs in its own process group, killed whole when it runs past its time,
when dspark is stopped (SIGTERM, SIGHUP, Ctrl-C) or dies, and when it exits: nothing it started outlives it.
InsideFailure says why there is no answer; each caller words it for what it ran.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Literal

INSIDE_ROOT = Path(__file__).resolve().parent.parent / "_inside_root"  # holds dspark_inside and nothing else
MARKER = "DSPARK_INSIDE "  # dspark_inside.protocol.MARKER (tests/engines/test_inside.py holds the two equal)

Runner = Callable[[Sequence[str], str, float, Mapping[str, str]], "subprocess.CompletedProcess[str]"]


class InsideFailure(Exception):
    """No answer from the tool: it could not be run, ran past its time, or exited without its answer line.

    detail: the OS's or subprocess's words; returncode and tail (its stderr, else stdout, by line) when it ran.
    """

    def __init__(self, why: Literal["not_run", "timeout", "no_answer"], detail: str, returncode: int | None = None,
                 tail: Sequence[str] = ()) -> None:
        super().__init__(detail)
        self.why = why
        self.detail = detail
        self.returncode = returncode
        self.tail = tuple(tail)

    def last(self, n: int) -> str:
        """The last n lines of the tool's output, joined."""
        return " | ".join(self.tail[-n:])


def inside_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment (default: this process's) with _inside_root first on PYTHONPATH."""
    out = dict(os.environ if env is None else env)
    rest = out.get("PYTHONPATH")
    out["PYTHONPATH"] = os.pathsep.join([str(INSIDE_ROOT), *([rest] if rest else [])])
    return out


def tool_argv(python: str, tool: str) -> list[str]:
    """The command that runs a tool ("<engine>.<tool>") in the engine's interpreter."""
    return [python, "-m", f"dspark_inside.{tool}"]


def run_inside(python: str, tool: str, request: object, timeout: float, *, runner: Runner | None = None,
               env: Mapping[str, str] | None = None) -> Any:
    """The tool's answer to `request` (JSON-able); InsideFailure when there is none."""
    run = run_process if runner is None else runner
    try:
        proc = run(tool_argv(python, tool), json.dumps(request), timeout, inside_env(env))
    except subprocess.TimeoutExpired as exc:
        raise InsideFailure("timeout", str(exc)) from exc
    except OSError as exc:
        raise InsideFailure("not_run", str(exc)) from exc
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        raise InsideFailure("no_answer", f"exit {proc.returncode}", proc.returncode,
                            (proc.stderr or proc.stdout).strip().splitlines())
    return json.loads(line[len(MARKER):])


def run_process(argv: Sequence[str], stdin: str, timeout: float, env: Mapping[str, str]
                ) -> subprocess.CompletedProcess[str]:
    """Run argv to its end in its own process group; subprocess.TimeoutExpired after `timeout` seconds."""
    _libc_prctl()  # resolved here, before the fork
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(env), start_new_session=True, preexec_fn=_die_with_parent)  # noqa: PLW1509 - one prctl call, no lock taken
    try:
        with _killed_on_termination(proc):
            out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        raise
    finally:
        _kill_group(proc)  # still running (Ctrl-C), or what it left behind in its group
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


_STOPS = (signal.SIGTERM, signal.SIGHUP)  # what stops dspark without a Python exception


@contextlib.contextmanager
def _killed_on_termination(proc: subprocess.Popen[str]) -> Iterator[None]:
    """While inside: a SIGTERM or SIGHUP of dspark kills the tool's group first, then takes its usual course."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread; the parent-death signal still holds
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        _kill_group(proc)
        _restore(previous)
        signal.raise_signal(signum)

    previous = {s: signal.signal(s, handler) for s in _STOPS}
    try:
        yield
    finally:
        _restore(previous)


def _restore(previous: Mapping[signal.Signals, Any]) -> None:
    for s, h in previous.items():
        signal.signal(s, signal.SIG_DFL if h is None else h)


@functools.cache
def _libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, resolved in the parent (the forked child must not load libraries); None off Linux."""
    import ctypes  # noqa: PLC0415 - only when a tool runs: not on every start-up

    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # no parent-death signal: the handlers and the timeout still clean up
    return prctl


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when dspark dies (killed outright, so no handler of its ran)."""
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
