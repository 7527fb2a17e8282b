"""A seat sweep: for each seat count start the engine from its plan, verify the launch, bench, stop; decide."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
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
from dspark.bench.peers import PeerOutcome, PeerPlan, PeerProcess, PeerSetup, peer_launch_problems, stop_all, wait_exec
from dspark.bench.results import BenchResult
from dspark.bench.runner import BenchSpec, PassObserver, run_bench
from dspark.bench.shard import ClientFailure
from dspark.bench.stats import RequestRecord
from dspark.core.errors import InputError
from dspark.core.redact import is_secret_flag, redact_text, secret_argv_values, secret_env_values
from dspark.engines import engine_spec
from dspark.engines.argv import option_values
from dspark.hardware.ray_nodes import RAY_ADDRESS_ENV, Placement, RayPlacements, RayUnavailable
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
    # The other nodes of a native multi-node plan (rank >= 1), each started over ssh beside this one.
    peers: tuple[PeerPlan, ...] = ()
    # A plan on Ray: the ranks the engine's Ray executor places (one placement-group bundle each; 0: not on Ray)
    # and the cluster's address (None: the local one).
    ray_ranks: int = 0
    ray_address: str | None = None


class RayView:
    """What the sweep reads of a Ray cluster: its placement groups, by id (RayPlacements, or a test's stand-in)."""

    def groups(self) -> Mapping[str, Placement]:
        raise NotImplementedError

    def close(self) -> None:
        """Disconnect."""


class _ClusterView(RayView):
    def __init__(self, address: str | None) -> None:
        self.placements = RayPlacements(address)

    def groups(self) -> Mapping[str, Placement]:
        return self.placements.groups()

    def close(self) -> None:
        self.placements.__exit__()


RayOpener = Callable[[str | None], RayView]


@dataclass(frozen=True)
class RayRanks:
    """How many of the engine's ranks Ray placed on one node."""

    node_id: str
    ranks: int


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
    peers: tuple[PeerOutcome, ...] = ()  # the other nodes' launches (native multi-node)
    peer_lost: str | None = None  # a peer that died during this setting: the sweep runs no further setting
    ray_nodes: tuple[RayRanks, ...] = ()  # on Ray: where the engine's ranks ran (its placement groups' bundles)

    @property
    def clean(self) -> bool:
        """Launched as planned (every node), 0 errors, 0 preemptions, and the engines lived through the bench."""
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
    interrupted: bool = False  # partial because of a signal (not because a peer died)

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


class _PeerWatch:
    """The peers of one setting, watched on a thread: the first that exits while it should run is recorded, and
    the head's engine is stopped (SIGTERM, SIGKILL after stop_timeout_s: a head still joining its peers does not
    answer SIGTERM) so that nothing waits on a rank that is gone (health, the bench)."""

    def __init__(self, peers: Sequence[PeerProcess], engine: EngineProcess, stop_timeout_s: float,
                 interval_s: float = 0.5) -> None:
        self._peers = peers
        self._engine = engine
        self._stop_timeout = stop_timeout_s
        self._interval = interval_s
        self._done = threading.Event()
        self.lost: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self._peers:
            self._thread.start()

    def check(self) -> str | None:
        """The first peer seen gone (now or before), in words."""
        if self.lost is None:
            for p in self._peers:
                if (rc := p.poll()) is not None:
                    self.lost = f"{p.who} exited with code {rc} while it should serve: {p.failure_context()}"
                    break
        return self.lost

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            if self.check() is not None:
                self._engine.stop(self._stop_timeout)  # the head cannot serve without its peer
                return

    def close(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)


def _peer_log(log_path: Path | None, plan: PeerPlan, seats: int) -> Path | None:
    """<out-dir>/logs/peer-rank-R-HOST-N-seats.log beside the head's engine log."""
    if log_path is None:
        return None
    host = "".join(c if c.isalnum() or c in ".-_" else "_" for c in plan.host)
    return log_path.parent / "logs" / f"peer-rank{plan.rank}-{host}-{seats}-seats.log"


def _start_nodes(engine: EngineProcess, peers: Sequence[PeerProcess], watch: _PeerWatch, label: str,
                 say: Callable[[str], None]) -> None:
    """The head's engine, then each peer's `dspark start` over ssh, then the watch on the peers."""
    engine.start()
    for peer in peers:
        say(f"{label}: starting {peer.who} over ssh; log: {peer.log_path or '-'}")
        try:
            peer.start()
        except OSError as exc:
            raise EngineFailure(f"cannot run ssh for {peer.who}: {exc.strerror or exc}") from exc
    watch.start()


def _peer_problems(peers: Sequence[PeerProcess], watch: _PeerWatch) -> list[str]:
    """Every peer's printed plan against its rank's, and a peer already gone."""
    wait_exec(peers, 10.0)  # printed before the engine imports: long since, unless the peer never planned
    out = [p for peer in peers for p in peer_launch_problems(peer.plan, peer.argv)]
    if (lost := watch.check()) is not None:
        out.append(lost)
    return out


def _stop_nodes(engine: EngineProcess, peers: Sequence[PeerProcess], stop_timeout_s: float, label: str,
                say: Callable[[str], None]) -> tuple[StopOutcome, list[str]]:
    """Stop the head's engine, then every peer (over ssh, at once); how each ended."""
    stop = engine.stop(stop_timeout_s)
    how = "killed (SIGKILL)" if stop.killed else "stopped (SIGTERM)"
    say(f"{label}: {how} in {stop.seconds:.1f} s" + (f"; killed stragglers {stop.stragglers}" if stop.stragglers
                                                    else ""))
    peer_stops = stop_all(peers, stop_timeout_s) if peers else []
    for peer, ended in zip(peers, peer_stops, strict=True):
        say(f"{label}: {peer.who} {ended}")
    return stop, peer_stops


RAY_PLACE_GRACE_S = 10.0  # placement groups exist before the engine answers; a short grace for the GCS


def _rank_counts(mine: Mapping[str, Placement]) -> tuple[RayRanks, ...]:
    counts: dict[str, int] = {}
    for p in mine.values():
        for node in p.gpu_nodes:
            if node:
                counts[node] = counts.get(node, 0) + 1
    return tuple(RayRanks(n, k) for n, k in sorted(counts.items()))


def ray_placed(view: RayView, before: set[str], ranks: int, grace_s: float | None = None
               ) -> tuple[dict[str, Placement], tuple[RayRanks, ...], list[str]]:
    """The placement groups created since the engine started (its ranks' GPU bundles), the ranks per node, and a
    problem when fewer than the plan's ranks are placed (after RAY_PLACE_GRACE_S)."""
    deadline = time.monotonic() + (RAY_PLACE_GRACE_S if grace_s is None else grace_s)
    while True:
        mine = {g: p for g, p in view.groups().items() if g not in before and p.live}
        placed = _rank_counts(mine)
        if sum(r.ranks for r in placed) >= ranks or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    got = sum(r.ranks for r in placed)
    if got >= ranks:
        return mine, placed, []
    unplaced = sum(1 for p in mine.values() for n in p.gpu_nodes if not n)
    return mine, placed, [
        f"Ray placed {got} of the plan's {ranks} ranks ({len(mine)} placement group(s) created since the engine "
        f"started{f', {unplaced} GPU bundle(s) waiting for a node' if unplaced else ''}): the engine's workers are "
        "not where the plan put them"]


def ray_released(view: RayView, mine: Mapping[str, Placement], timeout_s: float) -> list[str]:
    """A problem per placement group of the engine still reserving GPUs `timeout_s` after it stopped."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = view.groups()
        left = [now[g] for g in mine if g in now and now[g].live]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return [f"Ray placement group {p.group_id[:8]} still reserves {p.gpus:g} GPU(s) on "
            f"{', '.join(sorted({n[:8] for n in p.gpu_nodes if n})) or 'no node yet'} {timeout_s:.0f} s after the "
            "engine stopped: the next engine cannot have them (remove it with ray.util.remove_placement_group, or "
            "restart Ray on those nodes)" for p in left]


def _not_started(seats: int, plan: LaunchPlan, log_path: Path | None, problem: str) -> SettingResult:
    """A setting whose engine was never started, and why (already redacted)."""
    return SettingResult(seats=seats, label=f"{seats} seats", argv=tuple(redact_argv(plan.argv)),
                         env=redact_env(plan.env_overlay), log_path=str(log_path) if log_path else None,
                         startup_s=None, launch=None, bench=None, stop=None, problems=(problem,))


class _RayCheck:
    """Where a Ray launch's ranks run, across one setting: the placement groups created since the engine started
    must hold every rank, and be gone after it stopped. Does nothing for a plan that is not on Ray."""

    def __init__(self, launch: PlannedLaunch, open_ray: RayOpener) -> None:
        self.ranks = launch.ray_ranks
        self.view = open_ray(launch.ray_address) if self.ranks else None
        self.before = set(self.view.groups()) if self.view is not None else set()
        self.mine: dict[str, Placement] = {}
        self.placed: tuple[RayRanks, ...] = ()

    def after_start(self, label: str, say: Callable[[str], None]) -> list[str]:
        if self.view is None:
            return []
        self.mine, self.placed, problems = ray_placed(self.view, self.before, self.ranks)
        say(f"{label}: Ray placed {sum(r.ranks for r in self.placed)} of {self.ranks} ranks: "
            + (", ".join(f"{r.ranks} on node {r.node_id[:8]}" for r in self.placed) or "none"))
        return problems

    def after_stop(self, timeout_s: float) -> list[str]:
        if self.view is None:
            return []
        try:
            return ray_released(self.view, self.mine, timeout_s)
        except RayUnavailable as exc:
            return [f"whether the engine's Ray workers ended could not be read: {exc.message}"]
        finally:
            self.view.close()


def run_setting(  # noqa: PLR0915 - one setting's steps in order; each is a helper or a line
    seats: int,
    launch: PlannedLaunch,
    bench: BenchSpec,
    *,
    log_path: Path | None,
    health_timeout_s: float,
    stop_timeout_s: float,
    observer: PassObserver | None = None,
    say: Callable[[str], None] = lambda _m: None,
    open_ray: RayOpener = _ClusterView,
) -> SettingResult:
    """Start, verify, bench and stop one setting (every node's engine); everything is always stopped, and
    failures become problems. On Ray, the placement groups the engine created must hold every rank while it runs,
    and be gone once it stopped."""
    label = f"{seats} seats"
    plan = launch.plan
    known = secret_argv_values(plan.argv) | secret_env_values(plan.env_overlay)
    known |= {v for p in launch.peers for v in p.secrets()}
    say = _redacting(say, known)  # the plan's secrets never reach stderr, sweep.md or sweep.json

    url = launch.base_url or base_url_of(plan)
    espec = engine_spec(plan.engine)
    engine = EngineProcess(plan, log_format=espec.log_format, log_path=log_path)
    peers = [PeerProcess(p, log_path=_peer_log(log_path, p, seats), secrets=frozenset(known)) for p in launch.peers]
    watch = _PeerWatch(peers, engine, stop_timeout_s)
    problems: list[str] = []
    startup = check = result = None
    if port_answers(url):
        problem = (f"something already answers at {url} before the engine started (another server, or another "
                   "sweep's engine on this port): it would be benchmarked as this setting; stop it, or give the "
                   "sweep another --port")
        say(f"{label}: {problem}")
        return _not_started(seats, plan, log_path, redact_text(problem, known))
    try:
        ray_check = _RayCheck(launch, open_ray)
    except RayUnavailable as exc:
        problem = f"the Ray cluster cannot be read, so where this setting's ranks run could not be verified: " \
                  f"{exc.message}"
        say(f"{label}: {problem}")
        return _not_started(seats, plan, log_path, redact_text(problem, known))
    say(f"{label}: starting {plan.engine} ({url}); log: {log_path or '-'}")
    try:
        _start_nodes(engine, peers, watch, label, say)
        startup = engine.wait_healthy(url + "/health", health_timeout_s)
        _check_responder(engine, url)
        engine.log.kv_seen.wait(5.0)  # printed before the server answers; a short grace for the reader thread
        check = check_launch(plan.argv, seats, engine.log.engine_args, engine.log.kv_pool, launch.expected_pool_tokens,
                             seat_arg=espec.seat_arg)
        problems += [*check.problems, *_peer_problems(peers, watch)]
        problems += ray_check.after_start(label, say)
        for line in launch.on_boot(engine.log) if launch.on_boot is not None else ():
            say(f"{label}: {line.removeprefix('dspark: ')}")
        pool = f"{check.kv_pool_tokens:,}" if check.kv_pool_tokens is not None else "?"
        placed = ray_check.placed
        nodes = f" on {len(peers) + 1} nodes" if peers else f" on {len(placed)} Ray node(s)" if placed else ""
        say(f"{label}: healthy after {startup:.1f} s; KV pool {pool} tokens; "
            + (f"launch as planned{nodes}" if not problems else "; ".join(problems)))
        if not problems:
            spec = dataclasses.replace(bench, client=dataclasses.replace(bench.client, base_url=url))
            obs = _Prefixed(observer, label) if observer is not None else None
            result = asyncio.run(run_bench(spec, obs))
            if (lost := watch.check()) is not None:
                problems.append(lost)  # the cause first: the bench's failures follow from it
            if result.partial_reason:
                problems.append(result.partial_reason)
            problems += bench_problems(result)
            if lost is None and (rc := engine.poll()) is not None:
                problems.append(f"the engine exited with code {rc} during the bench: {engine.log.failure_context()}")
    except (EngineFailure, ClientFailure, InputError, RayUnavailable, httpx.HTTPError) as exc:
        if (lost := watch.check()) is not None and lost not in problems:
            problems.append(lost)  # the cause, before what the head's end looked like
        if isinstance(exc, httpx.HTTPError):
            tail = f"; {engine.log.failure_context()}" if engine.poll() is not None else ""
            problems.append(f"the bench could not reach the engine at {url}: {type(exc).__name__}: {exc}{tail}")
        else:
            problems.append(exc.message)
    finally:
        watch.close()
        stop, peer_stops = _stop_nodes(engine, peers, stop_timeout_s, label, say)
        problems += ray_check.after_stop(max(stop_timeout_s, 5.0))
    problems += [f"{p.who} {how}" for p, how in zip(peers, peer_stops, strict=True)
                 if how.startswith(("could not", "never"))]
    outcomes = tuple(
        PeerOutcome(host=p.plan.host, rank=p.plan.rank, log_path=str(p.log_path) if p.log_path else None,
                    argv=p.argv, returncode=p.poll(), stop=how,
                    problems=tuple(redact_text(x, known) for x in problems if x.startswith(p.who)))
        for p, how in zip(peers, peer_stops, strict=True)
    )
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
        peers=outcomes,
        peer_lost=redact_text(watch.lost, known) if watch.lost else None,
        ray_nodes=ray_check.placed,
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
    interrupted = False
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
                    interrupted = True
                    break
                if results[-1].peer_lost is not None:
                    partial = (f"stopped at {n} seats: {results[-1].peer_lost}; every node's engine stopped, "
                               f"{len(results)} of {len(seats)} seat count(s) run")
                    break
    except Interrupted as exc:
        partial = (f"interrupted by {exc.signame} at {current} seats (its engine stopped): {len(results)} of "
                   f"{len(seats)} seat count(s) run")
        interrupted = True
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
        interrupted=interrupted,
    )


def _decision(rule: DecisionRule, settings: Sequence[Setting], partial: str | None) -> Decision:
    """The rule applied; an interrupted sweep decides nothing (its verdicts so far are kept)."""
    if partial is None:
        return decide(rule, settings)
    verdicts = decide(rule, settings).verdicts if settings else ()
    return Decision(rule=rule, rule_text=rule.describe(), baseline=settings[0].label if settings else "",
                    verdicts=verdicts, chosen=None, summary=f"no decision: {partial}")


def start_plan_builder(request: StartRequest, peers: PeerSetup | None = None) -> PlanBuilder:
    """Seats -> the plan `dspark start` would exec with --max-num-seqs SEATS, and its predicted KV pool; on a
    native multi-node plan, each peer's `dspark start --node-rank R` (one --peer per rank >= 1) beside it."""
    from dspark.planning.ray_plan import ray_ranks  # noqa: PLC0415
    from dspark.planning.start import boot_recorder, plan_start  # noqa: PLC0415 - planning loads only for a sweep

    def build(seats: int) -> PlannedLaunch:
        flags = {**request.validate.flags, "max_num_seqs": seats}
        req = dataclasses.replace(request, validate=dataclasses.replace(request.validate, flags=flags))
        result = plan_start(req)
        ranks = 0
        if result.report.settings.distributed_runtime.value == "ray":  # the head's engine places every rank
            ranks = ray_ranks(req.validate, result.report.settings)[0]
        return PlannedLaunch(plan=result.plan, expected_pool_tokens=result.report.capacity.kv_pool_tokens,
                             on_boot=boot_recorder(result, req.validate.env),
                             peers=peer_plans(request, result, seats, peers), ray_ranks=ranks,
                             ray_address=req.validate.env.get(RAY_ADDRESS_ENV) or None)

    return build


def peer_plans(request: StartRequest, result: Any, seats: int, peers: PeerSetup | None) -> tuple[PeerPlan, ...]:
    """Each rank >= 1's `dspark start` over ssh, and the flags its engine argv must carry: those of the rank's own
    plan (the adapter's, for node_rank R) that differ from the head's, and the seat count. InputError when the
    hosts do not match the plan's nodes."""
    settings = result.report.settings
    nodes, runtime = settings.nnodes.value, settings.distributed_runtime.value
    hosts = peers.hosts if peers is not None else ()
    if runtime != "native" or nodes <= 1:
        if hosts:
            where = "runs on Ray: its workers come from the Ray cluster" if runtime != "native" else "runs on one node"
            raise InputError(f"--peer {hosts[0]}: this plan {where}, so there is no peer to start",
                             hint="drop --peer (a Ray plan needs `ray start --address HEAD:PORT` on each worker)")
        return ()
    if len(hosts) != nodes - 1:
        raise InputError(
            f"the plan spans {nodes} nodes (nnodes from {settings.nnodes.source}) but {len(hosts)} --peer given",
            hint=f"give one --peer HOST per rank 1..{nodes - 1}, in rank order (each runs `dspark start "
            "--node-rank R` over ssh), or run each node's `dspark start` yourself and bench with `dspark bench`")
    if peers is None:  # unreachable: hosts came from it
        return ()
    from dspark.config.knobs import KNOBS  # noqa: PLC0415

    by_name = {k.name: k for k in KNOBS}
    forwarded: list[str] = []
    for name, value in request.validate.flags.items():
        knob = by_name.get(name)
        if value is None or knob is None or knob.flag is None or name in ("node_rank", "max_num_seqs"):
            continue
        forwarded += [knob.flag, str(value)]
    adapter = result.report.spec.adapter()
    head = planned_flags(result.plan.argv)
    seat_arg = engine_spec(result.plan.engine).seat_arg
    out: list[PeerPlan] = []
    for rank, host in enumerate(hosts, start=1):
        worker = planned_flags(adapter.build_plan(dataclasses.replace(result.report.serve, node_rank=rank),
                                                  None).argv)
        expected: dict[str, str | bool] = {k: v for k, v in worker.items() if head.get(k) != v}
        expected[seat_arg] = str(seats)
        command = peers.command(request.validate.recipe, rank, seats, forwarded, request.validate.engine_flags)
        out.append(PeerPlan(host=host, rank=rank, ssh=peers.ssh, command=command, expected=expected))
    return tuple(out)


def plan_launches(seats: Sequence[int], build: PlanBuilder) -> dict[int, PlannedLaunch]:
    """Every seat count's plan, built (validated, argv checked) before any engine starts: a bad flag fails in
    seconds, not after the first engine's bench."""
    return {n: build(n) for n in seats}
