"""The real seat sweep on vLLM's CPU build: 2 seat counts x 2 reps from a recipe, JSON, table and PNG.

What it must show (issue #4): 0 errors, 0 preemptions, each engine's own log confirming the planned seats and
the predicted KV pool, and a warm re-run whose prefix-cache hit rate, read from the engine's /metrics, is above
zero. Engine starts use --enforce-eager (~25-70 s each on the shared 2-core machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from dspark.cli import main
from tests.bench.helpers import FIXTURES, free_port

# 12 prompts of 300 token ids: two full 128-token blocks each can hit the prefix cache on the warm re-run.
# /metrics once a second: vLLM renders it on the API server's event loop (~0.1 s on this shared 2-core box), and
# sampling every 0.25 s doubled TTFT here.
LOAD = ["--requests", "12", "--concurrency", "4", "--max-tokens", "128", "--input-len", "300", "--vocab-size", "512",
        "--sample-interval", "1"]


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_real_sweep_two_seat_counts_two_reps(tiny_model: Path, vllm_python: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "tiny-cpu-sweep.yaml"
    recipe.write_text((FIXTURES / "tiny-cpu-sweep.yaml").read_text().replace("MODEL_DIR", str(tiny_model)))
    out_dir = tmp_path / "sweep"
    rc = main([
        "sweep", str(recipe), "--platform", "cpu", "--port", str(free_port()), "--engine-python", vllm_python,
        "--seats", "2,4", "--reps", "2", "--warm-rerun", *LOAD,
        "--primary", "wall_time", "--adopt-at", "10%", "--max-regression", "10%",
        "--out-dir", str(out_dir), "--no-progress",
    ])
    printed = capsys.readouterr()
    with capsys.disabled():
        print("\n" + printed.out)  # the table, for the CI log
    data = json.loads((out_dir / "sweep.json").read_text())
    problems = [p for s in data["settings"] for p in s["problems"]]
    assert rc == 0, f"sweep not clean: {problems}\n{printed.err[-3000:]}"
    assert data["clean"] is True and problems == []
    assert data["seats"] == [2, 4] and data["reps"] == 2
    assert data["rule"]["primary"] == "wall_time_s" and data["rule"]["adopt_at"] == 0.1
    assert data["decision"]["chosen"] in ("2 seats", "4 seats")
    for s, seats in zip(data["settings"], (2, 4), strict=True):
        launch = s["launch"]
        assert launch["seats_confirmed"] is True and launch["mismatched"] == []
        assert launch["kv_pool_tokens"] == launch["expected_pool_tokens"] == 8192  # the recipe's 8 MiB pin
        assert f"--max-num-seqs {seats}" in " ".join(s["argv"])
        summary = s["bench"]["summary"]
        assert summary["errors"] == 0 and summary["preemptions"] == 0
        assert [p["label"] for p in s["bench"]["reps"]] == ["rep 1", "rep 2"]
        assert all(p["stats"]["output_tokens"] == 12 * 128 for p in s["bench"]["reps"])
        assert summary["aggregate_decode_tps"] > 0 and summary["ttft_mean_s"] > 0
        warm = s["bench"]["warm"]["engine"]
        assert warm["prefix_hit_rate"] > 0, "the warm re-run must hit the prefix cache (engine /metrics)"
        assert s["stop"]["returncode"] is not None and not s["stop"]["killed"]
        assert "KV cache size: 8,192 tokens" in (out_dir / f"engine-{seats}-seats.log").read_text()
    table = (out_dir / "sweep.md").read_text()
    assert table.startswith("Seat sweep: 2-rep mean per setting; Δ against 2 seats")
    assert "| Warm re-run: prefix hits " in table and printed.out.startswith(table)
    assert (out_dir / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # dspark advise's prediction, made before the runs, is kept beside what they measured.
    assert [p["seats"] for p in data["prediction"]["predictions"]] == [2, 4]
    assert "Predicted before the runs (dspark advise, uncalibrated) against measured:" in table
    # The engine is installed, so the prediction is its own scheduler replaying the sweep's load, warm re-run
    # included: 12 distinct prompts (no cold hits), each re-sent prompt's two full blocks found, as the engine
    # found them on the re-run of the second rep's prompts (the first rep's blocks are the ones LRU evicts).
    measured = {s["seats"]: s["bench"]["summary"] for s in data["settings"]}
    for p in data["prediction"]["predictions"]:
        assert p["simulator"] == "vllm 0.32.0 scheduler"
        assert p["prefix_cache_queries"] == 12 * 300 and p["prefix_cache_hits"] == 0
        assert p["warm"]["prefix_cache_hits"] == 12 * 256
        assert abs(p["warm"]["prefix_cache_hit_rate"] - measured[p["seats"]]["warm_prefix_hit_rate"]) <= 0.02
    assert "    vllm 0.32.0 scheduler: prefix hits 0.0% vs 0.0%; warm re-run prefix hits 85.3% vs " in table
    # No engine process survives the sweep.
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(tiny_model) in " ".join(p.info["cmdline"] or [])]
