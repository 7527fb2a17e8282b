"""The supervisor with small Python children: log capture, watchers, clean stop, SIGKILL, stragglers, signals."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dspark.engines import engine_spec
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import (
    NO_LOG_FORMAT,
    EngineFailure,
    EngineProcess,
    KvPoolLine,
    exit_status,
    group_members,
    pool_message,
    watch_plan,
)

FIXTURES = Path(__file__).resolve().parents[1] / "bench" / "fixtures"
VLLM_LOG = engine_spec("vllm").log_format  # the children below print vLLM's start-up lines
SGLANG_LOG = engine_spec("sglang").log_format


def plan(code: str, **env: str) -> LaunchPlan:
    return LaunchPlan(engine="fake", argv=(sys.executable, "-u", "-c", textwrap.dedent(code)), env_overlay=env)


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_parse_real_vllm_startup_lines() -> None:
    args_line, kv_line = (FIXTURES / "vllm_startup_lines.txt").read_text().splitlines()
    assert VLLM_LOG.kv_pool(kv_line) == KvPoolLine(pool_tokens=2048, max_model_len=1024, max_concurrency=2.0)
    assert VLLM_LOG.engine_args(args_line) == {
        "model_tag": "/tmp/bench-work/tiny", "host": "127.0.0.1", "port": 18733, "model": "/tmp/bench-work/tiny",
        "max_model_len": 1024, "enforce_eager": True, "skip_tokenizer_init": True, "kv_cache_memory_bytes": 1048576,
        "max_num_seqs": 8,
    }
    assert VLLM_LOG.kv_pool(args_line) is None
    assert VLLM_LOG.engine_args(kv_line) is None
    assert VLLM_LOG.kv_pool("GPU KV cache size: 181,777 tokens") == KvPoolLine(pool_tokens=181777)
    assert SGLANG_LOG.kv_pool("max_total_num_tokens=1720000, chunked_prefill_size=8192") == KvPoolLine(1720000)
    sglang = "server_args=ServerArgs(model_path='/m', max_running_requests=16, chunked_prefill_size=8192, x=f())"
    assert SGLANG_LOG.engine_args(sglang) == {"model_path": "/m", "max_running_requests": 16,
                                             "chunked_prefill_size": 8192}
    # Each engine's format reads its own lines only; a child that is no engine has none.
    assert SGLANG_LOG.kv_pool(kv_line) is None and VLLM_LOG.engine_args(sglang) is None
    assert NO_LOG_FORMAT.kv_pool(kv_line) is None and NO_LOG_FORMAT.engine_args(args_line) is None


def test_pool_message() -> None:
    same = pool_message(KvPoolLine(16384), 16384)
    assert same == (True, "dspark: the engine's KV pool is 16,384 tokens, as predicted")
    ok, msg = pool_message(KvPoolLine(15000), 16384)
    assert not ok
    assert msg == ("dspark: warning: the engine's KV pool is 15,000 tokens, dspark predicted 16,384 (-1,384 tokens, "
                   "-8.4%); the seat advice was computed for the predicted pool")


def test_log_capture_watchers_and_clean_stop(tmp_path: Path) -> None:
    child = plan("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (print("bye"), sys.exit(0)))
        print("INFO non-default args: {'max_num_seqs': 4, 'port': 1}")
        print("INFO CPU KV cache size: 16,384 tokens, Maximum concurrency for 1,024 tokens per request: 16.00x")
        print("env", __import__("os").environ["DSPARK_T"])
        while True: time.sleep(0.05)
    """, DSPARK_T="x1")
    seen: list[str] = []
    log = tmp_path / "engine.log"
    eng = EngineProcess(child, log_format=VLLM_LOG, log_path=log, watchers=[seen.append])
    eng.start()
    assert eng.log.kv_seen.wait(10)
    wait_for(lambda: "env x1" in seen)
    assert eng.log.kv_pool == KvPoolLine(16384, 1024, 16.0)
    assert eng.log.engine_args == {"max_num_seqs": 4, "port": 1}
    out = eng.stop(timeout=10)
    assert (out.returncode, out.killed, out.stragglers) == (0, False, ())
    assert log.read_text().splitlines()[-1] == "bye"
    assert group_members(eng.pid) == []


def test_sigkill_after_timeout(tmp_path: Path) -> None:
    child = plan("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("stubborn")
        while True: time.sleep(0.05)
    """)
    eng = EngineProcess(child, log_format=NO_LOG_FORMAT)
    eng.start()
    wait_for(lambda: eng.log.tail() == ["stubborn"])
    out = eng.stop(timeout=0.5)
    assert out.killed
    assert out.returncode == -signal.SIGKILL
    assert exit_status(out.returncode) == 137
    assert group_members(eng.pid) == []


def test_workers_left_behind_are_killed(tmp_path: Path) -> None:
    # The main process exits on SIGTERM but its worker ignores it: stop() must not leave an orphan.
    child = plan("""
        import signal, subprocess, sys, time
        w = subprocess.Popen([sys.executable, "-c",
            "import signal, time\\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\\nprint('worker', flush=True)\\n"
            "while True: time.sleep(0.05)"])
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        print("worker pid", w.pid)
        while True: time.sleep(0.05)
    """)
    eng = EngineProcess(child, log_format=NO_LOG_FORMAT)
    eng.start()
    wait_for(lambda: "worker" in eng.log.tail())
    worker = int(next(ln for ln in eng.log.tail() if ln.startswith("worker pid")).split()[-1])
    out = eng.stop(timeout=1.0)
    assert out.returncode == 0
    assert out.killed
    assert out.stragglers == (worker,)
    assert group_members(eng.pid) == []


def test_engine_that_dies_before_health_names_its_error(port: int) -> None:
    child = plan("""
        import sys
        print("starting")
        print("(EngineCore pid=1) ERROR [core.py:1] ValueError: To serve at least one request ... (0.0 GiB KV cache)")
        sys.exit(1)
    """)
    eng = EngineProcess(child, log_format=NO_LOG_FORMAT)
    eng.start()
    with pytest.raises(EngineFailure) as info:
        eng.wait_healthy(f"http://127.0.0.1:{port}/health", timeout=20)
    assert str(info.value).startswith(
        "the engine exited with code 1 before it became healthy: ValueError: To serve at least one request"
    )
    eng.stop(1)


def test_health_timeout() -> None:
    # Independent of load: the port is held (bound, never listening: refused at once, and no other process can
    # answer on it) and the clock is a fake one that each poll advances by the interval.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    now = [0.0]
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    eng = EngineProcess(plan("import time; print('slow'); time.sleep(30)"), log_format=NO_LOG_FORMAT)
    eng.start()
    try:
        with pytest.raises(EngineFailure, match=r"did not answer .*/health within 1 s"):
            eng.wait_healthy(f"http://127.0.0.1:{held.getsockname()[1]}/health", timeout=1.0, interval=0.25,
                             clock=lambda: now[0], sleep=sleep)
        assert waits == [0.25] * 5  # polled at 0, 0.25, 0.5, 0.75, 1.0 and 1.25: past the timeout, it gave up
    finally:
        held.close()
    assert eng.stop(5).returncode == -signal.SIGTERM


def test_watch_streams_log_warns_on_pool_and_returns_exit_code() -> None:
    child = plan("""
        import sys
        print("CPU KV cache size: 15,000 tokens, Maximum concurrency for 1,024 tokens per request: 14.65x")
        print("served")
        sys.exit(3)
    """)
    out, err = io.StringIO(), io.StringIO()
    rc = watch_plan(child, 16384, log_format=VLLM_LOG, out=out, err=err)
    assert rc == 1  # an engine crash is a failed run, not dspark's internal error (3)
    assert out.getvalue().splitlines() == [
        "CPU KV cache size: 15,000 tokens, Maximum concurrency for 1,024 tokens per request: 14.65x", "served"]
    assert "warning: the engine's KV pool is 15,000 tokens, dspark predicted 16,384" in err.getvalue()
    assert "the engine exited with status 3: last log lines:\n  CPU KV cache size" in err.getvalue()
    assert err.getvalue().rstrip().endswith("served")


def test_reader_keeps_draining_when_a_watcher_raises() -> None:
    # 20,000 lines (~1.4 MB) overflow a 64 KiB pipe many times over: a reader that stopped would block the child.
    child = plan("""
        import sys
        for i in range(20_000):
            print(f"line {i:05d} " + "x" * 60)
        print("CPU KV cache size: 2,048 tokens")
    """)
    calls = []

    def broken(line: str) -> None:
        calls.append(line)
        raise ValueError("watcher bug")

    eng = EngineProcess(child, log_format=VLLM_LOG, watchers=[broken])
    eng.start()
    assert eng.wait(30) == 0
    eng.stop(5)
    assert len(calls) == 20_001
    assert eng.log.kv_pool is not None and eng.log.kv_pool.pool_tokens == 2048  # parsing went on too
    assert eng.log.reader_errors == 20_001
    assert eng.log.reader_error == "ValueError: watcher bug"
    assert "dspark's log reader failed 20001 time(s), first: ValueError: watcher bug" in eng.log.failure_context()


def test_watch_forwards_sigterm_to_the_engine() -> None:
    child = plan("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda s, f: (print("got", s), sys.exit(0)))
        print("ready")
        while True: time.sleep(0.05)
    """)
    out, err = io.StringIO(), io.StringIO()

    def fire_when_ready() -> None:
        wait_for(lambda: "ready" in out.getvalue())
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=fire_when_ready, daemon=True)
    sender.start()
    rc = watch_plan(child, None, log_format=NO_LOG_FORMAT, out=out, err=err)
    sender.join(5)
    assert rc == 0
    assert f"got {int(signal.SIGTERM)}" in out.getvalue().splitlines()


def test_watch_kills_an_engine_that_ignores_the_forwarded_signal() -> None:
    child = plan("""
        import signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ready")
        while True: time.sleep(0.05)
    """)
    out, err = io.StringIO(), io.StringIO()

    def fire_when_ready() -> None:
        wait_for(lambda: "ready" in out.getvalue())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=fire_when_ready, daemon=True).start()
    rc = watch_plan(child, None, log_format=NO_LOG_FORMAT, out=out, err=err, grace_s=0.5)
    assert rc == 128 + signal.SIGKILL
    assert "did not exit 0 s after the signal; killing it" in err.getvalue()


def test_engine_dies_with_a_killed_supervisor(tmp_path: Path) -> None:
    # dspark killed outright (no chance to stop the engine): the parent-death signal still ends the engine.
    script = tmp_path / "supervisor.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        from dspark.runtime.supervise import NO_LOG_FORMAT, EngineProcess
        from dspark.runtime.launch import LaunchPlan
        eng = EngineProcess(LaunchPlan(engine="x", argv=(sys.executable, "-c", "import time; time.sleep(60)")),
                            log_format=NO_LOG_FORMAT)
        eng.start()
        print(eng.pid, flush=True)
        time.sleep(0.5)
        os._exit(0)
    """))
    root = str(Path(__file__).resolve().parents[2])  # this checkout's dspark, in the supervisor's interpreter
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30, check=True,
                          env={**os.environ, "PYTHONPATH": root})
    child = int(proc.stdout.split()[0])
    wait_for(lambda: group_members(child) == [], timeout=10)
