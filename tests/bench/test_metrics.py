"""/metrics parsing on real text captured from vLLM 0.32.0 (CPU build), and the pass delta.

Fixtures (tests/bench/fixtures/vllm_metrics_*.txt), all from a 2-layer Qwen3 served with --skip-tokenizer-init:
  idle       a fresh engine, nothing served yet
  running    mid-pass on a 2,048-token pool with 8 seats: 3 running, 5 waiting, KV 80% used
  preempted  the end of that pass: 8 requests x (200 prompt + 500 output) tokens, 9 preemptions
  warm       another engine after two cold passes and a warm re-run of 8 x 300-token prompts (2,048 hit tokens)
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
import pytest

from dspark.bench.metrics import (
    EngineSnapshot,
    Histogram,
    MetricsSampler,
    Sample,
    engine_delta,
    next_interval,
    parse_metrics,
    scrape,
)
from dspark.cli import main
from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import in_thread


def test_idle_engine_reads_zero_not_missing(metrics_text: dict[str, str]) -> None:
    snap = parse_metrics(metrics_text["idle"])
    assert snap == EngineSnapshot(
        prefix_queries=0.0, prefix_hits=0.0, preemptions=0.0, prompt_tokens=0.0, generation_tokens=0.0,
        kv_usage=0.0, running=0.0, waiting=0.0, queue_time=Histogram(sum=0.0, count=0.0),
    )


def test_running_gauges(metrics_text: dict[str, str]) -> None:
    snap = parse_metrics(metrics_text["running"])
    assert (snap.running, snap.waiting, snap.kv_usage) == (3.0, 5.0, 0.8)
    assert snap.prefix_queries == 1400.0
    assert snap.generation_tokens == 1105.0


def test_preempted_pass_delta(metrics_text: dict[str, str]) -> None:
    before = parse_metrics(metrics_text["idle"])
    after = parse_metrics(metrics_text["preempted"])
    samples = [Sample(t=0.4, running=7.0, waiting=1.0, kv_usage=0.93), Sample(t=0.8, running=5.0, waiting=3.0,
                                                                               kv_usage=1.0)]
    d = engine_delta(before, after, samples)
    assert d.preemptions == 9.0
    assert d.generation_tokens == 4000.0
    assert d.prefix_queries == 1600.0
    assert d.prefix_hits == 0.0
    assert d.prefix_hit_rate == 0.0
    assert d.kv_usage_peak == 1.0
    assert d.running_peak == 7.0
    assert d.running_mean == 6.0
    assert d.queue_time_mean_s == pytest.approx(2.3824128770000925 / 8)


def test_warm_hit_rate(metrics_text: dict[str, str]) -> None:
    snap = parse_metrics(metrics_text["warm"])
    assert (snap.prefix_queries, snap.prefix_hits) == (7200.0, 2048.0)
    # The warm pass alone: 8 prompts of 300 tokens, 2 full 128-token blocks of each hit.
    before = EngineSnapshot(prefix_queries=4800.0, prefix_hits=0.0)
    d = engine_delta(before, snap)
    assert d.prefix_hit_rate == pytest.approx(2048 / 2400)


def test_nothing_queried_means_no_hit_rate() -> None:
    snap = EngineSnapshot(prefix_queries=10.0, prefix_hits=0.0)
    assert engine_delta(snap, snap).prefix_hit_rate is None


def test_label_sets_are_summed_and_fractions_averaged() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 3.0\n'
        'vllm:num_requests_running{engine="1"} 4.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1"} 0.4\n'
    )
    snap = parse_metrics(text)
    assert snap.running == 7.0
    assert snap.kv_usage == pytest.approx(0.3)
    assert snap.prefix_hits is None  # not exported: unknown, not zero


def test_sglang_names() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 2.0\n"
        "# TYPE sglang:token_usage gauge\nsglang:token_usage 0.5\n"
        "# TYPE sglang:cached_tokens counter\nsglang:cached_tokens_total 30.0\n"
        "# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total 120.0\n"
        "# TYPE sglang:num_retracted_requests counter\nsglang:num_retracted_requests_total 1.0\n"
    )
    snap = parse_metrics(text)
    assert (snap.running, snap.kv_usage, snap.prefix_hits, snap.prefix_queries, snap.preemptions) == (
        2.0, 0.5, 30.0, 120.0, 1.0)


def test_sampling_adapts_to_the_pass() -> None:
    """Issue 26 item 13: every 5 s missed passes of 5-8 s; now 0.2 s at first, a tenth of the time elapsed."""
    assert next_interval(0.0, 5.0) == 0.2
    assert next_interval(3.0, 5.0) == pytest.approx(0.3)
    assert next_interval(600.0, 5.0) == 5.0
    assert next_interval(0.0, 0.05) == 0.05  # an interval asked below 0.2 s is kept
    t, n = 0.0, 0
    while t < 5.0:  # a 5 s pass
        t += next_interval(t, 5.0)
        n += 1
    assert n >= 10


def test_only_the_lines_read_are_parsed_and_nonsense_is_dropped(metrics_text: dict[str, str]) -> None:
    """Issue 26 item 15: 50 MB of /metrics cost 72 s of CPU; series dspark does not read are skipped unparsed."""
    junk = 'vllm:request_prefill_time_seconds_bucket{engine="0",le="%d"} 1.0\n'
    text = "".join(junk % i for i in range(300_000)) + metrics_text["running"]
    t0 = time.process_time()
    snap = parse_metrics(text)
    assert time.process_time() - t0 < 5.0
    assert (snap.running, snap.waiting, snap.kv_usage) == (3.0, 5.0, 0.8)
    odd = parse_metrics("vllm:num_requests_running -3\nvllm:num_preemptions_total NaN\nvllm:kv_cache_usage_perc 7\n"
                        "vllm:num_requests_waiting +Inf\n")
    assert (odd.running, odd.preemptions, odd.kv_usage, odd.waiting) == (None, None, None, None)


def test_a_trickling_or_huge_metrics_reply_is_cut_off() -> None:
    """Issue 26 item 15: a server trickling /metrics blocked the bench forever."""
    from tests.bench.hostile_server import Behaviour, HostileServer  # noqa: PLC0415

    async def go() -> None:
        srv = HostileServer()
        await srv.start()
        try:
            slow = srv.add(Behaviour(trickle_metrics=True)) + "/metrics"
            big = srv.add(Behaviour(metrics=b"x" * (3 << 20))) + "/metrics"
            async with httpx.AsyncClient(timeout=10.0) as client:
                # The server trickles forever: only the deadline can end this read (a hang is the suite's timeout).
                with pytest.raises(httpx.ReadTimeout, match="no complete reply within 1 s"):
                    await scrape(client, slow, deadline_s=1.0)
                with pytest.raises(httpx.DecodingError, match="exceeds 1,048,576 bytes"):
                    await scrape(client, big, limit=1 << 20)
        finally:
            await srv.stop()

    asyncio.run(go())


def test_a_short_pass_at_the_default_interval_sees_its_running_requests(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 13: at the default --sample-interval a ~2 s pass got no sample: running peak 0."""
    with in_thread(FakeServer(FakeConfig(token_delay=0.02))) as srv:
        assert main(["bench", "--url", srv.url, "--requests", "4", "--concurrency", "2", "--max-tokens", "40",
                     "--input-len", "4", "--no-progress", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["running_peak"] == 2.0
    assert len(data["reps"][0]["engine"]["samples"]) >= 6
    assert data["reps"][0]["metrics_warning"] is None


def test_a_peak_on_too_few_samples_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    with in_thread(FakeServer()) as srv:
        assert main(["bench", "--url", srv.url, "--requests", "2", "--concurrency", "1", "--max-tokens", "2",
                     "--input-len", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "warning: rep 1: its running and KV peaks rest on 0 /metrics sample(s)" in out


def test_stopping_the_sampler_always_ends_it_and_keeps_the_callers_cancellation() -> None:
    """A sweep on the real engine hung after its passes: asyncio.wait_for (before 3.12) swallowed the sampler's
    cancellation when it struck as a scrape completed, and stop() waited on it forever; stop() also swallowed
    the caller's own cancellation (a SIGTERM then did not stop the bench)."""

    async def go() -> None:
        async with FakeServer() as srv, httpx.AsyncClient(timeout=10.0) as client:
            rng = random.Random(5)  # noqa: S311 - test timing, no secret
            for _ in range(400):
                sampler = MetricsSampler(client, srv.url + "/metrics", interval=0.001)
                sampler.start(time.perf_counter())
                await asyncio.sleep(rng.random() * 0.01)
                await asyncio.wait_for(asyncio.shield(sampler.stop()), 5)
            sampler = MetricsSampler(client, srv.url + "/metrics", interval=0.001)
            sampler.start(time.perf_counter())
            await asyncio.sleep(0.01)
            after: list[str] = []

            async def stop_then_go_on() -> None:
                await sampler.stop()
                await asyncio.sleep(10)
                after.append("went on")

            waiter = asyncio.create_task(stop_then_go_on())
            await asyncio.sleep(0)  # it is inside stop(), waiting for the sampler to end
            waiter.cancel()
            await asyncio.wait({waiter}, timeout=2)
            assert waiter.cancelled() and after == []

    asyncio.run(go())
