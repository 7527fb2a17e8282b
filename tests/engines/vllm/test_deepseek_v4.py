"""dspark.engines.vllm.deepseek_v4: DeepSeek-V4's caches and vLLM's block-outermost packing of them.

The engine's own planner judges the full figures (tests/real_engines/test_vllm_dsv4_planner.py); these tests pin
the rules one at a time, each expectation worked out here from the engine's formulas.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.engines.vllm import deepseek_v4 as dsv4
from dspark.engines.vllm.deepseek_v4_detect import DeepseekV4NotModelledError, kv_cache_dtype
from dspark.model.architecture import parse_config

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
FLASH = json.loads((FIXTURES / "deepseek-v4-flash.json").read_text())


def _round(value: int) -> int:
    return -(-value // 576) * 576  # fp8_ds_mla pages are padded to 576-byte multiples


def _specs(config: dict[str, object], **kw: object) -> tuple[dsv4.V4Spec, ...]:
    return dsv4.layer_specs(parse_config(config), engine_version="0.32.0", **kw)  # type: ignore[arg-type]


def test_a_ratio_4_layer_registers_five_caches_in_the_engines_order() -> None:
    specs = [s for s in _specs(FLASH) if s.name.startswith("model.layers.2.")]
    assert [(s.name.removeprefix("model.layers.2.attn"), s.role) for s in specs] == [
        (".indexer.k_cache", "indexer"), (".indexer.compressor.state_cache", "state"), (".swa_cache", "window"),
        ("", "compressed"), (".compressor.state_cache", "state"),
    ]
    key, index_state, window, rows, state = specs
    assert (key.block_size, key.page_bytes) == (256, _round(256 // 4 * (128 + 4)))  # fp8 keys + fp32 scale per 128
    assert (index_state.block_size, index_state.sliding_window) == (4, 8)  # two overlapping ratio-4 windows
    assert index_state.page_bytes == _round(4 * 2 * 2 * 128 * 4)  # fp32 kv + score state of 2 x 128
    assert (window.block_size, window.sliding_window, window.page_bytes) == (64, 128, _round(64 * 584))
    assert (rows.block_size, rows.page_bytes) == (256, _round(64 * 584))
    assert (state.block_size, state.page_bytes) == (4, _round(4 * 2 * 2 * 512 * 4))


def test_ratio_128_layers_keep_two_rows_a_block_and_window_only_layers_one_cache() -> None:
    by_layer = [[s for s in _specs(FLASH) if s.name.startswith(f"model.layers.{i}.")] for i in (0, 3)]
    assert [s.role for s in by_layer[0]] == ["window"]
    _, rows, state = by_layer[1]
    assert rows.page_bytes == _round(2 * 584) == 1728
    assert (state.block_size, state.sliding_window, state.page_bytes) == (8, 128, _round(8 * 2 * 512 * 4))


def test_a_drafting_mtp_layer_adds_only_its_window() -> None:
    base, drafting = _specs(FLASH), _specs(FLASH, drafting_mtp_layers=1)
    assert [s.name for s in drafting[len(base):]] == ["model.layers.43.attn.swa_cache"]


def test_windows_retain_the_mtp_lookahead() -> None:
    specs = _specs(FLASH, extra_retained_tokens=2)
    assert {s.extra_retained_tokens for s in specs if s.sliding} == {2}
    window = next(s for s in specs if s.role == "window")
    # min(window - 1 + retained + in flight, max_model_len) tokens, +1 block for a window that straddles two.
    assert window.blocks_per_request(131072, 4096) == -(-(127 + 2 + 4096) // 64) + 1


def test_approximate_gcd_minimises_padding_and_prefers_the_larger_on_ties() -> None:
    # 43 window layers and balanced buckets of 21 and 20, at least 21 a group: 22 pads 1 + 1 + 2 = 4.
    assert dsv4.approximate_gcd([43, 21, 20], 21) == 22
    assert dsv4.approximate_gcd([4, 6], 1) == 2  # pads 0 at 1 and at 2: ties take the larger
    assert dsv4.approximate_gcd([5], 9) == 9  # a floor above every value stands


def test_flash_groups_windows_in_two_and_states_by_block_size() -> None:
    groups = dsv4.pack_groups(_specs(FLASH))
    assert [(g.specs[0].role, len(g.specs)) for g in groups] == [
        ("window", 22), ("window", 21), ("indexer", 62), ("state", 42), ("state", 20)
    ]
    assert [s.name for s in groups[0].specs][:2] == ["model.layers.0.attn.swa_cache", "model.layers.2.attn.swa_cache"]
    # The full-context group mixes three page sizes; it is the widest, so it sets the block.
    widest = 21 * _round(64 * 132) + 21 * _round(64 * 584) + 20 * 1728
    assert groups[2].bytes_per_block == widest
    assert dsv4.context_bytes_per_token(groups) == widest // 256


def test_window_only_models_are_one_uniform_group() -> None:
    config = {**FLASH, "compress_ratios": [0] * 44}
    groups = dsv4.pack_groups(_specs(config))
    assert len(groups) == 1 and len(groups[0].specs) == 43


def test_plan_counts_every_groups_blocks_from_one_pool() -> None:
    """Worked out by hand from the five groups (test_flash_groups_windows_in_two_and_states_by_block_size):

    block bytes: the widest group, 21 x 8,640 + 21 x 37,440 + 20 x 1,728 = 1,002,240 B (576-byte-padded pages of
      64 x 132, 64 x 584 and 2 x 584 B); 5,000,000,000 B // 1,002,240 = 4,988 blocks
    per request at 65,536 tokens with 4,096 in flight:
      two window groups     2 x (ceil((127 + 4,096) / 64) + 1) = 2 x 67 = 134
      full-context group    65,536 / 256                             = 256
      ratio-4 states        ceil((7 + 4,096) / 4) + 1                = 1,027
      ratio-128 states      ceil((127 + 4,096) / 8) + 1              = 529      -> 1,946 blocks
    pool: int(4,988 / 1,946 x 65,536) = 167,982 tokens; one request needs 1,946 x 1,002,240 = 1,950,359,040 B
    """
    groups = dsv4.pack_groups(_specs(FLASH))
    plan = dsv4.plan(groups, engine_version="0.33.0", budget_bytes=5 * 10**9, max_model_len=65536,
                     max_in_flight_tokens=4096)
    assert plan.blocks_per_request == 1_946
    assert plan.num_blocks == 4_988
    assert plan.kv_pool_tokens == 167_982
    assert plan.needed_bytes == 1_950_359_040


def test_budget_for_pool_is_the_smallest_that_reaches_it() -> None:
    groups = dsv4.pack_groups(_specs(FLASH))
    budget = dsv4.budget_for_pool(groups, pool_tokens=181_777, max_model_len=131072, max_in_flight_tokens=16384)

    def pool(b: int) -> int:
        return dsv4.plan(groups, engine_version="0.32.0", budget_bytes=b, max_model_len=131072,
                         max_in_flight_tokens=16384).kv_pool_tokens

    assert pool(budget) >= 181_777 > pool(budget - 1)


def test_unread_releases_and_non_fp8_caches_are_refused() -> None:
    with pytest.raises(DeepseekV4NotModelledError, match=r"0\.31\.0"):
        dsv4.layer_specs(parse_config(FLASH), engine_version="0.31.0")
    assert kv_cache_dtype(None) == kv_cache_dtype("fp8") == "fp8_ds_mla"
    with pytest.raises(DeepseekV4NotModelledError, match="only supports fp8"):
        kv_cache_dtype("bfloat16")
