"""The engine's /metrics: parse one scrape into a snapshot (pure), diff two, and sample over time (HTTP edge)."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dspark.bench.client import MAX_REPLY_BYTES, REPLY_DEADLINE_S, get_bounded
from dspark.engines import ENGINE_NAMES, engine_spec

# The concepts dspark reads; each engine names its sample for each (EngineSpec.metric_names). Counters are
# matched by their exposed sample name (with _total); label sets are summed (one per engine/DP rank).
_COUNTERS = ("prefix_queries", "prefix_hits", "preemptions", "prompt_tokens", "generation_tokens")
_GAUGES = ("kv_usage", "running", "waiting")
# Gauges that are fractions per rank are averaged rather than summed across label sets.
_AVERAGED = frozenset({"kv_usage"})
_QUEUE_TIME = "queue_time"  # a histogram: its base name


@functools.cache
def _sample_names() -> dict[str, tuple[str, ...]]:
    """Concept -> the sample names that carry it, one per engine, in the registry's order."""
    specs = [engine_spec(name) for name in ENGINE_NAMES]
    return {concept: tuple(s.metric_names[concept] for s in specs if concept in s.metric_names)
            for concept in (*_COUNTERS, *_GAUGES, _QUEUE_TIME)}


@functools.cache
def _wanted() -> frozenset[str]:
    """Every sample name parse_metrics reads: the lines worth handing to the Prometheus parser."""
    names = _sample_names()
    out = {n for concept in (*_COUNTERS, *_GAUGES) for n in names[concept]}
    out |= {base + suffix for base in names[_QUEUE_TIME] for suffix in ("_count", "_sum")}
    return frozenset(out)


def _relevant_lines(text: str) -> str:
    """The sample lines of the figures dspark reads, nothing else: an engine's /metrics holds hundreds of other
    series (histogram buckets above all), and parsing only these keeps a scrape cheap whatever the server sends."""
    wanted = _wanted()
    keep = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        end = len(line)
        for stop in ("{", " ", "\t"):
            at = line.find(stop)
            if 0 <= at < end:
                end = at
        if line[:end] in wanted:
            keep.append(line)
    return "\n".join(keep) + "\n" if keep else ""


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram's running sum and count at one instant."""

    sum: float
    count: float

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made between `earlier` and this one."""
        return Histogram(sum=self.sum - earlier.sum, count=self.count - earlier.count)


@dataclass(frozen=True)
class EngineSnapshot:
    """The figures dspark reads from one scrape; None where the engine does not export that figure."""

    prefix_queries: float | None = None
    prefix_hits: float | None = None
    preemptions: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    kv_usage: float | None = None  # fraction of the KV pool in use, 0..1
    running: float | None = None
    waiting: float | None = None
    queue_time: Histogram | None = None


@dataclass(frozen=True)
class Sample:
    """One point of the timeline: seconds since the pass started, and the gauges then."""

    t: float
    running: float | None
    waiting: float | None
    kv_usage: float | None


@dataclass(frozen=True)
class EngineDelta:
    """What the engine reported about one pass: counter differences and gauge peaks."""

    prefix_queries: float | None
    prefix_hits: float | None
    prefix_hit_rate: float | None  # hits / queries over the pass, None when nothing was queried
    preemptions: float | None
    generation_tokens: float | None
    kv_usage_peak: float | None
    running_peak: float | None
    running_mean: float | None
    queue_time_mean_s: float | None  # exact: histogram sum / count (its buckets are too coarse for quantiles)
    samples: tuple[Sample, ...] = field(default_factory=tuple)


def _sum_or_none(values: list[float]) -> float | None:
    return math.fsum(values) if values else None


def parse_metrics(text: str) -> EngineSnapshot:
    """Parse Prometheus text exposition (vLLM or SGLang /metrics) into an EngineSnapshot."""
    by_name: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(_relevant_lines(text)):
        for s in family.samples:
            value = float(s.value)
            # Counts, gauges and fractions are never negative or infinite: such a sample says nothing.
            if math.isfinite(value) and value >= 0:
                by_name.setdefault(s.name, []).append(value)

    names_of = _sample_names()
    values: dict[str, float | None] = {}
    for concept in (*_COUNTERS, *_GAUGES):
        names = names_of[concept]
        found = next((by_name[n] for n in names if n in by_name), None)
        if found is None:
            values[concept] = None
        elif concept in _AVERAGED:
            mean = math.fsum(found) / len(found)
            values[concept] = mean if mean <= 1 else None  # a fraction of the pool
        else:
            values[concept] = _sum_or_none(found)

    queue: Histogram | None = None
    for base in names_of[_QUEUE_TIME]:
        if base + "_count" in by_name:
            queue = Histogram(sum=math.fsum(by_name.get(base + "_sum", [])), count=math.fsum(by_name[base + "_count"]))
            break
    return EngineSnapshot(queue_time=queue, **values)


def _diff(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def _peak(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def engine_delta(before: EngineSnapshot, after: EngineSnapshot, samples: Sequence[Sample] = ()) -> EngineDelta:
    """The pass as the engine saw it: counters after minus before, peaks over the samples and the last scrape."""
    queries = _diff(after.prefix_queries, before.prefix_queries)
    hits = _diff(after.prefix_hits, before.prefix_hits)
    hit_rate = hits / queries if hits is not None and queries else None
    q_mean = None
    if after.queue_time is not None and before.queue_time is not None:
        q = after.queue_time.minus(before.queue_time)
        if q.count > 0:
            q_mean = q.sum / q.count
    running = [s.running for s in samples if s.running is not None]
    return EngineDelta(
        prefix_queries=queries,
        prefix_hits=hits,
        prefix_hit_rate=hit_rate,
        preemptions=_diff(after.preemptions, before.preemptions),
        generation_tokens=_diff(after.generation_tokens, before.generation_tokens),
        kv_usage_peak=_peak([*(s.kv_usage for s in samples), after.kv_usage]),
        running_peak=_peak([*running, after.running]),
        running_mean=math.fsum(running) / len(running) if running else None,
        queue_time_mean_s=q_mean,
        samples=tuple(samples),
    )


async def scrape(client: httpx.AsyncClient, url: str, *, limit: int = MAX_REPLY_BYTES,
                 deadline_s: float = REPLY_DEADLINE_S) -> EngineSnapshot:
    """GET the metrics URL (within `deadline_s` in all, at most `limit` bytes) and parse it; raises httpx
    errors (ValueError for text that does not parse) to the caller."""
    status, body = await get_bounded(client, url, limit=limit, deadline_s=deadline_s)
    if status != 200:
        raise httpx.HTTPStatusError(f"{url} answered HTTP {status}", request=httpx.Request("GET", url),
                                    response=httpx.Response(status))
    return parse_metrics(body.decode("utf-8", "replace"))


# Sampling adapts to the pass: every 0.2 s at first, then a tenth of the time elapsed so far, never sparser
# than the interval asked for. A 5 s pass gets ~20 samples, a 10-minute one about one per `interval`.
MIN_SAMPLE_INTERVAL_S = 0.2
SAMPLES_PER_ELAPSED = 10
# Fewer samples than this within a pass: its running and KV peaks are a guess, and the bench says so.
FEW_SAMPLES = 5


def next_interval(elapsed: float, longest: float) -> float:
    """Seconds to the next sample, `elapsed` s into the pass: at least 0.2 s (or `longest` when that is
    shorter), at most `longest`."""
    return max(min(MIN_SAMPLE_INTERVAL_S, longest), min(longest, elapsed / SAMPLES_PER_ELAPSED))


class MetricsSampler:
    """Scrapes /metrics while a pass runs, fast at first and at most `interval` seconds apart (next_interval);
    failed scrapes are counted, not fatal."""

    def __init__(self, client: httpx.AsyncClient, url: str, interval: float = 5.0) -> None:
        self._client = client
        self._url = url
        self._interval = interval
        self._t0 = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.samples: list[Sample] = []
        self.failures = 0

    async def _loop(self) -> None:
        while not self._stopping:
            # Sleep first: the pass's "before" scrape is its t=0 point, and a scrape as the first requests
            # arrive would stall them (vLLM renders /metrics on the API server's event loop).
            await asyncio.sleep(next_interval(time.perf_counter() - self._t0, self._interval))
            try:
                snap = await scrape(self._client, self._url)
            except (httpx.HTTPError, ValueError):
                self.failures += 1
            else:
                t = time.perf_counter() - self._t0
                self.samples.append(Sample(t=t, running=snap.running, waiting=snap.waiting, kv_usage=snap.kv_usage))

    def start(self, t0: float) -> None:
        """Begin sampling; sample times are relative to t0 (time.perf_counter())."""
        self._t0 = t0
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> list[Sample]:
        """Stop sampling and return the samples taken. A cancellation of the caller while it waits is its own
        and propagates (asyncio.wait, not `await task` under a suppress, which would swallow it)."""
        self._stopping = True  # ends the loop even where a library swallowed the cancellation below
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
            task, self._task = self._task, None
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
        return self.samples
