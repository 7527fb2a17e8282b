"""The KV-usage counting rule: blocks per running request per group over the pool, worked out by hand."""

from __future__ import annotations

import pytest

from dspark.advise.kv_usage import BlockGroup, KVCounting, KVPool, counting_for, token_counting
from dspark.advise.model import StepCosts, StepShape, Workload, simulate
from dspark.engines.sglang.kv_usage import sglang_counting
from dspark.engines.vllm.kv_usage import vllm_counting
from dspark.planning.validate import ValidateRequest, validate


def test_full_attention_holds_every_block_its_tokens_touch() -> None:
    full = BlockGroup(block_tokens=576)
    assert full.blocks(576) == 1
    assert full.blocks(577) == 2
    assert full.blocks(2048 + 511 + 4) == 5  # a 2,048-token prompt, 511 tokens out, 4 lookahead slots
    assert full.blocks(0) == 0


def test_a_sliding_window_frees_the_blocks_wholly_behind_it() -> None:
    # 300 tokens in 16-token blocks touch 19 blocks; a 128-token window skips the first 300 - 128 + 1 = 173
    # tokens, i.e. 10 whole blocks (160 tokens): 9 remain.
    assert BlockGroup(block_tokens=16, window=128).blocks(300) == 9
    # Shorter than the window: nothing skipped.
    assert BlockGroup(block_tokens=16, window=128).blocks(100) == 7


def test_state_groups_hold_a_fixed_count_whatever_the_context() -> None:
    mamba = BlockGroup(block_tokens=0, fixed_blocks=5)
    assert mamba.blocks(1) == mamba.blocks(200_000) == 5
    assert mamba.blocks(0) == 0  # a request that holds no slots yet holds no state either


def test_usage_is_the_fullest_pool() -> None:
    counting = KVCounting("m", (KVPool("tokens", 1000, (BlockGroup(1),)),
                                KVPool("slots", 10, (BlockGroup(0, fixed_blocks=3),))), rule="")
    # Two requests of 100 tokens: 200/1000 = 20% of the tokens, 6/10 = 60% of the slots.
    assert counting.usage([100, 100]) == pytest.approx(0.6)
    assert token_counting(1000).usage([100, 100]) == pytest.approx(0.2)


def _flash_next_capacity(seats: int) -> dict[str, object]:
    report = validate(ValidateRequest(recipe="flash-next-vllm", flags={"max_num_seqs": seats}))
    return dict(report.capacity.details)


def test_vllm_flash_next_counts_three_gdn_groups_of_state_and_the_attention_blocks() -> None:
    details = _flash_next_capacity(8)
    counting = vllm_counting(details)
    assert counting is not None
    # MTP with 4 speculative tokens: each GDN group holds its state block + 4 speculative state blocks
    # (MambaManager: 1 + num_speculative_blocks), attention cdiv(tokens + 4 lookahead, 576).
    groups = details["groups"]
    assert isinstance(groups, list)
    kinds = [g["kind"] for g in groups]
    assert sorted(kinds) == ["full", "mamba", "mamba", "mamba"]
    assert details["lookahead_tokens"] == 4
    assert counting.per_request(2048 + 511) == {"blocks": 3 * (1 + 4) + 5}
    # BlockPool.get_usage divides by num_gpu_blocks - 1 (the null block).
    assert counting.pools[0].size == int(details["num_blocks"]) - 1  # type: ignore[call-overload]
    assert counting.usage([2559] * 8) == pytest.approx(8 * 20 / counting.pools[0].size)


def test_vllm_without_groups_falls_back_to_tokens() -> None:
    assert vllm_counting({"num_blocks": 10}) is None
    assert vllm_counting({"groups": [{"kind": "full", "block_size": 0}], "num_blocks": 10}) is None


def test_a_dense_model_counts_close_to_tokens_over_the_pool() -> None:
    details = {"num_blocks": 1001, "lookahead_tokens": 0,
               "groups": [{"kind": "full", "block_size": 16, "speculative_blocks": 0, "sliding_window": None}]}
    counting = vllm_counting(details)
    assert counting is not None
    # 4 requests of 1,000 tokens: 63 blocks each (1,008 slots) of 1,000 usable blocks.
    assert counting.usage([1000] * 4) == pytest.approx(4 * 63 / 1000)


def test_sglang_takes_the_larger_of_tokens_and_mamba_slots() -> None:
    # extra_buffer with overlap scheduling: ratio 3 + 2 tracking slots; a running request holds its state slot
    # and both ping-pong tracking slots.
    details = {"page_size": 64, "mamba": {"max_mamba_cache_size": 100, "ratio": 5}}
    counting = sglang_counting(details, pool_tokens=1_000_000)
    # 2,000 tokens take 32 pages of 64 (2,048 tokens) of the 15,625 pages; 20 such requests hold 4% of the tokens
    # but 60 of the 100 Mamba slots.
    assert counting.per_request(2000) == {"pages": 32, "mamba slots": 3}
    assert counting.usage([2000] * 20) == pytest.approx(60 / 100)
    assert counting.pools[0].held([2000] * 20) / counting.pools[0].size == pytest.approx(640 / 15_625)
    dense = sglang_counting({"page_size": 1}, pool_tokens=10_000)
    assert dense.usage([2000, 3000]) == pytest.approx(0.5)


def test_counting_for_a_capacity_picks_the_engines_rule() -> None:
    report = validate(ValidateRequest(recipe="flash-next-vllm", flags={"max_num_seqs": 8}))
    counting = counting_for(report.capacity)
    assert counting.metric == "vllm:kv_cache_usage_perc"
    assert "BlockPool.get_usage" in counting.rule


def test_the_simulation_reports_usage_as_the_engine_does_after_each_step() -> None:
    # One request, 100 prompt tokens, 50 out, one token a step. The engine reports after a step with finished
    # requests freed: the last report holds the slots of the second-last step, 100 + 48 computed + 1 scheduled
    # = 149 tokens, cdiv(149, 16) = 10 blocks, + 2 state blocks, of 100 usable blocks.
    counting = KVCounting("m", (KVPool("blocks", 100, (BlockGroup(16), BlockGroup(0, fixed_blocks=2))),), rule="")
    shape = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0)
    costs = StepCosts(0.01, 1e9, 0.0, 0.0)
    sim = simulate(costs, shape, Workload(clients=1, requests=2, input_len=100, output_len=50), 1, counting)
    assert sim.kv_peak_usage == pytest.approx(12 / 100)
    # Without a counting the simulation reports none.
    assert simulate(costs, shape, Workload(1, 1, 100, 50), 1).kv_peak_usage is None
