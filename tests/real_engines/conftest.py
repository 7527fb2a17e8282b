"""Fixtures for the real-engine tests: tiny random-weight models, and vLLM started on them.

Two ways to start the engine, both through `vllm serve`'s own argument parser:
- run_oracle(cases): oracle_runner.py runs every case in one engine-venv process (one vLLM import for
  all, ~2-6 s per case after it) and is restarted after a case the engine refuses;
- serve_kv_line(case): `python -m vllm.entrypoints.openai.api_server` in its own process group, read
  until the KV line, then SIGTERM / SIGKILL to the whole group (TP=2 needs worker processes; it also
  shows the in-process runner prints what the server prints).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from vllm_harness import (
    ENGINE_ENV,
    HERE,
    MODELS,
    TIME_SCALE,
    OracleCase,
    OracleResult,
    free_port,
    kill_group,
    parse_line,
    run_batch,
)


@pytest.fixture(scope="session")
def tiny_models(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the tiny models once per builder version (cached under ~/.cache/engine-oracle-models, else tmp)."""
    digest = hashlib.sha256((HERE / "build_tiny_models.py").read_bytes()).hexdigest()[:12]
    # The path must not contain "dspark", "dflash", "eagle3" or "eagle-": vLLM re-detects an MTP method
    # from the draft model's path (the target's own for MTP); see the redetection case.
    cache_root = Path(os.environ.get("ORACLE_MODEL_CACHE", Path.home() / ".cache" / "engine-oracle-models"))
    try:
        out = cache_root / f"tiny-models-{digest}"
        out.mkdir(parents=True, exist_ok=True)
    except OSError:
        out = tmp_path_factory.mktemp(f"tiny-models-{digest}")
    # Sessions sharing the cache (several engineers, one machine) build it one at a time.
    with (out / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(
            [vllm_python, str(HERE / "build_tiny_models.py"), str(out), *MODELS],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, **ENGINE_ENV},
        )
        if proc.returncode != 0:
            pytest.fail(f"building the tiny models failed:\n{proc.stderr[-4000:]}", pytrace=False)
        # The hybrid again under a name vLLM's speculative-method detection reacts to.
        alias = out / "dspark-named-hybrid"
        if not alias.is_symlink():
            alias.symlink_to(out / "hybrid-qwen3-next", target_is_directory=True)
    return out


@pytest.fixture(scope="session")
def run_oracle(vllm_python: str, tiny_models: Path) -> Callable[[Sequence[OracleCase]], dict[str, OracleResult]]:
    """Start the real engine once per case (in as few processes as the refusals allow); results by case id."""

    def run(cases: Sequence[OracleCase]) -> dict[str, OracleResult]:
        pending: list[dict[str, object]] = [
            {
                "id": c.id,
                "argv": ["--model", str(tiny_models / c.model), *c.flags, "--skip-tokenizer-init", "--enforce-eager"],
                "env": dict(c.env),
            }
            for c in cases
        ]
        results: dict[str, OracleResult] = {}
        while pending:
            done, out = run_batch(vllm_python, pending, timeout=900 * TIME_SCALE)
            if not done:
                pytest.fail(f"the engine runner produced no result; its output ends:\n{out[-6000:]}", pytrace=False)
            if len(done) > 1 and done[-1].error is not None:
                # A failure after other cases in the same process may be the process's state, not the
                # case (0.32.0's CPU kernel-override rescan trips on objects an ngram drafter imports):
                # only a failure as the first case of a fresh process counts as the engine's answer.
                done = done[:-1]
            for r in done:
                results[r.case_id] = r
            pending = [c for c in pending if c["id"] not in results]
        return results

    return run


@pytest.fixture(scope="session")
def serve_kv_line(vllm_python: str, tiny_models: Path) -> Iterator[Callable[..., OracleResult]]:
    """Start `python -m vllm.entrypoints.openai.api_server` and return its KV line, then stop it cleanly."""
    started: list[subprocess.Popen[str]] = []

    def start_once(case: OracleCase, timeout: float) -> tuple[str, int | None, float]:
        """One server start: its output until the KV line (or its exit), and the exit code it had by then."""
        argv = [
            vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_models / case.model),
            *case.flags, "--skip-tokenizer-init", "--enforce-eager", "--host", "127.0.0.1", "--port", str(free_port()),
        ]  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            log_path = Path(tmp) / "engine.log"
            start = time.monotonic()
            with log_path.open("w") as log:  # the child writes here; we read through a second handle
                proc = subprocess.Popen(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                    env={**os.environ, **ENGINE_ENV, **case.env},
                    cwd=tempfile.gettempdir(),
                )
            started.append(proc)
            exited: int | None = None
            try:
                while time.monotonic() - start < timeout:
                    if parse_line(log_path.read_text(errors="replace")):
                        break
                    exited = proc.poll()
                    if exited is not None:
                        break
                    time.sleep(0.25)
            finally:
                kill_group(proc)
            return log_path.read_text(errors="replace"), exited, time.monotonic() - start

    def serve(case: OracleCase, timeout: float = 300.0 * TIME_SCALE) -> OracleResult:
        text, exited, seconds = start_once(case, timeout)
        if exited is not None and exited < 0 and not text.strip():
            # Killed by a signal before it printed anything: not the engine's answer (the machine is
            # shared); one more start decides.
            text, exited, seconds = start_once(case, timeout)
        match = parse_line(text)
        # A worker's root cause sits above the API server's own traceback (some 10,000 characters of it).
        error = None if match else f"no KV line; exit {exited}; output ends:\n{text[-16000:]}"
        return OracleResult(
            case_id=case.id,
            line=match.group("line") if match else None,
            tokens=int(match.group("tokens").replace(",", "")) if match else None,
            concurrency=match.group("conc") if match else None,
            max_model_len=int(match.group("len").replace(",", "")) if match else None,
            error=error,
            seconds=seconds,
            figures={},
        )

    yield serve
    for proc in started:
        kill_group(proc, grace=2.0)


@pytest.fixture(scope="session")
def dspark_exe() -> str:
    """The `dspark` console script of this checkout's Python (the package is installed editable)."""
    exe = Path(sys.executable).with_name("dspark")
    return str(exe) if exe.exists() else "dspark"
