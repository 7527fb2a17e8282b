"""The seat model: what one decode step costs, and a step-level simulation of a closed-loop bench; pure.

A decode step of `rows` seats, each verifying q = 1 + speculative tokens, costs

    t = fixed + (dense weights + routed experts × coverage(tokens) + KV of the seats' contexts + state) / bandwidth
        + decode tokens × per-token cost + prompt tokens in the step × prefill cost per token

Decode is bandwidth-bound (docs: the seed deployment read 78–85% of GB10's 273 GB/s at 1–7% of compute), so
more rows are nearly free until KV reads, expert coverage or per-token work catch up. The simulation runs the
engine's continuous batching step by step: up to `seats` requests hold a seat, decode rows are scheduled first
and prompts fill the rest of the `max_num_batched_tokens` budget in chunks (vLLM's chunked prefill), and C
closed-loop clients send their next request as soon as one finishes.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from dspark.advise.kv_usage import KVCounting
from dspark.capacity.seats import expert_coverage


@dataclass(frozen=True)
class StepCosts:
    """The cost terms of a step; each is a prior or fitted from measurements (see dspark.advise.calibrate)."""

    fixed_s: float  # per step, whatever it holds: launches, scheduling, sampling, collectives
    bandwidth_bytes_per_s: float  # effective rate at which a step reads weights, KV and state
    per_token_s: float  # work per decode token in a step beyond the bytes read (compute, per-row overhead)
    prefill_per_token_s: float  # cost of one prompt token computed in a step


@dataclass(frozen=True)
class StepShape:
    """What a step reads, per GPU, and how many tokens a seat verifies and keeps per step."""

    dense_weight_bytes: float  # read whole every step
    expert_weight_bytes: float  # routed experts: the share read follows expert coverage
    num_experts: int | None
    top_k: int | None
    kv_bytes_per_token: float  # KV read per token of context held
    state_bytes_per_seat: float  # linear-attention state read and written per seat
    speculative_tokens: int  # proposed per step: each seat verifies 1 + this many tokens
    emitted_per_step: float  # tokens a seat keeps per step: 1 + accepted speculative tokens

    @property
    def query_len(self) -> int:
        """Tokens one seat puts through the model per decode step."""
        return 1 + self.speculative_tokens


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
                  prefill_tokens: int = 0) -> float:
    """Seconds of one step with `rows` decoding seats holding `context_tokens` in all and prompt tokens."""
    tokens = rows * shape.query_len + prefill_tokens
    if shape.num_experts and shape.top_k and tokens > 0:
        coverage = expert_coverage(shape.num_experts, shape.top_k, tokens)
    else:
        coverage = 1.0 if tokens > 0 else 0.0
    read = (shape.dense_weight_bytes + shape.expert_weight_bytes * coverage
            + shape.kv_bytes_per_token * context_tokens + shape.state_bytes_per_seat * rows)
    return (costs.fixed_s + read / costs.bandwidth_bytes_per_s + rows * shape.query_len * costs.per_token_s
            + prefill_tokens * costs.prefill_per_token_s)


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


class _Req:
    __slots__ = ("arrival", "ctx", "first", "last", "out_left", "prefill_left")

    def __init__(self, arrival: float, prefill: int, cached: int, output: int) -> None:
        self.arrival = arrival
        self.prefill_left = prefill
        self.ctx = float(cached)
        self.out_left = float(output)
        self.first: float | None = None
        self.last = 0.0


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


def simulate(costs: StepCosts, shape: StepShape, load: Workload, seats: int,
             counting: KVCounting | None = None) -> Simulated:
    """Run the workload through `seats` seats step by step; steady stretches are advanced in one jump.

    With `counting`, the engine's KV-usage metric is taken after each step, as the engine reports it (finished
    requests freed, the others holding the slots the step gave them), and its peak reported.
    """
    if seats < 1 or load.clients < 1 or load.requests < 1 or load.output_len < 1:
        raise ValueError("seats, clients, requests and output_len must be positive")
    cached = round(load.input_len * load.prefix_hit_rate)
    prefill = max(1, load.input_len - cached)  # the engine always computes at least the last prompt token
    emit = max(shape.emitted_per_step, 1.0)
    budget = max(load.max_num_batched_tokens, 1)
    waiting: deque[_Req] = deque(_Req(0.0, prefill, cached, load.output_len)
                                 for _ in range(min(load.clients, load.requests)))
    sent = len(waiting)
    running: list[_Req] = []
    done: list[_Req] = []
    now = prefill_time = 0.0
    kv_peak = 0.0
    usage = _UsagePeak(counting)
    while running or waiting:
        while waiting and len(running) < seats:
            running.append(waiting.popleft())
        decoding = [r for r in running if r.prefill_left == 0]
        chunks = _chunks(running, budget - len(decoding) * shape.query_len)
        ctx = math.fsum(r.ctx for r in running)
        kv_peak = max(kv_peak, ctx + sum(t for _, t in chunks))
        if not chunks and decoding:
            # Nothing but decoding until the next request finishes: advance those steps at once.
            steps = max(1, math.ceil(min(r.out_left for r in decoding) / emit - 1e-9))
            mid = ctx + len(decoding) * emit * steps / 2
            now += steps * decode_step_s(costs, shape, len(decoding), mid)
            if steps > 1:  # the stretch's last report before its finishers leave: one step short of its end
                usage.see([r.ctx + ((steps - 2) * emit + shape.query_len if r.prefill_left == 0 else 0.0)
                           for r in running])
            _decode(decoding, steps * emit)
        else:
            prompt = sum(t for _, t in chunks)
            prefill_time += prompt * costs.prefill_per_token_s
            now += decode_step_s(costs, shape, len(decoding), ctx, prompt)
            _decode(decoding, emit)
            _prefill(chunks, now)
        kv_peak = max(kv_peak, math.fsum(r.ctx for r in running))
        for r in [r for r in running if r.out_left <= 1e-9]:
            r.last = now
            running.remove(r)
            done.append(r)
            if sent < load.requests:  # the client sends its next request at once (closed loop)
                waiting.append(_Req(now, prefill, cached, load.output_len))
                sent += 1
        # The engine reports usage after the step, finished requests freed; a decoding seat still holds the slots
        # it was given for the step: its verified and proposed tokens, not only those it kept.
        decoded = {id(r) for r in decoding}
        usage.see([r.ctx + (shape.query_len - emit if id(r) in decoded else 0.0) for r in running])
    streams = [r for r in done if r.first is not None and r.last > r.first]
    decode_tokens = (load.output_len - 1) * len(streams)
    decode_span = math.fsum(r.last - (r.first or 0.0) for r in streams)
    mean_ctx = cached + prefill + load.output_len / 2
    full = min(seats, load.clients)
    return Simulated(
        seats=seats,
        wall_time_s=now,
        aggregate_decode_tps=load.requests * load.output_len / now if now > 0 else math.nan,
        per_stream_decode_tps=decode_tokens / decode_span if decode_span > 0 else math.nan,
        ttft_mean_s=math.fsum((r.first or r.last) - r.arrival for r in done) / len(done),
        decode_step_s=decode_step_s(costs, shape, full, full * mean_ctx),
        kv_peak_tokens=math.ceil(kv_peak),
        kv_peak_usage=usage.peak,
        prefill_share=prefill_time / now if now > 0 else 0.0,
    )
