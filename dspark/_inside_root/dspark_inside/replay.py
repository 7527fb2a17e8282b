"""The engine-neutral half of each scheduler replay (<engine>/replay_scheduler.py): no engine imported here.

The advisor's step cost, the arrivals of a pass on its virtual clock, the pool of workers forked after the
engine's import (one seat count each), and the answer's scaffolding (shapes.ReplayRequest -> ReplayAnswer).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import heapq
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, cast

from dspark_inside.shapes import ReplayAnswer, ReplayRequest


def _rate(cost: Mapping[str, Any], key: str) -> float:
    value = float(cost.get(key) or 0.0)
    return value if value > 0 else math.inf


def step_terms(cost: Mapping[str, Any], rows: int, context: float, prefill: int,
               pairs: float | None = None) -> dict[str, float]:
    """Seconds of each op class of one step (see the module docstring); `pairs`: prompt (query, key) pairs.

    rows: decode rows; context: tokens of context the step reads (decode rows' and prompt chunks' prefixes);
    prefill: prompt tokens computed; pairs None: estimated from the step (a chunk against itself, plus the whole
    context as its prefix when no row decodes).
    """
    q = float(cost.get("query_len") or 1.0)
    tokens = rows * q + prefill
    if tokens <= 0:
        return {}
    sizes: Sequence[int] = cost.get("graph_sizes") or ()
    eager = bool(cost.get("eager"))
    padded = float(tokens)
    if sizes and not eager and tokens <= sizes[-1]:
        padded = float(sizes[bisect.bisect_left(sizes, math.ceil(tokens))])
    bw = _rate(cost, "bandwidth_bytes_per_s")
    experts, top_k = float(cost.get("num_experts") or 0), float(cost.get("top_k") or 0)
    coverage = 1.0 - (1.0 - top_k / experts) ** tokens if experts and top_k else 1.0
    observed = float(cost.get("prefill_per_token_s") or 0.0) if cost.get("prefill_observed") else 0.0
    gemm_tokens = padded - prefill if observed else padded  # a measured prompt cost replaces its compute
    half = max(float(cost.get("gemm_half_tokens") or 0.0), 1e-9)
    flops = _rate(cost, "flops_per_s")
    sampled = rows * q + (1 if prefill else 0)  # the logits: every verified position, a prompt's last token
    compute = float(cost.get("logits_flops_per_row") or 0.0) * sampled / (flops * sampled / (sampled + half))
    if gemm_tokens > 0:
        compute += float(cost.get("dense_flops_per_token") or 0.0) * gemm_tokens / (
            flops * gemm_tokens / (gemm_tokens + half))
        if experts and top_k:
            per_expert = max(gemm_tokens * top_k / experts, 1.0)
            expert_rate = float(cost.get("expert_flops_per_s") or 0.0) or flops  # the fused-MoE kernel's own
            compute += float(cost.get("expert_flops_per_token") or 0.0) * gemm_tokens / (
                expert_rate * per_expert / (per_expert + half))
    weights = (float(cost.get("dense_weight_bytes") or 0.0)
               + float(cost.get("expert_weight_bytes") or 0.0) * coverage) / bw
    if pairs is None:
        pairs = prefill * prefill / 2.0 + (prefill * context if rows == 0 else 0.0)
    per_pair = float(cost.get("attention_flops_per_pair") or 0.0)
    attn_flops = per_pair * (q * context * (1 if rows else 0) + pairs)
    kv_bw = float(cost.get("kv_bandwidth_bytes_per_s") or 0.0) or bw
    kv = (float(cost.get("kv_bytes_per_token") or 0.0) * context
          + float(cost.get("state_bytes_per_seat") or 0.0) * rows) / kv_bw
    terms = {
        "gemm": max(weights, compute),
        "attention": max(kv, attn_flops / _rate(cost, "attention_flops_per_s")),
        "elementwise": float(cost.get("activation_bytes_per_token") or 0.0) * tokens / bw,
        "kernels": float(cost.get("kernels_per_step") or 0.0) * float(cost.get("kernel_floor_s") or 0.0),
        "sampler": float(cost.get("per_token_s") or 0.0) * sampled,
        "prefill_observed": observed * prefill,
    }
    tp = float(cost.get("tp") or 1.0)
    if tp > 1:
        ring = 2.0 * (tp - 1.0) / tp
        terms["collectives"] = float(cost.get("allreduces_per_step") or 0.0) * (
            float(cost.get("collective_latency_s") or 0.0)
            + float(cost.get("allreduce_bytes_per_token") or 0.0) * tokens * ring / _rate(cost, "link_bytes_per_s"))
    gpu = math.fsum(terms.values())
    # Without a captured graph (eager, or a batch above the largest captured size) each kernel is launched alone.
    ungraphed = eager or bool(sizes and tokens > sizes[-1])
    launches = float(cost.get("launches_per_step") or cost.get("kernels_per_step") or 0.0)
    launch = launches * float(cost.get("launch_s") or 0.0) if ungraphed else 0.0
    cpu = float(cost.get("fixed_s") or 0.0) + float(cost.get("cpu_per_row_s") or 0.0) * (rows + (1 if prefill else 0))
    if cost.get("async_scheduling"):
        # The CPU schedules the next step while the GPU runs this one; without graphs it also launches this
        # step's kernels one by one, so its path is both: the step is the longer of the two paths.
        terms["cpu"] = max(0.0, cpu - gpu)
        terms["launch_gap"] = max(0.0, cpu + launch - gpu) - terms["cpu"]
    else:
        # Schedule and prepare, then launch: the GPU runs the kernels as they come (the slower of the two).
        terms["cpu"] = cpu
        terms["launch_gap"] = max(0.0, launch - gpu)
    return terms


def cpu_seconds(cost: Mapping[str, Any], rows: int, prefill: int) -> float:
    """The engine's CPU path of one step, as step_terms prices it: a copy of dspark.perf.step.cpu_seconds (the
    batch queue schedules the next step only after it: one thread)."""
    tokens = rows * float(cost.get("query_len") or 1.0) + prefill
    sizes: Sequence[int] = cost.get("graph_sizes") or ()
    ungraphed = bool(cost.get("eager")) or bool(sizes and tokens > sizes[-1])
    launches = float(cost.get("launches_per_step") or cost.get("kernels_per_step") or 0.0)
    launch = launches * float(cost.get("launch_s") or 0.0) if ungraphed else 0.0
    return (float(cost.get("fixed_s") or 0.0) + float(cost.get("cpu_per_row_s") or 0.0) * (rows + (1 if prefill else 0))
            + launch)


def step_seconds(cost: Mapping[str, Any], rows: int, context: float, prefill: int,
                 pairs: float | None = None) -> float:
    """Seconds of one step: a copy of dspark.perf.step.step_seconds (dspark is not importable here; tests/perf
    checks the two agree)."""
    return math.fsum(step_terms(cost, rows, context, prefill, pairs).values())


class Frontend:
    """The API server: one process takes each request in turn (HTTP, input processing), `serial` seconds of it a
    request, so requests sent together reach the engine core one after another, `hop` after each is sent (a copy
    of dspark.advise.model._Frontend; tests/perf checks the two agree)."""

    def __init__(self, hop: float, serial: float) -> None:
        self.hop, self.serial = hop, min(serial, hop)
        self.free = 0.0

    def arrival(self, sent: float) -> float:
        """When a request sent at `sent` reaches the engine core."""
        self.free = max(sent, self.free) + self.serial
        return self.free + self.hop - self.serial


class Arrivals:
    """A pass's arrivals: {clients: N} (closed loop) or {times: [s, ...]} (open loop, one per request).

    queued (optional, default false): every request of an instant is in the engine's input queue before the
    engine looks at it (an engine paused while they are sent, resumed once all wait); otherwise they reach it
    one at a time, as an API server hands over the requests a client sends at once.

    cost (the step cost table, optional): its arrival_hop_s and api_per_request_s put the API server between a
    client's send and the engine core (Frontend: what the advisor's own model does), its intake_s is how long an
    idle engine core takes from the first request's arrival to its first schedule(), and the first token reaches
    the client arrival_hop_s after it is sampled (`hop`). Without them a request reaches the engine as it is sent.
    """

    def __init__(self, arrivals: dict[str, Any], n: int, cost: Mapping[str, Any] | None = None) -> None:
        self.n = n
        self.queued = bool(arrivals.get("queued"))
        self.clients = int(arrivals.get("clients") or 0)
        cost = cost or {}
        self.hop = max(float(cost.get("arrival_hop_s") or 0.0), 0.0)
        self.intake = max(float(cost.get("intake_s") or 0.0), 0.0)
        self.frontend = Frontend(self.hop, max(float(cost.get("api_per_request_s") or 0.0), 0.0))
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
        """A request finished at `now`: a closed-loop client sends its next request at once."""
        if self.clients and self.sent < self.n:
            heapq.heappush(self.pending, self._send(now, self.sent))
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
