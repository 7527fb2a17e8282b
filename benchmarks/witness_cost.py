"""What the witness costs: `start`'s engine check with and without it, and `validate` with the version lookup.

The witness runs in the argv check's process, after the engine is imported for its parser, so its cost is the
difference between the two checks below (target: <= 15 s on the project's 2-core machine). `validate` without
--engine-check only reads the engine's dist-info (no engine import): compared with the same command on a
checkout without version detection (--baseline DIR, e.g. the main worktree), and with --engine-version given
(no lookup at all).

  python -m benchmarks.witness_cost --engine-python .engines/vllm/bin/python --model DIR [--reps 3]
      [--baseline /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dspark.engines.inside import MARKER, inside_env, tool_argv
from dspark.planning.validate import ValidateRequest, validate

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], stdin: str = "", env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.monotonic()
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, env=env, timeout=600)
    return time.monotonic() - start, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine-python", required=True)
    parser.add_argument("--model", required=True, help="a model directory (config.json) the engine can size")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline", help="another checkout to time `validate` against (PYTHONPATH=DIR)")
    args = parser.parse_args()

    flags = {"model": args.model, "engine": "vllm", "platform": "cpu", "kv_cache_memory_bytes": "1GiB"}
    request = ValidateRequest(flags=flags, engine_flags=("--max-model-len", "2048"), engine_python=args.engine_python,
                              env={})
    report = validate(request)
    argv = ["--model", args.model, "--max-model-len", "2048"]
    plain, with_witness = [], []
    check = tool_argv(args.engine_python, "vllm.argv_check")
    for _ in range(args.reps):  # alternate, so that load on a shared machine hits both alike
        seconds, _ = timed(check, json.dumps({"argv": argv}), env=inside_env())
        plain.append(seconds)
        payload = {"argv": argv, "witness": report.witness_request}
        seconds, out = timed(check, json.dumps(payload), env=inside_env())
        with_witness.append(seconds)
        answer = json.loads(next(ln for ln in out.splitlines() if ln.startswith(MARKER))[len(MARKER):])["witness"]
    print(f"engine check alone   : median {statistics.median(plain):6.2f} s  {[round(s, 2) for s in plain]}")
    print(f"engine check+witness : median {statistics.median(with_witness):6.2f} s  "
          f"{[round(s, 2) for s in with_witness]}")
    print(f"witness adds         : {statistics.median(with_witness) - statistics.median(plain):+6.2f} s "
          f"(in-process planning: {answer['seconds']} s; agrees: {answer.get('kv_pool_tokens')} tokens)")

    cli = [sys.executable, "-m", "dspark", "validate", "--model", args.model, "--engine", "vllm", "--platform", "cpu",
           "--kv-cache-memory", "1GiB", "--json", "--", "--max-model-len", "2048"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSPARK_ENGINE_PYTHON": args.engine_python}
    variants = {"validate (version read from dist-info)": (cli, env),
                "validate --engine-version 0.32.0": ([*cli[:-4], "--engine-version", "0.32.0", *cli[-4:]], env)}
    if args.baseline:
        variants["validate on the baseline checkout"] = (cli, {**env, "PYTHONPATH": args.baseline})
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.reps):
        for name, (command, environment) in variants.items():
            times[name].append(timed(command, env=environment)[0])
    for name, values in times.items():
        print(f"{name:40s}: median {statistics.median(values):5.2f} s  {[round(s, 2) for s in values]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
