"""The SGLang scheduler replay (dspark_inside.sglang.replay_scheduler) against SGLang's own cache
classes, in SGLang 0.5.23's interpreter (advise's wiring of it: tests/engines/sglang/test_replay_input.py).

One SGLang process (sglang_replay_check.py) runs every case: the replay, and beside it a tally of the prefix hits
by SGLang's classic RadixCache fed the same token ids in the order of the prefill batches the replay reports.
The workloads are the vLLM replay test's, at 2 and 8 seats:

(a) 12 distinct prompts of 350 tokens + 60 out, all at once in file order, then re-sent the same way;
(b) 24 prompts behind 4 shared 250-token system prefixes (taken in turn) with distinct 200-token tails, 100 out,
    sent and re-sent;
(c) 8 prompts of 100 tokens + 300 out in a pool of 2,000 tokens: at 8 seats they outgrow it and SGLang retracts.
    Requests that ignore EOS (as dspark bench sends them) are admitted with their whole remaining output reserved,
    up to SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION tokens (4,096 by default): SGLang retracts only past that clip, so
    this process runs with SGLang's own setting at 128 (no other case asks for more than 100 tokens).

Plans: a dense model with pages of 1 and of 16 (a prefix of 250 tokens is cached as 240 there), a pool that
evicts nothing (20,000 tokens) so that the tally must equal what the replay counted, request by request; a hybrid
GDN model with EAGLE drafts and the extra-buffer Mamba radix cache, whose hits SGLang takes only where it kept a
state (at most the tally's, on the 64-token state grid); and the recipes flash-next-sglang (8 and 16 seats) and
qwen27b-dflash-sglang (8 and 32 asked: 22 run) on the pools `dspark validate` plans, as `dspark advise` hands them.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from dspark.advise.model import StepCosts, StepShape
from dspark.advise.replay import engine_part, pass_prediction, replay_request, step_cost
from dspark.advise.workload import WorkloadRequest, arrivals_of
from dspark.engines.inside import inside_env
from dspark.planning.validate import ValidateRequest, validate

HERE = Path(__file__).resolve().parent
PREFIX = "SGLANG-REPLAY-CHECK "
SEATS = (2, 8)
MAX_LEN = 4096
COST = step_cost(StepCosts(fixed_s=0.01, bandwidth_bytes_per_s=5e11, per_token_s=1e-5, prefill_per_token_s=2e-5),
                 StepShape(dense_weight_bytes=2e9, expert_weight_bytes=0, num_experts=None, top_k=None,
                           kv_bytes_per_token=4096, state_bytes_per_seat=0, speculative_tokens=0, emitted_per_step=1))
MAMBA_CHUNK = 64  # the FLA chunk: where the extra-buffer Mamba cache keeps states (mamba_cache_chunk_size)


def _workloads() -> dict[str, list[WorkloadRequest]]:
    rng = random.Random(7)  # noqa: S311 - test prompts

    def ids(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(10, 30000) for _ in range(n))

    prefixes = [ids(250) for _ in range(4)]
    return {
        "a": [WorkloadRequest(ids(350), 60) for _ in range(12)],
        "b": [WorkloadRequest(prefixes[i % 4] + ids(200), 100) for i in range(24)],
        "c": [WorkloadRequest(ids(100), 300) for _ in range(8)],
    }


def _details(seats: int, pool: int, *, page: int = 1, hybrid: bool = False) -> dict[str, Any]:
    """Capacity details as validate gives them for SGLang (the keys the replay reads)."""
    d: dict[str, Any] = {"page_size": page, "chunked_prefill_size": 2048, "max_total_num_tokens": pool,
                         "max_running_requests": seats, "speculative_algorithm": None, "radix_cache": True}
    if hybrid:
        d.update(speculative_algorithm="EAGLE", speculative_num_steps=3, speculative_eagle_topk=1,
                 speculative_num_draft_tokens=4,
                 mamba={"strategy": "extra_buffer", "ratio": 5, "max_mamba_cache_size": 5 * seats})
    return d


def _request(plan: dict[int, dict[str, Any]], requests: list[WorkloadRequest], *, warm: bool,
             pattern: list[int] | None = None) -> dict[str, Any]:
    first = plan[min(plan)]
    part, _, _ = engine_part("sglang", None, first, MAX_LEN, 0, seat_details=plan)
    return replay_request(part, sorted(plan), requests, arrivals_of(len(requests), None, math.inf), warm=warm,
                          pattern=pattern or [0], cost=COST)


def _recipe_request(recipe: str, seats: tuple[int, ...], requests: list[WorkloadRequest]) -> tuple[
        dict[str, Any], dict[int, dict[str, Any]]]:
    """The replay request `dspark advise` builds for a recipe, and validate's details at each seat count run."""
    reports = [validate(ValidateRequest(recipe=recipe, flags={"max_num_seqs": n})) for n in seats]
    plan = {r.capacity.max_num_seqs: dict(r.capacity.details) for r in reports}
    cap = reports[0].capacity
    part, _, _ = engine_part("sglang", None, cap.details, cap.max_model_len, 1, seat_details=plan)
    request = replay_request(part, sorted(plan), requests, arrivals_of(len(requests), None, math.inf), warm=True,
                             pattern=[2, 3], cost=COST)
    return request, plan


@pytest.fixture(scope="module")
def checked(sglang_python: str) -> tuple[dict[str, Any], dict[str, dict[int, dict[str, Any]]], float]:
    """Every case through one SGLang process: {case: {answer, tally}}, the recipes' plans, and the seconds taken."""
    w = _workloads()
    big = {n: _details(n, 20000) for n in SEATS}
    rng = random.Random(11)  # noqa: S311 - test prompts
    system = tuple(rng.randrange(10, 150000) for _ in range(2000))
    shared = [WorkloadRequest(system + tuple(rng.randrange(10, 150000) for _ in range(500)), 64) for _ in range(24)]
    flash, flash_plan = _recipe_request("flash-next-sglang", (8, 16), shared)
    qwen, qwen_plan = _recipe_request("qwen27b-dflash-sglang", (8, 32), shared)
    cases = [
        {"name": "a", "request": _request(big, w["a"], warm=True), "tally": True},
        {"name": "b", "request": _request(big, w["b"], warm=True), "tally": True},
        {"name": "b-page16", "request": _request({n: _details(n, 20000, page=16) for n in SEATS}, w["b"], warm=True),
         "tally": True},
        {"name": "a-hybrid", "request": _request({n: _details(n, 20000, hybrid=True) for n in SEATS}, w["a"],
                                                 warm=True, pattern=[1, 2]), "tally": True},
        {"name": "b-hybrid", "request": _request({n: _details(n, 20000, hybrid=True) for n in SEATS}, w["b"],
                                                 warm=True, pattern=[1, 2]), "tally": True},
        {"name": "a-small", "request": _request({n: _details(n, 3000) for n in SEATS}, w["a"], warm=True)},
        {"name": "c-small", "request": _request({n: _details(n, 2000) for n in SEATS}, w["c"], warm=False)},
        {"name": "flash-next", "request": flash},
        {"name": "qwen27b", "request": qwen},
    ]
    job = {"env": {"SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "128"}, "cases": cases}
    start = time.monotonic()
    proc = subprocess.run([sglang_python, str(HERE / "sglang_replay_check.py")], input=json.dumps(job),
                          capture_output=True, text=True, timeout=600, check=False, env=inside_env())
    seconds = time.monotonic() - start
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(PREFIX)), None)
    assert line is not None, proc.stderr[-4000:]
    results: dict[str, Any] = json.loads(line[len(PREFIX):])
    for name, result in results.items():
        assert result["answer"]["ok"], (name, result["answer"].get("error"))
    return results, {"flash-next": flash_plan, "qwen27b": qwen_plan}, seconds


def _passes(result: dict[str, Any], seats: int) -> list[dict[str, Any]]:
    r = next(x for x in result["answer"]["results"] if x["seats"] == seats)
    return [r[k] for k in ("cold", "warm") if r.get(k)]


@pytest.mark.engine
@pytest.mark.parametrize("case", ["a", "b", "b-page16"])
def test_prefix_hits_are_the_radix_caches_own(checked: tuple[dict[str, Any], Any, float], case: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    results, _, seconds = checked
    result = results[case]
    prompt_tokens = sum(len(r.prompt) for r in _workloads()[case[0]])
    rows = []
    for seats in SEATS:
        tallied = result["tally"][str(seats)]
        for label, p, hits in zip(("cold", "warm"), _passes(result, seats), tallied, strict=True):
            assert p["cached_tokens"] == hits, (case, seats, label)  # request by request
            assert p["prefix_cache_hits"] == sum(hits), (case, seats, label)
            assert p["prefix_cache_queries"] == prompt_tokens, (case, seats, label)
            rows.append(f"{case:<9} {seats} seats {label}: {p['prefix_cache_hits']:>6} of "
                        f"{p['prefix_cache_queries']} prompt tokens cached (RadixCache tally {sum(hits)})")
    with capsys.disabled():
        print(f"\nSGLang replay vs RadixCache tally ({seconds:.0f} s for all cases, one SGLang import):")
        print("\n".join(rows))
    warm = {s: _passes(result, s)[1]["prefix_cache_hits"] for s in SEATS}
    assert all(v > 0 for v in warm.values())  # the re-sent prompts were found


@pytest.mark.engine
@pytest.mark.parametrize("case", ["a-hybrid", "b-hybrid"])
def test_hybrid_hits_land_on_kept_states(checked: tuple[dict[str, Any], Any, float], case: str) -> None:
    results, _, _ = checked
    result = results[case]
    assert result["answer"]["kv"]["tree_components"] == ["FULL", "MAMBA"]
    for seats in SEATS:
        for p, hits in zip(_passes(result, seats), result["tally"][str(seats)], strict=True):
            for got, full in zip(p["cached_tokens"], hits, strict=True):
                assert got <= full and got % MAMBA_CHUNK == 0, (case, seats, got, full)
    # The Mamba pool holds 5 slots per seat: at 2 seats it cannot keep the states of 12 distinct prompts.
    if case == "a-hybrid":
        assert _passes(result, 8)[1]["prefix_cache_hits"] > _passes(result, 2)[1]["prefix_cache_hits"]


@pytest.mark.engine
def test_a_small_pool_evicts_and_retracts(checked: tuple[dict[str, Any], Any, float]) -> None:
    results, _, _ = checked
    warm_small = {s: _passes(results["a-small"], s)[1]["prefix_cache_hits"] for s in SEATS}
    warm_big = {s: _passes(results["a"], s)[1]["prefix_cache_hits"] for s in SEATS}
    assert all(warm_small[s] < warm_big[s] for s in SEATS), (warm_small, warm_big)
    c2, c8 = (_passes(results["c-small"], s)[0] for s in SEATS)
    assert c2["preemptions"] == 0 and c8["preemptions"] >= 1, (c2["preemptions"], c8["preemptions"])
    assert c8["kv_peak_fraction"] > 0.9
    assert sum(c8["output_tokens"]) == 8 * 300  # retracted requests still finish, at their max_tokens


@pytest.mark.engine
@pytest.mark.parametrize(("recipe", "seats", "drafts"),
                         [("flash-next", (8, 16), "EAGLE"), ("qwen27b", (8, 22), "DFLASH")])
def test_recipes_replay_on_their_planned_pools(checked: tuple[dict[str, Any], Any, float], recipe: str,
                                               seats: tuple[int, int], drafts: str) -> None:
    results, plans, _ = checked
    answer = results[recipe]["answer"]
    plan = plans[recipe]
    assert tuple(sorted(plan)) == seats  # qwen27b: 32 asked, SGLang runs 22 (its state-slot cap)
    for r in answer["results"]:
        n = r["seats"]
        assert plan[n]["speculative_algorithm"] == drafts
        cold, warm = pass_prediction(r["cold"]), pass_prediction(r["warm"])
        assert cold.running_peak <= n and cold.requests == 24
        assert 0 < cold.kv_peak_fraction <= 1 and 0 < cold.kv_mean_fraction <= cold.kv_peak_fraction
        assert cold.prefix_cache_hit_rate is not None and warm.prefix_cache_hit_rate is not None
        assert warm.prefix_cache_hit_rate > cold.prefix_cache_hit_rate > 0  # the shared 2,000 tokens, then all
    assert answer["kv"]["max_total_tokens"] == plan[seats[0]]["max_total_num_tokens"]
    assert answer["kv"]["tree_components"] == ["FULL", "MAMBA"]
    assert answer["kv"]["mamba_slots"] == plan[seats[0]]["mamba"]["max_mamba_cache_size"]
