"""`dspark sweep` across two nodes on loopback: rank 1's `dspark start --node-rank 1` runs over ssh per seat count.

vLLM's CPU build in its native two-node mode (TP=2 over --nnodes 2, as test_two_node_e2e), the peer reached through
a throwaway sshd on 127.0.0.1 (loopback_sshd). Per seat count: the head's engine log shows the KV line the plan
predicted, and the peer's printed plan carries that seat count, --node-rank 1 and --headless. A peer killed while
its setting starts makes that setting unclean; the sweep stops there, exits 1, and nothing it started is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from loopback_sshd import HOST, LoopbackSshd
from test_start_e2e import _env
from test_two_node_e2e import _recipe
from vllm_harness import ENGINE_ENV, free_port

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

LOAD = ["--requests", "4", "--concurrency", "2", "--max-tokens", "8", "--input-len", "32", "--vocab-size", "512",
        "--sample-interval", "1", "--primary", "wall_time"]


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[LoopbackSshd]:
    server = LoopbackSshd.start(tmp_path / "ssh")
    yield server
    server.stop()


def _marked(mark: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment carries this test's mark: everything the sweep started."""
    out = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("SWEEP_TEST_MARK") == mark:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _sweep_argv(dspark_exe: str, recipe: Path, out_dir: Path, sshd: LoopbackSshd, vllm_python: str,
                mark: str) -> list[str]:
    peer_env = {**ENGINE_ENV, "DSPARK_ENGINE_PYTHON": vllm_python, "VLLM_CPU_OMP_THREADS_BIND": "1",
                "SWEEP_TEST_MARK": mark}
    if "PYTHONPATH" in os.environ:  # this checkout's dspark on the peer too
        peer_env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return [dspark_exe, "sweep", str(recipe), "--platform", "cpu", "--port", str(free_port()), "--seats", "2,4",
            *LOAD, "--out-dir", str(out_dir), "--no-progress", "--health-timeout", "400", "--stop-timeout", "20",
            "--peer", HOST, "--peer-ssh-config", str(sshd.ssh_config), "--peer-dspark", dspark_exe,
            *(x for k, v in peer_env.items() for x in ("--peer-env", f"{k}={v}"))]


def _wait_gone(mark: str, timeout: float = 30.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_two_node_sweep_restarts_and_verifies_both_nodes_per_seat_count(
    tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str, sshd: LoopbackSshd
) -> None:
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3", free_port())
    out_dir = tmp_path / "sweep"
    mark = uuid.uuid4().hex
    env = _env(vllm_python, VLLM_CPU_OMP_THREADS_BIND="0", SWEEP_TEST_MARK=mark)
    t0 = time.monotonic()
    proc = subprocess.run(_sweep_argv(dspark_exe, recipe, out_dir, sshd, vllm_python, mark), env=env,
                          capture_output=True, text=True, timeout=560, check=False)
    took = time.monotonic() - t0
    print(f"\ntwo-node sweep: {took:.0f} s\n{proc.stdout}")
    data = json.loads((out_dir / "sweep.json").read_text())
    problems = [p for s in data["settings"] for p in s["problems"]]
    assert proc.returncode == 0, f"{problems}\n{proc.stderr[-4000:]}"
    assert data["clean"] is True and problems == [] and data["seats"] == [2, 4]
    for setting, seats in zip(data["settings"], (2, 4), strict=True):
        # The head: its argv (rank 0 of 2, serving), its own log's KV line equal to the plan's pool.
        head = " ".join(setting["argv"])
        assert f"--max-num-seqs {seats}" in head and "--nnodes 2 --node-rank 0" in head and "--headless" not in head
        launch = setting["launch"]
        assert launch["seats_confirmed"] is True
        assert launch["kv_pool_tokens"] == launch["expected_pool_tokens"] is not None
        kv_line = f"KV cache size: {launch['kv_pool_tokens']:,} tokens"
        assert kv_line in (out_dir / f"engine-{seats}-seats.log").read_text()
        # The peer: the plan its `dspark start` printed, for rank 1 at this seat count, headless.
        (peer,) = setting["peers"]
        assert peer["host"] == HOST and peer["rank"] == 1 and peer["problems"] == []
        argv = peer["argv"]
        assert argv[argv.index("--max-num-seqs") + 1] == str(seats)
        assert argv[argv.index("--node-rank") + 1] == "1" and "--headless" in argv
        assert peer["stop"] in ("stopped (SIGTERM)", "had exited")
        log = Path(peer["log_path"])
        assert log.parent == out_dir / "logs" and "exec: " in log.read_text()
        assert setting["bench"]["summary"]["errors"] == 0
        assert f"{seats} seats: starting peer {HOST} (rank 1) over ssh" in proc.stderr
    assert _wait_gone(mark) == []


def test_a_peer_killed_mid_sweep_makes_its_setting_unclean_and_stops_the_rest(
    tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str, sshd: LoopbackSshd
) -> None:
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3", free_port())
    out_dir = tmp_path / "sweep"
    mark = uuid.uuid4().hex
    env = _env(vllm_python, VLLM_CPU_OMP_THREADS_BIND="0", SWEEP_TEST_MARK=mark)
    t0 = time.monotonic()
    sweep = subprocess.Popen(_sweep_argv(dspark_exe, recipe, out_dir, sshd, vllm_python, mark), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # Once the peer runs its engine (its plan printed, headless), kill its whole process group.
        log = out_dir / "logs" / f"peer-rank1-{HOST}-2-seats.log"
        victim = None
        deadline = time.monotonic() + 300
        while victim is None and time.monotonic() < deadline and sweep.poll() is None:
            time.sleep(0.5)
            if log.exists() and "exec: " in log.read_text():
                victim = next((p for p in _marked(mark) if "--headless" in " ".join(p.cmdline())), None)
        assert victim is not None, f"the peer never started its engine (sweep exit {sweep.poll()})"
        os.killpg(os.getpgid(victim.pid), signal.SIGKILL)
        killed_at = time.monotonic()
        _out, err = sweep.communicate(timeout=300)
        after_kill = time.monotonic() - killed_at
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    took = time.monotonic() - t0
    print(f"\npeer killed: sweep ended in {took:.0f} s, {after_kill:.0f} s after the kill (exit {sweep.returncode})")
    assert sweep.returncode == 1, err[-4000:]
    data = json.loads((out_dir / "sweep.json").read_text())
    assert data["clean"] is False and data["partial"] is True and data["interrupted"] is False
    assert [s["seats"] for s in data["settings"]] == [2], "the sweep must stop at the setting whose peer died"
    (setting,) = data["settings"]
    assert setting["peer_lost"] is not None and setting["peer_lost"].startswith(f"peer {HOST} (rank 1) exited")
    assert any(p.startswith(f"peer {HOST} (rank 1) exited") for p in setting["problems"])
    assert f"stopped at 2 seats: peer {HOST} (rank 1) exited" in data["partial_reason"]
    assert data["decision"]["chosen"] is None
    assert "launch as planned" not in err
    assert not (out_dir / "engine-4-seats.log").exists()
    assert _wait_gone(mark) == [], "the sweep left processes running"
