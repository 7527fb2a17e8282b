"""The workload replayed through the installed engine's own scheduler, and what each pass would measure.

The engine side (dspark_inside.<engine>.replay_scheduler) runs in the engine's interpreter; this
module builds its request from the plan, the workload and the advisor's step cost, runs it, and turns each
pass's per-request times into the figures a bench reports (TTFT percentiles, TPOT, decode rates, wall time).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspark.advise.advice import Prediction
from dspark.advise.model import StepCosts, StepShape, table
from dspark.advise.workload import Arrivals, WorkloadRequest
from dspark.bench.stats import percentile
from dspark.core.errors import DsparkError, InputError
from dspark.engines.inside import InsideFailure, run_inside
from dspark.engines.replay import scheduler_replay
from dspark.perf.step import step_seconds

if TYPE_CHECKING:
    from dspark.engines.spec import SchedulerReplay


class ReplayError(Exception):
    """The engine's scheduler could not be run on this plan or workload; the message says why."""


class ReplayFailedError(ReplayError):
    """The installed engine's scheduler was run and gave no replay; release: its version, when it said one."""

    def __init__(self, message: str, release: str | None = None) -> None:
        super().__init__(message)
        self.release = release


class EngineReplayError(DsparkError):
    """A release dspark models could not replay the workload (exit 3: dspark's bug, or the engine misbehaved)."""


def failed_release_error(exc: ReplayFailedError, engine: str, modelled: Sequence[str]) -> DsparkError:
    """What a replay the installed release could not run is to the user: an error naming the release.

    A release dspark models (modelled) is meant to replay, and an engine that gave no answer at all behaved
    unexpectedly: exit 3. Any other release is the input (exit 2): the hint names the releases that replay,
    and dspark's own model.
    """
    name = f"{engine} {exc.release}" if exc.release else f"{engine} (its release unread)"
    message = f"{name}'s scheduler could not replay the workload: {exc}"
    if exc.release is not None and exc.release not in modelled:
        return InputError(message, hint=f"install a release dspark models ({', '.join(modelled)}), or give "
                                        "--simulator dspark for dspark's own batching model")
    return EngineReplayError(message, hint=f"{engine} {exc.release} is a release dspark models: please report this"
                             if exc.release else "run again with --debug for the engine's last lines")


@dataclass(frozen=True)
class PassPrediction:
    """What the engine's scheduler did with one pass of the workload, as a bench of it would report it."""

    requests: int
    steps: int
    prefix_cache_queries: int  # prompt tokens looked up, as vllm:prefix_cache_queries counts them
    prefix_cache_hits: int
    prefix_cache_hit_rate: float | None  # hits / queries (None: no queries)
    preemptions: int
    kv_peak_fraction: float  # the KV pool used after the busiest step (the engine's own usage figure)
    kv_mean_fraction: float  # over the pass's virtual time
    running_peak: int
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    tpot_mean_ms: float
    per_stream_decode_tps: float
    aggregate_decode_tps: float
    wall_time_s: float
    prefill_share: float


@dataclass(frozen=True)
class SeatReplay:
    """The cold pass and, with --warm, the re-sent one at one seat count."""

    seats: int
    cold: PassPrediction
    warm: PassPrediction | None


@dataclass(frozen=True)
class ReplayResult:
    """Every seat count's passes, which scheduler produced them, and how long it took."""

    simulator: str
    engine_version: str | None
    seats: tuple[SeatReplay, ...]
    seconds: float
    setup_seconds: float
    kv: Mapping[str, Any]
    kv_usage_metric: str = "BlockPool.get_usage (the engine's scheduler)"
    notes: tuple[str, ...] = ()  # the engine's replay module on what it ran and what it stood in for

    def at(self, seats: int) -> SeatReplay | None:
        """The replay at `seats`, if it was run."""
        return next((s for s in self.seats if s.seats == seats), None)


def engine_part(engine: str, witness_request: Mapping[str, Any] | None, details: Mapping[str, Any],
                max_model_len: int, mtp_layers: int, seat_details: Mapping[int, Mapping[str, Any]] | None = None
                ) -> tuple[dict[str, Any], str, SchedulerReplay]:
    """The replay's plan and engine settings for `engine`, with the tool that runs them; ReplayError: why not.

    seat_details: validate's capacity details at each seat count, for an engine whose replay module sizes each
    seat count's pool from them (its replay_seat_part); the others plan each seat count themselves.
    """
    module = scheduler_replay(engine)
    if module is None:
        raise ReplayError(f"dspark cannot run {engine}'s scheduler without a model yet")
    try:
        part: dict[str, Any] = module.replay_engine_part(witness_request, details, max_model_len, mtp_layers)
        seat_part = module.replay_seat_part
        if seat_part is not None and seat_details:
            part["plans"] = {str(n): seat_part(d) for n, d in seat_details.items()}
    except ValueError as exc:
        raise ReplayError(str(exc)) from None
    return part, module.REPLAY_TOOL, module


def step_cost(costs: StepCosts, shape: StepShape, typical_prompt: int = 2048, budget: int = 8192) -> dict[str, Any]:
    """The step-time model's table (dspark.perf.step.cost_table), for the replay to cost each step with.

    The engine side counts a step's prompt share as prompt tokens × prefill_per_token_s: where no measured prompt
    cost is given, that is the model's marginal cost per token of a chunk of the typical prompt (its compute).
    """
    cost = dict(table(costs, shape))
    if not cost["prefill_observed"]:
        chunk = max(1, min(typical_prompt, budget))
        cost["prefill_per_token_s"] = step_seconds(cost, 0, 0.0, chunk, chunk * chunk / 2) / chunk
    return cost


def replay_request(part: Mapping[str, Any], seats: Sequence[int], requests: Sequence[WorkloadRequest],
                   arrivals: Arrivals, *, warm: bool, pattern: Sequence[int], cost: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """The JSON the engine-side replay reads."""
    return {
        **part, "seats": list(seats), "warm": warm, "accepted_pattern": list(pattern), "step_cost": dict(cost),
        "requests": [{"prompt": list(r.prompt), "max_tokens": r.max_tokens} for r in requests],
        "arrivals": arrivals.to_json(),
    }


def run_replay(python: str, tool: str, request: Mapping[str, Any], timeout: float = 600.0) -> dict[str, Any]:
    """Run the replay in the engine's interpreter and return its answer; ReplayError when there is none."""
    return run_replays(python, tool, [request], timeout)[0]


def run_replays(python: str, tool: str, requests: Sequence[Mapping[str, Any]], timeout: float = 600.0
                ) -> list[dict[str, Any]]:
    """Several replays from one engine import, answered in order; ReplayError when one has no answer."""
    try:
        answers: list[dict[str, Any]] = run_inside(python, tool, list(requests), timeout)
    except InsideFailure as failure:
        if failure.why == "no_answer":
            raise ReplayFailedError(f"no answer from the engine's scheduler in {python} (exit "
                                    f"{failure.returncode}): {failure.last(3)}") from None
        if failure.why == "not_run":  # the interpreter does not start: as if no engine were found
            raise ReplayError(f"cannot start {python}: {failure.detail}") from None
        raise ReplayFailedError(f"the engine's scheduler in {python} ran past its time: {failure.detail}") from None
    for answer in answers:
        if not answer.get("ok"):
            version, error = answer.get("engine_version"), str(answer.get("error"))
            if not version and error.startswith("ModuleNotFoundError"):
                # The engine did not import there (its version unread): not installed, as if never found.
                raise ReplayError(f"the engine does not import in {python}: {error}")
            raise ReplayFailedError(f"{error} (in {python})", str(version) if version else None)
    return answers


def pass_prediction(p: Mapping[str, Any]) -> PassPrediction:
    """A pass's figures from the replay's per-request times (virtual seconds) and the engine's counters."""
    arrival, first, finish, out = p["arrival_s"], p["first_token_s"], p["finish_s"], p["output_tokens"]
    # The client's TTFT: from its send to the first token's arrival, through the API server (first_token_seen_s),
    # or a hop after the engine samples it (an answer without it).
    hop = float(p.get("first_token_hop_s") or 0.0)
    seen = p.get("first_token_seen_s") or [f + hop for f in first]
    ttft = [s - a for a, s in zip(arrival, seen, strict=True) if math.isfinite(s - a)]
    streams = [(fin - f, n) for f, fin, n in zip(first, finish, out, strict=True) if n > 1 and fin > f]
    span = math.fsum(s for s, _ in streams)
    wall = float(p["wall_time_s"])
    queries, hits = int(p["prefix_cache_queries"]), int(p["prefix_cache_hits"])
    return PassPrediction(
        requests=int(p["requests"]), steps=int(p["steps"]), prefix_cache_queries=queries, prefix_cache_hits=hits,
        prefix_cache_hit_rate=hits / queries if queries else None, preemptions=int(p["preemptions"]),
        kv_peak_fraction=float(p["kv_peak_fraction"]), kv_mean_fraction=float(p["kv_mean_fraction"]),
        running_peak=int(p["running_peak"]),
        ttft_mean_s=statistics.fmean(ttft) if ttft else math.nan, ttft_p50_s=percentile(ttft, 50),
        ttft_p90_s=percentile(ttft, 90), ttft_p99_s=percentile(ttft, 99),
        tpot_mean_ms=statistics.fmean(s / (n - 1) for s, n in streams) * 1e3 if streams else math.nan,
        per_stream_decode_tps=sum(n - 1 for _, n in streams) / span if span > 0 else math.nan,
        aggregate_decode_tps=sum(out) / wall if wall > 0 else math.nan, wall_time_s=wall,
        prefill_share=float(p["prefill_time_s"]) / wall if wall > 0 else 0.0,
    )


def replay_result(answer: Mapping[str, Any], simulator: str, module: SchedulerReplay | None = None) -> ReplayResult:
    """The parsed answer of the engine-side replay (module: the engine's replay module, for its own wording)."""
    seats = tuple(SeatReplay(seats=int(r["seats"]), cold=pass_prediction(r["cold"]),
                             warm=pass_prediction(r["warm"]) if r.get("warm") else None)
                  for r in answer["results"])
    extra: dict[str, Any] = {}
    if module is not None:
        extra["kv_usage_metric"] = str(module.KV_USAGE_METRIC)
        extra["notes"] = tuple(module.replay_notes(answer))
    return ReplayResult(simulator=simulator, engine_version=answer.get("engine_version"), seats=seats,
                        seconds=float(answer.get("seconds", 0.0)),
                        setup_seconds=float(answer.get("setup_seconds", 0.0)), kv=answer.get("kv") or {}, **extra)


def simulate_with_engine(python: str, engine: str, witness_request: Mapping[str, Any] | None,
                         details: Mapping[str, Any], max_model_len: int, mtp_layers: int, seats: Sequence[int],
                         requests: Sequence[WorkloadRequest], arrivals: Arrivals, *, warm: bool,
                         pattern: Sequence[int], cost: Mapping[str, Any], timeout: float = 600.0,
                         seat_details: Mapping[int, Mapping[str, Any]] | None = None) -> ReplayResult:
    """Replay the workload at every seat count through the engine's scheduler in its interpreter."""
    if not requests:
        raise InputError("the workload has no requests")
    part, tool, module = engine_part(engine, witness_request, details, max_model_len, mtp_layers, seat_details)
    request = replay_request(part, seats, requests, arrivals, warm=warm, pattern=pattern, cost=cost)
    answer = run_replay(python, tool, request, timeout)
    return replay_result(answer, module.simulator_name(answer.get("engine_version")), module)


_PASS_KEYS = ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate", "preemptions", "kv_peak_fraction",
              "kv_mean_fraction", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_ms",
              "per_stream_decode_tps", "aggregate_decode_tps", "wall_time_s", "prefill_share", "running_peak")


def pass_json(p: PassPrediction) -> dict[str, Any]:
    """A pass's figures in predictions[]' names (NaN, a figure with nothing to measure, as None)."""
    out: dict[str, Any] = {}
    for key in _PASS_KEYS:
        value = getattr(p, key)
        out[key] = None if isinstance(value, float) and not math.isfinite(value) else value
    return out


def with_replay(prediction: Prediction, seat: SeatReplay, simulator: str,
                kv_usage_metric: str = "BlockPool.get_usage (the engine's scheduler)") -> Prediction:
    """The model's prediction with what the engine's scheduler did in its place: the figures it produced
    (prefix cache, preemptions, KV use, queueing and the times on the advisor's step cost), the warm pass."""
    c = seat.cold

    def finite(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return dataclasses.replace(
        prediction, simulator=simulator, aggregate_decode_tps=c.aggregate_decode_tps,
        per_stream_decode_tps=c.per_stream_decode_tps, ttft_s=c.ttft_mean_s, wall_time_s=c.wall_time_s,
        kv_peak_fraction=c.kv_peak_fraction, kv_usage_metric=kv_usage_metric,
        prefill_share=c.prefill_share, prefix_cache_queries=c.prefix_cache_queries,
        prefix_cache_hits=c.prefix_cache_hits, prefix_cache_hit_rate=c.prefix_cache_hit_rate,
        preemptions=c.preemptions, kv_mean_fraction=c.kv_mean_fraction, ttft_p50_s=finite(c.ttft_p50_s),
        ttft_p90_s=finite(c.ttft_p90_s), ttft_p99_s=finite(c.ttft_p99_s), tpot_mean_ms=finite(c.tpot_mean_ms),
        warm=pass_json(seat.warm) if seat.warm is not None else None, queue_mean_s=None, prefill_mean_s=None,
    )
