"""dspark top against the real vLLM CPU engine: while requests decode, the view (JSON and in a tmux terminal)
shows what the engine's own /metrics say: requests running, tokens generated, a KV cache in use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from vllm_harness import ENGINE_ENV, free_port, kill_group

# alone: dspark top reads /metrics within 5 s, which a CPU engine under load answers only on an otherwise idle
# machine (two tests' engines on two cores left it a ReadTimeout).
pytestmark = [pytest.mark.engine, pytest.mark.alone]
ROOT = Path(__file__).resolve().parents[2]
SEATS = 4


@pytest.fixture(scope="module")
def engine(vllm_python: str, tiny_models: Path) -> Iterator[str]:
    port = free_port()
    argv = [vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_models / "dense-qwen3"),
            "--skip-tokenizer-init", "--enforce-eager", "--max-model-len", "2048", "--max-num-seqs", str(SEATS),
            "--kv-cache-memory-bytes", str(64 << 20), "--host", "127.0.0.1", "--port", str(port)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "engine.log"
        with log.open("w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, text=True,
                                    env={**os.environ, **ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": "0"},
                                    cwd=tempfile.gettempdir())
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    pytest.fail(f"the engine exited {proc.returncode}:\n{log.read_text()[-3000:]}", pytrace=False)
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            else:
                pytest.fail("the engine did not answer /health in 300 s", pytrace=False)
            yield url
        finally:
            kill_group(proc)


# The load runs in its own process: client threads in the test's own interpreter starved its main thread of the
# GIL (a `python -c pass` child took 40-70 s to be reaped beside six busy httpx threads), which is where this
# test's minutes went.
_LOAD = """
import sys, threading, traceback, httpx
url, seats, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model = httpx.get(url + "/v1/models", timeout=60).json()["data"][0]["id"]
lock = threading.Lock()

def note(line):
    with lock, open(out, "a") as f:
        f.write(line + "\\n")

def one(i):
    with httpx.Client(timeout=300) as client:
        while True:
            body = {"model": model, "prompt": list(range(1, 200 + i)), "max_tokens": 300, "ignore_eos": True}
            try:
                note(str(client.post(url + "/v1/completions", json=body).status_code))
            except httpx.HTTPError:
                note("-1")
            except BaseException:
                note("# " + traceback.format_exc().replace("\\n", " | "))
                raise

for i in range(seats + 2):
    threading.Thread(target=one, args=(i,), daemon=True).start()
threading.Event().wait()  # until the test kills this process group
"""


@contextmanager
def _load(url: str, answers: Path) -> Iterator[subprocess.Popen[str]]:
    """Keep SEATS + 2 short requests in flight (some queue) from another process; each answer's status a line."""
    proc = subprocess.Popen([sys.executable, "-c", _LOAD, url, str(SEATS), str(answers)],
                            start_new_session=True, text=True, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        kill_group(proc)


def _load_state(proc: subprocess.Popen[str], answers: Path) -> str:
    """What the load did, for a failure message: its answers (and errors), and its exit if it ended."""
    text = answers.read_text() if answers.exists() else ""
    if proc.poll() is not None:
        text += f"\nthe load process exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
    return text


def _answers(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().splitlines() if line and not line.startswith("#")] \
        if path.exists() else []


def _running(url: str) -> float:
    lines = [ln for ln in httpx.get(url + "/metrics", timeout=10).text.splitlines()
             if ln.startswith("vllm:num_requests_running{")]
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines)


def test_top_shows_the_engine_at_work(engine: str, tmp_path: Path) -> None:
    answers = tmp_path / "answers.txt"
    with _load(engine, answers) as load:
        seen = 0.0
        for _ in range(600):  # until the requests are decoding
            if (seen := _running(engine)) >= 1:
                break
            time.sleep(0.1)
        assert seen >= 1, _load_state(load, answers)
        proc = subprocess.run([sys.executable, "-m", "dspark", "top", engine, "--json", "--interval", "2",
                               "--seats", str(SEATS)], capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        assert load.poll() is None, _load_state(load, answers)
        view = json.loads(proc.stdout)
        assert view["engine"] == "vllm" and view["seats"] == SEATS
        # The gauges are the engine's at the second read (between two requests a seat can be empty); the rates
        # cover the window, so tokens were generated in it.
        assert 0 <= view["running"] <= SEATS and 0 <= view["kv_usage"] <= 1, view
        assert view["generation_tokens_per_s"] > 0
        assert view["itl_s"]["p50"] is not None and view["itl_s"]["p50"] > 0

        session = f"dspark-top-engine-{os.getpid()}"
        cmd = f"{sys.executable} -m dspark top {engine} --interval 0.5 --seats {SEATS}"
        subprocess.run(["tmux", "-L", session, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", "-c",
                        str(ROOT), cmd], check=True, timeout=120)  # a loaded host starts tmux's server slowly
        try:
            screen = ""
            for _ in range(300):
                screen = subprocess.run(["tmux", "-L", session, "capture-pane", "-p", "-t", session],
                                        capture_output=True, text=True, timeout=120, check=True).stdout
                if f"of {SEATS}" in screen and "ITL" in screen:
                    break
                time.sleep(0.2)
            assert f"of {SEATS}" in screen and "vllm at" in screen, screen
            (tmp_path / "top-screen.txt").write_text(screen)
        finally:
            subprocess.run(["tmux", "-L", session, "kill-server"], capture_output=True, timeout=120, check=False)
        done = _answers(answers)
    # Short requests, re-sent as they end: the engine answered several while the view watched it.
    assert done.count(200) >= SEATS, _load_state(load, answers)
