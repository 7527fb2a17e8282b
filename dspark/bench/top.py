"""`dspark top`'s figures: a running engine's /metrics read twice, and what changed between the two reads.

Pure but for `fetch_metrics` (one bounded GET). Counters become rates over the window between two scrapes;
latency percentiles come from the engine's own histograms, from the observations made inside the window
(bucket counts subtracted, then interpolated within a bucket as Prometheus's histogram_quantile does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dspark.core.errors import InputError
from dspark.engines import ENGINE_NAMES, engine_spec

# What the view reads, by concept; each engine names its sample (EngineSpec.metric_names).
_COUNTERS = ("prefix_queries", "prefix_hits", "preemptions", "prompt_tokens", "generation_tokens")
_GAUGES = ("running", "waiting", "kv_usage")
_HISTOGRAMS = ("ttft", "itl")
QUANTILES = (0.5, 0.9, 0.99)
MAX_METRICS_BYTES = 16 << 20  # a real /metrics page is tens of kB; more is not an engine's


@dataclass(frozen=True)
class Buckets:
    """One histogram at one instant: cumulative counts per upper bound (ascending, +inf last), sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    def minus(self, earlier: Buckets | None) -> Buckets:
        """The observations made since `earlier` (the whole histogram when there is none or it was reset)."""
        if earlier is None or earlier.bounds != self.bounds or earlier.count > self.count:
            return self
        return Buckets(self.bounds, tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
                       self.sum - earlier.sum, self.count - earlier.count)

    def quantile(self, q: float) -> float | None:
        """histogram_quantile(q): linear within the bucket that holds rank q·count; None with no observations."""
        if self.count <= 0 or not self.bounds:
            return None
        rank = q * self.cumulative[-1]
        lower, below = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank:
                if math.isinf(bound):
                    return lower  # in the open bucket: its lower bound, as Prometheus answers
                width = cum - below
                return lower + (bound - lower) * ((rank - below) / width if width > 0 else 1.0)
            lower, below = bound, cum
        return lower

    @property
    def mean(self) -> float | None:
        """Exact: sum / count."""
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class Scrape:
    """One /metrics read: the engine it came from, its counters and gauges (None: not exported), histograms."""

    engine: str | None
    values: Mapping[str, float | None]
    histograms: Mapping[str, Buckets | None]


@dataclass(frozen=True)
class TopView:
    """What `dspark top` shows for one window; rates per second over `window_s`, None where not exported."""

    engine: str | None
    window_s: float
    seats: int | None
    running: float | None
    waiting: float | None
    kv_usage: float | None
    prefix_hit_rate: float | None  # hits / queries in the window (tokens)
    prompt_tps: float | None
    generation_tps: float | None
    preemptions_total: float | None
    preemptions_window: float | None
    ttft_s: Mapping[str, float | None]  # "p50", "p90", "p99", "mean": over the window's finished prefills
    itl_s: Mapping[str, float | None]

    def as_json(self) -> dict[str, object]:
        """The view as plain JSON values (`dspark top --json`)."""
        return {
            "engine": self.engine, "window_s": round(self.window_s, 3), "seats": self.seats,
            "running": self.running, "waiting": self.waiting, "kv_usage": self.kv_usage,
            "prefix_hit_rate": self.prefix_hit_rate, "prompt_tokens_per_s": self.prompt_tps,
            "generation_tokens_per_s": self.generation_tps, "preemptions_total": self.preemptions_total,
            "preemptions_in_window": self.preemptions_window, "ttft_s": dict(self.ttft_s), "itl_s": dict(self.itl_s),
        }


def _engine_names() -> dict[str, Mapping[str, str]]:
    return {name: engine_spec(name).metric_names for name in ENGINE_NAMES}


def parse_scrape(text: str) -> Scrape:
    """Parse Prometheus text exposition into a Scrape; InputError (exit 2) for text that is not one."""
    samples: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples.setdefault(s.name, []).append((s.labels, float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise InputError(f"/metrics is not Prometheus text ({type(exc).__name__})",
                         hint="point dspark top at the engine's own server (vLLM or SGLang)") from None
    # The engine whose names the page carries most of (a page of neither: nothing recognised, said by the view).
    score = {name: sum(1 for n in names.values() if n in samples or n + "_count" in samples)
             for name, names in _engine_names().items()}
    engine = max(score, key=lambda n: score[n]) if any(score.values()) else None
    names = _engine_names()[engine] if engine else {}
    values: dict[str, float | None] = {}
    for concept in (*_COUNTERS, *_GAUGES):
        found = samples.get(names.get(concept, ""))
        finite = [v for _, v in found or () if math.isfinite(v)]
        if not finite:
            values[concept] = None
        elif concept == "kv_usage":  # a fraction per engine or DP rank: averaged
            values[concept] = math.fsum(finite) / len(finite)
        else:
            values[concept] = math.fsum(finite)
    histograms = {concept: _buckets(samples, names.get(concept)) for concept in _HISTOGRAMS}
    return Scrape(engine, values, histograms)


def _buckets(samples: Mapping[str, list[tuple[Mapping[str, str], float]]], base: str | None) -> Buckets | None:
    """The histogram `base`, summed over its label sets (engines, models), or None when not exported."""
    if base is None or base + "_bucket" not in samples:
        return None
    by_bound: dict[float, float] = {}
    for labels, value in samples[base + "_bucket"]:
        try:
            bound = float(labels.get("le", "nan"))
        except ValueError:
            continue
        if not math.isnan(bound) and math.isfinite(value):
            by_bound[bound] = by_bound.get(bound, 0.0) + value
    if not by_bound:
        return None
    bounds = tuple(sorted(by_bound))
    total = math.fsum(v for _, v in samples.get(base + "_count", ()))
    return Buckets(bounds, tuple(by_bound[b] for b in bounds),
                   math.fsum(v for _, v in samples.get(base + "_sum", ())), total)


def _rate(after: float | None, before: float | None, window: float) -> float | None:
    if after is None or before is None or window <= 0:
        return None
    return max(0.0, after - before) / window  # a restarted engine resets its counters: no negative rate


def _summary(after: Buckets | None, before: Buckets | None) -> dict[str, float | None]:
    window = after.minus(before) if after is not None else None
    out: dict[str, float | None] = {f"p{round(q * 100)}": window.quantile(q) if window else None for q in QUANTILES}
    out["mean"] = window.mean if window else None
    return out


def top_view(before: Scrape, after: Scrape, window_s: float, seats: int | None = None) -> TopView:
    """The window between two scrapes of one engine."""
    b, a = before.values, after.values
    queries = None if a["prefix_queries"] is None or b["prefix_queries"] is None else \
        a["prefix_queries"] - b["prefix_queries"]
    hits = None if a["prefix_hits"] is None or b["prefix_hits"] is None else a["prefix_hits"] - b["prefix_hits"]
    hit_rate = hits / queries if hits is not None and queries and queries > 0 else None
    preempted = None if a["preemptions"] is None or b["preemptions"] is None else \
        max(0.0, a["preemptions"] - b["preemptions"])
    return TopView(
        engine=after.engine, window_s=window_s, seats=seats, running=a["running"], waiting=a["waiting"],
        kv_usage=a["kv_usage"], prefix_hit_rate=hit_rate,
        prompt_tps=_rate(a["prompt_tokens"], b["prompt_tokens"], window_s),
        generation_tps=_rate(a["generation_tokens"], b["generation_tokens"], window_s),
        preemptions_total=a["preemptions"], preemptions_window=preempted,
        ttft_s=_summary(after.histograms["ttft"], before.histograms["ttft"]),
        itl_s=_summary(after.histograms["itl"], before.histograms["itl"]),
    )


def metrics_url(url: str) -> str:
    """The /metrics URL of a server URL (`http://host:8000` or `.../metrics`); InputError for anything else."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InputError(f"URL {url!r} is not a URL", hint="e.g. http://127.0.0.1:8000") from None
    if parsed.scheme not in ("http", "https") or not parsed.host or any(c in url for c in "\r\n\t "):
        raise InputError(f"URL {url!r}: expected http(s)://HOST[:PORT]", hint="e.g. http://127.0.0.1:8000")
    if parsed.userinfo:
        raise InputError("the URL carries credentials: give the server's address without user:password@",
                         hint="dspark top reads /metrics, which vLLM and SGLang serve without authentication")
    path = parsed.path.rstrip("/")
    return str(parsed.copy_with(path=path if path.endswith("/metrics") else path + "/metrics", query=None))


def fetch_metrics(client: httpx.Client, url: str, deadline_s: float) -> str:
    """GET url within deadline_s overall and at most MAX_METRICS_BYTES; httpx errors and InputError raised."""
    import time  # noqa: PLC0415

    end = time.monotonic() + deadline_s
    chunks: list[bytes] = []
    size = 0
    with client.stream("GET", url, timeout=deadline_s) as resp:
        resp.raise_for_status()
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > MAX_METRICS_BYTES:
                raise InputError(f"{url}: /metrics is over {MAX_METRICS_BYTES >> 20} MiB; not an engine's page")
            if time.monotonic() > end:
                raise httpx.ReadTimeout(f"{url}: no whole /metrics page within {deadline_s:g} s")
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def fmt_quantiles(values: Mapping[str, float | None], keys: Sequence[str] = ("p50", "p90", "p99")) -> str:
    """`12 / 30 / 95 ms` from seconds; '-' where there were no observations."""
    shown = ["-" if values.get(k) is None else f"{1000 * float(values[k] or 0):.0f}" for k in keys]
    return " / ".join(shown) + (" ms" if any(s != "-" for s in shown) else "")
