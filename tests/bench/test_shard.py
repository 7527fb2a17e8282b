"""The one pass runner: in-process and sharded clients, one clock, and failures that are never a finished pass."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dspark.bench.client import ClientConfig
from dspark.bench.prompts import synthetic_token_prompts
from dspark.bench.shard import ClientFailure, run_pass, split
from dspark.core.errors import ExitCode, InputError
from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import in_thread


def cfg(url: str, **kw: object) -> ClientConfig:
    base: dict[str, object] = {"base_url": url, "model": "fake-model", "max_tokens": 5, "concurrency": 4}
    base.update(kw)
    return ClientConfig(**base)  # type: ignore[arg-type]


def test_split_shares() -> None:
    assert split(10, 4) == [3, 3, 2, 2]
    assert split(256, 2) == [128, 128]
    assert split(3, 8) == [1, 1, 1]


def test_clients_spread_over_processes() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(token_delay=0.002)) as srv:
            c = cfg(srv.url, concurrency=4, processes=2)
            starts: list[float] = []
            seen: list[int] = []
            records, wall = await run_pass(c, synthetic_token_prompts(10, 6, vocab_size=500, seed=3),
                                           on_start=starts.append, on_record=lambda r: seen.append(r.index))
            assert [r.index for r in records] == list(range(10)) and sorted(seen) == list(range(10))
            assert all(r.ok and r.output_tokens == 5 for r in records)
            assert len(starts) == 1 and all(r.start >= starts[0] for r in records)  # one clock for all processes
            assert wall == max(r.end for r in records) - starts[0]
            # At most one connection per client (a client the others outpaced may never have had a prompt).
            assert srv.state.max_running <= 4 and srv.state.connections <= 4
    asyncio.run(go())


@pytest.mark.parametrize("processes", [1, 2])
def test_in_process_and_sharded_measure_the_same_way(processes: int) -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(token_delay=0.002)) as srv:
            starts: list[float] = []
            records, wall = await run_pass(cfg(srv.url, processes=processes),
                                           synthetic_token_prompts(6, 4, vocab_size=500, seed=1),
                                           on_start=starts.append)
            assert wall == max(r.end for r in records) - starts[0]
            assert all(r.ok and len(r.itl) == 4 for r in records)  # 5 chunks: 4 gaps, carried across processes
    asyncio.run(go())


def test_a_child_that_raises_fails_the_pass_with_its_error() -> None:
    async def go() -> None:
        async with FakeServer() as srv:
            # Token ids cannot go to the chat endpoint: the child's request builder raises InputError, which
            # reaches the parent as that same input error (exit 2 with its message, as in one process).
            c = cfg(srv.url, endpoint="chat", concurrency=2, processes=2)
            with pytest.raises(InputError, match=r"^token-id prompts need the completions endpoint"):
                await run_pass(c, synthetic_token_prompts(4, 4, vocab_size=500, seed=0))
    asyncio.run(go())


def test_a_child_that_dies_fails_the_pass() -> None:
    async def go() -> None:
        async with FakeServer(FakeConfig(token_delay=0.05)) as srv:
            me = psutil.Process()

            def kill_a_child(_t0: float) -> None:
                # The spawned clients, not multiprocessing's resource tracker.
                kids = [k for k in me.children() if "spawn_main" in " ".join(k.cmdline())]
                assert len(kids) == 2
                os.kill(kids[0].pid, signal.SIGKILL)

            with pytest.raises(ClientFailure, match=r"died \(exit code -9\) before it finished"):
                await run_pass(cfg(srv.url, max_tokens=40, concurrency=2, processes=2),
                               synthetic_token_prompts(8, 4, vocab_size=500, seed=0), on_start=kill_a_child)
    asyncio.run(go())
    assert ClientFailure("x").exit_code == ExitCode.REFUSED  # a failed run (1), not dspark's internal error (3)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_client_processes_die_with_their_parent(sig: signal.Signals) -> None:
    """Issue 26 item 16: a SIGTERM of `bench --client-processes N` left its clients sending requests."""
    root = Path(__file__).resolve().parents[2]
    with in_thread(FakeServer(FakeConfig(token_delay=0.05))) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dspark", "bench", "--url", srv.url, "--requests", "400", "--concurrency", "4",
             "--client-processes", "2", "--max-tokens", "200", "--input-len", "4", "--no-progress", "--no-metrics"],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 90
        while srv.state.requests < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        kids = [k for k in parent.children() if "spawn_main" in " ".join(k.cmdline())]
        assert len(kids) == 2
        proc.send_signal(sig)
        proc.wait(30)
        _gone, alive = psutil.wait_procs(kids, timeout=10)
        assert alive == []
        sent = srv.state.requests
        time.sleep(0.5)
        assert srv.state.requests == sent  # nothing sends any more
