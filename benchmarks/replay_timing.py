"""How close the scheduler replay's times come to the real engine after a 2-point calibration (goal: within 15%).

Starts vLLM's CPU build once on the tiny random-weight Qwen3 of tests/real_engines (8 seats, a 512-block pool,
--enforce-eager; the engine on one CPU, the clients on the other where there are two), then:

1. calibrates: `dspark bench --seats 8 --json` at 1 client (4 requests) and at 8 clients (16 requests), the
   two points `dspark advise --calibrate` fits the step cost to;
2. for each held-out load (4 and 16 closed-loop clients, and an open loop of 6 requests/s), predicts with
   `dspark advise ... --calibrate both` (the replay through the installed engine's own scheduler, on the
   fitted step cost) and measures with `dspark bench` the same load on the same engine;
3. prints TTFT (mean), per-stream decode tok/s and wall time, predicted against measured, and the error of each.

Every request has --input-len prompt tokens (distinct random ids) and --max-tokens output tokens (ignore_eos).
Wall-clock figures: a machine shared with other work moves them (the load average is printed).

  python -m benchmarks.replay_timing [--input-len 256] [--max-tokens 64] [--engine-python PY] [--models DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dspark.engines import engine_spec
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import EngineProcess
from tests.bench.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]

SEATS = 8
KV_BYTES = 512 * 128 * 1024  # 512 blocks of 128 tokens at 1,024 B per token: nothing is preempted
MAX_LEN = 2048
CALIBRATION = ((1, 4), (8, 16))  # (clients, requests)
HELD_OUT: tuple[tuple[str, list[str], int], ...] = (
    ("4 clients", ["--clients", "4"], 16),
    ("16 clients (queueing)", ["--clients", "16"], 32),
    ("open loop, 6 req/s", ["--request-rate", "6"], 24),
)
Row = tuple[str, dict[str, Any], dict[str, Any], list[str]]  # load, prediction, measured summary, fitted terms
FIGURES = (("TTFT mean, s", "ttft_s", "ttft_mean_s"), ("per-stream tok/s", "per_stream_decode_tps",
                                                         "per_stream_decode_tps"),
           ("wall time, s", "wall_time_s", "wall_time_s"))


def tiny_model(engine_python: str, models: Path | None) -> Path:
    """The tests' tiny dense Qwen3, built once per builder version (the real-engine tests' cache)."""
    builder = ROOT / "tests" / "real_engines" / "build_tiny_models.py"
    digest = hashlib.sha256(builder.read_bytes()).hexdigest()[:12]
    root = models or Path(os.environ.get("ORACLE_MODEL_CACHE", Path.home() / ".cache" / "engine-oracle-models"))
    out = root / f"tiny-models-{digest}"
    if not (out / "dense-qwen3" / "config.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([engine_python, str(builder), str(out), "dense-qwen3"], check=True, capture_output=True,
                       timeout=600)
    return out / "dense-qwen3"


def dspark(args: list[str], engine_python: str, timeout: float = 900) -> dict[str, Any]:
    """`python -m dspark COMMAND --json ARGS`, its JSON (exit 0 or 1: a refusal still answers)."""
    proc = subprocess.run([sys.executable, "-m", "dspark", args[0], "--json", *args[1:]], capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=ROOT,
                          env={**os.environ, "DSPARK_ENGINE_PYTHON": engine_python, "PYTHONPATH": str(ROOT)})
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise SystemExit(f"dspark {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    try:
        result: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"dspark {' '.join(args)} printed no JSON: {proc.stdout[:500]}") from None
    return result


def bench(url: str, out: Path, load: list[str], requests: int, args: argparse.Namespace,
          engine_python: str) -> dict[str, Any]:
    """One `dspark bench` of the load on the engine; its summary."""
    data = dspark(["bench", "--url", url, "--seats", str(SEATS), "--requests", str(requests),
                   "--input-len", str(args.input_len), "--max-tokens", str(args.max_tokens), "--no-progress",
                   "--sample-interval", "1", "--out", str(out), *load], engine_python)
    if data["summary"].get("errors"):
        raise SystemExit(f"the bench had errors: {data['summary']}")
    summary: dict[str, Any] = data["summary"]
    return summary


def measure(args: argparse.Namespace, model: Path, tmp: Path) -> tuple[list[dict[str, Any]], list[Row], list[str]]:
    """Start the engine, calibrate, predict and bench each held-out load; stop the engine."""
    cpus = sorted(os.sched_getaffinity(0))
    engine_cpu, client_cpus = cpus[-1], set(cpus[:-1]) or {cpus[-1]}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    engine = EngineProcess(LaunchPlan(engine="vllm", argv=(
        args.engine_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--max-num-seqs", str(SEATS), "--kv-cache-memory-bytes", str(KV_BYTES), "--max-model-len", str(MAX_LEN),
        "--enforce-eager", "--skip-tokenizer-init", "--host", "127.0.0.1", "--port", str(port))),
        log_format=engine_spec("vllm").log_format)
    plan = ["--model", str(model), "--engine", "vllm", "--platform", "cpu", "--kv-cache-memory", str(KV_BYTES),
            "--seats", str(SEATS), "--input-len", str(args.input_len), "--output-len", str(args.max_tokens)]
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {engine_cpu})  # the engine's processes inherit it
    try:
        engine.start()
    finally:
        os.sched_setaffinity(0, allowed)
    calibration: list[str] = []
    measured, rows, terms = [], [], []
    try:
        engine.wait_healthy(url + "/health", 600)
        os.sched_setaffinity(0, client_cpus)
        for clients, requests in CALIBRATION:
            path = tmp / f"calibrate-{clients}.json"
            measured.append(bench(url, path, ["--concurrency", str(clients)], requests, args, args.engine_python))
            calibration += ["--calibrate", str(path)]
        for label, load, requests in HELD_OUT:
            advice = dspark(["advise", *plan, "--requests", str(requests), *load, *calibration, "--",
                             "--max-model-len", str(MAX_LEN), "--enforce-eager"], args.engine_python)
            (pred,) = advice["predictions"]
            bench_load = ["--concurrency", load[1]] if load[0] == "--clients" else [*load, "--concurrency", "64"]
            got = bench(url, tmp / "held-out.json", bench_load, requests, args, args.engine_python)
            rows.append((label, pred, got, advice["model"].get("fitted") or []))
            terms = advice["model"]["terms"]
    finally:
        os.sched_setaffinity(0, allowed)
        engine.stop(30)
    return measured, rows, terms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    engines = Path(os.environ.get("DSPARK_ENGINES_DIR", ROOT / ".engines"))
    parser.add_argument("--engine-python", default=str(engines / "vllm" / "bin" / "python"))
    parser.add_argument("--models", type=Path, default=None, help="where the tiny models are cached")
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    model = tiny_model(args.engine_python, args.models)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        measured, rows, terms = measure(args, model, Path(tmp))
    print(f"vLLM CPU engine (tiny Qwen3, {SEATS} seats, {args.input_len} + {args.max_tokens} tokens a request), "
          f"calibrated on {', '.join(f'{c} client(s) x {n} requests' for c, n in CALIBRATION)}; "
          f"{time.monotonic() - start:.0f} s, load average {os.getloadavg()[0]:.1f}")
    for (clients, _), point in zip(CALIBRATION, measured, strict=True):
        print(f"  calibration, {clients} client(s): TTFT mean {point['ttft_mean_s']:.3g} s, per-stream "
              f"{point['per_stream_decode_tps']:.3g} tok/s, wall {point['wall_time_s']:.3g} s")
    print("  fitted step cost: " + "; ".join(terms))
    worst = 0.0
    for label, pred, got, fitted in rows:
        cells = []
        for name, pkey, mkey in FIGURES:
            value, actual = pred.get(pkey), got.get(mkey)
            err = (value / actual - 1) if value is not None and actual else float("nan")
            worst = max(worst, abs(err))
            cells.append(f"{name} {value:.3g} vs {actual:.3g} ({err:+.0%})" if value is not None and actual
                         else f"{name} –")
        print(f"  {label} [{pred['simulator']}; fitted {', '.join(fitted) or 'nothing'}]: " + "; ".join(cells))
    print(f"largest error {worst:.0%} (goal: within 15%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
