"""A seat sweep: for each seat count start the engine from its plan, verify the launch, bench, stop; decide."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import psutil

from dspark.bench.decision import Decision, DecisionRule, Setting, decide
from dspark.bench.interrupt import Interrupted, raising_on_signals
from dspark.bench.results import BenchResult
from dspark.bench.runner import BenchSpec, PassObserver, run_bench
from dspark.bench.shard import ClientFailure
from dspark.bench.stats import RequestRecord
from dspark.core.errors import InputError
from dspark.core.redact import is_secret_flag, redact_text, secret_argv_values, secret_env_values
from dspark.engines import engine_spec
from dspark.engines.argv import option_values
from dspark.runtime.launch import LaunchPlan, redact_argv, redact_env
from dspark.runtime.supervise import EngineFailure, EngineLog, EngineProcess, KvPoolLine, StopOutcome

if TYPE_CHECKING:  # a sweep plans like start; bench and report, which import this module, need no planning
    from dspark.planning.start import StartRequest


@dataclass(frozen=True)
class PlannedLaunch:
    """What the sweep starts for one seat count: the plan and the KV pool dspark predicts for it."""

    plan: LaunchPlan
    expected_pool_tokens: int | None
    base_url: str | None = None  # default: http://HOST:PORT from the plan's --host/--port
    # Records the boot's KV pool and memory figures (dspark.planning.boot_records.BootRecorder); its lines are said.
    on_boot: Callable[[EngineLog], Sequence[str]] | None = None


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
    # A signal ended the sweep early: `settings` are those that ran, and partial_reason says why.
    partial: bool = False
    partial_reason: str | None = None

    @property
    def clean(self) -> bool:
        """Every setting clean, and every seat count run."""
        return not self.partial and all(s.clean for s in self.settings)


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


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)


def port_answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts connections at the URL's host and port already."""
    host, port = _host_port(url)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _listeners(port: int) -> set[int | None] | None:
    """Pids listening on TCP `port` (None for a socket whose owner this user cannot see); None when the system
    does not tell (psutil needs privileges for it on some systems)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, psutil.Error, OSError):
        return None
    return {c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port}


def _family(pid: int) -> set[int]:
    """The engine's process and everything under it (its API server, workers)."""
    try:
        root = psutil.Process(pid)
        return {pid, *(p.pid for p in root.children(recursive=True))}
    except psutil.Error:
        return {pid}


def responder_problems(url: str, engine_pid: int, served_names: Sequence[str] = ()) -> list[str]:
    """Why the server answering `url` may not be the engine this sweep started: its listening socket belongs to
    another process, or its /v1/models does not list the served-model name the plan set. Empty: it is ours."""
    port = _host_port(url)[1]
    listeners = _listeners(port)
    if listeners is not None:
        ours = _family(engine_pid)
        if not listeners & ours:
            who = ", ".join("another user's process" if p is None else f"pid {p}" for p in sorted(
                listeners, key=lambda p: -1 if p is None else p)) or "no visible process"
            return [f"the server answering {url} is not the engine this sweep started (pid {engine_pid}): port "
                    f"{port} is held by {who}; stop it, or give the sweep another --port"]
    if served_names:
        try:
            with httpx.Client(timeout=5.0) as client:
                data = client.get(url + "/v1/models").json().get("data") or []
            ids = {str(m.get("id")) for m in data if isinstance(m, dict)}
        except (httpx.HTTPError, ValueError, AttributeError, TypeError, RecursionError):
            ids = set()
        if not ids & set(served_names):
            return [f"the server answering {url} does not serve {' / '.join(served_names)} (its /v1/models lists "
                    f"{', '.join(sorted(ids)) or 'nothing'}): not the engine this sweep started"]
    return []


def _served_names(argv: Sequence[str]) -> tuple[str, ...]:
    """The served-model name(s) the plan sets, when it sets one."""
    out: list[str] = []
    take = False
    for arg in argv:
        if take and not arg.startswith("-"):
            out.append(arg)
            continue
        take = False
        name, eq, value = arg.partition("=")
        if name == "--served-model-name":
            if eq:
                out.append(value)
            else:
                take = True
    return tuple(out)


def _check_responder(engine: EngineProcess, url: str) -> None:
    """EngineFailure unless the server that answered `url` is the engine started (alive, its socket, its name)."""
    if (rc := engine.poll()) is not None:
        raise EngineFailure(f"the engine exited with code {rc} although {url} answers: another server holds the "
                            f"port; {engine.log.failure_context()}")
    if foreign := responder_problems(url, engine.pid, _served_names(engine.plan.argv)):
        raise EngineFailure(foreign[0])


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
    if port_answers(url):
        problem = (f"something already answers at {url} before the engine started (another server, or another "
                   "sweep's engine on this port): it would be benchmarked as this setting; stop it, or give the "
                   "sweep another --port")
        say(f"{label}: {problem}")
        return SettingResult(seats=seats, label=label, argv=tuple(redact_argv(plan.argv)),
                             env=redact_env(plan.env_overlay), log_path=str(log_path) if log_path else None,
                             startup_s=None, launch=None, bench=None, stop=None,
                             problems=(redact_text(problem, known),))
    say(f"{label}: starting {plan.engine} ({url}); log: {log_path or '-'}")
    try:
        engine.start()
        startup = engine.wait_healthy(url + "/health", health_timeout_s)
        _check_responder(engine, url)
        engine.log.kv_seen.wait(5.0)  # printed before the server answers; a short grace for the reader thread
        check = check_launch(plan.argv, seats, engine.log.engine_args, engine.log.kv_pool, launch.expected_pool_tokens,
                             seat_arg=espec.seat_arg)
        problems += check.problems
        for line in launch.on_boot(engine.log) if launch.on_boot is not None else ():
            say(f"{label}: {line.removeprefix('dspark: ')}")
        pool = f"{check.kv_pool_tokens:,}" if check.kv_pool_tokens is not None else "?"
        say(f"{label}: healthy after {startup:.1f} s; KV pool {pool} tokens; "
            + ("launch as planned" if not check.problems else "; ".join(check.problems)))
        if not check.problems:
            spec = dataclasses.replace(bench, client=dataclasses.replace(bench.client, base_url=url))
            obs = _Prefixed(observer, label) if observer is not None else None
            result = asyncio.run(run_bench(spec, obs))
            if result.partial_reason:
                problems.append(result.partial_reason)
            problems += bench_problems(result)
            if (rc := engine.poll()) is not None:
                problems.append(f"the engine exited with code {rc} during the bench: {engine.log.failure_context()}")
    except (EngineFailure, ClientFailure, InputError) as exc:
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
    partial: str | None = None
    current = seats[0] if seats else 0
    try:
        with raising_on_signals():
            for n in seats:
                current = n
                launch = build(n)
                log_path = log_dir / f"engine-{n}-seats.log" if log_dir else None
                t0 = time.monotonic()
                results.append(
                    run_setting(
                        n, launch, bench, log_path=log_path, health_timeout_s=health_timeout_s,
                        stop_timeout_s=stop_timeout_s, observer=observer, say=say,
                    )
                )
                say(f"{n} seats: done in {time.monotonic() - t0:.0f} s"
                    + ("" if results[-1].clean else " (not clean)"))
                if results[-1].bench is not None and results[-1].bench.partial:
                    partial = (f"interrupted during {n} seats ({results[-1].bench.partial_reason}): "
                               f"{len(results)} of {len(seats)} seat count(s) run")
                    break
    except Interrupted as exc:
        partial = (f"interrupted by {exc.signame} at {current} seats (its engine stopped): {len(results)} of "
                   f"{len(seats)} seat count(s) run")
    if partial:
        say(partial)
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
        decision=_decision(rule, settings, partial),
        partial=partial is not None,
        partial_reason=partial,
    )


def _decision(rule: DecisionRule, settings: Sequence[Setting], partial: str | None) -> Decision:
    """The rule applied; an interrupted sweep decides nothing (its verdicts so far are kept)."""
    if partial is None:
        return decide(rule, settings)
    verdicts = decide(rule, settings).verdicts if settings else ()
    return Decision(rule=rule, rule_text=rule.describe(), baseline=settings[0].label if settings else "",
                    verdicts=verdicts, chosen=None, summary=f"no decision: {partial}")


def start_plan_builder(request: StartRequest) -> PlanBuilder:
    """Seats -> the plan `dspark start` would exec with --max-num-seqs SEATS, and its predicted KV pool."""
    from dspark.planning.start import boot_recorder, plan_start  # noqa: PLC0415 - planning loads only for a sweep

    def build(seats: int) -> PlannedLaunch:
        flags = {**request.validate.flags, "max_num_seqs": seats}
        req = dataclasses.replace(request, validate=dataclasses.replace(request.validate, flags=flags))
        result = plan_start(req)
        return PlannedLaunch(plan=result.plan, expected_pool_tokens=result.report.capacity.kv_pool_tokens,
                             on_boot=boot_recorder(result, req.validate.env))

    return build


def plan_launches(seats: Sequence[int], build: PlanBuilder) -> dict[int, PlannedLaunch]:
    """Every seat count's plan, built (validated, argv checked) before any engine starts: a bad flag fails in
    seconds, not after the first engine's bench."""
    return {n: build(n) for n in seats}
