"""One bench run against a live server: repetitions, an optional warm re-run, /metrics before, during and after."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

import httpx

from dspark import __version__
from dspark.bench.client import ClientConfig, auth_headers, first_model, get_bounded, make_client
from dspark.bench.interrupt import SignalStop
from dspark.bench.metrics import FEW_SAMPLES, EngineSnapshot, MetricsSampler, Sample, engine_delta, scrape
from dspark.bench.prompts import Prompt
from dspark.bench.results import BenchResult, PassResult, mean_distribution, summarize_reps
from dspark.bench.shard import run_pass
from dspark.bench.stats import RequestRecord, summarize

# After the last response the engine may not have logged its final step yet: poll briefly until it settles.
_SETTLE_POLLS = 12
_SETTLE_INTERVAL_S = 0.25


class PassObserver(Protocol):
    """Receives progress: a pass begins, each request ends, the pass ends."""

    def begin(self, label: str, total: int) -> None:
        """A pass of `total` requests starts."""

    def record(self, rec: RequestRecord) -> None:
        """One request finished (or failed)."""

    def end(self) -> None:
        """The pass finished."""


@dataclass(frozen=True)
class BenchSpec:
    """What to run: the client settings, prompts for each repetition, and how to read /metrics."""

    client: ClientConfig
    prompts_for_rep: Callable[[int], Sequence[Prompt]]  # rep index from 0 -> that rep's prompts
    prompt_source: str
    reps: int = 1
    warm_rerun: bool = False
    metrics_url: str | None = None  # default: base_url + "/metrics"
    metrics_authorization: str | None = None  # --metrics-url's own credentials (default: the server's)
    sample_interval_s: float = 5.0  # the longest gap between samples (they start at 0.2 s: MetricsSampler)
    read_metrics: bool = True
    schedule_for_rep: Callable[[int], Sequence[float]] | None = None  # open loop: arrival times per rep
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # argv, load mode: recorded as given
    seats: int | None = None  # the server's seats as the user said them (--seats); None: not given, never guessed
    slos_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)  # --goodput, by vLLM's names


async def _scrape_or_error(client: httpx.AsyncClient, url: str) -> tuple[EngineSnapshot | None, str | None]:
    try:
        return await scrape(client, url), None
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:300]


async def _settled(client: httpx.AsyncClient, url: str, before: EngineSnapshot, tokens: int) -> EngineSnapshot | None:
    """The first scrape after which no request runs and the engine counted at least the tokens the client got."""
    snap: EngineSnapshot | None = None
    for _ in range(_SETTLE_POLLS):
        snap, _err = await _scrape_or_error(client, url)
        if snap is not None:
            gen = None
            if snap.generation_tokens is not None and before.generation_tokens is not None:
                gen = snap.generation_tokens - before.generation_tokens
            if (snap.running in (None, 0)) and (gen is None or gen >= tokens):
                return snap
        await asyncio.sleep(_SETTLE_INTERVAL_S)
    return snap


async def _one_pass(
    mhttp: httpx.AsyncClient,
    spec: BenchSpec,
    cfg: ClientConfig,
    *,
    label: str,
    prompts: Sequence[Prompt],
    observer: PassObserver | None,
    schedule: Sequence[float] | None = None,
) -> PassResult:
    murl = spec.metrics_url or cfg.base_url + "/metrics"
    before, err = (await _scrape_or_error(mhttp, murl)) if spec.read_metrics else (None, "not read")
    sampler = MetricsSampler(mhttp, murl, spec.sample_interval_s) if before is not None else None
    if observer is not None:
        observer.begin(label, len(prompts))

    def started(t0: float) -> None:
        if sampler is not None:
            sampler.start(t0)

    try:
        records, wall = await run_pass(cfg, prompts, schedule=schedule, on_start=started,
                                       on_record=observer.record if observer is not None else None)
    finally:
        samples = await sampler.stop() if sampler is not None else []
        if before is not None:
            samples.insert(0, Sample(t=0.0, running=before.running, waiting=before.waiting, kv_usage=before.kv_usage))
        if observer is not None:
            observer.end()
    stats = summarize(records, wall, spec.slos_ms)
    engine = None
    warning = None
    if before is not None:
        after = await _settled(mhttp, murl, before, stats.output_tokens)
        if after is None:
            err = "the engine's /metrics stopped answering during the pass"
        else:
            engine = engine_delta(before, after, samples)
            during = len(samples) - 1  # the t=0 point is the scrape before the pass
            if during < FEW_SAMPLES:
                warning = (f"its running and KV peaks rest on {during} /metrics sample(s) over {wall:.1f} s "
                           f"(fewer than {FEW_SAMPLES}): a longer pass (more --requests) samples them better")
    return PassResult(label=label, stats=stats, engine=engine, metrics_error=None if engine else err,
                      metrics_warning=warning)


async def server_identity(client: httpx.AsyncClient, base_url: str) -> dict[str, str | None]:
    """The engine's name (/v1/models `owned_by`) and version (/version), None where the server does not say."""
    out: dict[str, str | None] = {"engine": None, "engine_version": None}

    def text(value: object) -> str | None:
        return str(value)[:200] if isinstance(value, (str, int, float)) and str(value).isprintable() and value \
            else None

    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError, AttributeError,
                             RecursionError):
        status, body = await get_bounded(client, base_url + "/v1/models", limit=1 << 20)
        data = json.loads(body).get("data") or [] if status == 200 else []
        owner = data[0].get("owned_by") if data else None
        out["engine"] = text(owner)
    with contextlib.suppress(httpx.HTTPError, ValueError, TypeError, AttributeError, RecursionError):
        status, body = await get_bounded(client, base_url + "/version", limit=1 << 20)
        if status == 200:
            out["engine_version"] = text(json.loads(body).get("version"))
    return out


async def run_bench(spec: BenchSpec, observer: PassObserver | None = None) -> BenchResult:
    """Run spec.reps passes (and the warm re-run of the last rep's prompts); failures are recorded, not raised.

    SIGINT or SIGTERM (in the main thread) ends the run early: the passes that finished are returned, the
    result marked partial with the signal and where it struck.
    """
    cfg = spec.client
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    reps: list[PassResult] = []
    warm: PassResult | None = None
    last: Sequence[Prompt] = ()
    partial: str | None = None
    identity: dict[str, str | None] = {"engine": None, "engine_version": None}
    where = "before the first pass"
    with SignalStop() as stop:
        try:
            mheaders = ({"Authorization": spec.metrics_authorization} if spec.metrics_authorization
                        else auth_headers(cfg))
            async with httpx.AsyncClient(timeout=10.0, headers=mheaders) as mhttp:
                if not cfg.model:
                    async with make_client(cfg, connections=1) as http:
                        cfg = dataclasses.replace(cfg, model=await first_model(http, cfg.base_url))
                identity = await server_identity(mhttp, cfg.base_url)
                last_schedule: Sequence[float] | None = None
                for rep in range(spec.reps):
                    last = spec.prompts_for_rep(rep)
                    last_schedule = spec.schedule_for_rep(rep) if spec.schedule_for_rep is not None else None
                    label = f"rep {rep + 1}"
                    where = f"during {label}"
                    reps.append(await _one_pass(mhttp, spec, cfg, label=label, prompts=last, observer=observer,
                                                schedule=last_schedule))
                if spec.warm_rerun:
                    where = "during the warm re-run"
                    warm = await _one_pass(mhttp, spec, cfg, label="warm re-run", prompts=last,
                                           observer=observer, schedule=last_schedule)
        except asyncio.CancelledError:
            if stop.signame is None:
                raise
            uncancel = getattr(asyncio.current_task(), "uncancel", None)  # Python 3.11+: the cancel was handled
            if uncancel is not None:
                uncancel()
            partial = (f"interrupted by {stop.signame} {where}: {len(reps)} of {spec.reps} rep(s) measured"
                       + ("" if not spec.warm_rerun or warm is not None else ", no warm re-run")
                       + "; an interrupted pass is not counted")
    stats = [p.stats for p in reps]
    metadata = {"dspark_version": __version__, **identity, "started_at": started, **spec.metadata}
    summary = summarize_reps(reps, warm)
    return BenchResult(
        url=cfg.base_url,
        model=cfg.model,
        seats=spec.seats,
        endpoint=cfg.endpoint,
        concurrency=cfg.concurrency,
        requests=len(last) if last else len(spec.prompts_for_rep(0)),
        max_tokens=cfg.max_tokens,
        ignore_eos=cfg.ignore_eos,
        prompt_source=spec.prompt_source,
        reps=tuple(reps),
        warm=warm,
        summary=summary,
        metadata=metadata,
        tpot_ms=mean_distribution(stats, "tpot_ms"),
        itl_ms=mean_distribution(stats, "itl_ms"),
        e2e_ms=mean_distribution(stats, "e2e_ms"),
        ttft_ms=mean_distribution(stats, "ttft_ms"),
        request_throughput=summary.get("request_throughput"),
        total_token_throughput=summary.get("total_token_throughput"),
        output_throughput=summary.get("aggregate_decode_tps"),
        partial=partial is not None,
        partial_reason=partial,
        hints=tuple(_hints(spec, reps)),
        goodput={"slos_ms": dict(spec.slos_ms), "request_goodput": summary.get("request_goodput"),
                 "fraction": summary.get("goodput_fraction")} if spec.slos_ms else None,
    )


# A first pass of fresh synthetic prompts that hits the prefix cache this much found it warm from an earlier run.
WARM_CACHE_HIT_RATE = 0.1


def _hints(spec: BenchSpec, reps: Sequence[PassResult]) -> list[str]:
    """What the figures suggest: a first rep of synthetic prompts already in the server's prefix cache."""
    first = reps[0].engine if reps else None
    seed = spec.metadata.get("seed")
    if first is None or first.prefix_hit_rate is None or not spec.metadata.get("synthetic"):
        return []
    if first.prefix_hit_rate < WARM_CACHE_HIT_RATE:
        return []
    return [f"rep 1 hit the prefix cache at {first.prefix_hit_rate:.0%}: the server has seen these synthetic "
            f"prompts (seed {seed}) before, from an earlier bench; pass another --seed (e.g. --seed "
            f"{int(seed or 0) + 1}) for prompts it has not cached, or restart the server"]
