"""How long `dspark validate --json` takes beside the real engine printing the same KV line.

Usage: python benchmarks/validate_vs_engine.py [--runs 7] [--models DIR]
Builds the tiny dense Qwen3 of tests/real_engines (with the engine venv's transformers), times `dspark validate`
(median of --runs), starts `python -m vllm.entrypoints.openai.api_server` once with the same settings
(--enforce-eager; in its own process group, stopped with SIGTERM then SIGKILL) until it prints
"CPU KV cache size: ...", and prints both times, their ratio and both lines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = Path(os.environ.get("DSPARK_ENGINES_DIR", ROOT / ".engines")) / "vllm" / "bin" / "python"
KV_LINE = re.compile(r"\w+ KV cache size: [\d,]+ tokens, Maximum concurrency for [\d,]+ tokens per request: [\d.]+x")
FLAGS = ["--max-model-len", "2048"]
KV_BYTES = 1 << 30


def build_model(models: Path) -> Path:
    subprocess.run(
        [str(ENGINE_PYTHON), str(ROOT / "tests" / "engine" / "build_tiny_models.py"), str(models), "dense-qwen3"],
        check=True,
        capture_output=True,
    )
    return models / "dense-qwen3"


def time_validate(model: Path, runs: int) -> tuple[float, str]:
    dspark = Path(sys.executable).with_name("dspark")
    argv = [str(dspark if dspark.exists() else "dspark"), "validate", "--model", str(model), "--engine", "vllm",
            "--platform", "cpu", "--kv-cache-memory", str(KV_BYTES), "--json", "--", *FLAGS]  # fmt: skip
    times = []
    line = ""
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        report = json.loads(proc.stdout)
        line = str(report["capacity"]["details"]["kv_line"])
    return statistics.median(times), line


def time_engine(model: Path) -> tuple[float, str]:
    argv = [str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), *FLAGS,
            "--kv-cache-memory-bytes", str(KV_BYTES), "--skip-tokenizer-init", "--enforce-eager",
            "--host", "127.0.0.1", "--port", "18431"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "engine.log"
        start = time.perf_counter()
        with log.open("w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        match = None
        try:
            while proc.poll() is None and time.perf_counter() - start < 600:
                match = KV_LINE.search(log.read_text(errors="replace"))
                if match:
                    break
                time.sleep(0.1)
            elapsed = time.perf_counter() - start
        finally:
            for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=wait)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
        if match is None:
            raise SystemExit(f"the engine printed no KV line:\n{log.read_text(errors='replace')[-3000:]}")
    return elapsed, match.group(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--models", type=Path, default=None, help="where the tiny model is built (default: a tmp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.models or Path(tmp))
        validate_s, predicted = time_validate(model, args.runs)
        engine_s, printed = time_engine(model)
    print(f"dspark validate --json (median of {args.runs}): {validate_s:.3f} s")
    print(f"vLLM 0.32.0 CPU, launch to KV line (--enforce-eager): {engine_s:.1f} s")
    print(f"ratio: the engine takes {engine_s / validate_s:.0f}x as long")
    print(f"predicted: {predicted}")
    print(f"engine:    {printed}")
    print("match" if predicted == printed else "MISMATCH")
    return 0 if predicted == printed else 1


if __name__ == "__main__":
    sys.exit(main())
