"""Run a launch plan as a supervised child: own process group, log capture, line watchers, signals, clean stop."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

import httpx
import psutil

from dspark.core.errors import DsparkError, ExitCode
from dspark.core.redact import redact_text, secret_argv_values, secret_env_values
from dspark.runtime.engine_log import NO_LOG_FORMAT, KvPoolLine, LogFormat
from dspark.runtime.launch import LaunchPlan

__all__ = ["NO_LOG_FORMAT", "EngineFailure", "EngineLog", "EngineProcess", "KvPoolLine", "LogFormat", "StopOutcome",
           "exit_status", "forwarding_signals", "group_members", "pool_message", "watch_plan"]

# The line that names why start-up failed, e.g. "ValueError: To serve at least one request ...".
_ERROR_LINE = re.compile(r"(?:^|\] )([A-Z]\w*(?:Error|Exception)): (.+)$")
_PR_SET_PDEATHSIG = 1


class EngineFailure(DsparkError):
    """The engine died, never became healthy, or did not start as planned: the run failed (exit 1), with the
    engine's own last lines; exit 3 stays for dspark's own bugs."""

    exit_code = ExitCode.REFUSED


class EngineLog:
    """What the watchers saw in the log, read with the engine's LogFormat; shared between the reader thread and
    the supervisor (thread-safe)."""

    def __init__(self, log_format: LogFormat = NO_LOG_FORMAT, tail_lines: int = 200,
                 secrets: frozenset[str] = frozenset()) -> None:
        self._format = log_format
        self._secrets = secrets  # values of the plan's secrets: kept out of the tail and the error line
        self._lock = threading.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self.kv_pool: KvPoolLine | None = None
        self.engine_args: dict[str, object] | None = None
        self.last_error: str | None = None
        self.kv_seen = threading.Event()
        self.reader_error: str | None = None  # the first exception the reader thread survived
        self.reader_errors = 0

    def shown(self, line: str) -> str:
        """A log line as dspark writes or prints it: the plan's secrets hidden (vLLM logs its --api-key)."""
        return redact_text(line, self._secrets, patterns=False) if self._secrets else line

    def feed(self, line: str) -> None:
        """Record one log line (without its newline) and parse the lines dspark checks (the parsed values are
        the engine's own; what is kept to print has the plan's secrets hidden)."""
        with self._lock:
            self._tail.append(self.shown(line))
        if self.kv_pool is None and (kv := self._format.kv_pool(line)) is not None:
            self.kv_pool = kv
            self.kv_seen.set()
        if self.engine_args is None and (nd := self._format.engine_args(line)) is not None:
            self.engine_args = nd
        if (err := _ERROR_LINE.search(line)) is not None:
            self.last_error = self.shown(f"{err.group(1)}: {err.group(2)}")

    def reader_failed(self, error: str) -> None:
        """Note an exception in the reader thread (it keeps draining the pipe)."""
        with self._lock:
            self.reader_errors += 1
            if self.reader_error is None:
                self.reader_error = error

    def failure_context(self) -> str:
        """The error line the engine printed, if any, and its last log lines, for failure messages."""
        tail = "\n  ".join(self.tail(12))
        head = f"{self.last_error}\n" if self.last_error else ""
        reader = (f"dspark's log reader failed {self.reader_errors} time(s), first: {self.reader_error}\n"
                  if self.reader_error else "")
        return f"{head}{reader}last log lines:\n  {tail}"

    def tail(self, n: int = 20) -> list[str]:
        """The last n lines."""
        with self._lock:
            return list(self._tail)[-n:]


def _libc_prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: no parent-death signal, stop() still cleans up
    return prctl


_PRCTL = _libc_prctl()  # resolved in the parent: the forked child must not load libraries


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if dspark itself dies, so a killed supervisor leaves no engine behind."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in the process group."""
    out: list[int] = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


@dataclass(frozen=True)
class StopOutcome:
    """How the engine ended: its exit code, whether SIGKILL was needed, and any stragglers killed."""

    returncode: int | None
    killed: bool
    stragglers: tuple[int, ...] = ()
    seconds: float = 0.0


class EngineProcess:
    """The engine as a child in its own process group; its output goes to a log file, watchers and an echo."""

    def __init__(
        self,
        plan: LaunchPlan,
        *,
        log_format: LogFormat,
        log_path: Path | None = None,
        echo: TextIO | None = None,
        watchers: Sequence[Callable[[str], None]] = (),
    ) -> None:
        self.plan = plan
        self.log = EngineLog(log_format, secrets=frozenset(
            secret_argv_values(plan.argv) | secret_env_values(plan.env_overlay)))
        self._log_path = log_path
        self._echo = echo
        self._watchers = list(watchers)
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        """The engine's process id (also its process group id)."""
        if self._proc is None:
            raise RuntimeError("engine not started")
        return self._proc.pid

    def start(self) -> None:
        """Start the plan's argv with its environment; stdout and stderr merged into the log."""
        log_file = None
        if self._log_path is not None:
            try:
                self._log_path.parent.mkdir(parents=True, exist_ok=True)
                log_file = self._log_path.open("a", encoding="utf-8")
            except OSError as exc:
                raise EngineFailure(f"cannot write the engine log {self._log_path}: {exc.strerror}") from exc
        try:
            self._proc = subprocess.Popen(
                list(self.plan.argv),
                env=self.plan.full_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: stop() reaches the engine's workers too
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl call, no locks taken
            )
        except OSError as exc:
            if log_file is not None:
                log_file.close()
            raise EngineFailure(f"cannot start {self.plan.argv[0]}: {exc.strerror or exc}") from exc
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout, log_file), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes] | None, log_file: IO[str] | None) -> None:
        if stream is None:
            return
        try:
            for raw in iter(stream.readline, b""):
                try:
                    self._handle(raw, log_file)
                except Exception as exc:  # noqa: BLE001 - keep draining: a full pipe would block the engine
                    self.log.reader_failed(f"{type(exc).__name__}: {exc}")
        finally:
            if log_file is not None:
                with contextlib.suppress(OSError):
                    log_file.close()

    def _handle(self, raw: bytes, log_file: IO[str] | None) -> None:
        """One line: parse it, show it to the watchers, append it to the log file, echo it."""
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        self.log.feed(line)
        for watch in self._watchers:
            watch(line)
        line = self.log.shown(line)
        if log_file is not None:
            log_file.write(line + "\n")
            log_file.flush()
        if self._echo is not None:
            self._echo.write(line + "\n")
            self._echo.flush()

    def poll(self) -> int | None:
        """The exit code once the engine's main process has ended, else None."""
        return None if self._proc is None else self._proc.poll()

    def send(self, sig: int, *, group: bool = False) -> None:
        """Send a signal to the engine's main process (or its whole group); a vanished target is no error."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the main process; None on timeout."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 30.0) -> StopOutcome:
        """SIGTERM the engine, wait up to `timeout` for its whole group, then SIGKILL what is left; no orphans."""
        if self._proc is None:
            return StopOutcome(returncode=None, killed=False)
        t0 = time.monotonic()
        pgid = self._proc.pid
        if self._proc.poll() is None:
            self.send(signal.SIGTERM)
        deadline = t0 + timeout
        rc = self.wait(max(0.0, deadline - time.monotonic()))
        # The main process may exit before its workers: wait for the rest of the group within the same deadline.
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = tuple(group_members(pgid))
        killed = rc is None or bool(left)
        if killed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
            rc = self.wait(10.0)
            for _ in range(50):
                if not group_members(pgid):
                    break
                time.sleep(0.1)
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        return StopOutcome(returncode=rc, killed=killed, stragglers=left, seconds=time.monotonic() - t0)

    def wait_healthy(self, url: str, timeout: float, interval: float = 0.5, *,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> float:
        """Poll `url` until it answers 200; seconds taken. EngineFailure if the engine dies or the time runs out.

        clock / sleep: the time source and the wait between polls (tests pass a fake clock).
        """
        t0 = clock()
        with httpx.Client(timeout=5.0) as client:
            while True:
                rc = self.poll()
                if rc is not None:
                    raise EngineFailure(
                        f"the engine exited with code {rc} before it became healthy: {self.log.failure_context()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        return clock() - t0
                if clock() - t0 > timeout:
                    raise EngineFailure(
                        f"the engine did not answer {url} within {timeout:.0f} s: {self.log.failure_context()}"
                    )
                sleep(interval)


@contextlib.contextmanager
def forwarding_signals(engine: EngineProcess, signals: Sequence[int]) -> Iterator[list[int]]:
    """While inside, the given signals received by dspark are passed on to the engine; yields those received."""
    received: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        engine.send(signum)

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def pool_message(seen: KvPoolLine, expected: int | None) -> tuple[bool, str]:
    """(matches, message) comparing the pool the engine printed with dspark's prediction."""
    if expected is None:
        return True, f"dspark: the engine's KV pool is {seen.pool_tokens:,} tokens (no prediction to compare)"
    if seen.pool_tokens == expected:
        return True, f"dspark: the engine's KV pool is {seen.pool_tokens:,} tokens, as predicted"
    diff = seen.pool_tokens - expected
    return False, (
        f"dspark: warning: the engine's KV pool is {seen.pool_tokens:,} tokens, dspark predicted {expected:,} "
        f"({diff:+,} tokens, {diff / expected:+.1%}); the seat advice was computed for the predicted pool"
    )


def exit_status(rc: int | None) -> int:
    """A shell-style status: the exit code, or 128 + signal number when the engine was killed by a signal."""
    if rc is None:
        return int(ExitCode.INTERNAL)
    return 128 - rc if rc < 0 else rc


def watch_plan(
    plan: LaunchPlan,
    expected_pool_tokens: int | None,
    *,
    log_format: LogFormat,
    out: TextIO | None = None,
    err: TextIO | None = None,
    log_path: Path | None = None,
    grace_s: float = 30.0,
) -> int:
    """Run the plan in front of the user: stream its log, forward SIGINT/SIGTERM/SIGHUP, check the printed KV pool.

    Returns 0 when the engine exits cleanly; 1 when it crashes on its own (its last lines go to `err`); after
    a signal the user sent (forwarded to it), the engine's own exit status (128 + N when a signal ended it).
    After a forwarded signal the engine has `grace_s` seconds to exit before its whole process group is killed.
    """
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    reported = threading.Event()

    def check_pool(line: str) -> None:
        if reported.is_set():
            return
        seen = log_format.kv_pool(line)
        if seen is not None:
            reported.set()
            _ok, msg = pool_message(seen, expected_pool_tokens)
            err.write(msg + "\n")
            err.flush()

    engine = EngineProcess(plan, log_format=log_format, log_path=log_path, echo=out, watchers=[check_pool])
    with forwarding_signals(engine, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as received:
        engine.start()
        forwarded_at: float | None = None
        while engine.wait(0.2) is None:
            if received and forwarded_at is None:
                forwarded_at = time.monotonic()
            if forwarded_at is not None and time.monotonic() - forwarded_at > grace_s:
                err.write(f"dspark: the engine did not exit {grace_s:.0f} s after the signal; killing it\n")
                engine.send(signal.SIGKILL, group=True)
                break
        outcome = engine.stop(timeout=5.0)
    if outcome.stragglers:
        err.write(f"dspark: killed {len(outcome.stragglers)} engine process(es) left behind by the main one\n")
    if engine.log.reader_error:
        err.write(f"dspark: warning: reading the engine's log failed {engine.log.reader_errors} time(s) (it was "
                  f"still drained); first: {engine.log.reader_error}\n")
    if received or outcome.returncode == 0:
        return exit_status(outcome.returncode)
    # A crash, not a stop the user asked for: a failed run (1) with the engine's own words, not dspark's bug (3).
    err.write(f"dspark: the engine exited with status {exit_status(outcome.returncode)}: "
              f"{engine.log.failure_context()}\n")
    return int(ExitCode.REFUSED)
