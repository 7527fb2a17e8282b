"""Statistics over request records: exact values on hand-made records."""

from __future__ import annotations

import dataclasses
import math

import pytest

from dspark.bench.results import PassResult, pass_values, summarize_reps
from dspark.bench.stats import (
    Distribution,
    PassStats,
    RequestRecord,
    percentile,
    relative_change,
    stream_decode_tps,
    summarize,
)

_NAN = Distribution(math.nan, math.nan, math.nan, math.nan)


def rec(i: int, start: float, first: float | None, last: float | None, end: float, tokens: int,
        error: str | None = None) -> RequestRecord:
    return RequestRecord(index=i, start=start, end=end, first_token=first, last_token=last, output_tokens=tokens,
                         prompt_tokens=10, error=error)


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile(values, 101)


def test_stream_decode_rate_needs_two_tokens_and_a_span() -> None:
    assert stream_decode_tps(rec(0, 0.0, 1.0, 3.0, 3.0, 11)) == 5.0  # 10 tokens after the first in 2 s
    assert stream_decode_tps(rec(0, 0.0, 1.0, 1.0, 1.0, 1)) is None
    assert stream_decode_tps(rec(0, 0.0, 1.0, 1.0, 1.0, 5)) is None  # all in one chunk: no span
    assert stream_decode_tps(rec(0, 0.0, 1.0, 3.0, 3.0, 11, error="boom")) is None


def test_summarize_counts_errors_and_excludes_them_from_rates() -> None:
    records = [
        rec(0, 0.0, 0.5, 2.5, 2.5, 21),  # ttft 0.5, 10 tok/s
        rec(1, 0.0, 1.5, 2.5, 3.5, 41),  # ttft 1.5, 40 tok/s
        rec(2, 1.0, None, None, 1.2, 0, error="HTTP 500: x"),
    ]
    s = summarize(records, wall_time_s=4.0)
    assert s.ttft_p99_s == pytest.approx(1.49)
    assert dataclasses.replace(s, tpot_ms=_NAN, itl_ms=_NAN, e2e_ms=_NAN, ttft_ms=_NAN) == PassStats(
        requests=3,
        errors=1,
        wall_time_s=4.0,
        output_tokens=62,
        aggregate_decode_tps=15.5,
        per_stream_decode_tps=20.0,  # 60 tokens after the first in 3 s of streaming, not the mean rate 25
        ttft_mean_s=1.0,
        ttft_p50_s=1.0,
        ttft_p99_s=s.ttft_p99_s,  # 1.49, approximately: asserted above
        latency_mean_s=3.0,
        error_messages=("HTTP 500: x",),
        request_throughput=0.5,  # 2 good requests in 4 s
        total_token_throughput=(62 + 20) / 4.0,
        prompt_tokens_mean=10.0,
        tpot_ms=_NAN, itl_ms=_NAN, e2e_ms=_NAN, ttft_ms=_NAN,
    )


def test_vllm_bench_figures_tpot_itl_e2e() -> None:
    """TPOT = (latency − TTFT) / (tokens − 1) per request, vLLM's definition; ITL over every chunk gap."""
    records = [
        RequestRecord(0, 0.0, 2.5, 0.5, 2.5, 21, 10, itl=(0.1, 0.1, 0.3)),  # TPOT (2.5 − 0.5) / 20 = 100 ms
        RequestRecord(1, 0.0, 3.5, 1.5, 3.5, 41, 10, itl=(0.05,)),  # TPOT 2.0 / 40 = 50 ms
        RequestRecord(2, 0.0, 1.0, 1.0, 1.0, 1, 10),  # one token: no TPOT, as in vLLM
    ]
    s = summarize(records, wall_time_s=4.0)
    assert dataclasses.astuple(s.tpot_ms) == pytest.approx(dataclasses.astuple(Distribution(75.0, 75.0, 95.0, 99.5)))
    assert s.itl_ms.mean == pytest.approx(137.5)
    assert s.itl_ms.p50 == pytest.approx(100.0)
    assert s.e2e_ms.mean == pytest.approx(7000 / 3)
    assert s.ttft_ms.p50 == pytest.approx(1000.0)


def test_relative_change() -> None:
    assert relative_change(8.0, 10.0) == 0.25
    assert relative_change(10.0, 8.0) == -0.2
    assert math.isnan(relative_change(0.0, 1.0))


def _pass(label: str, wall: float, tokens: int, errors: int = 0) -> PassResult:
    stats = PassStats(requests=4, errors=errors, wall_time_s=wall, output_tokens=tokens,
                      aggregate_decode_tps=tokens / wall, per_stream_decode_tps=10.0, ttft_mean_s=1.0,
                      ttft_p50_s=1.0, ttft_p99_s=2.0, latency_mean_s=3.0)
    return PassResult(label=label, stats=stats, engine=None, metrics_error="not read")


def test_summary_means_over_reps_and_unknown_engine_figures_stay_unknown() -> None:
    reps = [_pass("rep 1", 2.0, 100), _pass("rep 2", 4.0, 100, errors=1)]
    warm = _pass("warm re-run", 1.0, 100)
    s = summarize_reps(reps, warm)
    assert s["wall_time_s"] == 3.0
    assert s["aggregate_decode_tps"] == 37.5  # mean of 50 and 25
    assert s["warm_wall_time_s"] == 1.0
    assert s["errors"] == 1.0
    # No /metrics: hit rate, KV peak and preemptions are unknown, never 0.
    assert s["prefix_hit_rate"] is None
    assert s["kv_usage_peak"] is None
    assert s["preemptions"] is None
    assert pass_values(warm)["preemptions"] is None
