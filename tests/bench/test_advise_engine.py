"""The seat advisor against the real vLLM CPU engine: bench a tiny model with 1, 2 and 4 requests decoding
together, calibrate on 1 and 4, and predict 2's aggregate decode (within 15%; the error is printed).

One engine start (max_num_seqs 4, --enforce-eager) serves every bench: with as many clients as the seat count
under test, the engine's batch holds exactly that many requests, as a restart at that seat count would. The
seat counts are interleaved over three rounds, so a neighbour's load on this shared machine lands on all of them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dspark.bench.supervise import EngineProcess
from dspark.cli import main
from dspark.launch import LaunchPlan
from tests.bench.helpers import free_port

SEATS = (1, 2, 4)
ROUNDS = 3
OUT_TOKENS = 96
IN_TOKENS = 16


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_calibrated_on_two_seat_counts_the_third_is_predicted(tiny_model: Path, vllm_python: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    plan = LaunchPlan(engine="vllm", argv=(
        vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model), "--max-num-seqs", "4",
        "--kv-cache-memory-bytes", str(8 << 20), "--max-model-len", "1024", "--enforce-eager",
        "--skip-tokenizer-init", "--host", "127.0.0.1", "--port", str(port)))
    engine = EngineProcess(plan, log_path=tmp_path / "engine.log")
    engine.start()
    files: dict[int, list[Path]] = {n: [] for n in SEATS}
    try:
        engine.wait_healthy(url + "/health", 600)
        for rnd in range(ROUNDS):
            for n in SEATS:
                out = tmp_path / f"bench-{n}-{rnd}.json"
                rc = main(["bench", "--url", url, "--requests", str(3 * n), "--concurrency", str(n), "--max-tokens",
                           str(OUT_TOKENS), "--input-len", str(IN_TOKENS), "--vocab-size", "512", "--seed", str(rnd),
                           "--no-metrics", "--no-progress", "--json", "--out", str(out)])
                assert rc == 0, capsys.readouterr().err[-2000:]
                files[n].append(out)
    finally:
        engine.stop(30)
    capsys.readouterr()
    calibrate = [arg for n in (1, 4) for f in files[n] for arg in ("--calibrate", str(f))]
    rc = main(["advise", "--model", str(tiny_model), "--engine", "vllm", "--platform", "cpu", "--kv-cache-memory",
               str(8 << 20), "--seats", "2", "--clients", "2", "--requests", "6", "--input-len", str(IN_TOKENS),
               "--output-len", str(OUT_TOKENS), *calibrate, "--json", "--", "--max-model-len", "1024"])
    printed = capsys.readouterr()
    assert rc == 0, printed.err[-2000:]
    advice = json.loads(printed.out)
    assert advice["model"]["calibration_points"] == 2 * ROUNDS
    assert advice["model"]["fitted"][:2] == ["fixed_s", "per_token_s"]
    predicted = advice["predictions"][0]["aggregate_decode_tps"]
    runs = [json.loads(f.read_text())["summary"]["aggregate_decode_tps"] for f in files[2]]
    measured = math.prod(runs) ** (1 / len(runs))  # geometric mean, as the fit weighs the calibration runs
    err = predicted / measured - 1
    with capsys.disabled():
        seen = {n: [round(json.loads(f.read_text())["summary"]["aggregate_decode_tps"], 1) for f in files[n]]
                for n in SEATS}
        print(f"\nreal vLLM CPU engine, aggregate decode tok/s by seats (per round): {seen}; calibrated on 1 and 4 "
              f"({', '.join(advice['model']['fitted'])}), 2 seats predicted {predicted:.1f}, measured "
              f"{measured:.1f} ({err:+.1%})")
    assert abs(err) < 0.15
