"""`dspark advise --workload ... --warm` through the installed engine's scheduler, end to end, on both releases.

vLLM 0.32.0 (the CPU build): the command of the docs on a tiny model, every new key in both passes at both seat
counts. vLLM 0.33.0's code (its wheel beside CPU torch): Flash-Next's plan (GB10 pair, "align" GDN state,
MTP 4) replayed by its AsyncScheduler (CUDA's default) on the pool its planner makes of that plan, which is
dspark's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dspark.cli import main

KEYS = ("prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate", "preemptions", "kv_peak_fraction",
        "kv_mean_fraction", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_ms", "wall_time_s")


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_advise_workload_warm_through_the_engines_scheduler(vllm_python: str, tiny_models: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)  # noqa: S311 - test prompts
    workload = tmp_path / "w.jsonl"
    workload.write_text("".join(json.dumps({"prompt": [rng.randrange(10, 500) for _ in range(300)],
                                            "max_tokens": 20 + i}) + "\n" for i in range(10)))
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", vllm_python)
    rc = main(["advise", "--model", str(tiny_models / "dense-qwen3"), "--engine", "vllm", "--platform", "cpu",
               "--kv-cache-memory", str(40 * 128 * 1024), "--seats", "2,8", "--workload", str(workload),
               "--request-rate", "inf", "--warm", "--json", "--", "--max-model-len", "4096"])
    out = capsys.readouterr()
    assert rc in (0, 1), out.err[-2000:]
    data = json.loads(out.out)
    preds = data["predictions"]
    assert [p["seats"] for p in preds] == [2, 8]
    for p in preds:
        assert p["simulator"] == "vllm 0.32.0 scheduler"
        assert p["prefix_cache_queries"] == 10 * 300 and p["prefix_cache_hits"] == 0  # distinct prompts, cold
        assert all(p[k] is not None for k in KEYS)
        warm = p["warm"]
        assert warm["prefix_cache_queries"] == 10 * 300 and warm["prefix_cache_hits"] > 0
        assert all(k in warm for k in KEYS)
    assert preds[1]["kv_peak_fraction"] > preds[0]["kv_peak_fraction"]
    # The CPU platform turns async scheduling off: the engine's Scheduler, one batch at a time, as replayed.
    assert any(a.startswith("simulated by vllm 0.32.0 scheduler (Scheduler, the class and loop the engine uses")
               for a in data["assumptions"])


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_flash_next_plan_replayed_by_0_33s_scheduler(vllm033_python: str, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", vllm033_python)
    rc = main(["validate", "flash-next-vllm", "--max-num-seqs", "8", "--json"])
    details = json.loads(capsys.readouterr().out)["capacity"]["details"]
    assert rc in (0, 1)
    rc = main(["advise", "flash-next-vllm", "--seats", "8", "--requests", "12", "--input-len", "2000",
               "--output-len", "64", "--shared-prefix", "1200", "--clients", "1", "--simulator", "engine",
               "--json"])
    out = capsys.readouterr()
    assert rc in (0, 1), out.err[-2000:]
    data = json.loads(out.out)
    (pred,) = data["predictions"]
    assert pred["simulator"] == "vllm 0.33.0 scheduler"
    # CUDA with MTP: async scheduling on, so the AsyncScheduler behind EngineCore's batch queue of 2.
    assert any(a.startswith("simulated by vllm 0.33.0 scheduler (AsyncScheduler, 2 batches in flight,")
               for a in data["assumptions"])
    assert details["async_scheduling"] is True and details["max_concurrent_batches"] == 2
    # One client: each request runs alone, after the first has computed the shared 1,200 tokens. Its hits end
    # on the engine's grid (0.33's GDN prefill checkpoints can be finer than a block) within the shared prefix:
    # at least its one full 576-token block, never past the 1,200 shared tokens (the tails are distinct).
    block = int(details["block_size"])
    assert block == 576
    assert 11 * block <= pred["prefix_cache_hits"] <= 11 * 1200
    assert pred["prefix_cache_queries"] == 12 * 2000 and pred["preemptions"] == 0
    # 8 requests of 2,064 tokens at most: 3 GDN groups x (1 + 4) state blocks + cdiv(2,068, 576) attention blocks,
    # the shared prefix held once; well under the plan's pool.
    assert 0 < pred["kv_peak_fraction"] < 8 * (15 + 4) / (int(details["num_blocks"]) - 1) + 1e-9


@pytest.mark.engine
@pytest.mark.timeout(600)
@pytest.mark.parametrize("clients", [8, 32])
def test_the_engines_scheduler_times_a_gpu_plan_as_the_advisors_model_does(
        clients: int, vllm_python: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 Qwen3-8B shape of the recorded device runs (1,024 + 256 tokens, 2 × clients requests): replayed
    through vLLM's own scheduler its clock is the advisor's model's (the API server's hop and serial intake, the
    idle engine's wake-up, the batch queue's cut after the CPU path, the first token's hop back): the four figures
    within 1% of --simulator dspark's (0.32's Scheduler here against the model's async loop: a step at most)."""
    model = tmp_path / "qwen3-8b"
    model.mkdir()
    config = Path(__file__).resolve().parents[1] / "device" / "configs" / "qwen3-8b.json"
    (model / "config.json").write_text(config.read_text())
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", vllm_python)
    args = ["advise", "--model", str(model), "--engine", "vllm", "--hardware", "h200", "--engine-version", "0.25.0",
            "--seats", "128", "--clients", str(clients), "--requests", str(2 * clients), "--input-len", "1024",
            "--output-len", "256", "--json"]
    figures = {}
    for simulator in ((), ("--simulator", "dspark")):
        assert main([*args, *simulator, "--", "--max-model-len", "8192"]) in (0, 1)
        figures[simulator] = json.loads(capsys.readouterr().out)["predictions"][0]
    replay, model_ = figures[()], figures[("--simulator", "dspark")]
    assert replay["simulator"].endswith("scheduler") and model_["simulator"].startswith("dspark model")
    for key in ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_s", "wall_time_s"):
        assert replay[key] == pytest.approx(model_[key], rel=0.01), key
