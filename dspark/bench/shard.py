"""One pass runner: the bench clients in this process, or spread over several for stream counts one process
cannot keep up with; the same clock, the same wall time and the same completeness check either way.

Children take prompt indices from one shared counter (a slow shard never leaves work undone while another
idles) and send their records back over a queue. The pass starts only once every child has imported and is
ready, so spawn time is not measured. Times are perf_counter readings, CLOCK_MONOTONIC on Linux: one clock
across processes. A child that dies or raises, or a pass that ends with fewer records than prompts, is a
failed run (ClientFailure) naming the child's error, never a pass that "finished".
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from dspark.bench.client import ClientConfig, run_clients
from dspark.bench.prompts import Prompt
from dspark.bench.stats import RequestRecord
from dspark.core.errors import DsparkError, ExitCode, InputError

_READY_TIMEOUT_S = 120.0
_PR_SET_PDEATHSIG = 1
_PARENT_POLL_S = 0.5


class ClientFailure(DsparkError):
    """The bench's own client failed (a process died or raised): the pass measured nothing trustworthy."""

    exit_code = ExitCode.REFUSED


def split(total: int, parts: int) -> list[int]:
    """`total` clients over `parts` processes as evenly as possible (10, 4 -> [3, 3, 2, 2]); no empty share."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def die_with_parent(parent: int) -> None:
    """In a client process: end when the bench process that started it ends, however it ends (SIGKILL too).

    On Linux the kernel sends SIGKILL when the parent dies (PR_SET_PDEATHSIG); everywhere a thread also watches
    the parent's pid, and a parent already gone before this ran ends the child at once. Ctrl-C is the parent's
    to handle: the children ignore SIGINT, so a terminal's Ctrl-C reaches only the process that reports it.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def _child(cfg: ClientConfig, prompts: list[Prompt], schedule: list[float] | None, counter: Synchronized[int],
           out: Any, ready: Any, start: Any, parent: int = 0) -> None:
    """A child process: signal ready, wait for go, run its clients; its last word is ("done", cpu),
    ("input-error", message, hint) or ("error", msg)."""
    if parent:
        die_with_parent(parent)

    def take() -> int | None:
        with counter.get_lock():
            i = counter.value
            if i >= len(prompts):
                return None
            counter.value = i + 1
            return i

    cpu0 = [0.0]

    def started() -> float:
        # Ready only once imports are done and the clients are built; block until every child is.
        ready.set()
        # Poll the shared start time rather than wait on an Event: Event.set() blocks until every waiter has
        # woken, so one child killed while waiting would hang the parent.
        while start.value == 0.0:
            time.sleep(0.0002)
        cpu0[0] = time.process_time()
        return float(start.value)

    try:
        asyncio.run(run_clients(cfg, prompts, take, out.put, started, schedule))
    except InputError as exc:  # the server's answers are not an OpenAI server's: the user's input, no traceback
        out.put(("input-error", exc.message, exc.hint))
        return
    except BaseException as exc:
        out.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"))
        raise
    out.put(("done", time.process_time() - cpu0[0]))


async def _collect(out: Any, children: Sequence[Any], records: list[RequestRecord | None],
                   on_record: Callable[[RequestRecord], None] | None) -> float:
    """Receive records until every child has said done; their CPU seconds. ClientFailure for a dead or failed child."""
    loop = asyncio.get_running_loop()
    finished = 0
    child_cpu = 0.0
    while finished < len(children):
        try:
            item = await loop.run_in_executor(None, out.get, True, 0.5)
        except queue.Empty:
            # Only a child that exited without its last word is dead: one that said done exits with 0.
            dead = [p for p in children if p.exitcode is not None and p.exitcode != 0]
            if dead:
                raise ClientFailure(f"a bench client process died (exit code {dead[0].exitcode}) before it "
                                    "finished its requests") from None
            continue
        if isinstance(item, tuple):
            kind, value = item[0], item[1]
            if kind == "input-error":
                raise InputError(str(value), hint=item[2])
            if kind == "error":
                raise ClientFailure(f"a bench client process failed: {value}")
            finished += 1
            child_cpu += float(value)
            continue
        records[item.index] = item
        if on_record is not None:
            on_record(item)
    return child_cpu


async def _in_process(cfg: ClientConfig, prompts: Sequence[Prompt], schedule: Sequence[float] | None,
                      records: list[RequestRecord | None], on_start: Callable[[float], None] | None,
                      on_record: Callable[[RequestRecord], None] | None) -> tuple[float, float]:
    pending = iter(range(len(prompts)))
    clock = {"start": 0.0, "cpu": 0.0}

    def keep(rec: RequestRecord) -> None:
        records[rec.index] = rec
        if on_record is not None:
            on_record(rec)

    def started() -> float:
        clock["start"], clock["cpu"] = time.perf_counter(), time.process_time()
        if on_start is not None:
            on_start(clock["start"])
        return clock["start"]

    await run_clients(cfg, prompts, lambda: next(pending, None), keep, started, schedule)
    return clock["start"], time.process_time() - clock["cpu"]


async def _all_ready(children: Sequence[Any], readies: Sequence[Any]) -> None:
    """Wait until every child has built its clients; ClientFailure for one that exits or takes too long."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + _READY_TIMEOUT_S
    for proc, ready in zip(children, readies, strict=True):
        while not await loop.run_in_executor(None, ready.wait, 0.5):
            if proc.exitcode is not None:
                raise ClientFailure(f"a bench client process exited ({proc.exitcode}) before it was ready")
            if time.monotonic() > deadline:
                raise ClientFailure(f"a bench client process did not start within {_READY_TIMEOUT_S:.0f} s")


async def _sharded(cfg: ClientConfig, prompts: Sequence[Prompt], schedule: Sequence[float] | None,
                   records: list[RequestRecord | None], on_start: Callable[[float], None] | None,
                   on_record: Callable[[RequestRecord], None] | None) -> tuple[float, float]:
    ctx = mp.get_context("spawn")  # spawned: safe beside the supervisor's threads
    counter = ctx.Value("i", 0)
    start_at = ctx.Value("d", 0.0)
    out = ctx.Queue()
    children = []
    readies = []
    plan = list(schedule) if schedule is not None else None
    for share in split(cfg.concurrency, cfg.processes):
        ready = ctx.Event()
        child_cfg = dataclasses.replace(cfg, concurrency=share, processes=1)
        proc = ctx.Process(target=_child, args=(child_cfg, list(prompts), plan, counter, out, ready, start_at,
                                                os.getpid()), daemon=True)
        proc.start()
        children.append(proc)
        readies.append(ready)
    try:
        await _all_ready(children, readies)
        start = time.perf_counter()
        cpu0 = time.process_time()
        if on_start is not None:
            on_start(start)
        start_at.value = start  # the children's go
        child_cpu = await _collect(out, children, records, on_record)
    except BaseException:
        for proc in children:  # a failed pass: the other clients' numbers are worthless, stop them now
            if proc.is_alive():
                proc.kill()
        raise
    finally:
        for proc in children:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return start, child_cpu + time.process_time() - cpu0


async def run_pass(
    cfg: ClientConfig,
    prompts: Sequence[Prompt],
    *,
    schedule: Sequence[float] | None = None,
    on_start: Callable[[float], None] | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    cpu: list[float] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Send every prompt through cfg.concurrency clients in cfg.processes process(es); closed loop, or open
    loop at the schedule's arrival times (seconds after the start, per prompt).

    Returns the records in prompt order and the wall time from the start to the end of the last request.
    on_start receives the perf_counter time the pass started (once every client is ready); `cpu`, when given,
    receives the CPU seconds the clients used during the pass (all their processes).
    """
    if schedule is not None and len(schedule) != len(prompts):
        raise ValueError("the schedule needs one arrival time per prompt")
    records: list[RequestRecord | None] = [None] * len(prompts)
    runner = _sharded if cfg.processes > 1 else _in_process
    start, used = await runner(cfg, prompts, schedule, records, on_start, on_record)
    if cpu is not None:
        cpu.append(used)
    done = [r for r in records if r is not None]
    if len(done) != len(prompts):
        raise ClientFailure(f"the bench clients returned {len(done)} of {len(prompts)} requests")
    return done, max((r.end for r in done), default=start) - start
