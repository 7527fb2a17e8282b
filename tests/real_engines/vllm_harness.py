"""Real-engine harness: case and result values, the KV-line pattern, process-group handling, the runner.

Imported by tests/real_engines/conftest.py (fixtures) and the oracle tests; runs in the checkout's Python
and only starts the engine's own interpreter as a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
KV_LINE = re.compile(
    r"(?P<line>(?P<device>\w+) KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for "
    r"(?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x)"
)
MODELS = ("dense-qwen3", "hybrid-qwen3-next", "mla-deepseek-v3", "sliding-mistral")
# The engine start-up limits are for a real CPU; scripts/ci-avx2.sh runs the engine on an emulated one, about ten
# times slower, and sets ENGINE_TEST_TIME_SCALE to stretch them (a start returns as soon as it is up either way).
TIME_SCALE = float(os.environ.get("ENGINE_TEST_TIME_SCALE", "1"))
# Engine logs go to stdout; keep them in one language and without colour codes.
ENGINE_ENV = {"VLLM_LOGGING_COLOR": "0", "NO_COLOR": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class OracleCase:
    """One engine start: a tiny model, the serve flags, the environment, and the KV pin dspark is given."""

    id: str
    model: str
    flags: tuple[str, ...]
    env: Mapping[str, str]
    kv_pin: str  # what `dspark validate --kv-cache-memory` receives (bytes, or the GiB of VLLM_CPU_KVCACHE_SPACE)


@dataclass(frozen=True)
class OracleResult:
    """What the engine did: its KV line (parsed) or the error it raised instead."""

    case_id: str
    line: str | None
    tokens: int | None
    concurrency: str | None  # the printed two decimals, as text
    max_model_len: int | None
    error: str | None
    seconds: float
    figures: Mapping[str, object]


def kill_group(proc: subprocess.Popen[str], grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left: no orphaned engine workers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_line(text: str) -> re.Match[str] | None:
    matches = list(KV_LINE.finditer(text))
    return matches[-1] if matches else None


def _result(case_id: str, chunk: str, end: str) -> OracleResult:
    """One case's output between its BEGIN and END/FAILED markers."""
    kind, _, payload = end.partition(" ")
    info = json.loads(payload.split(" ", 1)[1]) if payload else {}
    match = parse_line(chunk)
    return OracleResult(
        case_id=case_id,
        line=match.group("line") if match else None,
        tokens=int(match.group("tokens").replace(",", "")) if match else None,
        concurrency=match.group("conc") if match else None,
        max_model_len=int(match.group("len").replace(",", "")) if match else None,
        error=f"{info.get('type')}: {info.get('message')}" if kind == "ORACLE-FAILED" else None,
        seconds=float(info.get("seconds", 0.0)),
        figures=info,
    )


def run_batch(python: str, cases: Sequence[dict[str, object]], timeout: float) -> tuple[list[OracleResult], str]:
    """Run oracle_runner.py over cases; returns the results it finished (it stops after a refusal)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(list(cases), fh)
        path = fh.name
    proc = subprocess.Popen(
        [python, str(HERE / "oracle_runner.py"), path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: _kill_group reaches every child
        env={**os.environ, **ENGINE_ENV},
        cwd=tempfile.gettempdir(),
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out = (proc.stdout.read() if proc.stdout else "") or ""
    finally:
        kill_group(proc, grace=2.0)
        Path(path).unlink(missing_ok=True)
    results: list[OracleResult] = []
    current: str | None = None
    chunk: list[str] = []
    for line in out.splitlines():
        if line.startswith("ORACLE-BEGIN "):
            current, chunk = line.split(" ", 1)[1], []
        elif line.startswith(("ORACLE-END ", "ORACLE-FAILED ")) and current is not None:
            results.append(_result(current, "\n".join(chunk), line))
            current = None
        else:
            chunk.append(line)
    return results, out
