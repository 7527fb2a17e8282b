"""Client CPU per streamed token: dspark bench against `vllm bench serve`, on one paced streaming server.

Both clients stream from tests/bench/fake_server.py (its own process; one SSE event per network write,
--token-delay apart per stream, like an engine's decode loop) with the same load: --concurrency streams,
--max-tokens tokens per request, ignore_eos. Each client runs as a child process at --small and at --large
requests; its CPU time is the child's user + system time (getrusage of the waited child), and the difference
between the two sizes over the difference in tokens is the CPU per token, start-up (imports, tokenizer) cancelled.

  python -m benchmarks.client_cpu_vs_vllm [--concurrency 32] [--max-tokens 100] [--small 64] [--large 1280]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.bench_vs_vllm import BUILD, free_port

ROOT = Path(__file__).resolve().parents[1]

FAKE = ROOT / "tests" / "bench" / "fake_server.py"


def run(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    import resource  # noqa: PLC0415 - POSIX only, like the engines

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc


def one_run(client: str, n: int, a: argparse.Namespace, url: str, work: Path, model: Path, vllm: str,
            env: dict[str, str]) -> dict[str, float]:
    """One client at n requests: its CPU seconds, output tokens and wall time."""
    if client == "dspark bench":
        out = work / f"dspark-{n}.json"
        argv = [sys.executable, "-m", "dspark", "bench", "--url", url, "--served-model", "fake-model", "--requests",
                str(n), "--concurrency", str(a.concurrency), "--max-tokens", str(a.max_tokens), "--input-len", "16",
                "--no-metrics", "--no-progress", "--out", str(out)]
        cpu, _ = run(argv, env)
        data = json.loads(out.read_text())
        tokens = sum(r["stats"]["output_tokens"] for r in data["reps"])
        wall = data["reps"][0]["stats"]["wall_time_s"]
    else:
        name = f"vllm-{n}.json"
        argv = [vllm, "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", "fake-model",
                "--tokenizer", str(model), "--dataset-name", "random", "--random-input-len", "16",
                "--random-output-len", str(a.max_tokens), "--random-range-ratio", "0", "--num-prompts", str(n),
                "--max-concurrency", str(a.concurrency), "--ignore-eos", "--disable-tqdm", "--save-result",
                "--result-dir", str(work), "--result-filename", name]
        cpu, _ = run(argv, env)
        data = json.loads((work / name).read_text())
        tokens, wall = data["total_output_tokens"], data["duration"]
    print(f"{client:>18}, {n:5d} requests: {tokens:,} tokens in {wall:.1f} s, CPU {cpu:.2f} s", flush=True)
    return {"cpu_s": cpu, "tokens": float(tokens), "wall_s": float(wall)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine-python", default=str(ROOT / ".engines/vllm/bin/python"))
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=100)
    p.add_argument("--small", type=int, default=64)
    p.add_argument("--large", type=int, default=1280)
    p.add_argument("--token-delay", type=float, default=0.02)
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dspark-client-cpu-"))
    model = work / "tokenizer-model"
    subprocess.run([a.engine_python, "-c", BUILD, str(model)], check=True, capture_output=True, timeout=600)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, str(FAKE), "--port", str(port), "--token-delay", str(a.token_delay)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    vllm = str(Path(a.engine_python).with_name("vllm"))
    results: dict[str, dict[str, float]] = {}
    try:
        for _ in range(100):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        for client in ("dspark bench", "vllm bench serve"):
            figures = {}
            for n in (a.small, a.large):
                figures[str(n)] = one_run(client, n, a, url, work, model, vllm, env)
            small, large = figures[str(a.small)], figures[str(a.large)]
            per_token = (large["cpu_s"] - small["cpu_s"]) / (large["tokens"] - small["tokens"]) * 1e6
            results[client] = {**{f"{k}_{n}": v for n, f in figures.items() for k, v in f.items()},
                               "cpu_us_per_token": per_token, "tokens_per_s": large["tokens"] / large["wall_s"]}
            print(f"{client:>18}: {per_token:.1f} µs of client CPU per streamed token "
                  f"({large['tokens'] / large['wall_s']:,.0f} tok/s)", flush=True)
    finally:
        server.terminate()
        server.wait(10)
    ratio = results["dspark bench"]["cpu_us_per_token"] / results["vllm bench serve"]["cpu_us_per_token"]
    print(f"dspark bench / vllm bench serve, CPU per token: {ratio:.2f}")
    if a.out:
        a.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": results,
                                     "ratio": ratio}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
