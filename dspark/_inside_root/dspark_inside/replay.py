"""The engine-neutral half of each scheduler replay (<engine>/replay_scheduler.py): no engine imported here.

The advisor's step cost, the arrivals of a pass on its virtual clock, the pool of workers forked after the
engine's import (one seat count each), and the answer's scaffolding (shapes.ReplayRequest -> ReplayAnswer).
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

from dspark_inside.shapes import ReplayAnswer, ReplayRequest


def step_seconds(cost: dict[str, float], rows: int, context_tokens: float, prefill_tokens: int) -> float:
    """The advisor's step cost (dspark.advise.model.decode_step_s) for `rows` decoding seats, their context, prompt.

    cost: fixed_s, bandwidth_bytes_per_s, per_token_s, prefill_per_token_s, dense_weight_bytes,
    expert_weight_bytes, num_experts, top_k, kv_bytes_per_token, state_bytes_per_seat, query_len.
    """
    query_len = cost["query_len"]
    tokens = rows * query_len + prefill_tokens
    experts, top_k = cost.get("num_experts") or 0, cost.get("top_k") or 0
    if experts and top_k and tokens > 0:
        coverage = 1.0 - float((1.0 - top_k / experts) ** tokens)
    else:
        coverage = 1.0 if tokens > 0 else 0.0
    read = (cost["dense_weight_bytes"] + cost["expert_weight_bytes"] * coverage
            + cost["kv_bytes_per_token"] * context_tokens + cost["state_bytes_per_seat"] * rows)
    return float(cost["fixed_s"] + read / cost["bandwidth_bytes_per_s"] + rows * query_len * cost["per_token_s"]
                 + prefill_tokens * cost["prefill_per_token_s"])


class Arrivals:
    """A pass's arrivals: {clients: N} (closed loop) or {times: [s, ...]} (open loop, one per request)."""

    def __init__(self, arrivals: dict[str, Any], n: int) -> None:
        self.n = n
        self.clients = int(arrivals.get("clients") or 0)
        # (arrival time, index): a heap, so requests arriving together are added in file order.
        if self.clients:
            self.pending = [(0.0, i) for i in range(min(self.clients, n))]
        else:
            self.pending = [(float(t), i) for i, t in enumerate(arrivals["times"])]
        heapq.heapify(self.pending)
        self.sent = len(self.pending)

    def due(self, now: float) -> Iterator[int]:
        """The index of every request whose arrival time has come by `now`, in arrival (then file) order."""
        while self.pending and self.pending[0][0] <= now:
            yield heapq.heappop(self.pending)[1]

    def next_at(self) -> float:
        """When the next pending request arrives (call only while some are pending)."""
        return self.pending[0][0]

    def finished(self, now: float) -> None:
        """A request finished at `now`: a closed-loop client sends its next request at once."""
        if self.clients and self.sent < self.n:
            heapq.heappush(self.pending, (now, self.sent))
            self.sent += 1


class Runs(Protocol):
    """A set-up replay: one seat count's answer per call."""

    def run(self, seats: int) -> dict[str, Any]:
        """The cold pass, then the warm one when asked, at `seats`."""


_REPLAY: Runs | None = None  # the set-up replay that forked workers inherit


def _run_seats(seats: int) -> dict[str, Any]:
    """One seat count in a worker; an error comes back as text (exceptions need not pickle)."""
    assert _REPLAY is not None  # noqa: S101 - set before the workers fork
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return _REPLAY.run(seats)
    except Exception as exc:  # noqa: BLE001 - the engine's refusal is the answer
        return {"seats": seats, "error": f"{type(exc).__name__}: {exc}"}


def run_all(replay: Runs, seats: list[int], workers: int) -> list[dict[str, Any]]:
    """Each seat count on its own scheduler; with workers > 1 in processes forked after the engine's import."""
    global _REPLAY  # noqa: PLW0603 - what fork hands the workers
    _REPLAY = replay
    # The engine's imports are long-lived: keep the collector off them (a few percent of each step), and the
    # forked workers' copies of them shared.
    gc.collect()
    gc.freeze()
    if workers <= 1 or len(seats) <= 1 or not hasattr(os, "fork"):
        return [_run_seats(n) for n in seats]
    import multiprocessing  # noqa: PLC0415

    with multiprocessing.get_context("fork").Pool(min(workers, len(seats))) as pool:
        return pool.map(_run_seats, seats, chunksize=1)


def replay(req: ReplayRequest, env: dict[str, str], setup: Callable[[Any, dict[str, Any]], Any],
           done: Callable[[Any, dict[str, Any]], None] | None = None) -> ReplayAnswer:
    """Every seat count of the request; errors (an engine refusal included) come back as text.

    env: defaults set before the engine is imported; setup(req, answer): the engine's set-up replay (a Runs), the
    engine's figures (engine_version, ...) put in the answer; done(replay, answer): the engine's own fields of a
    successful answer.
    """
    start = time.monotonic()
    answer: dict[str, Any] = {"ok": False}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # engines log on import; stdout carries our line
            r = setup(req, answer)
            answer["setup_seconds"] = round(time.monotonic() - start, 3)
        workers = int(req.get("workers") or os.cpu_count() or 1)
        results = run_all(r, [int(n) for n in req["seats"]], workers)
        failed = next((x["error"] for x in results if "error" in x), None)
        if failed is not None:
            answer["error"] = failed
        else:
            answer["results"] = results
            answer["kv"] = results[0]["kv"] if results else None
            if done is not None:
                done(r, answer)
            answer["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the engine's refusal or a missing piece is the answer
        answer["error"] = f"{type(exc).__name__}: {exc}"
    answer["seconds"] = round(time.monotonic() - start, 3)
    return cast("ReplayAnswer", answer)
