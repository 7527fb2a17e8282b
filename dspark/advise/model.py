"""The seat model: a step-level simulation of a closed-loop bench, each step costed by dspark.perf; pure.

What one step costs is dspark.perf.step's model (a roofline per op class: weights, KV and activations read against
GEMM and attention FLOPs, plus per-kernel latency, CUDA-graph padding, the eager launch gap and the CPU's
per-step time, hidden behind the GPU with async scheduling). The simulation runs the engine's continuous batching
step by step: up to `seats` requests hold a seat, decode rows are scheduled first and prompts fill the rest of the
`max_num_batched_tokens` budget in chunks (vLLM's chunked prefill), and C closed-loop clients send their next
request once the last token of its previous one reaches it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dspark.advise.kv_usage import KVCounting
from dspark.perf.step import StepCosts, StepShape, cost_table, cpu_seconds, step_seconds

# The API server's model is dspark_inside.frontend, the very file the engine-side replay's arrivals use (one copy),
# imported by its name in the dspark package it ships in (mypy reads it by its engine-side name, as dspark.perf.step
# does step_cost).
if TYPE_CHECKING:
    from dspark_inside.frontend import Frontend
else:
    from dspark._inside_root.dspark_inside.frontend import Frontend

__all__ = ["Simulated", "StepCosts", "StepShape", "Workload", "decode_step_s", "simulate", "table"]


@lru_cache(maxsize=64)
def table(costs: StepCosts, shape: StepShape) -> dict[str, Any]:
    """The flat cost table of (costs, shape), built once per pair (do not mutate it)."""
    return cost_table(costs, shape)


@dataclass(frozen=True)
class Workload:
    """A closed-loop bench: `clients` streams send `requests` requests of input_len prompt tokens each."""

    clients: int
    requests: int
    input_len: int
    output_len: int
    prefix_hit_rate: float = 0.0  # share of each prompt already in the prefix cache (not computed again)
    max_num_batched_tokens: int = 8192


def decode_step_s(costs: StepCosts, shape: StepShape, rows: int, context_tokens: float,
                  prefill_tokens: int = 0, pairs: float | None = None) -> float:
    """Seconds of one step with `rows` decoding seats holding `context_tokens` in all and prompt tokens.

    pairs: the prompt chunks' (query, key) pairs, Σ n·(prefix + n/2); None: estimated (dspark.perf.step).
    """
    return step_seconds(table(costs, shape), rows, context_tokens, prefill_tokens, pairs)


@dataclass(frozen=True)
class Simulated:
    """What a bench of the workload would measure at one seat count."""

    seats: int
    wall_time_s: float
    aggregate_decode_tps: float  # output tokens / wall time
    per_stream_decode_tps: float  # Σ(tokens − 1) / Σ(last − first token), as dspark bench pools it
    ttft_mean_s: float  # includes the wait for a seat
    decode_step_s: float  # one step with every seat decoding, at the mean context
    kv_peak_tokens: int  # tokens held by seated requests at the busiest step
    kv_peak_usage: float | None  # the engine's KV-usage metric at its busiest step (None: no counting given)
    prefill_share: float  # share of the wall time spent computing prompts
    # As vLLM's request_queue_time_seconds and request_prefill_time_seconds histograms split the engine's part of
    # TTFT: reaching the engine core to first scheduled, first scheduled to first token (means).
    queue_mean_s: float = 0.0
    prefill_mean_s: float = 0.0


class _Req:
    __slots__ = ("arrival", "ctx", "first", "last", "out_left", "prefill_left", "scheduled", "seen", "sent")

    def __init__(self, arrival: float, prefill: int, cached: int, output: int, sent: float | None = None) -> None:
        self.sent = arrival if sent is None else sent  # when its client sent it
        self.arrival = arrival  # when it reached the engine core
        self.prefill_left = prefill
        self.ctx = float(cached)
        self.out_left = float(output)
        self.first: float | None = None
        self.seen: float | None = None  # when its client has the first token
        self.last = 0.0
        self.scheduled: float | None = None


def _decode(decoding: list[_Req], tokens: float) -> None:
    for r in decoding:
        r.out_left -= tokens
        r.ctx += tokens


def _prefill(chunks: list[tuple[_Req, int]], now: float) -> None:
    for r, take in chunks:
        r.prefill_left -= take
        r.ctx += take
        if r.prefill_left == 0:  # the step that computes the last prompt token samples the first token
            r.first = now
            r.out_left -= 1
            r.ctx += 1


def _chunks(running: list[_Req], left: int) -> list[tuple[_Req, int]]:
    """Prompt chunks in seat order within what the step's token budget leaves (vLLM's chunked prefill)."""
    chunks: list[tuple[_Req, int]] = []
    for r in running:
        if r.prefill_left > 0 and left > 0:
            take = min(r.prefill_left, left)
            chunks.append((r, take))
            left -= take
    return chunks


class _UsagePeak:
    """The highest KV-usage report seen, counted as `counting` says (None without a counting)."""

    def __init__(self, counting: KVCounting | None) -> None:
        self.counting = counting
        self.peak: float | None = None

    def see(self, allocated: list[float]) -> None:
        if self.counting is not None:
            value = self.counting.usage(allocated)
            self.peak = value if self.peak is None else max(self.peak, value)


def _mixed_step(costs: StepCosts, shape: StepShape, decoding: list[_Req], chunks: list[tuple[_Req, int]],
                ctx: float) -> tuple[float, float]:
    """(seconds, the prompt chunks' share of them) of a step of decode rows and prompt chunks; each chunk attends
    to its prefix (the request's context so far) and to itself (causal)."""
    prompt = sum(t for _, t in chunks)
    pairs = math.fsum(t * (r.ctx + t / 2) for r, t in chunks)
    dt = decode_step_s(costs, shape, len(decoding), ctx, prompt, pairs)
    if not prompt:
        return dt, 0.0
    # The prompt's share: what the step costs beyond its decode rows alone.
    alone = decode_step_s(costs, shape, len(decoding), math.fsum(r.ctx for r in decoding))
    return dt, max(0.0, dt - alone)


class _Pipeline:
    """When the engine fixes a step's batch. One thread schedules and launches, and with a queue of `depth` batches
    step k is scheduled once step k - depth has returned its output and step k - 1 has been launched:
    cut_k = max(end_(k-depth), cut_(k-1) + CPU path of step k-1). Requests that finished after end_(k-depth) still
    hold their seats for step k (the scheduler learns of their end with the output of the step they ended in).

    The queue is filled before the engine core blocks on the oldest batch's output (EngineCore.step_with_batch_queue),
    so it takes step k's output, and sends its first tokens on, only once step k + 1 is scheduled and launched: at
    max(end_k, cut_(k+1) + CPU path of step k+1). Where that path is longer than the step (a step above the largest
    captured graph launches each kernel from the CPU) the first tokens wait for it. On the lent H200 Qwen3-30B-A3B's
    1,024-token prompt steps are launch-bound (~84 ms of CPU for ~30 of GPU): at 8 streams the first prompt step's
    requests had their first tokens only once the second prompt step was launched (request_prefill_time 0.112 s;
    0.103 with each first token at its step's end, 0.113 so), and one eager stream's prompt waits for its first
    decode step's launch (0.046 s; 0.027 at the step's end, 0.043 so)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.restart(0.0)

    def restart(self, now: float) -> None:
        """The engine was idle: its next step is scheduled at `now`."""
        self.ends: deque[float] = deque([now] * self.depth, maxlen=self.depth)
        self.freed: deque[int] = deque([0] * self.depth, maxlen=self.depth)
        self.last_cut, self.last_cpu = now, 0.0
        self.sampled: list[_Req] = []  # whose first token the last step sampled, its output not yet taken

    def cut(self) -> float:
        """The time by which a request must have reached the engine core to be in the next step."""
        return max(self.ends[0], self.last_cut + self.last_cpu) if self.depth > 1 else self.ends[0]

    def held(self) -> int:
        """Seats of requests that finished after the cut."""
        return sum(self.freed) - self.freed[0]

    def ran(self, now: float, steps: int, dt: float, finished: int, cut: float, cpu: float,
            chunks: list[tuple[_Req, int]]) -> None:
        """`steps` steps of `dt` each ended at `now`, `finished` requests ending in the last; `cut`: the first's
        cut; `cpu`: each one's CPU path; `chunks`: the prompt chunks of the last. The step before the first had
        its output taken once the first was launched: its first tokens then."""
        if self.depth > 1:
            for r in self.sampled:
                late = max(0.0, cut + cpu - (r.first or 0.0))
                r.first = (r.first or 0.0) + late
                r.seen = None if r.seen is None else r.seen + late  # its client has it as much later
        self.sampled = [r for r, _ in chunks if r.prefill_left == 0]
        for k in range(min(steps, self.depth) - 1, 0, -1):
            self.ends.append(now - k * dt)
            self.freed.append(0)
        self.ends.append(now)
        self.freed.append(finished)
        self.last_cut = cut if steps == 1 else max(cut, now - self.depth * dt)
        self.last_cpu = cpu


def _admit(waiting: deque[_Req], running: list[_Req], seats: int, pipe: _Pipeline) -> None:
    """Seat the requests that reached the engine core by the next step's cut, while seats are free."""
    cut, held = pipe.cut(), pipe.held()
    while waiting and len(running) + held < seats and waiting[0].arrival <= cut + 1e-12:
        running.append(waiting.popleft())


def _returned(api: Frontend, when: tuple[float, int, float], rows: int, firsts: list[_Req], finished: int,
              successors: tuple[deque[_Req], int, int, int, int]) -> int:
    """The step's tokens (`when`: its end, and the steps of a stretch and their length) pass through the API server to
    their clients: first tokens are seen then, and each finished request's client sends its next request once it has
    the last token (`successors`: the waiting queue, how many are left to send, their prompt to compute, cached and
    output tokens); how many were sent."""
    seen = api.returned(when[0], rows + len(firsts), finished, when[1], when[2])
    for r in firsts:
        r.seen = seen
    waiting, left, prefill, cached, output = successors
    count = min(finished, left)
    waiting.extend(_Req(api.arrival(seen), prefill, cached, output, seen) for _ in range(count))
    return count


def _leave(running: list[_Req], done: list[_Req], now: float) -> int:
    """Move the requests that have all their tokens from `running` to `done`; how many."""
    finished = [r for r in running if r.out_left <= 1e-9]
    for r in finished:
        r.last = now
        running.remove(r)
        done.append(r)
    return len(finished)


def simulate(costs: StepCosts, shape: StepShape, load: Workload, seats: int,
             counting: KVCounting | None = None) -> Simulated:
    """Run the workload through `seats` seats step by step; steady stretches are advanced in one jump.

    The engine's loop decides what a step holds before the step it follows has ended: with async scheduling
    (vLLM's EngineCore.step_with_batch_queue, a queue of 2) step k is scheduled when step k - 2 returns its output,
    while step k - 1 runs, so a request that reaches the engine during step k - 1 waits for step k + 1 at the
    earliest; without it, step k is scheduled when step k - 1 returns. Every step's tokens reach their
    clients through the API server (dspark_inside.frontend: one process, its work per streamed token and per
    request that ends queued behind what it had, then `arrival_hop_s`); a finished request's client sends its next
    one once it has the last token, and that request reaches the engine core `arrival_hop_s` later (HTTP, the API
    server's input processing, the IPC to the engine core).

    With `counting`, the engine's KV-usage metric is taken after each step, as the engine reports it (finished
    requests freed, the others holding the slots the step gave them), and its peak reported.
    """
    if seats < 1 or load.clients < 1 or load.requests < 1 or load.output_len < 1:
        raise ValueError("seats, clients, requests and output_len must be positive")
    cached = round(load.input_len * load.prefix_hit_rate)
    prefill = max(1, load.input_len - cached)  # the engine always computes at least the last prompt token
    emit = max(shape.emitted_per_step, 1.0)
    budget = max(load.max_num_batched_tokens, 1)
    pipe = _Pipeline(2 if shape.async_scheduling else 1)
    api = Frontend(max(costs.arrival_hop_s, 0.0), costs.api_per_request_s, costs.api_per_token_s,
                   costs.api_per_finish_s)
    waiting: deque[_Req] = deque(_Req(api.arrival(0.0), prefill, cached, load.output_len, 0.0)
                                 for _ in range(min(load.clients, load.requests)))
    sent = len(waiting)
    running: list[_Req] = []
    done: list[_Req] = []
    now = prefill_time = 0.0
    kv_peak = 0.0
    usage = _UsagePeak(counting)
    while running or waiting:
        if not running and waiting[0].arrival > pipe.cut():  # idle until the next request arrives
            now = max(now, waiting[0].arrival + costs.intake_s)
            pipe.restart(now)
        cut = pipe.cut()
        _admit(waiting, running, seats, pipe)
        decoding = [r for r in running if r.prefill_left == 0]
        chunks = _chunks(running, budget - len(decoding) * shape.query_len)
        for r, _ in chunks:  # scheduled: its first chunk is in the step (vLLM's SCHEDULED event)
            r.scheduled = max(r.arrival, cut) if r.scheduled is None else r.scheduled
        ctx = math.fsum(r.ctx for r in running)
        kv_peak = max(kv_peak, ctx + sum(t for _, t in chunks))
        # Someone is on the way (sent, not yet seen by the scheduler) while a seat is free: step by step.
        arriving = bool(waiting) and len(running) + pipe.held() < seats
        if not chunks and decoding and not arriving:
            # Nothing but decoding until the next request finishes: advance those steps at once.
            steps = max(1, math.ceil(min(r.out_left for r in decoding) / emit - 1e-9))
            mid = ctx + len(decoding) * emit * steps / 2
            dt = decode_step_s(costs, shape, len(decoding), mid)
            if steps > 1:  # the stretch's last report before its finishers leave: one step short of its end
                usage.see([r.ctx + ((steps - 2) * emit + shape.query_len if r.prefill_left == 0 else 0.0)
                           for r in running])
            now += steps * dt
            _decode(decoding, steps * emit)
        else:
            steps = 1
            dt, prompt_dt = _mixed_step(costs, shape, decoding, chunks, ctx)
            prefill_time += prompt_dt
            now += dt
            _decode(decoding, emit)
            _prefill(chunks, now)
        firsts = [r for r, _ in chunks if r.prefill_left == 0]  # none in a stretch: it has no prompt chunks
        kv_peak = max(kv_peak, math.fsum(r.ctx for r in running))
        finished = _leave(running, done, now)
        sent += _returned(api, (now, steps, dt), len(decoding), firsts, finished,
                          (waiting, load.requests - sent, prefill, cached, load.output_len))
        pipe.ran(now, steps, dt, finished, cut,
                 cpu_seconds(table(costs, shape), len(decoding), sum(t for _, t in chunks)), chunks)
        # The engine reports usage after the step, finished requests freed; a decoding seat still holds the slots
        # it was given for the step: its verified and proposed tokens, not only those it kept.
        decoded = {id(r) for r in decoding}
        usage.see([r.ctx + (shape.query_len - emit if id(r) in decoded else 0.0) for r in running])
    return _result(costs, shape, load, seats, done, now, kv_peak, usage.peak, prefill_time)


def _result(costs: StepCosts, shape: StepShape, load: Workload, seats: int, done: list[_Req], now: float,
            kv_peak: float, usage_peak: float | None, prefill_time: float) -> Simulated:
    """What the bench would report of the finished requests (and the model's own figures beside)."""
    cached = round(load.input_len * load.prefix_hit_rate)
    streams = [r for r in done if r.first is not None and r.last > r.first]
    decode_tokens = (load.output_len - 1) * len(streams)
    decode_span = math.fsum(r.last - (r.first or 0.0) for r in streams)
    mean_ctx = cached + max(1, load.input_len - cached) + load.output_len / 2
    full = min(seats, load.clients)
    n = len(done)
    return Simulated(
        seats=seats,
        wall_time_s=now,
        aggregate_decode_tps=load.requests * load.output_len / now if now > 0 else math.nan,
        per_stream_decode_tps=decode_tokens / decode_span if decode_span > 0 else math.nan,
        # The client's TTFT: from its send to the first token's arrival, through the API server.
        ttft_mean_s=math.fsum((r.seen or r.last) - r.sent for r in done) / n,
        decode_step_s=decode_step_s(costs, shape, full, full * mean_ctx),
        kv_peak_tokens=math.ceil(kv_peak),
        kv_peak_usage=usage_peak,
        prefill_share=prefill_time / now if now > 0 else 0.0,
        queue_mean_s=math.fsum((r.scheduled or r.arrival) - r.arrival for r in done) / n,
        prefill_mean_s=math.fsum((r.first or r.last) - (r.scheduled or r.arrival) for r in done) / n,
    )
