"""parse_config / parse_drafter on real models' configs (tests/fixtures/configs) and hand-written minimal ones."""

from __future__ import annotations

import copy
import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import ArchitectureError
from dspark.model.architecture import (
    AttentionLayer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    MoE,
    dtype_bytes,
    parse_config,
    parse_drafter,
)

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
FIX = "give the field in the recipe's model.config, or pass a config.json that has it"


def load(name: str) -> dict[str, Any]:
    with (CONFIGS / name).open() as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def arch_of(name: str) -> ModelArchitecture:
    return parse_config(load(name), name)


def kinds(arch: ModelArchitecture) -> Counter[str]:
    return Counter(layer.kind for layer in arch.layers)


# name, model_type, dtype, layers by kind, parameters (no MTP), MTP layers, quantization
REAL_MODELS = [
    ("llama-3-8b-instruct.json", "llama", "bfloat16", {"attention": 32}, 8_030_261_248, 0, None),
    ("mistral-7b-v0.1.json", "mistral", "bfloat16", {"attention": 32}, 7_241_732_096, 0, None),
    ("qwen3-32b.json", "qwen3", "bfloat16", {"attention": 64}, 32_762_123_264, 0, None),
    (
        "qwen3-next-80b-a3b-instruct.json",
        "qwen3_next",
        "bfloat16",
        {"attention": 12, "linear": 36},
        79_674_391_296,
        1,
        None,
    ),
    ("qwen3.5-27b.json", "qwen3_5", "bfloat16", {"attention": 16, "linear": 48}, 27_356_728_560, 1, None),
    ("deepseek-v3.json", "deepseek_v3", "bfloat16", {"mla": 61}, 671_026_419_200, 1, "fp8"),
    ("deepseek-v3.2-exp.json", "deepseek_v32", "bfloat16", {"mla": 61}, 671_877_944_064, 1, "fp8"),
    ("deepseek-v4-flash.json", "deepseek_v4", "bfloat16", {"mla": 43}, 284_332_240_471, 1, "fp8"),
]


@pytest.mark.parametrize(("name", "model_type", "dtype", "layer_kinds", "params", "mtp", "quant"), REAL_MODELS)
def test_real_model_summary(
    name: str, model_type: str, dtype: str, layer_kinds: dict[str, int], params: int, mtp: int, quant: str | None
) -> None:
    arch = arch_of(name)
    assert arch.model_type == model_type
    assert arch.dtype == dtype
    assert dict(kinds(arch)) == layer_kinds
    assert arch.parameter_count == params
    assert len(arch.mtp_layers) == mtp
    assert arch.quantization == quant
    assert arch.source == name


@pytest.mark.parametrize(
    ("name", "kv_heads", "head_dim", "window"),
    [
        ("llama-3-8b-instruct.json", 8, 128, None),
        ("mistral-7b-v0.1.json", 8, 128, 4096),  # sliding_window alone: every layer slides
        ("qwen3-32b.json", 8, 128, None),  # head_dim 128 given, not 5120 // 64 = 80
    ],
)
def test_dense_attention_shapes(name: str, kv_heads: int, head_dim: int, window: int | None) -> None:
    arch = arch_of(name)
    assert set(arch.layers) == {AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=window)}


def test_qwen3_next_hybrid_layout() -> None:
    arch = arch_of("qwen3-next-80b-a3b-instruct.json")
    full = [i for i, layer in enumerate(arch.layers) if isinstance(layer, AttentionLayer)]
    assert full == list(range(3, 48, 4))  # full_attention_interval 4: layers 3, 7, ..., 47
    assert arch.layers[3] == AttentionLayer(num_kv_heads=2, head_dim=256)
    gdn = arch.layers[0]
    assert gdn == LinearStateLayer(
        family="gated_delta_net", conv_kernel=4, num_k_heads=16, num_v_heads=32, head_k_dim=128, head_v_dim=128
    )
    assert isinstance(gdn, LinearStateLayer)
    assert gdn.conv_dim == 8192
    assert arch.is_hybrid and not arch.uses_mla
    assert arch.moe == MoE(num_experts=512, top_k=10, num_shared_experts=1, moe_intermediate_size=512)
    # The config has no num_nextn_predict_layers; the checkpoint ships one full-attention MTP layer.
    assert arch.mtp_layers == (AttentionLayer(num_kv_heads=2, head_dim=256),)
    assert any("MTP" in note for note in arch.notes)
    assert arch.parameters is not None
    # One MTP layer (1,642,076,672) + fc 2h->h (8,388,608) + three norms (6,144: vLLM's qwen3_next_mtp has
    # norm, pre_fc_norm_hidden, pre_fc_norm_embedding). models.md's 81,324,860,672 counted two norms.
    assert arch.parameters.mtp == 1_650_471_424
    assert arch.parameters.total + arch.parameters.mtp == 81_324_862_720


def test_qwen3_5_27b_nested_text_config() -> None:
    arch = arch_of("qwen3.5-27b.json")
    assert arch.architecture == "Qwen3_5ForConditionalGeneration"
    assert (arch.hidden_size, arch.vocab_size, arch.max_position_embeddings) == (5120, 248320, 262144)
    assert arch.layers[3] == AttentionLayer(num_kv_heads=4, head_dim=256)
    assert arch.layers[0] == LinearStateLayer(
        family="gated_delta_net",
        conv_kernel=4,
        num_k_heads=16,
        num_v_heads=48,
        head_k_dim=128,
        head_v_dim=128,
        ssm_dtype="float32",  # mamba_ssm_dtype
    )
    assert arch.moe is None
    assert arch.mtp_layers == (AttentionLayer(num_kv_heads=4, head_dim=256),)
    assert arch.parameters is not None
    assert arch.parameters.vision == 460_730_096  # the 27-block ViT and its merger
    assert arch.parameters.total - arch.parameters.vision == 26_895_998_464


@pytest.mark.parametrize(
    ("name", "index_head_dim"),
    [("deepseek-v3.json", None), ("deepseek-v3.2-exp.json", 128)],
)
def test_deepseek_v3_mla(name: str, index_head_dim: int | None) -> None:
    arch = arch_of(name)
    layer = MLALayer(kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=index_head_dim)
    assert set(arch.layers) == {layer}
    assert arch.layers[0].kind == "mla" and layer.latent_dim == 576
    assert arch.mtp_layers == (layer,)
    assert arch.uses_mla
    assert arch.moe == MoE(num_experts=256, top_k=8, num_shared_experts=1, moe_intermediate_size=2048)
    assert (arch.weight_format, arch.expert_weight_format) == ("fp8", None)
    assert arch.parameters is not None
    # The MTP module: one MoE decoder layer + eh_proj + 3 norms (its embed/head copies are the target's).
    assert arch.parameters.mtp == (11_610_068_224 if index_head_dim is None else 11_624_027_648)


def test_deepseek_v4_flash_layers() -> None:
    arch = arch_of("deepseek-v4-flash.json")
    ratios = [layer.compress_ratio for layer in arch.layers if isinstance(layer, MLALayer)]
    assert ratios == [0, 0] + [4, 128] * 20 + [4]
    assert Counter(ratios) == {0: 2, 4: 21, 128: 20}
    for layer in arch.layers:
        assert isinstance(layer, MLALayer)
        assert (layer.kv_lora_rank, layer.qk_rope_head_dim, layer.latent_dim) == (448, 64, 512)
        assert layer.sliding_window == 128  # every layer keeps the raw window
        assert layer.index_head_dim == (128 if layer.compress_ratio == 4 else None)
        assert layer.keeps_context_rows == (layer.compress_ratio > 0)
    # compress_ratios has a 44th entry (0) for the MTP layer.
    assert arch.mtp_layers == (MLALayer(kv_lora_rank=448, qk_rope_head_dim=64, compress_ratio=0, sliding_window=128),)
    assert arch.moe == MoE(num_experts=256, top_k=6, num_shared_experts=1, moe_intermediate_size=2048)
    assert (arch.quantization, arch.weight_format, arch.expert_weight_format) == ("fp8", "fp8", "mxfp4")
    assert arch.parameters is not None
    assert arch.parameters.routed_experts == 43 * 256 * 3 * 4096 * 2048


def test_deepseek_v4_mtp_without_ratio_entry_is_window_only() -> None:
    config = load("deepseek-v4-flash.json")
    config["compress_ratios"] = config["compress_ratios"][:43]
    arch = parse_config(config, "v4.json")
    assert arch.mtp_layers[0] == MLALayer(kv_lora_rank=448, qk_rope_head_dim=64, compress_ratio=0, sliding_window=128)
    assert any("no MTP entry" in note for note in arch.notes)


def v4_minimal(ratios: list[int]) -> dict[str, Any]:
    return {
        "model_type": "deepseek_v4",
        "num_hidden_layers": len(ratios),
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 128,
        "qk_rope_head_dim": 32,
        "sliding_window": 64,
        "index_head_dim": 32,
        "compress_ratios": ratios,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }


def test_deepseek_v4_ratio_one_is_window_only() -> None:
    # vLLM's V4 attention keeps only the window when compress_ratio <= 1.
    arch = parse_config(v4_minimal([1, 4, 128]))
    assert arch.layers == (
        MLALayer(96, 32, compress_ratio=0, sliding_window=64),
        MLALayer(96, 32, index_head_dim=32, compress_ratio=4, sliding_window=64),
        MLALayer(96, 32, compress_ratio=128, sliding_window=64),
    )


def test_deepseek_v4_unknown_ratio_is_refused() -> None:
    assert_fails(v4_minimal([0, 2]), "'compress_ratios' has ratios dspark does not size: [2]")


def test_dflash_drafter() -> None:
    drafter = parse_drafter(load("dflash2-drafter.json"), "dflash", "dflash2-drafter.json")
    assert drafter.layers == (AttentionLayer(num_kv_heads=8, head_dim=128, sliding_window=2048),) * 5
    assert drafter.block_size == 16
    assert drafter.target_layer_ids == (1, 13, 25, 37, 49)
    assert drafter.dtype == "bfloat16"
    # 5 Qwen3 layers + fc (5 x 6656 -> 6656) + 2 norms; the checkpoint's header has exactly these plus the
    # DFlash2 convolutions and candidate selector (216,174,592 more), which the estimate says it leaves out.
    assert drafter.parameter_count == 2_555_985_152
    assert any("DFlash2 extras" in note for note in drafter.notes)


@pytest.mark.parametrize(
    ("dflash_config", "layer_types", "windows"),
    [
        ({}, ["sliding_attention", "sliding_attention"], (512, 512)),
        ({"use_swa": True}, None, (512, 512)),
        ({}, None, (None, None)),
        ({"use_swa": True, "swa_window_size": 64}, ["full_attention", "full_attention"], (64, 64)),
    ],
)
def test_dflash_sliding_rules(
    dflash_config: dict[str, Any], layer_types: list[str] | None, windows: tuple[int | None, ...]
) -> None:
    config = {
        "model_type": "qwen3",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "sliding_window": 512,
        "dflash_config": {"block_size": 8, "target_layer_ids": [1, 3], **dflash_config},
    }
    if layer_types is not None:
        config["layer_types"] = layer_types
    drafter = parse_drafter(config, "dflash")
    assert tuple(layer.sliding_window for layer in drafter.layers if isinstance(layer, AttentionLayer)) == windows
    assert drafter.block_size == 8


def test_eagle3_drafter() -> None:
    drafter = parse_drafter(load("eagle3-llama3.1-8b.json"), "eagle3", "eagle3.json")
    assert drafter.layers == (AttentionLayer(num_kv_heads=8, head_dim=128),)
    assert drafter.dtype == "float16"
    # layer 0 with 2h-wide q/k/v input + fc (3 x 4096 -> 4096) + norm + 32000-token draft LM head.
    assert drafter.parameter_count == 424_689_664


def test_eagle3_speculators_format() -> None:
    config = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
        },
    }
    drafter = parse_drafter(config, "eagle3", "speculators.json")
    assert drafter.layers == (AttentionLayer(num_kv_heads=8, head_dim=128),)
    assert drafter.parameter_count is None  # no intermediate_size: no estimate, not a failure


@pytest.mark.parametrize(
    ("name", "layers", "params"),
    [
        ("qwen3-next-80b-a3b-instruct.json", (AttentionLayer(num_kv_heads=2, head_dim=256),), 1_650_471_424),
        ("deepseek-v3.json", (MLALayer(kv_lora_rank=512, qk_rope_head_dim=64),), 11_610_068_224),
    ],
)
def test_mtp_drafter_from_target(name: str, layers: tuple[Any, ...], params: int) -> None:
    target = arch_of(name)
    from_target = parse_drafter(None, "mtp", target=target)
    from_config = parse_drafter(load(name), "mtp", name)
    assert from_target.layers == from_config.layers == layers
    assert from_target.parameter_count == params


def test_draft_model_is_a_whole_model() -> None:
    drafter = parse_drafter(load("llama-3-8b-instruct.json"), "draft_model", "llama.json")
    assert drafter.layers == (AttentionLayer(num_kv_heads=8, head_dim=128),) * 32
    assert drafter.parameter_count == 8_030_261_248


BASE: dict[str, Any] = {
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        # MHA: KV heads default to the query heads, head_dim to hidden // heads.
        ({"model_type": "llama"}, [AttentionLayer(4, 64)] * 4),
        ({"model_type": "llama", "num_key_value_heads": 1, "head_dim": 128}, [AttentionLayer(1, 128)] * 4),
        ({"model_type": "llama", "head_dim": None}, [AttentionLayer(4, 64)] * 4),
        ({"model_type": "mistral", "sliding_window": 0}, [AttentionLayer(4, 64)] * 4),  # 0 means none
        ({"model_type": "mistral", "sliding_window": None}, [AttentionLayer(4, 64)] * 4),
        # Qwen2/Qwen3: sliding only with use_sliding_window, from max_window_layers on.
        ({"model_type": "qwen2", "sliding_window": 100, "max_window_layers": 2}, [AttentionLayer(4, 64)] * 4),
        (
            {"model_type": "qwen2", "sliding_window": 100, "use_sliding_window": True, "max_window_layers": 2},
            [AttentionLayer(4, 64)] * 2 + [AttentionLayer(4, 64, sliding_window=100)] * 2,
        ),
        # gemma2 alternates from layer 0; gemma3 slides 5 of every 6.
        (
            {"model_type": "gemma2", "sliding_window": 128},
            [AttentionLayer(4, 64, sliding_window=128), AttentionLayer(4, 64)] * 2,
        ),
        (
            {"model_type": "gemma3_text", "sliding_window": 128, "sliding_window_pattern": 2},
            [AttentionLayer(4, 64, sliding_window=128), AttentionLayer(4, 64)] * 2,
        ),
        # layer_types wins over everything else.
        (
            {"model_type": "llama", "sliding_window": 64, "layer_types": ["full_attention", "sliding_attention"] * 2},
            [AttentionLayer(4, 64), AttentionLayer(4, 64, sliding_window=64)] * 2,
        ),
    ],
)
def test_minimal_dense_configs(extra: dict[str, Any], expected: list[AttentionLayer]) -> None:
    arch = parse_config({**BASE, **extra})
    assert list(arch.layers) == expected


def test_minimal_gdn_config_with_interval() -> None:
    config = {
        **BASE,
        "model_type": "qwen3_next",
        "full_attention_interval": 2,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "fp32",
    }
    arch = parse_config(config)
    gdn = LinearStateLayer("gated_delta_net", 4, 2, 4, 32, 16, ssm_dtype="float32")
    assert list(arch.layers) == [gdn, AttentionLayer(2, 128)] * 2
    assert gdn.conv_dim == 2 * 2 * 32 + 4 * 16
    assert arch.parameter_count is None  # no intermediate_size / MoE sizes: layers only
    assert any("no parameter estimate" in note for note in arch.notes)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {
                "model_type": "nemotron_h",
                "hybrid_override_pattern": "M-M*",
                "num_key_value_heads": 2,
                "head_dim": 128,
                "n_groups": 8,
                "ssm_state_size": 128,
                "mamba_num_heads": 128,
                "mamba_head_dim": 80,
                "conv_kernel": 4,
                "mamba_ssm_cache_dtype": "float32",
            },
            [
                LinearStateLayer("mamba2", 4, 8, 128, 128, 80, ssm_dtype="float32"),
                LinearStateLayer("mamba2", 4, 8, 128, 128, 80, ssm_dtype="float32"),
                AttentionLayer(2, 128),
            ],
        ),
        (
            {
                "model_type": "granitemoehybrid",
                "layer_types": ["mamba", "mamba", "mamba", "attention"],
                "num_key_value_heads": 1,
                "mamba_n_groups": 1,
                "mamba_d_state": 128,
                "mamba_n_heads": 16,
                "mamba_d_head": "auto",
                "mamba_d_conv": 4,
            },
            [LinearStateLayer("mamba2", 4, 1, 16, 128, 32)] * 3 + [AttentionLayer(1, 64)],
        ),
    ],
)
def test_mamba2_hybrids(config: dict[str, Any], expected: list[Any]) -> None:
    arch = parse_config({**BASE, **config})
    assert list(arch.layers) == expected
    assert arch.parameter_count is None


@pytest.mark.parametrize(
    ("extra", "family", "layer"),
    [
        ({"kv_lora_rank": 256, "qk_rope_head_dim": 32}, "deepseek_v3", MLALayer(256, 32)),
        ({"kv_lora_rank": 256, "qk_rope_head_dim": 32, "index_head_dim": 64}, "deepseek_v32", MLALayer(256, 32, 64)),
    ],
)
def test_unknown_model_type_with_recognisable_fields(extra: dict[str, Any], family: str, layer: MLALayer) -> None:
    arch = parse_config({**BASE, "model_type": "my_mla_fork", **extra})
    assert arch.model_type == family
    assert set(arch.layers) == {layer}


@pytest.mark.parametrize(
    ("keys", "dtype", "note"),
    [
        ({"torch_dtype": "bfloat16"}, "bfloat16", None),
        ({"dtype": "float16"}, "float16", None),
        ({"torch_dtype": "torch.bfloat16"}, "bfloat16", None),
        ({"torch_dtype": "float32"}, "bfloat16", "float32"),  # engines serve fp32 checkpoints in bf16
        ({}, "bfloat16", "assumed bfloat16"),
    ],
)
def test_dtype(keys: dict[str, Any], dtype: str, note: str | None) -> None:
    arch = parse_config({**BASE, "model_type": "llama", "intermediate_size": 512, **keys})
    assert arch.dtype == dtype
    assert dtype_bytes(arch.dtype) == 2
    assert any(note in n for n in arch.notes) if note else not arch.notes


@pytest.mark.parametrize(
    ("quantization_config", "method", "weight_format"),
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "modelopt_fp4", "nvfp4"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "modelopt", "fp8"),
        ({"quant_method": "modelopt_fp4"}, "modelopt_fp4", "nvfp4"),
        ({"quant_method": "mxfp4"}, "mxfp4", "mxfp4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq", "int4"),
        ({"quant_method": "gptq", "bits": 8}, "gptq", "int8"),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
            },
            "compressed-tensors",
            "nvfp4",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            },
            "compressed-tensors",
            "fp8",
        ),
        ({"quant_method": "something_new"}, "something_new", None),
    ],
)
def test_quantization(quantization_config: dict[str, Any], method: str, weight_format: str | None) -> None:
    arch = parse_config({**BASE, "model_type": "llama", "quantization_config": quantization_config})
    assert (arch.quantization, arch.weight_format) == (method, weight_format)


def assert_fails(config: Any, *needles: str, source: str = "config.json") -> None:
    with pytest.raises(ArchitectureError) as info:
        parse_config(config, source)
    message = str(info.value)
    for needle in (source, FIX, *needles):
        assert needle in message, f"{needle!r} not in {message!r}"


def without(config: dict[str, Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(config)
    target = out.get("text_config", out)
    del target[key]
    return out


@pytest.mark.parametrize(
    ("name", "key", "shown_as"),
    [
        ("llama-3-8b-instruct.json", "num_attention_heads", "'num_attention_heads'"),
        ("llama-3-8b-instruct.json", "hidden_size", "'hidden_size'"),
        ("llama-3-8b-instruct.json", "vocab_size", "'vocab_size'"),
        ("llama-3-8b-instruct.json", "max_position_embeddings", "'max_position_embeddings'"),
        ("qwen3-next-80b-a3b-instruct.json", "linear_num_value_heads", "'linear_num_value_heads'"),
        ("qwen3-next-80b-a3b-instruct.json", "full_attention_interval", "full_attention_interval"),
        ("qwen3.5-27b.json", "linear_key_head_dim", "'text_config.linear_key_head_dim'"),
        ("deepseek-v3.json", "qk_rope_head_dim", "'qk_rope_head_dim'"),
        ("deepseek-v3.2-exp.json", "index_head_dim", "'index_head_dim'"),
        ("deepseek-v4-flash.json", "compress_ratios", "'compress_ratios'"),
        ("deepseek-v4-flash.json", "sliding_window", "'sliding_window'"),
        ("deepseek-v4-flash.json", "index_head_dim", "'index_head_dim'"),
    ],
)
def test_missing_required_key(name: str, key: str, shown_as: str) -> None:
    assert_fails(without(load(name), key), shown_as, source=name)


def test_unknown_model_type() -> None:
    assert_fails({**BASE, "model_type": "brand_new"}, "unknown model_type 'brand_new'")


def test_no_model_type() -> None:
    assert_fails(dict(BASE), "no 'model_type'")


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({**BASE, "model_type": "llama", "hidden_size": "4096"}, "'hidden_size' must be an integer"),
        ({**BASE, "model_type": "llama", "num_hidden_layers": 0}, "'num_hidden_layers' must be a positive"),
        ({**BASE, "model_type": "llama", "num_attention_heads": True}, "'num_attention_heads' must be an integer"),
        ({**BASE, "model_type": "llama", "hidden_size": 250}, "not a multiple of num_attention_heads"),
        ({**BASE, "model_type": "llama", "layer_types": ["full_attention"]}, "lists 1 layers"),
        ({**BASE, "model_type": "llama", "layer_types": ["chunked_attention"] * 4}, "chunked_attention"),
        ({**BASE, "model_type": "llama", "layer_types": ["sliding_attention"] * 4}, "'sliding_window'"),
        ({**BASE, "model_type": "llama", "torch_dtype": "int4"}, "'torch_dtype' is 'int4'"),
        ({**BASE, "model_type": "llama", "quantization_config": {"bits": 4}}, "quant_method"),
        ({**BASE, "model_type": "deepseek_v4", "expert_dtype": "fp2"}, "'expert_dtype' is 'fp2'"),
        ({**BASE, "model_type": 7}, "'model_type' must be a string"),
    ],
)
def test_bad_values_fail_closed(config: dict[str, Any], needle: str) -> None:
    assert_fails(config, needle)


def test_config_must_be_a_mapping() -> None:
    with pytest.raises(ArchitectureError, match="must be a JSON object"):
        parse_config([1, 2], "list.json")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "method", "needle"),
    [
        (None, "medusa", "'medusa' is not one of"),
        (None, "eagle3", "needs the drafter's config.json"),
        ({**BASE, "model_type": "llama"}, "mtp", "has no MTP modules"),
        (
            {**BASE, "model_type": "qwen3", "layer_types": ["sliding_attention"] * 4, "dflash_config": {}},
            "dflash",
            "'sliding_window'",
        ),
    ],
)
def test_drafter_fails_closed(config: dict[str, Any] | None, method: str, needle: str) -> None:
    with pytest.raises(ArchitectureError, match=needle):
        parse_drafter(config, method, "draft.json")


FIXTURES = sorted(p.name for p in CONFIGS.glob("*.json"))
BAD_VALUES: list[Any] = [None, "x", -1, 0, 1.5, True, [], {}, [1], ["full_attention"]]


def _keys(config: dict[str, Any]) -> list[tuple[str | None, str]]:
    nested = config.get("text_config")
    return [(None, key) for key in config] + [("text_config", key) for key in nested or {}]


@pytest.mark.parametrize("name", FIXTURES)
def test_no_stray_exceptions(name: str) -> None:
    """Deleting any key or giving it any wrong value parses or raises ArchitectureError, nothing else."""
    config = load(name)
    outcomes: Counter[str] = Counter()
    for where, key in _keys(config):
        for value in [..., *BAD_VALUES]:  # Ellipsis: delete the key
            broken = copy.deepcopy(config)
            target = broken if where is None else broken[where]
            if value is ...:
                del target[key]
            else:
                target[key] = value
            for parse in (lambda c: parse_config(c, name), lambda c: parse_drafter(c, "dflash", name)):
                try:
                    parse(broken)
                    outcomes["parsed"] += 1
                except ArchitectureError as exc:
                    assert name in str(exc)
                    outcomes["refused"] += 1
    assert outcomes["parsed"] > 0 and outcomes["refused"] > 0


# Small configs of families the fixtures do not cover, for the parameter cross-check.
TINY_FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2": {"model_type": "qwen2", "intermediate_size": 96, "tie_word_embeddings": False},
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "intermediate_size": 96,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48,
        "mlp_only_layers": [1],
        "tie_word_embeddings": False,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        "head_dim": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "tie_word_embeddings": False,
    },
    "mixtral": {
        "model_type": "mixtral",
        "intermediate_size": 96,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "tie_word_embeddings": False,
    },
    "gemma2": {"model_type": "gemma2", "intermediate_size": 96, "head_dim": 32, "sliding_window": 128},
    "gemma3_text": {"model_type": "gemma3_text", "intermediate_size": 96, "head_dim": 32, "sliding_window": 128},
    "deepseek_v2": {
        "model_type": "deepseek_v2",
        "intermediate_size": 96,
        "kv_lora_rank": 32,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "q_lora_rank": None,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 2,
        "moe_intermediate_size": 32,
        "first_k_dense_replace": 1,
        "topk_method": "greedy",
        "n_group": 1,
        "topk_group": 1,
        "tie_word_embeddings": False,
    },
    "qwen3_5_moe_text": {
        "model_type": "qwen3_5_moe_text",
        "head_dim": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "tie_word_embeddings": False,
    },
    "llama_bias_tied": {
        "model_type": "llama",
        "intermediate_size": 96,
        "attention_bias": True,
        "mlp_bias": True,
        "tie_word_embeddings": True,
    },
}
TINY_BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}

# Counts parameters of transformers' own model classes on the meta device (no memory), adding the
# DeepSeek router score-correction biases, which transformers keeps as buffers but checkpoints store.
_ORACLE = r"""
import json, sys, torch, transformers
from transformers import AutoConfig, AutoModelForCausalLM
out = {}
for name, config in json.load(sys.stdin).items():
    config.pop("quantization_config", None)
    cfg = AutoConfig.for_model(**config)
    cls = getattr(transformers, (config.get("architectures") or [""])[0], None) or AutoModelForCausalLM
    with torch.device("meta"):
        model = cls._from_config(cfg) if cls is not AutoModelForCausalLM else cls.from_config(cfg)
    n = sum(p.numel() for p in model.parameters())
    n += sum(b.numel() for k, b in model.named_buffers() if k.endswith("e_score_correction_bias"))
    out[name] = n
print(json.dumps(out))
"""


@pytest.mark.engine
def test_parameter_estimate_matches_transformers(vllm_python: str) -> None:
    """The config-only estimate equals what transformers instantiates, family by family."""
    configs = {name: load(name) for name in FIXTURES if name not in {"dflash2-drafter.json", "eagle3-llama3.1-8b.json"}}
    configs.update({name: {**TINY_BASE, **extra} for name, extra in TINY_FAMILIES.items()})
    result = subprocess.run(
        [vllm_python, "-c", _ORACLE],
        input=json.dumps(configs),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    oracle = json.loads(result.stdout.strip().splitlines()[-1])
    mine = {name: parse_config(config, name).parameter_count for name, config in configs.items()}
    assert mine == oracle


def test_outer_architecture_and_nested_text_config() -> None:
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "architectures": ["Gemma3ForCausalLM"],
            "model_type": "gemma3_text",
            **BASE,
            "head_dim": 32,
            "sliding_window": 512,
        },
    }
    arch = parse_config(config)
    assert arch.architecture == "Gemma3ForConditionalGeneration"  # the class the engine builds
    assert arch.model_type == "gemma3"
    assert arch.tie_word_embeddings  # gemma ties by default
    assert list(arch.layers) == [AttentionLayer(4, 32, sliding_window=512)] * 4  # pattern 6: layers 0-4 slide


def test_nemotron_h_parameters_are_vllms_module_shapes() -> None:
    """NVIDIA-Nemotron-Nano-9B-v2 (tests/device/configs): every parameter vLLM's nemotron_h.py builds, by name."""
    root = Path(__file__).resolve().parents[2]
    config = json.loads((root / "tests/device/configs/nemotron-nano-9b-v2.json").read_text())
    arch = parse_config(config)
    h, vocab, inter = 4480, 131072, 15680
    heads, head_dim, groups_state, kernel = 128, 80, 8 * 128, 4
    d_inner = heads * head_dim
    conv_dim = d_inner + 2 * groups_state
    mamba = {  # MambaMixer2 + the layer's RMSNorm
        "in_proj.weight": h * (2 * d_inner + 2 * groups_state + heads), "conv1d.weight": conv_dim * kernel,
        "conv1d.bias": conv_dim, "A": heads, "D": heads, "dt_bias": heads, "norm.weight": d_inner,
        "out_proj.weight": d_inner * h, "layer norm": h,
    }
    attention = {"qkv_proj.weight": h * (40 + 2 * 8) * 128, "o_proj.weight": 40 * 128 * h, "layer norm": h}
    mlp = {"up_proj.weight": h * inter, "down_proj.weight": inter * h, "layer norm": h}
    pattern = Counter(config["hybrid_override_pattern"])
    assert (pattern["M"], pattern["*"], pattern["-"]) == (27, 4, 25)
    expected = (2 * vocab * h + h + 27 * sum(mamba.values()) + 4 * sum(attention.values())
                + 25 * sum(mlp.values()))
    assert arch.parameter_count == expected
    assert arch.parameters is not None and len(arch.parameters.layers) == arch.num_layers == 31
    # Under TP only the layer norms stay whole; the KV projections are the attention layers'.
    assert sum(p.replicated for p in arch.parameters.layers) == 56 * h
    assert sum(p.kv_proj for p in arch.parameters.layers) == 4 * 2 * h * 8 * 128
