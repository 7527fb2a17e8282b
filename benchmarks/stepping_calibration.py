"""Calibration against a server with a known step cost, live: bench the stepping fake, fit, predict unseen seats.

The fake (tests/bench/fake_server.py) runs continuous batching with a step of 20 ms + 5 ms per running request
and up to N seats. This benches it at 1, 2, 4 and 8 seats with dspark's own bench (8 clients, 16 requests of
8 prompt tokens and 12 out), calibrates the seat model on the 1- and 4-seat results, and prints what it
predicts at 2 and 8 seats beside what was measured. Wall-clock figures: on a busy machine the event loop's
timer jitter moves them, which is why the unit test (tests/advise/test_calibrate.py) reads benches recorded
here instead of timing its own.

  python -m benchmarks.stepping_calibration                     print the figures
  python -m benchmarks.stepping_calibration --record DIR        also write stepping-N-seats.json bench results
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from dspark.advise.calibrate import fit, points_from_json
from dspark.advise.model import StepCosts, StepShape, simulate
from dspark.bench.client import ClientConfig
from dspark.bench.prompts import synthetic_token_prompts
from dspark.bench.report import to_json
from dspark.bench.runner import BenchSpec, run_bench
from tests.bench.fake_server import FakeConfig, FakeServer

STEP_FIXED_S = 0.020
STEP_PER_RUNNING_S = 0.005
SEATS = (1, 2, 4, 8)


def bench_json(seats: int) -> dict[str, Any]:
    """A `dspark bench --json` result from the stepping fake with `seats` seats (its JSON records them)."""
    async def go() -> str:
        cfg = FakeConfig(step_fixed_s=STEP_FIXED_S, step_per_running_s=STEP_PER_RUNNING_S, seats=seats)
        async with FakeServer(cfg) as srv:
            spec = BenchSpec(client=ClientConfig(base_url=srv.url, model="fake-model", max_tokens=12, concurrency=8),
                             prompts_for_rep=lambda r: synthetic_token_prompts(16, 8, vocab_size=500, seed=r),
                             prompt_source="synthetic ids, 8 tokens, seed 0", sample_interval_s=0.2, seats=seats)
            return to_json(await run_bench(spec))
    data: dict[str, Any] = json.loads(asyncio.run(go()))
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, metavar="DIR", help="write stepping-N-seats.json here")
    args = parser.parse_args()
    benches = {n: bench_json(n) for n in SEATS}
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
        for n, data in benches.items():
            (args.record / f"stepping-{n}-seats.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    points = points_from_json(benches[1], "1 seat") + points_from_json(benches[4], "4 seats")
    shape = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0)
    cal = fit(StepCosts(0.002, 1e12, 1e-6, 1e-4, cpu_per_row_s=1e-4), shape, points)
    print(f"fitted on 1 and 4 seats: fixed {cal.costs.fixed_s * 1e3:.2f} ms, per running request "
          f"{cal.costs.cpu_per_row_s * 1e3:.2f} ms (the server: {STEP_FIXED_S * 1e3:g} ms + "
          f"{STEP_PER_RUNNING_S * 1e3:g} ms per running request)")
    for n in SEATS:
        sim = simulate(cal.costs, shape, points[0].workload, n)  # type: ignore[arg-type]
        measured = benches[n]["summary"]["aggregate_decode_tps"]
        print(f"{n} seats: predicted {sim.aggregate_decode_tps:.1f} tok/s, measured {measured:.1f} "
              f"({sim.aggregate_decode_tps / measured - 1:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
