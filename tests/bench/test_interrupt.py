"""SIGINT and SIGTERM sent to a real `dspark bench` / sweep process: what was measured is kept, marked partial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import HERE, in_thread

ROOT = HERE.parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
REQUESTS = 4


def _wait(cond: object, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)
    assert cond(), "timed out"  # type: ignore[operator]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_some_reps_writes_them_marked_partial(sig: signal.Signals, tmp_path: Path) -> None:
    """Issue 26 item 10: Ctrl-C in `bench --reps 6 --out r.json` after three reps wrote no file."""
    out = tmp_path / "r.json"
    with in_thread(FakeServer(FakeConfig(token_delay=0.01))) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dspark", "bench", "--url", srv.url, "--reps", "6", "--requests", str(REQUESTS),
             "--concurrency", "2", "--max-tokens", "30", "--input-len", "4", "--no-progress", "--sample-interval",
             "0.1", "--out", str(out)],
            cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait(lambda: srv.state.requests > 2 * REQUESTS)  # two reps done, the third under way
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    data = json.loads(out.read_text())
    assert data["partial"] is True and data["clean"] is False
    assert len(data["reps"]) >= 2
    assert data["partial_reason"].startswith(f"interrupted by {sig.name} during rep ")
    assert f"{len(data['reps'])} of 6 rep(s) measured" in data["partial_reason"]
    assert all(r["stats"]["requests"] == REQUESTS and r["stats"]["errors"] == 0 for r in data["reps"])
    assert "PARTIAL: interrupted by" in stdout
    assert "Traceback" not in stderr and f"wrote {out}" in stderr


_SWEEP = """
import sys
from pathlib import Path
from dspark.bench.decision import DecisionRule
from dspark.bench.load import LoadOptions
from dspark.commands.sweep import sweep
from tests.bench.test_sweep_fake import fake_plan
load = LoadOptions(requests=4, concurrency=2, max_tokens=40, input_len=8, sample_interval_s=0.1)
sys.exit(sweep((2, 4, 8), load, DecisionRule(secondaries=()), lambda n: fake_plan(n, "--token-delay", "0.05"),
               out_dir=Path(sys.argv[1]), progress=False))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_the_first_seat_count_keeps_the_sweep(sig: signal.Signals, tmp_path: Path) -> None:
    """Issue 26 item 10: SIGINT/SIGTERM after a sweep's first seat count left no sweep.json."""
    out_dir = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-c", _SWEEP, str(out_dir)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out_dir / "engine-4-seats.log"
    _wait(log.exists)  # 2 seats done, 4 starting
    time.sleep(0.3)
    proc.send_signal(sig)
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    data = json.loads((out_dir / "sweep.json").read_text())
    assert data["partial"] is True and data["clean"] is False
    assert data["settings"][0]["label"] == "2 seats" and data["settings"][0]["problems"] == []
    assert 1 <= len(data["settings"]) <= 2
    assert data["partial_reason"].startswith("interrupted ") and sig.name in data["partial_reason"]
    assert data["decision"]["chosen"] is None and data["decision"]["summary"].startswith("no decision: interrupted")
    assert (out_dir / "sweep.md").read_text().splitlines()[1].startswith("PARTIAL: interrupted")
    assert (out_dir / "sweep.png").exists()
    assert "Traceback" not in stderr
    assert not (out_dir / ".dspark-sweep.lock").exists()
