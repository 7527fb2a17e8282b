"""The SGLang scheduler replay's plumbing, without SGLang: what dspark hands the engine-side script (from validate's
details, a pool per seat count), the script's step cost and imports, and how its answer reaches advise's
predictions in the same shape as the vLLM replay's."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from types import ModuleType
from typing import Any

import pytest

from dspark.advise import replay as replay_mod
from dspark.advise.advice import Prediction
from dspark.advise.replay import ReplayError, engine_part, pass_json, replay_result, with_replay
from dspark.cli import main
from dspark.engines.replay import scheduler_replay
from dspark.engines.sglang import replay_input
from dspark.engines.sglang.replay_input import REPLAY_TOOL, replay_engine_part, replay_notes, replay_seat_part
from dspark.planning.validate import ValidateRequest, validate


def _driver() -> ModuleType:
    """The engine-side tool, imported afresh: at import it needs only the standard library."""
    for name in [m for m in sys.modules if m == "dspark_inside" or m.startswith("dspark_inside.")]:
        del sys.modules[name]
    return importlib.import_module("dspark_inside.sglang.replay_scheduler")


def _details(seats: int) -> dict[str, Any]:
    return dict(validate(ValidateRequest(recipe="flash-next-sglang", flags={"max_num_seqs": seats})).capacity.details)


def test_the_registry_finds_sglangs_replay_module() -> None:
    assert scheduler_replay("sglang") is replay_input
    assert importlib.util.find_spec(f"dspark_inside.{replay_input.REPLAY_TOOL}") is not None


def test_the_drivers_step_cost_is_the_shared_one_the_vllm_driver_is_held_to() -> None:
    """Both drivers take step_seconds from dspark_inside.step_cost, the file dspark.perf.step exports too."""
    assert _driver().step_seconds.__module__ == "dspark_inside.step_cost"


def test_the_driver_imports_nothing_but_the_standard_library_at_load() -> None:
    before = set(sys.modules)
    _driver()
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("sglang", "torch", "dspark")}


def test_flash_next_plans_a_pool_per_seat_count_and_sglangs_settings() -> None:
    d8, d16 = _details(8), _details(16)
    part, script, module = engine_part("sglang", None, d8, 262144, 1, seat_details={8: d8, 16: d16})
    assert module is replay_input and script == REPLAY_TOOL
    e = part["engine"]
    assert e["context_len"] == 262144 and e["page_size"] == d8["page_size"]
    assert e["chunked_prefill_size"] == d8["chunked_prefill_size"] == 8192
    assert e["speculative"] == {"algorithm": "EAGLE", "num_steps": 4, "eagle_topk": 1, "num_draft_tokens": 5}
    assert e["mamba"] == {"strategy": "extra_buffer", "chunk_size": None} and e["overlap_schedule"] is True
    assert e["disable_radix_cache"] is False and e["schedule_policy"] is None  # SGLang's default (fcfs)
    plans = part["plans"]
    assert set(plans) == {"8", "16"}
    for n, d in ((8, d8), (16, d16)):
        assert plans[str(n)] == {"max_total_tokens": d["max_total_num_tokens"], "max_running_requests": n,
                                 "max_mamba_cache_size": d["mamba"]["max_mamba_cache_size"]}
    # With MTP on this hybrid, SGLang's state pool grows with the seats and the token pool shrinks.
    assert plans["16"]["max_total_tokens"] < plans["8"]["max_total_tokens"]


def test_launch_flags_reach_the_replay() -> None:
    report = validate(ValidateRequest(recipe="flash-next-sglang", flags={"max_num_seqs": 8},
                                      engine_flags=("--schedule-policy", "lpm", "--enable-mixed-chunk",
                                                    "--disable-radix-cache")))
    e = replay_engine_part(None, report.capacity.details, 262144, 1)["engine"]
    assert e["schedule_policy"] == "lpm" and e["enable_mixed_chunk"] is True and e["disable_radix_cache"] is True


def test_a_plan_without_a_pool_is_refused_with_why() -> None:
    with pytest.raises(ValueError, match=r"KV pool \(max_total_num_tokens\).*dspark validate shows why"):
        replay_seat_part({"max_total_num_tokens": None, "max_running_requests": 8, "page_size": 1})
    with pytest.raises(ReplayError, match="max_total_num_tokens"):
        engine_part("sglang", None, {"page_size": 1, "max_running_requests": 8}, 4096, 0)


def _answer(seats: list[int]) -> dict[str, Any]:
    """An answer in the engine-side script's shape (two requests per pass)."""
    def one(hits: int) -> dict[str, Any]:
        return {"requests": 2, "steps": 9, "wall_time_s": 4.0, "prefill_time_s": 1.0, "prefix_cache_queries": 600,
                "prefix_cache_hits": hits, "preemptions": 1, "kv_peak_fraction": 0.6, "kv_mean_fraction": 0.3,
                "running_peak": 2, "arrival_s": [0.0, 0.0], "first_token_s": [1.0, 2.0], "finish_s": [3.0, 4.0],
                "output_tokens": [5, 5], "cached_tokens": [0, hits], "seconds": 0.1, "cpu_seconds": 0.1,
                "process": 1}
    kv = {"max_total_tokens": 5000, "page_size": 1, "tree_cache": "UnifiedRadixCache",
          "tree_components": ["FULL", "MAMBA"], "allocator": "TokenToKVPoolAllocator",
          "req_to_token_pool": "HybridReqToTokenPool", "schedule_policy": "fcfs"}
    return {"ok": True, "engine_version": "0.5.23", "seconds": 1.0, "setup_seconds": 0.5, "kv": kv,
            "stood_in": ["torchvision"], "results": [{"seats": n, "cold": one(0), "warm": one(300), "kv": kv}
                                                      for n in seats]}


def test_the_answer_becomes_predictions_in_the_vllm_replays_shape() -> None:
    answer = _answer([8])
    result = replay_result(answer, replay_input.simulator_name("0.5.23"), replay_input)
    assert result.simulator == "sglang 0.5.23 scheduler; forward pass by dspark"
    assert result.kv_usage_metric == replay_input.KV_USAGE_METRIC
    assert result.notes == tuple(replay_notes(answer))
    assert "UnifiedRadixCache (FULL+MAMBA)" in result.notes[0] and "fcfs schedule policy" in result.notes[0]
    assert result.notes[1] == "stood in on this host (no effect on a figure): torchvision"
    seat = result.at(8)
    assert seat is not None and seat.warm is not None
    base = Prediction(seats=8, seats_asked=8, aggregate_decode_tps=1.0, per_stream_decode_tps=1.0, ttft_s=1.0,
                      wall_time_s=1.0, decode_step_ms=100.0, kv_pool_tokens=5000, kv_peak_tokens=500,
                      kv_peak_fraction=0.1, kv_usage_metric="dspark's count", pool_holds_workload=True,
                      expert_coverage=None, prefill_share=0.0)
    p = with_replay(base, seat, result.simulator, result.kv_usage_metric)
    assert p.kv_usage_metric.startswith("sglang:token_usage") and p.preemptions == 1
    assert p.prefix_cache_hit_rate == 0.0 and p.warm is not None and p.warm["prefix_cache_hit_rate"] == 0.5
    assert set(p.warm) == set(pass_json(seat.warm))


def test_advise_hands_sglang_each_seat_counts_pool(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    sent: list[dict[str, Any]] = []

    def fake_run(python: str, tool: str, request: dict[str, Any], timeout: float = 600.0) -> dict[str, Any]:
        assert tool == REPLAY_TOOL
        sent.append(json.loads(json.dumps(request)))
        return _answer(request["seats"])

    monkeypatch.setattr(replay_mod, "run_replay", fake_run)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", sys.executable)
    rc = main(["advise", "qwen27b-dflash-sglang", "--seats", "8,32", "--requests", "4", "--input-len", "300",
               "--output-len", "20", "--request-rate", "inf", "--warm", "--simulator", "engine", "--json"])
    out = capsys.readouterr()
    assert rc in (0, 1), out.err[-2000:]
    (request,) = sent
    assert request["seats"] == [8, 22]  # SGLang runs 22 of the 32 asked (its state-slot cap)
    plans = request["plans"]
    for n in (8, 22):
        d: dict[str, Any] = dict(validate(ValidateRequest(recipe="qwen27b-dflash-sglang",
                                                          flags={"max_num_seqs": n})).capacity.details)
        assert plans[str(n)]["max_total_tokens"] == d["max_total_num_tokens"]
        assert plans[str(n)]["max_mamba_cache_size"] == d["mamba"]["max_mamba_cache_size"]
    assert request["engine"]["speculative"]["algorithm"] == "DFLASH" and len(request["requests"]) == 4
    data = json.loads(out.out)
    for p in data["predictions"]:
        assert p["simulator"] == "sglang 0.5.23 scheduler; forward pass by dspark"
        assert p["kv_usage_metric"] == replay_input.KV_USAGE_METRIC
        assert p["prefix_cache_hit_rate"] == 0.0 and p["warm"]["prefix_cache_hit_rate"] == 0.5
        assert not math.isnan(p["wall_time_s"])
    assert any(a.startswith("SGLang's own code: the Scheduler without its model worker") for a in data["assumptions"])


def _mode(decode: bool) -> Any:
    return type("Mode", (), {"is_decode": staticmethod(lambda: decode)})()


def test_a_prefill_batch_of_several_prompts_is_priced_by_each_chunks_own_attention() -> None:
    """Eight 1,024-token prompts in one extend batch attend to 8 × 1,024 × 512 keys, not to 8,192²/2 as one
    prompt of their summed length would (what step_cost assumes when it is not told the pairs); a mixed chunk's
    decode rows add none."""
    driver = _driver()
    reqs = [object() for _ in range(10)]
    prompts = type("Batch", (), {"forward_mode": _mode(False), "extend_num_tokens": 8 * 1024 + 2, "reqs": reqs,
                                 "prefix_lens": [0] * 6 + [256, 256, 900, 700], "extend_lens": [1024] * 8 + [1, 1],
                                 "decoding_reqs": reqs[8:]})()
    rows, context, prefill, pairs = driver._Pass._shape(None, prompts)
    assert (rows, context, prefill) == (2, 2 * 256 + 1600, 8 * 1024)
    assert pairs == 6 * 1024 * 512 + 2 * 1024 * (256 + 512)
    decode = type("Batch", (), {"forward_mode": _mode(True), "reqs": [type("R", (), {"kv": type(
        "KV", (), {"kv_committed_len": 300})()})()] * 3})()
    assert driver._Pass._shape(None, decode) == (3, 900.0, 0, 0.0)
