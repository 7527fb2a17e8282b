"""A seat sweep: for each seat count start the engine from its plan, verify the launch, bench, stop; decide."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from dspark.bench.decision import Decision, DecisionRule, Setting, decide
from dspark.bench.results import BenchResult
from dspark.bench.runner import BenchSpec, PassObserver, run_bench
from dspark.bench.shard import ClientFailure
from dspark.bench.stats import RequestRecord
from dspark.core.redact import is_secret_flag, redact_text, secret_argv_values, secret_env_values
from dspark.engines import engine_spec
from dspark.engines.argv import option_values
from dspark.runtime.launch import LaunchPlan, redact_argv, redact_env
from dspark.runtime.supervise import EngineFailure, EngineProcess, KvPoolLine, StopOutcome

if TYPE_CHECKING:  # a sweep plans like start; bench and report, which import this module, need no planning
    from dspark.planning.start import StartRequest


@dataclass(frozen=True)
class PlannedLaunch:
    """What the sweep starts for one seat count: the plan and the KV pool dspark predicts for it."""

    plan: LaunchPlan
    expected_pool_tokens: int | None
    base_url: str | None = None  # default: http://HOST:PORT from the plan's --host/--port


PlanBuilder = Callable[[int], PlannedLaunch]


def planned_flags(argv: Sequence[str]) -> dict[str, str | bool]:
    """The `--flag value` / `--flag=value` / bare `--flag` / `--no-flag` options of an argv, by dest name."""
    return option_values(argv)


def _same(planned: str | bool, seen: object) -> bool:
    """Whether a planned argv value and the engine's parsed value agree."""
    if isinstance(planned, bool) or isinstance(seen, bool):
        truthy = planned if isinstance(planned, bool) else planned.lower() in ("1", "true", "yes")
        return bool(seen) == truthy
    if seen is None:
        return planned.lower() in ("none", "")
    try:
        if isinstance(seen, (int, float)):
            return float(planned) == float(seen)
        if isinstance(seen, (dict, list)):
            return bool(json.loads(planned) == seen)
    except ValueError:  # json.JSONDecodeError is a ValueError
        return False
    return planned == str(seen)


def _values(argv: Sequence[str], key: str) -> list[str]:
    """Every value after the last `--flag` of dest `key` (or its `--flag=value`), up to the next option."""
    flags = {"--" + key.replace("_", "-"), "--" + key}
    start = next((i for i in range(len(argv) - 1, -1, -1) if argv[i].partition("=")[0] in flags), None)
    if start is None:
        return []
    _, eq, value = argv[start].partition("=")
    out = [value] if eq else []
    for arg in argv[start + 1:]:
        if arg.startswith("--"):
            break
        out.append(arg)
    return out


@dataclass(frozen=True)
class LaunchCheck:
    """The engine's own log against the plan: argv values and the KV pool."""

    confirmed: tuple[str, ...]
    mismatched: tuple[str, ...]
    unconfirmed: tuple[str, ...]  # planned, but absent from the engine's line (vLLM omits values at their default)
    seats_confirmed: bool
    kv_pool_tokens: int | None
    expected_pool_tokens: int | None
    max_concurrency: float | None
    problems: tuple[str, ...]


def check_launch(
    argv: Sequence[str],
    seats: int,
    engine_args: Mapping[str, object] | None,
    kv: KvPoolLine | None,
    expected_pool_tokens: int | None,
    *,
    seat_arg: str,
) -> LaunchCheck:
    """Compare the planned argv and pool with what the engine printed; every disagreement is a problem.

    seat_arg: the engine's dest name for the seat count (EngineSpec.seat_arg).
    """
    planned = planned_flags(argv)
    confirmed: list[str] = []
    mismatched: list[str] = []
    unconfirmed: list[str] = []
    problems: list[str] = []
    if engine_args is None:
        problems.append("the engine printed no argument line (vLLM `non-default args:`), so its argv is unconfirmed")
    else:
        for key, value in planned.items():
            seen = engine_args.get(key)
            if key not in engine_args:
                unconfirmed.append(key)
            elif _same(value, seen) or (isinstance(seen, list) and [str(v) for v in seen] == _values(argv, key)):
                confirmed.append(key)  # a flag of several values (vLLM's --api-key K1 K2) is read as a list
            elif is_secret_flag("--" + key):
                mismatched.append(f"{key}: planned and engine values differ (secret: not shown)")
            else:
                mismatched.append(f"{key}: planned {value!r}, engine {seen!r}")
    seats_ok = engine_args is not None and seat_arg in engine_args and _same(str(seats), engine_args[seat_arg])
    if engine_args is not None and not seats_ok:
        problems.append(f"the engine's log does not confirm {seats} seats")
    problems += [f"argv mismatch: {m}" for m in mismatched]
    pool = kv.pool_tokens if kv else None
    if kv is None:
        problems.append("the engine printed no KV pool line")
    elif expected_pool_tokens is not None and pool != expected_pool_tokens:
        problems.append(f"KV pool is {pool:,} tokens, the plan predicted {expected_pool_tokens:,}")
    return LaunchCheck(
        confirmed=tuple(confirmed),
        mismatched=tuple(mismatched),
        unconfirmed=tuple(unconfirmed),
        seats_confirmed=seats_ok,
        kv_pool_tokens=pool,
        expected_pool_tokens=expected_pool_tokens,
        max_concurrency=kv.max_concurrency if kv else None,
        problems=tuple(problems),
    )


def base_url_of(plan: LaunchPlan) -> str:
    """http://HOST:PORT the plan serves on (a wildcard host is reached on loopback)."""
    flags = planned_flags(plan.argv)
    host = flags.get("host")
    host = "127.0.0.1" if not isinstance(host, str) or host in ("", "0.0.0.0", "::") else host  # noqa: S104
    port = flags.get("port")
    port_num = int(port) if isinstance(port, str) else engine_spec(plan.engine).default_port
    return f"http://{'[' + host + ']' if ':' in host else host}:{port_num}"


@dataclass(frozen=True)
class SettingResult:
    """One seat count: how its engine started and stopped, what the bench measured, and what went wrong."""

    seats: int
    label: str
    argv: tuple[str, ...]  # secrets redacted
    env: dict[str, str]  # the plan's overlay, secrets redacted
    log_path: str | None
    startup_s: float | None
    launch: LaunchCheck | None
    bench: BenchResult | None
    stop: StopOutcome | None
    problems: tuple[str, ...]  # anything that makes this setting's numbers unfit for the decision

    @property
    def clean(self) -> bool:
        """Launched as planned, 0 errors, 0 preemptions, and the engine lived through the bench."""
        return not self.problems


@dataclass(frozen=True)
class SweepResult:
    """The whole sweep: the rule frozen before the runs, each setting, and the decision."""

    rule: DecisionRule
    rule_text: str
    seats: tuple[int, ...]
    reps: int
    started_at: str
    finished_at: str
    settings: tuple[SettingResult, ...]
    decision: Decision
    # What `dspark advise` predicted for these seats and this load before the runs (its --json object, or
    # {"error": ...}), kept beside what was measured.
    prediction: dict[str, Any] | None = None

    @property
    def clean(self) -> bool:
        """Every setting clean."""
        return all(s.clean for s in self.settings)


def bench_problems(bench: BenchResult) -> list[str]:
    """Failed requests and preemptions (or an unknown preemption count) in a bench, as problem sentences."""
    out: list[str] = []
    errors = int(bench.summary.get("errors") or 0)
    if errors:
        first = next((m for p in bench.passes for m in p.stats.error_messages), "")
        out.append(f"{errors} failed request(s): {first}")
    pre = bench.summary.get("preemptions")
    if pre is None:
        out.append("preemptions unknown: the engine's /metrics could not be read for every pass")
    elif pre:
        out.append(f"{int(pre)} preemption(s)")
    return out


class _Prefixed:
    """A PassObserver that labels passes with the setting they belong to."""

    def __init__(self, inner: PassObserver, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    def begin(self, label: str, total: int) -> None:
        self._inner.begin(f"{self._prefix} · {label}", total)

    def record(self, rec: RequestRecord) -> None:
        self._inner.record(rec)

    def end(self) -> None:
        self._inner.end()


def _redacting(say: Callable[[str], None], known: set[str]) -> Callable[[str], None]:
    return lambda message: say(redact_text(message, known))


def run_setting(
    seats: int,
    launch: PlannedLaunch,
    bench: BenchSpec,
    *,
    log_path: Path | None,
    health_timeout_s: float,
    stop_timeout_s: float,
    observer: PassObserver | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> SettingResult:
    """Start, verify, bench and stop one setting; the engine is always stopped, and failures become problems."""
    label = f"{seats} seats"
    plan = launch.plan
    known = secret_argv_values(plan.argv) | secret_env_values(plan.env_overlay)
    say = _redacting(say, known)  # the plan's secrets never reach stderr, sweep.md or sweep.json

    url = launch.base_url or base_url_of(plan)
    espec = engine_spec(plan.engine)
    engine = EngineProcess(plan, log_format=espec.log_format, log_path=log_path)
    problems: list[str] = []
    startup = check = result = stop = None
    say(f"{label}: starting {plan.engine} ({url}); log: {log_path or '-'}")
    try:
        engine.start()
        startup = engine.wait_healthy(url + "/health", health_timeout_s)
        engine.log.kv_seen.wait(5.0)  # printed before the server answers; a short grace for the reader thread
        check = check_launch(plan.argv, seats, engine.log.engine_args, engine.log.kv_pool, launch.expected_pool_tokens,
                             seat_arg=espec.seat_arg)
        problems += check.problems
        pool = f"{check.kv_pool_tokens:,}" if check.kv_pool_tokens is not None else "?"
        say(f"{label}: healthy after {startup:.1f} s; KV pool {pool} tokens; "
            + ("launch as planned" if not check.problems else "; ".join(check.problems)))
        if not check.problems:
            spec = dataclasses.replace(bench, client=dataclasses.replace(bench.client, base_url=url))
            obs = _Prefixed(observer, label) if observer is not None else None
            result = asyncio.run(run_bench(spec, obs))
            problems += bench_problems(result)
            if (rc := engine.poll()) is not None:
                problems.append(f"the engine exited with code {rc} during the bench: {engine.log.failure_context()}")
    except (EngineFailure, ClientFailure) as exc:
        problems.append(exc.message)
    except httpx.HTTPError as exc:
        tail = f"; {engine.log.failure_context()}" if engine.poll() is not None else ""
        problems.append(f"the bench could not reach the engine at {url}: {type(exc).__name__}: {exc}{tail}")
    finally:
        stop = engine.stop(stop_timeout_s)
        how = "killed (SIGKILL)" if stop.killed else "stopped (SIGTERM)"
        say(f"{label}: {how} in {stop.seconds:.1f} s" + (f"; killed stragglers {stop.stragglers}" if stop.stragglers
                                                        else ""))
    return SettingResult(
        seats=seats,
        label=label,
        argv=tuple(redact_argv(plan.argv)),
        env=redact_env(plan.env_overlay),
        log_path=str(log_path) if log_path else None,
        startup_s=startup,
        launch=check,
        bench=result,
        stop=stop,
        problems=tuple(redact_text(p, known) for p in problems),
    )


def run_sweep(
    seats: Sequence[int],
    build: PlanBuilder,
    bench: BenchSpec,
    rule: DecisionRule,
    *,
    log_dir: Path | None,
    health_timeout_s: float = 600.0,
    stop_timeout_s: float = 30.0,
    observer: PassObserver | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> SweepResult:
    """Run every seat count in order (the first is the baseline) and apply the rule fixed beforehand."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    say(f"decision rule (fixed before the runs): {rule.describe()}")
    results: list[SettingResult] = []
    for n in seats:
        launch = build(n)
        log_path = log_dir / f"engine-{n}-seats.log" if log_dir else None
        t0 = time.monotonic()
        results.append(
            run_setting(
                n, launch, bench, log_path=log_path, health_timeout_s=health_timeout_s,
                stop_timeout_s=stop_timeout_s, observer=observer, say=say,
            )
        )
        say(f"{n} seats: done in {time.monotonic() - t0:.0f} s" + ("" if results[-1].clean else " (not clean)"))
    settings = [
        Setting(label=r.label, summary=r.bench.summary if r.bench else {}, problems=r.problems) for r in results
    ]
    return SweepResult(
        rule=rule,
        rule_text=rule.describe(),
        seats=tuple(seats),
        reps=bench.reps,
        started_at=started,
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        settings=tuple(results),
        decision=decide(rule, settings),
    )


def start_plan_builder(request: StartRequest) -> PlanBuilder:
    """Seats -> the plan `dspark start` would exec with --max-num-seqs SEATS, and its predicted KV pool."""
    from dspark.planning.start import plan_start  # noqa: PLC0415 - the planning stack loads only for a sweep

    def build(seats: int) -> PlannedLaunch:
        flags = {**request.validate.flags, "max_num_seqs": seats}
        req = dataclasses.replace(request, validate=dataclasses.replace(request.validate, flags=flags))
        result = plan_start(req)
        return PlannedLaunch(plan=result.plan, expected_pool_tokens=result.report.capacity.kv_pool_tokens)

    return build


def plan_launches(seats: Sequence[int], build: PlanBuilder) -> dict[int, PlannedLaunch]:
    """Every seat count's plan, built (validated, argv checked) before any engine starts: a bad flag fails in
    seconds, not after the first engine's bench."""
    return {n: build(n) for n in seats}
