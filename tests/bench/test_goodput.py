"""--goodput: requests meeting every SLO, counted as vLLM's calculate_metrics counts them."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from dspark.bench.load import LoadOptions, bench_spec, parse_goodput
from dspark.bench.stats import RequestRecord, good_requests, summarize
from dspark.core.errors import InputError


def rec(i: int, ttft: float, latency: float, tokens: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(index=i, start=10.0, end=10.0 + latency, first_token=10.0 + ttft,
                         last_token=10.0 + latency, output_tokens=tokens, prompt_tokens=5,
                         error=None if ok else "boom")


# By hand: ttft, latency (s), tokens -> TPOT = (latency - ttft) / (tokens - 1).
RECORDS = [
    rec(0, 0.100, 1.100, 11),  # TPOT 100 ms
    rec(1, 0.500, 0.900, 5),  # TTFT exactly 500 ms, TPOT 100 ms
    rec(2, 0.600, 0.700, 2),  # TTFT 600 ms: misses ttft:500
    rec(3, 0.200, 2.200, 11),  # TPOT 200 ms: misses tpot:150
    rec(4, 0.050, 3.000, 1),  # one token: TPOT taken as 0, e2e 3 s
    rec(5, 0.010, 0.020, 3, ok=False),  # failed: never good
]


def test_goodput_against_a_hand_count() -> None:
    assert good_requests(RECORDS, {"ttft": 500}) == 4  # 0, 1, 3, 4 (the SLO is met at equality)
    assert good_requests(RECORDS, {"ttft": 500, "tpot": 150}) == 3  # 0, 1, 4
    assert good_requests(RECORDS, {"ttft": 500, "tpot": 150, "e2el": 2000}) == 2  # 0, 1
    assert good_requests(RECORDS, {"tpot": 0}) == 1  # only the one-token request
    stats = summarize(RECORDS, 4.0, {"ttft": 500, "tpot": 150})
    assert stats.good_requests == 3
    assert stats.request_goodput == pytest.approx(3 / 4.0)
    assert summarize(RECORDS, 4.0).good_requests is None and math.isnan(summarize(RECORDS, 4.0).request_goodput)


def _vllm_good(records: list[RequestRecord], slos: dict[str, float]) -> int:
    """vLLM 0.32's calculate_metrics loop, transcribed: ttfts, all_tpots and e2els of the successful requests."""
    ttfts, all_tpots, e2els = [], [], []
    for r in records:
        if r.ok:
            assert r.first_token is not None
            latency, ttft = r.end - r.start, r.first_token - r.start
            all_tpots.append((latency - ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0)
            ttfts.append(ttft)
            e2els.append(latency)
    valid, values = [], []
    for name, metric in (("ttft", ttfts), ("tpot", all_tpots), ("e2el", e2els)):
        if name in slos:
            valid.append(metric)
            values.append(slos[name] / 1000)
    return sum(all(s >= m for s, m in zip(values, req, strict=True)) for req in zip(*valid, strict=True))


@pytest.mark.parametrize("seed", range(30))
def test_goodput_matches_vllms_loop_on_generated_requests(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible cases
    records = [rec(i, rng.uniform(0, 1), rng.uniform(1, 3), rng.randint(0, 40), ok=rng.random() > 0.1)
               for i in range(rng.randint(1, 60))]
    names = rng.sample(["ttft", "tpot", "e2el"], rng.randint(1, 3))
    slos = {n: rng.uniform(0, 2500 if n != "tpot" else 150) for n in names}
    assert good_requests(records, slos) == _vllm_good(records, slos)


def test_goodput_spellings() -> None:
    assert parse_goodput(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    assert parse_goodput(["ttft:500,tpot:50 e2e:3000"]) == {"ttft": 500.0, "tpot": 50.0, "e2el": 3000.0}
    assert parse_goodput([]) == {}


@pytest.mark.parametrize("bad", ["ttft", "ttft:", "ttft:abc", "ttfb:5", "ttft:-1", "ttft:nan", "ttft:inf",
                                 ":5", "ttft:1e999", "x" * 5000 + ":1"])
def test_bad_goodput_is_an_input_error_naming_it(bad: str) -> None:
    with pytest.raises(InputError, match="--goodput") as info:
        bench_spec(LoadOptions(goodput=(bad,)), "http://127.0.0.1:9")
    assert len(str(info.value)) < 400


def test_latency_ends_at_the_last_output_chunk_as_vllms() -> None:
    # vLLM's latency is its most_recent_timestamp (the last chunk with a choice), not the stream's end.
    r = RequestRecord(index=0, start=0.0, end=5.0, first_token=0.5, last_token=1.5, output_tokens=11,
                      prompt_tokens=3)
    assert good_requests([r], {"e2el": 1500, "tpot": 100}) == 1
    assert good_requests([r], {"e2el": 1499}) == 0
    s = summarize([r], 5.0)
    assert s.e2e_ms.mean == pytest.approx(1500.0) and s.tpot_ms.mean == pytest.approx(100.0)


def test_arrivals_are_vllms_draws_for_the_same_seed() -> None:
    import numpy as np  # noqa: PLC0415 - matplotlib ([plot]) brings it; the draws are vLLM's only with it

    from dspark.bench.load import arrival_schedule  # noqa: PLC0415

    # vLLM's get_request: np.random.seed(seed), then np.random.gamma per request, summed, rescaled to N / rate.
    np.random.seed(21)
    delays = list(itertools.accumulate(float(np.random.gamma(shape=0.5, scale=1 / (4.0 * 0.5))) for _ in range(9)))
    expected = [d * (9 / 4.0) / delays[-1] for d in delays]
    assert arrival_schedule(9, 4.0, 0.5, 21) == pytest.approx(expected, rel=1e-12)
