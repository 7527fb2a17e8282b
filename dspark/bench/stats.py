"""Pure statistics over per-request records: throughput, TTFT percentiles, means over repetitions."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it; times are seconds on one monotonic clock."""

    index: int
    start: float
    end: float
    first_token: float | None  # arrival of the first chunk that carried output
    last_token: float | None  # arrival of the last chunk that carried output
    output_tokens: int  # the server's usage count when it sent one, else chunks with output
    prompt_tokens: int | None
    error: str | None = None
    itl: tuple[float, ...] = ()  # seconds between successive output chunks (vLLM bench's inter-token latencies)

    @property
    def ok(self) -> bool:
        """True when the request completed without an error."""
        return self.error is None


@dataclass(frozen=True)
class Distribution:
    """Mean and percentiles of one latency, in milliseconds, as `vllm bench serve` reports them."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of_seconds(cls, values: Sequence[float]) -> Distribution:
        """The distribution of `values` (seconds) in ms; nan when there are none."""
        ms = [v * 1e3 for v in values]
        return cls(mean=mean(ms), p50=percentile(ms, 50), p90=percentile(ms, 90), p99=percentile(ms, 99))


_EMPTY = Distribution(math.nan, math.nan, math.nan, math.nan)


@dataclass(frozen=True)
class PassStats:
    """What one pass of requests measured, client side."""

    requests: int
    errors: int
    wall_time_s: float
    output_tokens: int
    aggregate_decode_tps: float  # output tokens of successful requests / wall time (vLLM bench's definition)
    per_stream_decode_tps: float  # Σ(tokens - 1) / Σ(last - first token) over requests: one burst cannot dominate
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    latency_mean_s: float
    error_messages: tuple[str, ...] = ()
    # vLLM bench serve's figures: TPOT = (latency − TTFT) / (output tokens − 1) per request; ITL between chunks.
    tpot_ms: Distribution = _EMPTY
    itl_ms: Distribution = _EMPTY
    e2e_ms: Distribution = _EMPTY
    ttft_ms: Distribution = _EMPTY
    request_throughput: float = math.nan  # successful requests per second of wall time
    total_token_throughput: float = math.nan  # (prompt + output tokens) per second of wall time
    prompt_tokens_mean: float = math.nan  # the server's usage count, over successful requests
    # --goodput: requests that met every SLO (None: no SLOs given), and those per second of wall time.
    good_requests: int | None = None
    request_goodput: float = math.nan


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default); nan if empty."""
    if not 0 <= q <= 100:
        raise ValueError("q must be within 0..100")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; nan if empty."""
    return math.fsum(values) / len(values) if values else math.nan


def stream_decode_tps(rec: RequestRecord) -> float | None:
    """Decode rate of one stream after its first token, or None when it streamed fewer than 2 tokens or chunks."""
    if not rec.ok or rec.first_token is None or rec.last_token is None or rec.output_tokens < 2:
        return None
    span = rec.last_token - rec.first_token
    return (rec.output_tokens - 1) / span if span > 0 else None


def vllm_latency(r: RequestRecord) -> float:
    """A request's latency as vllm bench serve measures it: from the send to the last chunk with a choice (its
    `most_recent_timestamp`), not to the end of the stream (the usage chunk and [DONE] after it)."""
    return (r.last_token if r.last_token is not None else r.end) - r.start


# The SLO names vLLM's --goodput takes (ms): time to first token, time per output token, end-to-end latency.
SLO_NAMES = ("ttft", "tpot", "e2el")


def good_requests(records: Sequence[RequestRecord], slos_ms: Mapping[str, float]) -> int:
    """Successful requests meeting every SLO, as vLLM's calculate_metrics counts them: TTFT, TPOT ((latency −
    TTFT) / (output tokens − 1), taken as 0 for one token or none) and end-to-end latency each at most its SLO."""
    count = 0
    for r in records:
        if not r.ok or r.first_token is None:
            continue
        ttft = r.first_token - r.start
        latency = vllm_latency(r)
        figures = {"ttft": ttft, "tpot": (latency - ttft) / (r.output_tokens - 1) if r.output_tokens > 1 else 0.0,
                   "e2el": latency}
        if all(slo / 1000.0 >= figures[name] for name, slo in slos_ms.items()):
            count += 1
    return count


def summarize(records: Sequence[RequestRecord], wall_time_s: float,
              slos_ms: Mapping[str, float] | None = None) -> PassStats:
    """Pass statistics; failed requests count as errors and add no tokens or latencies. With SLOs (ms, by the
    names in SLO_NAMES) the requests that met them all, and the goodput: those per second of wall time."""
    good = [r for r in records if r.ok]
    ttfts = [r.first_token - r.start for r in good if r.first_token is not None]
    # Pooled rather than a mean of per-request rates: a stream whose tokens arrived in one burst (the server's
    # output loop fell behind and coalesced them) would otherwise contribute an absurd rate.
    streams = [r for r in good if stream_decode_tps(r) is not None]
    decode_tokens = sum(r.output_tokens - 1 for r in streams)
    decode_time = math.fsum((r.last_token or 0.0) - (r.first_token or 0.0) for r in streams)
    tokens = sum(r.output_tokens for r in good)
    # vLLM's TPOT counts requests with more than one output token; its latency ends at the last output chunk.
    tpots = [(vllm_latency(r) - (r.first_token - r.start)) / (r.output_tokens - 1)
             for r in good if r.first_token is not None and r.output_tokens > 1]
    prompts = [r.prompt_tokens for r in good if r.prompt_tokens is not None]
    rate = (lambda n: n / wall_time_s) if wall_time_s > 0 else (lambda _n: math.nan)
    met = good_requests(records, slos_ms) if slos_ms else None
    return PassStats(
        requests=len(records),
        errors=len(records) - len(good),
        wall_time_s=wall_time_s,
        output_tokens=tokens,
        aggregate_decode_tps=tokens / wall_time_s if wall_time_s > 0 else math.nan,
        per_stream_decode_tps=decode_tokens / decode_time if decode_time > 0 else math.nan,
        ttft_mean_s=mean(ttfts),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p99_s=percentile(ttfts, 99),
        latency_mean_s=mean([r.end - r.start for r in good]),
        error_messages=tuple(sorted({r.error for r in records if r.error is not None})),
        tpot_ms=Distribution.of_seconds(tpots),
        itl_ms=Distribution.of_seconds([gap for r in good for gap in r.itl]),
        e2e_ms=Distribution.of_seconds([vllm_latency(r) for r in good]),
        ttft_ms=Distribution.of_seconds(ttfts),
        request_throughput=rate(len(good)),
        total_token_throughput=rate(tokens + sum(prompts)),
        prompt_tokens_mean=mean([float(p) for p in prompts]),
        good_requests=met,
        request_goodput=rate(met) if met is not None else math.nan,
    )


def relative_change(base: float, new: float) -> float:
    """(new - base) / base; nan when base is zero or either value is nan."""
    if base == 0 or math.isnan(base) or math.isnan(new):
        return math.nan
    return (new - base) / base
