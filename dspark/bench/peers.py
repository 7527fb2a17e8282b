"""The other nodes of a native multi-node sweep: each rank's `dspark start --node-rank R` over ssh, and its stop.

A peer runs `dspark start RECIPE --node-rank R --max-num-seqs N ...` on its own host (that host plans from its own
environment and execs its engine, headless); the sweep keeps the ssh client as a child, its merged output in a log
file, reads the plan the peer printed (`exec: ...`), and stops the peer's whole process group over ssh. ssh's argv
is a list (never a shell here); the remote command line is shlex-quoted for the peer's login shell.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from dspark.core.errors import InputError
from dspark.core.redact import redact_argv, redact_text, secret_argv_values, secret_env_values
from dspark.engines.argv import option_values

PGID_MARK = "dspark-peer: pgid"
_PGID = re.compile(re.escape(PGID_MARK) + r"\s+(\d+)")
# What the peer's login shell runs first: its process group (sshd made the session its own), then exec the peer.
_PREAMBLE = f'echo "{PGID_MARK} $(ps -o pgid= -p $$)" >&2; exec "$@"'


@dataclass(frozen=True)
class SshOptions:
    """How ssh reaches the peers: an ssh_config file (-F) and `-o KEY=VALUE` options; always BatchMode."""

    config: Path | None = None
    options: tuple[str, ...] = ()
    program: str = "ssh"

    def argv(self, host: str, remote: Sequence[str]) -> list[str]:
        """ssh's argv running `remote` (quoted for the peer's shell) on `host`."""
        argv = [self.program, "-o", "BatchMode=yes", "-T"]
        if self.config is not None:
            argv += ["-F", str(self.config)]
        for option in self.options:
            argv += ["-o", option]
        return [*argv, host, shlex.join(remote)]


def check_host(host: str) -> str:
    """A --peer value ssh takes as a destination, not an option; InputError (exit 2) otherwise."""
    if not host or host.startswith("-") or any(c.isspace() or not c.isprintable() for c in host):
        raise InputError(f"--peer {host!r} is not a host name", hint="give a host (or user@host, or an ssh_config Host "
                         "alias) per rank >= 1, e.g. --peer spark-b")
    return host


def check_ssh_option(option: str) -> str:
    """A --peer-ssh-option KEY=VALUE; InputError (exit 2) otherwise."""
    key, eq, _value = option.partition("=")
    if not eq or not key or not key.isalnum():
        raise InputError(f"--peer-ssh-option {option!r} is not an ssh option Name=value",
                         hint="e.g. --peer-ssh-option Port=2222 --peer-ssh-option IdentityFile=~/.ssh/spark")
    return option


def check_env(assignment: str) -> str:
    """A --peer-env NAME=VALUE; InputError (exit 2) otherwise."""
    name, eq, _value = assignment.partition("=")
    if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InputError(f"--peer-env {name!r}...: not NAME=VALUE",
                         hint="e.g. --peer-env DSPARK_ENGINE_PYTHON=/opt/vllm/bin/python")
    return assignment


@dataclass(frozen=True)
class PeerSetup:
    """The sweep's peers: one host per rank >= 1 (in rank order), how ssh reaches them, what they run."""

    hosts: tuple[str, ...]
    ssh: SshOptions = field(default_factory=SshOptions)
    dspark: str = "dspark"  # the dspark command on the peers
    env: tuple[str, ...] = ()  # NAME=VALUE set for the peer's `dspark start` (per-node engine settings)

    def command(self, recipe: str | None, rank: int, seats: int, flags: Sequence[str],
                engine_flags: Sequence[str]) -> tuple[str, ...]:
        """The peer's `dspark start` at this rank and seat count: the sweep's own plan flags forwarded."""
        start = [self.dspark, "start", *([recipe] if recipe else []), *flags, "--node-rank", str(rank),
                 "--max-num-seqs", str(seats)]
        if engine_flags:
            start += ["--", *engine_flags]
        return tuple(["env", *self.env, *start] if self.env else start)


@dataclass(frozen=True)
class PeerPlan:
    """One peer at one seat count: where, what it runs, and the flags its engine's argv must carry."""

    host: str
    rank: int
    ssh: SshOptions
    command: tuple[str, ...]
    expected: Mapping[str, str | bool]  # dest -> value the rank's engine argv must hold (seats, rank, headless)

    def ssh_argv(self) -> list[str]:
        return self.ssh.argv(self.host, ["sh", "-c", _PREAMBLE, "dspark-peer", *self.command])

    def secrets(self) -> set[str]:
        """The secret values in the peer's command (its --peer-env and flags): redacted from its log and problems."""
        env: dict[str, str] = {}
        words = list(self.command)
        if words[:1] == ["env"]:
            for word in words[1:]:
                name, eq, value = word.partition("=")
                if not eq:
                    break
                env[name] = value
        return secret_env_values(env) | secret_argv_values(words)


def exec_argv(line: str) -> tuple[str, ...] | None:
    """The engine argv of a `dspark start` line `exec: [K=V ...] ARGV` (environment assignments dropped)."""
    _, mark, rest = line.partition("exec: ")
    if not mark:
        return None
    try:
        words = shlex.split(rest)
    except ValueError:
        return None
    while words and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    return tuple(words) or None


def peer_launch_problems(plan: PeerPlan, argv: Sequence[str] | None) -> list[str]:
    """Why the peer's printed plan is not the planned rank: no plan line, or an expected flag absent or different."""
    who = f"peer {plan.host} (rank {plan.rank})"
    if argv is None:
        return [f"{who} printed no plan (`dspark start`'s `exec:` line), so its launch is unconfirmed"]
    seen = option_values(argv)
    out: list[str] = []
    for key, value in plan.expected.items():
        flag = "--" + key.replace("_", "-")
        if key not in seen:
            out.append(f"{who}: its engine argv lacks {flag}" + ("" if value is True else f" {value}"))
        elif seen[key] != value:
            out.append(f"{who}: its engine argv has {flag} {seen[key]}, planned {value}")
    return out


@dataclass(frozen=True)
class PeerOutcome:
    """How one peer ran at one seat count: its log, the argv it printed, how it ended, what went wrong."""

    host: str
    rank: int
    log_path: str | None
    argv: tuple[str, ...] | None  # secrets redacted
    returncode: int | None  # the ssh client's: the peer's `dspark start` / engine exit code, or 255 for ssh's own
    stop: str  # "stopped (SIGTERM)", "killed (SIGKILL)", "had exited", or why it could not be stopped
    problems: tuple[str, ...]


class PeerProcess:
    """A peer's `dspark start` through a local ssh client (its own process group); output to a log file."""

    def __init__(self, plan: PeerPlan, *, log_path: Path | None, secrets: frozenset[str] = frozenset()) -> None:
        self.plan = plan
        self.log_path = log_path
        self._secrets = secrets
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self.pgid: int | None = None
        self.argv: tuple[str, ...] | None = None
        self.exec_seen = threading.Event()
        self.tail: list[str] = []

    @property
    def who(self) -> str:
        return f"peer {self.plan.host} (rank {self.plan.rank})"

    def start(self) -> None:
        """Start ssh; InputError-free: a failure to run ssh at all is an OSError the caller reports."""
        log_file: IO[str] | None = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log_file = self.log_path.open("a", encoding="utf-8")
        try:
            self._proc = subprocess.Popen(self.plan.ssh_argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        except OSError:
            if log_file is not None:
                log_file.close()
            raise
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout, log_file), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes] | None, log_file: IO[str] | None) -> None:
        if stream is None:
            return
        try:
            for raw in iter(stream.readline, b""):
                line = redact_text(raw.decode("utf-8", "replace").rstrip("\r\n"), self._secrets)
                self.tail = [*self.tail[-39:], line]
                if self.pgid is None and (m := _PGID.search(line)):
                    self.pgid = int(m.group(1))
                elif self.argv is None and (argv := exec_argv(line)) is not None:
                    self.argv = tuple(redact_argv(argv))
                    self.exec_seen.set()
                if log_file is not None:
                    log_file.write(line + "\n")
                    log_file.flush()
        finally:
            if log_file is not None:
                with contextlib.suppress(OSError):
                    log_file.close()

    def poll(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def failure_context(self) -> str:
        """The last lines the peer printed, for a problem sentence."""
        lines = [line if len(line) <= 160 else line[:157] + "..." for line in self.tail[-3:] if line.strip()]
        return ("its last lines: " + " | ".join(lines)) if lines else "it printed nothing"

    def stop(self, timeout_s: float) -> str:
        """SIGTERM the peer's process group over ssh, SIGKILL it after `timeout_s`; then end the local ssh client.

        Returns how it ended, in words; the local client is always gone on return.
        """
        if self._proc is None:
            return "not started"
        how = "had exited"
        if self.pgid is not None:
            how = self._remote_stop(self.pgid, timeout_s)
        elif self.poll() is None:
            how = "never reported its process group: only the local ssh client was stopped"
        if self._proc is not None:
            try:
                self._proc.wait(10.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._proc.pid, signal.SIGTERM)
                try:
                    self._proc.wait(5.0)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait(5.0)
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        return how

    def _remote_stop(self, pgid: int, timeout_s: float) -> str:
        steps = max(1, int(timeout_s / 0.2))
        # A member is alive unless a zombie (one its parent has not reaped yet holds the group id, too).
        alive = f"ps -e -o pgid= -o stat= | awk '$1 == {pgid} && $2 !~ /^Z/ {{n++}} END {{exit n == 0}}'"
        script = (f"kill -TERM -{pgid} 2>/dev/null || {{ echo gone; exit 0; }}; i=0; "
                  f"while {alive}; do i=$((i+1)); if [ $i -ge {steps} ]; then "
                  f"kill -KILL -{pgid} 2>/dev/null; echo killed; exit 0; fi; sleep 0.2; done; echo stopped")
        argv = self.plan.ssh.argv(self.plan.host, ["sh", "-c", script])
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=timeout_s + 30.0, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"could not be stopped over ssh ({type(exc).__name__}): its processes may still run"
        said = done.stdout.strip().splitlines()[-1:] or [""]
        if done.returncode != 0 or said[0] not in ("gone", "killed", "stopped"):
            err = redact_text(done.stderr.strip()[-300:], self._secrets)
            return f"could not be stopped over ssh (exit {done.returncode}: {err}): its processes may still run"
        return {"gone": "had exited", "killed": "killed (SIGKILL)", "stopped": "stopped (SIGTERM)"}[said[0]]


def stop_all(peers: Sequence[PeerProcess], timeout_s: float) -> list[str]:
    """Stop every peer at once (threads: each waits on its own ssh); how each ended, in order."""
    results: list[str] = ["" for _ in peers]

    def one(i: int) -> None:
        results[i] = peers[i].stop(timeout_s)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(peers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def wait_exec(peers: Sequence[PeerProcess], timeout_s: float) -> None:
    """Wait (up to timeout_s in all) for every live peer's plan line."""
    deadline = time.monotonic() + timeout_s
    for p in peers:
        p.exec_seen.wait(max(0.0, deadline - time.monotonic()))
