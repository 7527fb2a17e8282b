"""The engine-neutral half of each scheduler replay (<engine>/replay_scheduler.py): no engine imported here.

The arrivals of a pass on its virtual clock, the pool of workers forked after the
engine's import (one seat count each), and the answer's scaffolding (shapes.ReplayRequest -> ReplayAnswer).
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, cast

from dspark_inside.frontend import Frontend
from dspark_inside.shapes import ReplayAnswer, ReplayRequest


class Arrivals:
    """A pass's arrivals: {clients: N} (closed loop) or {times: [s, ...]} (open loop, one per request).

    queued (optional, default false): every request of an instant is in the engine's input queue before the
    engine looks at it (an engine paused while they are sent, resumed once all wait); otherwise they reach it
    one at a time, as an API server hands over the requests a client sends at once.

    cost (the step cost table, optional): its arrival_hop_s and api_per_request_s put the API server between a
    client's send and the engine core (Frontend: what the advisor's own model does), its intake_s is how long an
    idle engine core takes from the first request's arrival to its first schedule(), and a step's tokens reach
    their clients through the same API server (api_per_token_s, api_per_finish_s), arrival_hop_s after it is
    through them (stepped); a closed-loop client sends its next request once it has its last token. Without them
    a request reaches the engine as it is sent and its tokens the client as they are sampled.
    """

    def __init__(self, arrivals: dict[str, Any], n: int, cost: Mapping[str, Any] | None = None) -> None:
        self.n = n
        self.queued = bool(arrivals.get("queued"))
        self.clients = int(arrivals.get("clients") or 0)
        cost = cost or {}
        self.hop = max(float(cost.get("arrival_hop_s") or 0.0), 0.0)
        self.intake = max(float(cost.get("intake_s") or 0.0), 0.0)
        self.frontend = Frontend(self.hop, max(float(cost.get("api_per_request_s") or 0.0), 0.0),
                                 float(cost.get("api_per_token_s") or 0.0), float(cost.get("api_per_finish_s") or 0.0))
        # Open loop, every arrival is worked out up front (the API server's intake of the whole schedule): a step's
        # outputs then queue on a Frontend of their own.
        self.streams = self.frontend if self.clients else Frontend(self.hop, self.frontend.serial,
                                                                   self.frontend.per_token, self.frontend.per_finish)
        self.sent_at: dict[int, float] = {}
        # (arrival at the engine core, index): a heap, so requests arriving together are added in file order.
        if self.clients:
            sends = [(0.0, i) for i in range(min(self.clients, n))]
        else:
            sends = sorted((float(t), i) for i, t in enumerate(arrivals["times"]))
        self.pending = [self._send(t, i) for t, i in sends]  # the API server takes them in send order
        heapq.heapify(self.pending)
        self.sent = len(self.pending)
        self.due_at: dict[int, float] = {}  # each request taken by due(): when its client sent it

    def _send(self, t: float, i: int) -> tuple[float, int]:
        self.sent_at[i] = t
        return self.frontend.arrival(t), i

    def due(self, now: float) -> Iterator[int]:
        """The index of every request that has reached the engine core by `now`, in arrival (then file) order."""
        while self.pending and self.pending[0][0] <= now:
            _, i = heapq.heappop(self.pending)
            self.due_at[i] = self.sent_at[i]
            yield i

    def next_at(self) -> float:
        """When the next pending request reaches the engine core (call only while some are pending)."""
        return self.pending[0][0]

    def finished(self, now: float) -> None:
        """A request's client has its last token at `now`: a closed-loop client sends its next request at once."""
        if self.clients and self.sent < self.n:
            heapq.heappush(self.pending, self._send(now, self.sent))
            self.sent += 1

    def stepped(self, now: float, tokens: int, finished: int) -> float:
        """A step ended at `now` with `tokens` tokens streamed and `finished` requests ending: when their clients
        have them, through the API server (Frontend.returned); each finished request's client sends its next then."""
        seen = self.streams.returned(now, tokens, finished)
        for _ in range(finished):
            self.finished(seen)
        return seen


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
