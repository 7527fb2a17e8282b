"""config.json values the engines cannot build: refused with the key named, never a crash or a runaway list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark.core.errors import ArchitectureError
from dspark.model.architecture import AttentionLayer, parse_config
from dspark.model.architecture.fields import INT_LIMITS

DENSE: dict[str, Any] = {
    "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "max_position_embeddings": 4096,
}
HYBRID: dict[str, Any] = {
    **DENSE, "model_type": "qwen3_next", "num_hidden_layers": 4, "full_attention_interval": 4,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
}


@pytest.mark.parametrize(
    ("base", "key", "value"),
    [
        (DENSE, "num_hidden_layers", 10**30),
        (HYBRID, "num_hidden_layers", 10**30),
        (DENSE, "num_nextn_predict_layers", 10**30),
        (DENSE, "num_attention_heads", 10**12),
        (DENSE, "vocab_size", 10**12),
        (DENSE, "head_dim", 10**15),
        (DENSE, "max_position_embeddings", 10**40),
    ],
)
def test_counts_above_the_bound_are_refused_by_key(base: dict[str, Any], key: str, value: int) -> None:
    with pytest.raises(ArchitectureError, match=f"'{key}' is .*above the largest dspark accepts"):
        parse_config({**base, key: value}, "c.json")


def test_the_bound_itself_is_accepted() -> None:
    # The limit is inclusive: an MTP count at the limit parses (and is far above any real checkpoint).
    limit = INT_LIMITS["num_nextn_predict_layers"]
    arch = parse_config({**DENSE, "num_nextn_predict_layers": limit}, "c.json")
    assert len(arch.mtp_layers) == limit


@pytest.mark.parametrize("kv_heads", [3, 8, 5])
def test_kv_heads_that_do_not_divide_the_query_heads_are_refused(kv_heads: int) -> None:
    with pytest.raises(ArchitectureError, match=f"'num_key_value_heads' {kv_heads} must divide"):
        parse_config({**DENSE, "num_key_value_heads": kv_heads}, "c.json")


def test_negative_sliding_window_is_refused_and_zero_means_none() -> None:
    with pytest.raises(ArchitectureError, match="'sliding_window' must be a positive number of tokens"):
        parse_config({**DENSE, "model_type": "mistral", "sliding_window": -5}, "c.json")
    arch = parse_config({**DENSE, "model_type": "mistral", "sliding_window": 0}, "c.json")
    assert all(isinstance(layer, AttentionLayer) and layer.sliding_window is None for layer in arch.layers)


@pytest.mark.parametrize(
    "override",
    [{"full_attention_interval": 9}, {"layer_types": ["linear_attention"] * 4}],
)
def test_hybrid_without_a_full_attention_layer_is_refused(override: dict[str, Any]) -> None:
    with pytest.raises(ArchitectureError, match="none is full attention"):
        parse_config({**HYBRID, **override}, "c.json")


def test_non_finite_numbers_are_not_integers() -> None:
    with pytest.raises(ArchitectureError, match="'num_hidden_layers' must be an integer"):
        parse_config({**DENSE, "num_hidden_layers": float("inf")}, "c.json")


def test_the_vision_tower_is_read_as_sglang_reads_it() -> None:
    recipe = yaml.safe_load((Path(__file__).resolve().parents[3] / "dspark/data/recipes/qwen27b-dflash-sglang.yaml")
                            .read_text())["model"]["config"]
    text_only = {k: v for k, v in recipe.items() if k != "vision_config"}
    assert parse_config(text_only, "inline").vision_tower is None
    qwen = parse_config(recipe, "inline")  # depth 27, hidden 1152, no num_hidden_layers
    assert qwen.vision_tower == (24, 1152) and qwen.wraps_text_config  # `depth` is not num_hidden_layers to SGLang
    wide = parse_config({**recipe, "vision_config": {**recipe["vision_config"], "num_hidden_layers": 32}}, "inline")
    assert wide.vision_tower == (32, 1152)
    with pytest.raises(ArchitectureError, match=r"vision_config\.num_hidden_layers"):
        parse_config({**recipe, "vision_config": {**recipe["vision_config"], "num_hidden_layers": -5}}, "inline")
