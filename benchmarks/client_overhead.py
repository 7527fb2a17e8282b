"""The bench client's own CPU time per streamed token at 256 concurrent streams, against a fast local server.

Runs tests/bench/fake_server.py in its own process (so its CPU is not counted) and streams from it with
dspark's client, measuring this process's CPU time (time.process_time) over the pass. Two modes:
  paced    the server sends each stream's tokens --token-delay apart, one SSE event per network write: the
           worst case for the client (one read and one JSON parse per token), like a real engine's decode loop;
  unpaced  the server writes as fast as it can (events coalesce into larger reads).
The client is not the bottleneck when its CPU share of the wall time is well below one core per client process
and its ceiling (1 / CPU per token, per core) is far above the token rate the engine delivers. CPU time is the
clients' own during the pass (with --processes N > 1, summed over the N client processes).

  python -m benchmarks.client_overhead [--streams 256] [--tokens 200] [--token-delay 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from dspark.bench.client import ClientConfig
from dspark.bench.shard import run_pass
from dspark.bench.stats import summarize

ROOT = Path(__file__).resolve().parents[1]

FAKE = ROOT / "tests" / "bench" / "fake_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(token_delay: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", str(port), "--token-delay", str(token_delay)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the fake server did not start")


async def measure(url: str, streams: int, tokens: int, requests_per_stream: int, processes: int) -> dict[str, float]:
    cfg = ClientConfig(base_url=url, model="fake-model", max_tokens=tokens, concurrency=streams, timeout_s=600,
                       processes=processes)
    prompts = [[11, 12, 13, 14]] * (streams * requests_per_stream)
    used: list[float] = []
    records, wall = await run_pass(cfg, prompts, cpu=used)
    cpu, elapsed = used[0], wall
    s = summarize(records, wall)
    assert s.errors == 0, s.error_messages
    return {"streams": streams, "processes": processes, "tokens": s.output_tokens, "wall_s": elapsed,
            "client_cpu_s": cpu, "cpu_us_per_token": cpu / s.output_tokens * 1e6, "client_cpu_share": cpu / elapsed,
            "tokens_per_s": s.output_tokens / elapsed, "ceiling_tokens_per_s": s.output_tokens / cpu}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--tokens", type=int, default=200, help="output tokens per request")
    p.add_argument("--requests-per-stream", type=int, default=2)
    p.add_argument("--token-delay", type=float, default=0.02, help="paced mode: seconds between a stream's tokens")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4], help="client process counts to measure")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    results = {}
    for mode, delay in (("paced", a.token_delay), ("unpaced", 0.0)):
        for procs in a.processes:
            proc, url = start_server(delay)
            try:
                r = asyncio.run(measure(url, a.streams, a.tokens, a.requests_per_stream, procs))
            finally:
                proc.terminate()
                proc.wait(10)
            results[f"{mode}, {procs} client process(es)"] = r
            print(f"{mode:>8}, {procs} client process(es): {r['tokens']:,} tokens in {r['wall_s']:.1f} s "
                  f"({r['tokens_per_s']:,.0f} tok/s); client CPU {r['client_cpu_s']:.2f} s = "
                  f"{r['cpu_us_per_token']:.1f} µs/token, {r['client_cpu_share']:.0%} of one core; "
                  f"ceiling {r['ceiling_tokens_per_s']:,.0f} tok/s per core", flush=True)
    if a.out:
        from dspark.bench.report import write_atomic  # noqa: PLC0415 - rich and friends only when writing

        write_atomic(a.out, json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": results},
                                       indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
