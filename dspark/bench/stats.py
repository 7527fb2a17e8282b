"""Pure statistics over per-request records: throughput, TTFT percentiles, means over repetitions."""

from __future__ import annotations

import math
from collections.abc import Sequence
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

    @property
    def ok(self) -> bool:
        """True when the request completed without an error."""
        return self.error is None


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


def summarize(records: Sequence[RequestRecord], wall_time_s: float) -> PassStats:
    """Pass statistics; failed requests count as errors and add no tokens or latencies."""
    good = [r for r in records if r.ok]
    ttfts = [r.first_token - r.start for r in good if r.first_token is not None]
    # Pooled rather than a mean of per-request rates: a stream whose tokens arrived in one burst (the server's
    # output loop fell behind and coalesced them) would otherwise contribute an absurd rate.
    streams = [r for r in good if stream_decode_tps(r) is not None]
    decode_tokens = sum(r.output_tokens - 1 for r in streams)
    decode_time = math.fsum((r.last_token or 0.0) - (r.first_token or 0.0) for r in streams)
    tokens = sum(r.output_tokens for r in good)
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
    )


def relative_change(base: float, new: float) -> float:
    """(new - base) / base; nan when base is zero or either value is nan."""
    if base == 0 or math.isnan(base) or math.isnan(new):
        return math.nan
    return (new - base) / base
