"""The scheduler replay (dspark_inside.vllm.replay_scheduler) against the real vLLM CPU engine.

A tiny random-weight Qwen3 with a pinned pool of 40 blocks of 128 tokens serves three workloads at 2 and at 8
seats (one engine start per seat count, its prefix cache reset between workloads):

(a) 12 distinct prompts of 381 tokens + 24 out, all at once in file order, then re-sent the same way: LRU's worst
    case, the cached prompts of the first pass evicted as the second runs, more at 8 seats (each running
    request holds a 4th block from its 4th output token on);
(b) 16 prompts behind 4 shared 256-token system prefixes (taken in turn) with distinct 250-token tails, 16 out,
    sent and re-sent: shared-prefix hits, the tails evicted;
(c) 8 prompts of 630, 620, ... 560 tokens with 64 out: at 8 seats they outgrow the pool (5 blocks each, and the
    six longest take a 6th, one every 10 steps) and the engine preempts; the pool stays within a block of full
    for a score of steps, where a pool outgrown by identical requests is full for one step.

and a third engine, 2 seats on a pool of 170 blocks (21,760 tokens), serves

(d) 16 distinct prompts of 1,250-1,646 tokens (uneven) with 8 out, sent as a client sends them at once (one
    request each, 20 ms apart, which pins their order), then re-sent the same way: the prompts outgrow the pool
    by a few blocks, so the warm pass's hits depend on which blocks each allocation evicted, step by step.
    Sent so, the idle engine wakes on the first request and steps with it alone (EngineCore.
    _process_input_queue); the others are in by its next step. A replay that put all 16 in the first step
    (as the paused engine of (a)-(c) has them) counted 7 blocks more warm hits here (12,800 vs 11,904 of
    23,030 on this workload: issue 25's 56.7% vs 52.8%); asserted equal, queries and hits, in both passes.

Decode steps are what the CPU engine spends its time on, so the outputs are short and the prompts end just short
of a block boundary; every KV peak still lasts 18 steps or more (the sampling must see it). The replay runs once
for every workload and seat count, through vLLM 0.32.0's own Scheduler in its interpreter, on dspark's plan of
the same launch, while both engines start (each on its own CPU where there are two); then each engine serves the
same requests sent the same way (both at once, each with its client on its CPU), and its /metrics counters
(prefix-cache queries and hits, preemptions, per pass) and its KV usage gauge (sampled every 20 ms) are
compared: hit rate within 2 points, preemptions within 1, peak KV usage within 5 points of the highest value
sampled. "All at once in file order" is sent as one completions call
holding the prompts as a batch (the API server adds them to the engine in list order) while the engine's
scheduler is paused, resumed once all wait (the replay is told so: its arrivals are queued). Each workload is
sized so that at 8 seats something is evicted or preempted (checked, so that the comparison compares something).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dspark.advise.inputs import model_inputs
from dspark.advise.replay import PassPrediction, engine_part, pass_prediction, replay_request, run_replays, step_cost
from dspark.advise.workload import WorkloadRequest, arrivals_of
from dspark.bench.metrics import parse_metrics
from dspark.engines import engine_spec
from dspark.planning.validate import ValidateRequest, validate
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import EngineProcess
from tests.bench.helpers import free_port

SEATS = (2, 8)
BLOCKS = 40
KV_BYTES = BLOCKS * 128 * 1024  # 128-token blocks of 1,024 B per token (4 layers x 2 KV heads x 32 x bf16 x K, V)
UNEVEN_SEATS, UNEVEN_BLOCKS = 2, 170  # workload (d)'s engine
UNEVEN_KV_BYTES = UNEVEN_BLOCKS * 128 * 1024
SEND_GAP_S = 0.02  # workload (d): one request each, this far apart (the order pinned)
MAX_LEN = 2048
SAMPLE_S = 0.02
# Seconds the paused engine is given to receive a batch: adding 16 token-id prompts takes the API server a few
# milliseconds; a batch still arriving at the resume would show as fewer hits than predicted, not pass unseen.
ADD_S = 1.0


@dataclass(frozen=True)
class Workload:
    """Requests, whether they are re-sent after the first pass, and whether they reach a paused engine."""

    name: str
    requests: list[WorkloadRequest]
    warm: bool
    paused: bool = True  # all in the engine's queue before its first step; else one request each, SEND_GAP_S apart


def _workloads() -> list[Workload]:
    rng = random.Random(7)  # noqa: S311 - test prompts

    def ids(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(10, 500) for _ in range(n))

    prefixes = [ids(256) for _ in range(4)]
    return [
        Workload("a-distinct-resent", [WorkloadRequest(ids(381), 24) for _ in range(12)], warm=True),
        Workload("b-shared-prefixes", [WorkloadRequest(prefixes[i % 4] + ids(250), 16) for i in range(16)],
                 warm=True),
        Workload("c-long-outputs", [WorkloadRequest(ids(630 - 10 * i), 64) for i in range(8)], warm=False),
    ]


def _uneven() -> Workload:
    """Workload (d): uneven prompts, few outputs, a pool they outgrow, sent as a client sends them at once."""
    rng = random.Random(1)  # noqa: S311 - test prompts
    lengths = [rng.randint(1250, 1646) for _ in range(16)]
    return Workload("d-uneven-evicting", [WorkloadRequest(tuple(rng.randrange(10, 500) for _ in range(n)), 8)
                                          for n in lengths], warm=True, paused=False)


@dataclass(frozen=True)
class Measured:
    """The engine's own counters over one pass, and the highest KV usage sampled during it."""

    queries: float
    hits: float
    preemptions: float
    kv_peak: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else math.nan


async def _metrics(client: httpx.AsyncClient, url: str) -> str:
    return (await client.get(url + "/metrics")).text


async def _pass(url: str, model: str, requests: list[WorkloadRequest]) -> Measured:
    """Send every request at once, in order, sampling the KV gauge until all are done.

    The engine's scheduler is paused (/pause?mode=keep, VLLM_SERVER_DEV_MODE) while one completions call hands
    the API server the prompts as a batch (one engine request per prompt, added in list order), and resumed
    ADD_S later: its first step sees every request, as the replay's does. Unpaused, the engine starts a step as
    soon as the first request arrives and takes the rest in later steps (seen: one block fewer of hits at 8
    seats in workload (a), 3 points).
    """
    max_tokens = {r.max_tokens for r in requests}
    assert len(max_tokens) == 1  # a batch shares its sampling parameters
    async with httpx.AsyncClient() as client:
        before = parse_metrics(await _metrics(client, url))
        (await client.post(url + "/pause", params={"mode": "keep", "clear_cache": "false"}, timeout=60)
         ).raise_for_status()
        send = asyncio.create_task(client.post(url + "/v1/completions", timeout=900, json={
            "model": model, "prompt": [list(r.prompt) for r in requests], "max_tokens": max_tokens.pop(),
            "ignore_eos": True, "temperature": 0.0}))
        # A paused engine runs no step, so its gauges stand still: give the API server time to add the batch.
        await asyncio.sleep(ADD_S)
        assert not send.done()
        (await client.post(url + "/resume", timeout=60)).raise_for_status()
        peak = 0.0
        while not send.done():
            peak = max(peak, parse_metrics(await _metrics(client, url)).kv_usage or 0.0)
            await asyncio.sleep(SAMPLE_S)
        resp = await send
        resp.raise_for_status()
        assert resp.json()["usage"]["completion_tokens"] == sum(r.max_tokens for r in requests)
        after = parse_metrics(await _metrics(client, url))

    def delta(name: str) -> float:
        return float(getattr(after, name) or 0.0) - float(getattr(before, name) or 0.0)

    return Measured(delta("prefix_queries"), delta("prefix_hits"), delta("preemptions"), peak)


async def _sent_apart(url: str, model: str, requests: list[WorkloadRequest]) -> Measured:
    """Send the requests one each, SEND_GAP_S apart, to the running engine, sampling the KV gauge until done."""
    async with httpx.AsyncClient(timeout=900) as client:
        before = parse_metrics(await _metrics(client, url))
        sends = []
        for r in requests:
            sends.append(asyncio.create_task(client.post(url + "/v1/completions", json={
                "model": model, "prompt": list(r.prompt), "max_tokens": r.max_tokens, "ignore_eos": True,
                "temperature": 0.0})))
            await asyncio.sleep(SEND_GAP_S)
        peak = 0.0
        while not all(send.done() for send in sends):
            peak = max(peak, parse_metrics(await _metrics(client, url)).kv_usage or 0.0)
            await asyncio.sleep(SAMPLE_S)
        for send, r in zip(sends, requests, strict=True):
            resp = await send
            resp.raise_for_status()
            assert resp.json()["usage"]["completion_tokens"] == r.max_tokens
        after = parse_metrics(await _metrics(client, url))

    def delta(name: str) -> float:
        return float(getattr(after, name) or 0.0) - float(getattr(before, name) or 0.0)

    return Measured(delta("prefix_queries"), delta("prefix_hits"), delta("preemptions"), peak)


@dataclass
class _Served:
    """One engine at one seat count: its process, URL, log and CPU."""

    seats: int
    engine: EngineProcess
    url: str
    log: Path
    cpu: int


def _start(vllm_python: str, model: Path, seats: int, cpu: int, tmp_path: Path, kv_bytes: int = KV_BYTES
           ) -> _Served:
    """Start the engine at `seats` on CPU `cpu` (it and its workers inherit the affinity); not yet healthy."""
    port = free_port()
    plan = LaunchPlan(engine="vllm", argv=(
        vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--max-num-seqs", str(seats),
        "--kv-cache-memory-bytes", str(kv_bytes), "--max-model-len", str(MAX_LEN), "--enforce-eager",
        "--skip-tokenizer-init", "--host", "127.0.0.1", "--port", str(port)),
        env_overlay={"VLLM_SERVER_DEV_MODE": "1"})  # /reset_prefix_cache between workloads, /pause and /resume
    log = tmp_path / f"engine-{seats}-{kv_bytes}.log"
    engine = EngineProcess(plan, log_format=engine_spec("vllm").log_format, log_path=log)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        engine.start()
    finally:
        os.sched_setaffinity(0, allowed)
    return _Served(seats, engine, f"http://127.0.0.1:{port}", log, cpu)


def _measure(served: _Served, model: Path, workloads: list[Workload]) -> dict[str, list[Measured]]:
    """Every workload through the healthy engine, its prefix cache reset before each; this client on its CPU."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {served.cpu})  # the engine's processes and this client on one CPU (as the bench tests)
    measured: dict[str, list[Measured]] = {}
    try:
        for w in workloads:
            httpx.post(served.url + "/reset_prefix_cache", timeout=30).raise_for_status()
            send = _pass if w.paused else _sent_apart
            passes = [asyncio.run(send(served.url, str(model), w.requests))]
            if w.warm:
                passes.append(asyncio.run(send(served.url, str(model), w.requests)))
            measured[w.name] = passes
    finally:
        os.sched_setaffinity(0, allowed)
    return measured


def _replay_part(model: Path, kv_bytes: int, seats: int) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """dspark's plan of the launch as the replay's engine part, its tool, and the replay's step cost."""
    report = validate(ValidateRequest(flags={"model": str(model), "engine": "vllm", "platform": "cpu",
                                             "kv_cache_memory_bytes": kv_bytes, "max_num_seqs": seats},
                                      engine_flags=("--max-model-len", str(MAX_LEN))))
    cap = report.capacity
    inputs = model_inputs(report.architecture, report.weights, cap, None, platform="cpu", tp=1, speculative_tokens=0)
    part, tool, _module = engine_part("vllm", report.witness_request, cap.details, cap.max_model_len, 0)
    return part, tool, step_cost(inputs.prior, inputs.shape)


def _predicted(vllm_python: str, model: Path
               ) -> tuple[dict[str, dict[int, list[PassPrediction]]], dict[str, int]]:
    """The replay's passes per workload and seat count (one engine import for all), and each pool in tokens."""
    part, tool, cost = _replay_part(model, KV_BYTES, SEATS[0])
    uneven_part, _tool, uneven_cost = _replay_part(model, UNEVEN_KV_BYTES, UNEVEN_SEATS)
    workloads = [*_workloads(), _uneven()]
    requests = []
    for w in workloads:
        one = (part, SEATS, cost) if w.paused else (uneven_part, (UNEVEN_SEATS,), uneven_cost)
        request = replay_request(one[0], one[1], w.requests, arrivals_of(len(w.requests), None, math.inf),
                                 warm=w.warm, pattern=[0], cost=one[2])
        request["arrivals"]["queued"] = w.paused  # a paused engine has them all in its first step
        requests.append(request)
    answers = run_replays(vllm_python, tool, requests, timeout=900)
    out: dict[str, dict[int, list[PassPrediction]]] = {}
    pools: dict[str, int] = {}
    for w, answer in zip(workloads, answers, strict=True):
        out[w.name] = {int(r["seats"]): [pass_prediction(r[k]) for k in ("cold", "warm") if r[k]]
                       for r in answer["results"]}
        pools[w.name] = int(answer["kv"]["num_blocks"]) * int(answer["kv"]["block_size"])
    return out, pools


def _misses(p: PassPrediction, m: Measured, *, exact: bool) -> list[str]:
    """What of a pass the replay got wrong: hits (exact: to the token), hit rate, preemptions, KV peak."""
    out = []
    if exact and p.prefix_cache_hits != m.hits:
        out.append(f"hits {p.prefix_cache_hits} vs {m.hits:.0f}")
    if abs((p.prefix_cache_hit_rate or 0.0) - m.hit_rate) > 0.02:
        out.append("hit rate")
    if abs(p.preemptions - m.preemptions) > 1:
        out.append("preemptions")
    if abs(p.kv_peak_fraction - m.kv_peak) > 0.05:
        out.append("KV peak")
    return out


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_the_replay_predicts_the_engines_own_counters(vllm_python: str, tiny_models: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = tiny_models / "dense-qwen3"
    start = time.monotonic()
    cpus = sorted(os.sched_getaffinity(0))
    uneven = _uneven()
    # The replay (its own interpreter) runs while the engines start, the engines' start-up being most of the
    # time; then the engines serve at once, each with its client on a CPU of its own where there are enough (a
    # thread's affinity is its own).
    with ThreadPoolExecutor(4) as pool:
        replay = pool.submit(_predicted, vllm_python, model)
        engines = [(_start(vllm_python, model, n, cpus[-1 - i % len(cpus)], tmp_path), _workloads())
                   for i, n in enumerate(SEATS)]
        engines.append((_start(vllm_python, model, UNEVEN_SEATS, cpus[0], tmp_path, UNEVEN_KV_BYTES), [uneven]))
        try:
            for served, _w in engines:
                served.engine.wait_healthy(served.url + "/health", 600)
            started_s = time.monotonic() - start
            runs = [pool.submit(_measure, served, model, w) for served, w in engines]
            measured: dict[str, dict[int, list[Measured]]] = {}
            for (served, _w), run in zip(engines, runs, strict=True):
                for name, passes in run.result().items():
                    measured.setdefault(name, {})[served.seats] = passes
        finally:
            for served, _w in engines:
                served.engine.stop(30)
        predicted, pool_tokens = replay.result()
    for served, workloads in engines:  # the replay's pool
        tokens = pool_tokens[workloads[0].name]
        assert f"KV cache size: {tokens:,} tokens" in served.log.read_text(errors="replace")
    rows, failures = [], []
    for w in [*_workloads(), uneven]:
        for seats in SEATS if w.paused else (UNEVEN_SEATS,):
            got = measured[w.name][seats]
            assert len(got) == len(predicted[w.name][seats]) == (2 if w.warm else 1)
            for label, p, m in zip(("cold", "warm"), predicted[w.name][seats], got, strict=False):
                assert p.prefix_cache_queries == m.queries, (w.name, seats, label)  # the same prompt tokens looked up
                rows.append(f"{w.name:<18} {seats:>2} seats {label}: hits {p.prefix_cache_hits:>6} vs "
                            f"{m.hits:>6.0f} of {m.queries:.0f} ({p.prefix_cache_hit_rate or 0:6.1%} vs "
                            f"{m.hit_rate:6.1%}), preemptions {p.preemptions} vs {m.preemptions:.0f}, KV peak "
                            f"{p.kv_peak_fraction:6.1%} vs {m.kv_peak:6.1%} sampled")
                failures += [f"{w.name} {seats} {label}: {what}" for what in _misses(p, m, exact=not w.paused)]
    with capsys.disabled():
        print(f"\nvLLM 0.32.0 CPU engine vs its own Scheduler replayed by dspark ({BLOCKS} blocks of 128 tokens, "
              f"{UNEVEN_BLOCKS} for {uneven.name}; replay and the engine starts {started_s:.0f} s, all "
              f"{time.monotonic() - start:.0f} s): predicted vs engine")
        print("\n".join(rows))
    assert not failures, failures
    # What makes the comparison compare something: eviction and preemption at the higher seat count, and in (d)
    # a warm pass that finds part of its prompts evicted.
    a, c = "a-distinct-resent", "c-long-outputs"
    warm_hits = {s: measured[a][s][1].hit_rate for s in SEATS}
    assert warm_hits[SEATS[1]] < warm_hits[SEATS[0]], warm_hits  # more seats: more of the cache evicted
    assert measured[c][SEATS[1]][0].preemptions >= 1 and measured[c][SEATS[0]][0].preemptions == 0
    cold, warm = measured[uneven.name][UNEVEN_SEATS]
    assert cold.hits == 0 and 0.2 < warm.hit_rate < 0.8, warm  # evicted in part: the order of eviction shows


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_vllm_0_33_replays_workload_d_as_0_32_does(vllm_python: str, vllm033_python: str, tiny_models: Path) -> None:
    """0.33.0's code (its wheel beside CPU torch) on (d)'s plan: the counts 0.32.0's replay gives (the engine's).

    (0.25.0 and 0.26.0, unpacked beside the same torch, gave these too when the tool was ported to them; they are
    not installed here.)
    """
    part, tool, cost = _replay_part(tiny_models / "dense-qwen3", UNEVEN_KV_BYTES, UNEVEN_SEATS)
    w = _uneven()
    request = replay_request(part, (UNEVEN_SEATS,), w.requests, arrivals_of(len(w.requests), None, math.inf),
                             warm=True, pattern=[0], cost=cost)
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run_replays, python, tool, [request], 600) for python in (vllm_python, vllm033_python)]
        answers = [run.result()[0] for run in runs]
    assert [a["engine_version"] for a in answers] == ["0.32.0", "0.33.0"]
    keys = ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "steps", "running_peak")
    figures = [[{k: r[p][k] for k in keys} for r in a["results"] for p in ("cold", "warm")] for a in answers]
    assert figures[0] == figures[1]
    warm = figures[0][1]
    assert 0 < warm["prefix_cache_hits"] < warm["prefix_cache_queries"]  # evicted in part: the order shows
