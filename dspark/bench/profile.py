"""`dspark profile`: a short, bounded set of benches against a live engine that measures its step costs; the JSON
`dspark advise --calibrate` fits the step-time model to (dspark.advise.calibrate reads it).

The plan: decode batches of 1, 4, 16 and 64 streams with short prompts (the step time at each batch size), and a
batch of 1 and 4 with long prompts (the prompt's compute), a few output tokens each, one wave per point; then two
closed-loop benches in the regime a deployment runs in (32 and 128 streams of 1,024-token prompts, two requests a
stream, 128 out: prompts landing in decode steps, the GPU at its sustained clock). What `advise --calibrate` reads
of it (dspark.advise.calibrate.profile_points): every point's decode step (the median inter-token gap: at 1-64
rows and two contexts it pins the GPU's fixed cost per step and, for routed experts, the bandwidth and how many
experts a few rows read) and the closed loops as the benches they are (their prompt figures pin the GEMM rate at
the sustained clock); not a wave's aggregate or prefill figures (its intake race) nor a lone prompt's prefill (a
burst above the sustained clock). Some 15-20 s on a datacenter GPU, a minute or two on smaller ones. Around each
point /metrics is read twice; the engine's own histograms
(vLLM: vllm:inter_token_latency_seconds, vllm:request_prefill_time_seconds, vllm:request_decode_time_seconds,
vllm:iteration_tokens_total; the names are each engine's EngineSpec.metric_names) give the step figures, exact as
sum ÷ count over the point. Where an engine exports none of them, the client's own inter-token latency and time
to first token stand in, and the point says so (`source`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dspark.bench.load import LoadOptions, bench_once, bench_spec
from dspark.bench.results import BenchResult, jsonable
from dspark.engines import ENGINE_NAMES, engine_spec

PROFILE_KIND = "dspark-profile"
HISTOGRAMS = ("itl", "prefill_time", "decode_time", "iteration_tokens")


@dataclass(frozen=True)
class ProfilePoint:
    """One bench of the profile: `batch` streams, each a prompt of input_len tokens and output_len out; `requests`
    in all (0: one wave, a request a stream)."""

    batch: int
    input_len: int
    output_len: int
    requests: int = 0

    @property
    def n(self) -> int:
        """Requests sent."""
        return self.requests or self.batch


SHORT_PROMPT, LONG_PROMPT, OUTPUT_TOKENS = 256, 2048, 48
PLAN: tuple[ProfilePoint, ...] = (
    *(ProfilePoint(b, SHORT_PROMPT, OUTPUT_TOKENS) for b in (1, 4, 16, 64)),
    *(ProfilePoint(b, LONG_PROMPT, OUTPUT_TOKENS) for b in (1, 4)),
    *(ProfilePoint(b, 1024, 128, requests=2 * b) for b in (32, 128)),
)


def _histogram_names() -> dict[str, tuple[str, ...]]:
    """Concept -> the histogram base names that carry it, one per engine that exports it."""
    specs = [engine_spec(name) for name in ENGINE_NAMES]
    return {c: tuple(s.metric_names[c] for s in specs if c in s.metric_names) for c in HISTOGRAMS}


def histograms(text: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each step-time histogram in one /metrics scrape (label sets summed); absent ones left out."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith(("_sum", "_count")):
                sums[s.name] = sums.get(s.name, 0.0) + float(s.value)
    out: dict[str, tuple[float, float]] = {}
    for concept, bases in _histogram_names().items():
        for base in bases:
            if base + "_count" in sums:
                out[concept] = (sums.get(base + "_sum", 0.0), sums[base + "_count"])
                break
    return out


def histogram_means(before: str, after: str) -> dict[str, float]:
    """Mean of each histogram's observations between two scrapes (sum ÷ count of the differences)."""
    b, a = histograms(before), histograms(after)
    out: dict[str, float] = {}
    for concept, (total, count) in a.items():
        s0, c0 = b.get(concept, (0.0, 0.0))
        if count - c0 > 0:
            out[concept] = (total - s0) / (count - c0)
    return out


def point_record(point: ProfilePoint, bench: Mapping[str, Any], means: Mapping[str, float]) -> dict[str, Any]:
    """One point's figures: the engine's histogram means where present, else the client's (said in `source`)."""
    summary = bench.get("summary") or {}
    itl = bench.get("itl_ms") or {}
    record: dict[str, Any] = {"batch": point.batch, "input_len": point.input_len, "output_len": point.output_len,
                              "requests": point.n, "summary": dict(summary)}
    for dist in ("itl_ms", "ttft_ms", "tpot_ms"):  # the client's distributions: the median gap is a pure decode step
        if isinstance(bench.get(dist), dict):
            record[dist] = dict(bench[dist])
    if "itl" in means:
        record["itl_mean_s"], record["source"] = means["itl"], "engine /metrics"
    elif isinstance(itl.get("mean"), (int, float)):
        record["itl_mean_s"], record["source"] = float(itl["mean"]) / 1e3, "client (no engine histogram)"
    if "prefill_time" in means:
        record["prefill_mean_s"] = means["prefill_time"]
    elif point.batch == 1 and isinstance(summary.get("ttft_mean_s"), (int, float)):
        record["prefill_mean_s"] = float(summary["ttft_mean_s"])  # one stream: the TTFT is its prefill
    for concept, key in (("decode_time", "decode_mean_s"), ("iteration_tokens", "iteration_tokens_mean")):
        if concept in means:
            record[key] = means[concept]
    return record


async def _metrics(url: str) -> str:
    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.get(url)
        return resp.text if resp.status_code == 200 else ""


def run_profile(url: str, *, model: str | None = None, plan: Sequence[ProfilePoint] = PLAN,
                metrics_url: str | None = None, vocab_size: int = 500, seed: int = 0) -> dict[str, Any]:
    """Run the plan against the server at `url`; the profile JSON (each point's bench summary and step figures)."""
    base = url.rstrip("/").removesuffix("/v1")
    murl = metrics_url or base + "/metrics"
    points: list[dict[str, Any]] = []
    identity: dict[str, Any] = {}
    for i, point in enumerate(plan):
        load = LoadOptions(model=model, input_len=point.input_len, requests=point.n, concurrency=point.batch,
                           max_tokens=point.output_len, vocab_size=vocab_size, seed=seed + 7919 * i,
                           metrics_url=murl)
        try:
            before = asyncio.run(_metrics(murl))
        except httpx.HTTPError:
            before = ""
        result: BenchResult = bench_once(bench_spec(load, base, seats=None))
        try:
            after = asyncio.run(_metrics(murl))
        except httpx.HTTPError:
            after = ""
        bench = jsonable(result)
        model = model or result.model
        identity = {"model": result.model, "metadata": bench.get("metadata") or {}}
        points.append(point_record(point, bench, histogram_means(before, after)))
    engine = (identity.get("metadata") or {}).get("engine")
    return {"kind": PROFILE_KIND, "url": base, "model": identity.get("model"), "engine": engine,
            "metadata": identity.get("metadata") or {}, "points": points}


def profile_points_ok(profile: Mapping[str, Any]) -> bool:
    """Whether a JSON object is a profile with at least one step figure."""
    points = profile.get("points")
    return (profile.get("kind") == PROFILE_KIND and isinstance(points, list)
            and any(isinstance(p, dict) and math.isfinite(float(p.get("itl_mean_s") or math.nan)) for p in points))
