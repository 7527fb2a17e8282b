"""The bench clients spread over several processes, for stream counts one Python process cannot keep up with.

Each child runs its share of the closed-loop clients in its own event loop; all take prompt indices from one
shared counter (so a slow shard never leaves work undone while another idles) and send their records back
over a queue. The pass starts only once every child has imported and is ready, so spawn time is not measured.
Times are perf_counter readings, CLOCK_MONOTONIC on Linux: one clock across processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Sequence
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from dspark.bench.client import ClientConfig, run_clients
from dspark.bench.prompts import Prompt
from dspark.bench.stats import RequestRecord
from dspark.errors import DsparkError

_READY_TIMEOUT_S = 120.0


def split(total: int, parts: int) -> list[int]:
    """`total` clients over `parts` processes as evenly as possible (10, 4 -> [3, 3, 2, 2]); no empty share."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _child(cfg: ClientConfig, prompts: list[Prompt], counter: Synchronized[int], out: Any, ready: Any,
           go: Any) -> None:
    """A child process: signal ready, wait for go, run its clients, then send the CPU seconds that took."""

    def take() -> int | None:
        with counter.get_lock():
            i = counter.value
            if i >= len(prompts):
                return None
            counter.value = i + 1
            return i

    cpu0 = [0.0]

    def started() -> None:
        # Ready only once imports are done and the clients are built; block until every child is.
        ready.set()
        go.wait()
        cpu0[0] = time.process_time()

    try:
        asyncio.run(run_clients(cfg, prompts, take, out.put, started))
    finally:
        out.put(time.process_time() - cpu0[0])


async def _collect(
    out: Any, children: Sequence[Any], records: list[RequestRecord | None],
    on_record: Callable[[RequestRecord], None] | None,
) -> float:
    """Receive records until every child has sent its CPU seconds; their sum. A child that dies is an error."""
    loop = asyncio.get_running_loop()
    finished = 0
    child_cpu = 0.0
    while finished < len(children):
        try:
            item = await loop.run_in_executor(None, out.get, True, 1.0)
        except queue.Empty:
            dead = [p for p in children if p.exitcode not in (None, 0)]
            if dead:
                raise DsparkError(f"a bench client process died (exit {dead[0].exitcode})") from None
            continue
        if isinstance(item, float):  # a child's last word: the CPU seconds its clients took
            finished += 1
            child_cpu += item
            continue
        records[item.index] = item
        if on_record is not None:
            on_record(item)
    return child_cpu


async def run_sharded(
    cfg: ClientConfig,
    prompts: Sequence[Prompt],
    *,
    on_start: Callable[[float], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    cpu: list[float] | None = None,
) -> tuple[list[RequestRecord], float]:
    """run_pass over cfg.processes processes (spawned: safe beside the supervisor's threads)."""
    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)
    out = ctx.Queue()
    go = ctx.Event()
    children = []
    readies = []
    for share in split(cfg.concurrency, cfg.processes):
        ready = ctx.Event()
        child_cfg = dataclasses.replace(cfg, concurrency=share, processes=1)
        proc = ctx.Process(target=_child, args=(child_cfg, list(prompts), counter, out, ready, go), daemon=True)
        proc.start()
        children.append(proc)
        readies.append(ready)
    loop = asyncio.get_running_loop()
    records: list[RequestRecord | None] = [None] * len(prompts)
    try:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        for proc, ready in zip(children, readies, strict=True):
            while not await loop.run_in_executor(None, ready.wait, 0.5):
                if proc.exitcode is not None:
                    raise DsparkError(f"a bench client process exited ({proc.exitcode}) before it was ready")
                if time.monotonic() > deadline:
                    raise DsparkError(f"a bench client process did not start within {_READY_TIMEOUT_S:.0f} s")
        start = time.perf_counter()
        cpu0 = time.process_time()
        if on_start is not None:
            on_start(start)
        go.set()
        child_cpu = await _collect(out, children, records, on_record)
    finally:
        for proc in children:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    if cpu is not None:
        cpu.append(child_cpu + time.process_time() - cpu0)
    done = [r for r in records if r is not None]
    wall = max((r.end for r in done), default=start) - start
    return done, wall
