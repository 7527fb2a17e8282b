"""run_inside: the one runner of dspark_inside's tools; its answer line, its failures, and no child left behind."""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python): pytest itself brings tomli there
    import tomli as tomllib

from dspark.engines import ENGINE_NAMES
from dspark.engines.inside import INSIDE_ROOT, MARKER, InsideFailure, inside_env, run_inside, run_process
from dspark_inside import protocol

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_the_marker_is_the_protocols() -> None:
    assert protocol.MARKER == MARKER


def test_the_inside_root_holds_only_dspark_inside() -> None:
    # Nothing beside it may shadow an engine module on the engine's PYTHONPATH.
    assert sorted(p.name for p in INSIDE_ROOT.iterdir() if p.name != "__pycache__") == ["dspark_inside"]
    assert inside_env({"PYTHONPATH": "/x"})["PYTHONPATH"] == f"{INSIDE_ROOT}{os.pathsep}/x"
    assert inside_env({})["PYTHONPATH"] == str(INSIDE_ROOT)


def test_every_engine_has_its_tools() -> None:
    for engine in ENGINE_NAMES:
        for tool in ("argv_check", "witness", "replay_scheduler"):
            assert importlib.util.find_spec(f"dspark_inside.{engine}.{tool}") is not None, (engine, tool)


def test_a_wheel_ships_the_inside_package() -> None:
    """What a non-editable install holds: setuptools' discovery (pyproject's packages.find) and package data."""
    finder = importlib.import_module("setuptools.discovery").PEP420PackageFinder
    found = set(finder.find(str(ROOT), include=["dspark*"]))
    assert {"dspark._inside_root.dspark_inside", "dspark._inside_root.dspark_inside.vllm",
            "dspark._inside_root.dspark_inside.sglang"} <= found
    # And as package data, should discovery ever leave folders without __init__.py out.
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["dspark"]
    data = {p for pattern in patterns for p in (ROOT / "dspark").glob(pattern)}
    assert set((INSIDE_ROOT / "dspark_inside").rglob("*.py")) <= data
    shipped = importlib.resources.files("dspark") / "_inside_root" / "dspark_inside"
    assert (shipped / "protocol.py").is_file() and (shipped / "vllm" / "argv_check.py").is_file()


def _tool(tmp_path: Path, body: str) -> Path:
    """A stand-in interpreter that runs `body` as the tool (the request on stdin), whatever module it is asked."""
    script = tmp_path / "tool.py"
    script.write_text(textwrap.dedent(body))
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {script}\n')
    python.chmod(0o755)
    return python


def test_the_answer_is_the_marked_line_and_stdout_noise_goes_to_stderr(tmp_path: Path) -> None:
    # The real protocol, through the real runner: the tool prints, and a child of it writes to fd 1.
    tool = INSIDE_ROOT / "dspark_inside" / "protocol.py"
    python = _tool(tmp_path, f"""
        import os, runpy, sys
        protocol = runpy.run_path({str(tool)!r})
        def answer(request):
            print("noise from the engine")
            os.system("echo noise from a child")
            return {{"echo": request, "pythonpath": os.environ["PYTHONPATH"]}}
        sys.exit(protocol["serve"](answer))
    """)
    proc = run_process([str(python)], json.dumps([1, "x"]), 30, inside_env())
    assert proc.returncode == 0
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith(MARKER)
    assert "noise from the engine" in proc.stderr and "noise from a child" in proc.stderr
    answer = run_inside(str(python), "vllm.witness", [1, "x"], 30)
    assert answer["echo"] == [1, "x"] and answer["pythonpath"].split(os.pathsep)[0] == str(INSIDE_ROOT)


def test_the_tool_is_run_as_a_module_of_dspark_inside() -> None:
    seen: list[Sequence[str]] = []

    def runner(argv: Sequence[str], stdin: str, timeout: float, env: Mapping[str, str]
               ) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(INSIDE_ROOT)
        return subprocess.CompletedProcess(argv, 0, f"{MARKER}{stdin}\n", "")

    assert run_inside("/py", "sglang.witness", {"a": 1}, 5, runner=runner) == {"a": 1}
    assert seen == [["/py", "-m", "dspark_inside.sglang.witness"]]


@pytest.mark.parametrize(("body", "why", "tail"), [
    ("import sys; print('half an answer'); sys.stderr.write('one\\ntwo\\nthree\\nfour\\n'); sys.exit(3)",
     "no_answer", "two | three | four"),
    ("raise ImportError('No module named dspark_inside')", "no_answer", "ImportError: No module named dspark_inside"),
])
def test_no_answer_says_the_exit_and_the_last_lines(tmp_path: Path, body: str, why: str, tail: str) -> None:
    with pytest.raises(InsideFailure) as failure:
        run_inside(str(_tool(tmp_path, body)), "vllm.argv_check", {}, 30)
    assert failure.value.why == why
    assert failure.value.returncode not in (0, None)
    assert failure.value.last(3).endswith(tail)


def test_an_interpreter_that_is_not_there_is_not_run(tmp_path: Path) -> None:
    with pytest.raises(InsideFailure) as failure:
        run_inside(str(tmp_path / "nowhere" / "python"), "vllm.argv_check", {}, 30)
    assert failure.value.why == "not_run" and "nowhere" in failure.value.detail


def test_a_timeout_kills_the_tool_and_what_it_started(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    python = _tool(tmp_path, f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """)
    with pytest.raises(InsideFailure) as failure:
        run_inside(str(python), "vllm.argv_check", {}, 3)
    assert failure.value.why == "timeout"
    for pid in map(int, pids.read_text().split()):
        assert _wait_gone(pid), f"process {pid} outlived the timeout"


def test_a_sigterm_of_dspark_during_a_check_kills_the_check(tmp_path: Path) -> None:
    """Issue 26 item 16: a SIGTERM during `start`'s argument check left the check running for up to 180 s."""
    pids = tmp_path / "pids"
    python = _tool(tmp_path, f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(300)
    """)
    # dspark's side in a process of its own, as `dspark start` would run the check (main thread, default SIGTERM).
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from dspark.engines.inside import run_inside
        run_inside({str(python)!r}, "vllm.argv_check", {{}}, 180)
    """)], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    tool_pids = list(map(int, pids.read_text().split()))
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == -signal.SIGTERM  # dspark still dies of the signal, as before
    for pid in tool_pids:
        assert _wait_gone(pid), f"process {pid} outlived dspark's SIGTERM"
