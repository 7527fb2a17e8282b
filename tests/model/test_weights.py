"""Weight bytes total and per GPU: from safetensors header sizes (exact) or the config's parameter estimate."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import InputError
from dspark.model.architecture import ModelArchitecture, parse_config, parse_drafter
from dspark.model.weights import (
    BYTES_PER_PARAMETER,
    TensorInfo,
    WeightsInfo,
    drafter_weight_bytes,
    format_bytes_per_parameter,
    pp_partition,
    weight_bytes,
    weights_from_checkpoint_total,
)

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"


def load(name: str) -> dict[str, Any]:
    with (CONFIGS / name).open() as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def arch_of(name: str, **overrides: Any) -> ModelArchitecture:
    return parse_config({**load(name), **overrides}, name)


@pytest.mark.parametrize(
    ("weight_format", "dtype", "expected"),
    [
        (None, "bfloat16", 2.0),
        (None, "float16", 2.0),
        ("fp8", "bfloat16", 1.0),
        ("int8", "bfloat16", 1.0),
        ("nvfp4", "bfloat16", 0.5625),  # 4 bits + an FP8 scale per 16
        ("mxfp4", "bfloat16", 0.53125),  # 4 bits + an E8M0 scale per 32
        ("int4", "bfloat16", 0.51953125),  # 4 bits + fp16 scale + 4-bit zero per 128
    ],
)
def test_bytes_per_parameter(weight_format: str | None, dtype: str, expected: float) -> None:
    assert format_bytes_per_parameter(weight_format, dtype) == expected


def test_unknown_format_is_refused() -> None:
    with pytest.raises(InputError, match="'fp3' has no known size"):
        format_bytes_per_parameter("fp3", "bfloat16")
    assert set(BYTES_PER_PARAMETER) >= {"fp8", "nvfp4", "mxfp4", "bfloat16"}


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [
        (32, 1, (32,)),
        (48, 3, (16, 16, 16)),
        (61, 4, (15, 15, 16, 15)),  # vLLM gives the remainder to the stages before the last
        (10, 4, (2, 3, 3, 2)),
        (7, 2, (4, 3)),
    ],
)
def test_pp_partition_matches_vllm(layers: int, pp: int, expected: tuple[int, ...]) -> None:
    assert pp_partition(layers, pp) == expected
    assert sum(expected) == layers


# Llama-3-8B in bf16: 8,030,261,248 parameters; per layer 218,112,000 of which 8,192 are norms and
# 8,388,608 the K/V projections; embedding and LM head 525,336,576 each; final norm 4,096.
@pytest.mark.parametrize(
    ("tp", "pp", "per_stage"),
    [
        (1, 1, (16_060_522_496,)),
        # TP=2: everything halves except the 266,240 norm parameters (532,480 bytes) every rank keeps.
        (2, 1, ((16_060_522_496 - 532_480) // 2 + 532_480,)),
        # TP=16 > 8 KV heads: each rank holds 1 KV head's K/V projections (1/8, not 1/16).
        (16, 1, ((16_060_522_496 - 532_480 - 536_870_912) // 16 + 536_870_912 // 8 + 532_480,)),
        # PP=2: 16 layers each; the embedding goes first, the LM head and final norm last.
        (1, 2, (16 * 436_224_000 + 1_050_673_152, 16 * 436_224_000 + 1_050_673_152 + 8_192)),
    ],
)
def test_llama_estimate(tp: int, pp: int, per_stage: tuple[int, ...]) -> None:
    weights = weight_bytes(arch_of("llama-3-8b-instruct.json"), tp=tp, pp=pp)
    assert weights is not None
    assert weights.total_bytes == 16_060_522_496
    assert weights.per_stage_bytes == per_stage
    assert weights.per_gpu_bytes == max(per_stage)
    assert not weights.exact
    assert weights.source == "parameter estimate from llama-3-8b-instruct.json"
    assert any("replicated" in note for note in weights.notes)
    assert any("get_pp_indices" in note for note in weights.notes) == (pp > 1)


def test_qwen3_next_nvfp4_estimate() -> None:
    arch = arch_of(
        "qwen3-next-80b-a3b-instruct.json", quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4"}
    )
    assert (arch.quantization, arch.weight_format) == ("modelopt_fp4", "nvfp4")
    weights = weight_bytes(arch)
    assert weights is not None
    # embeddings + LM head + final norm + norms/routers (672,969,216 params) at 2 bytes, the other
    # 79,001,422,080 (experts, attention, DeltaNet) at 0.5625.
    assert weights.total_bytes == 672_969_216 * 2 + 79_001_422_080 * 9 // 16 == 45_784_238_352
    with_mtp = weight_bytes(arch, include_mtp=True)
    assert with_mtp is not None
    assert with_mtp.total_bytes == 45_784_238_352 + 1_650_471_424 * 9 // 16


def test_deepseek_v4_flash_mixed_fp4_fp8_estimate() -> None:
    arch = arch_of("deepseek-v4-flash.json")
    weights = weight_bytes(arch, tp=2)
    assert weights is not None
    # routed experts 277,025,390,592 x 0.53125 + rest 5,410,654,912 x 1
    # + replicated 837,063,570, embedding/head 1,059,061,760 and final 69,637 at 2 bytes
    # + the FP8 weights' fp32 scale per 128 x 128 block (weight_block_size): 5,410,654,912 x 4 / 16,384.
    scales = 5_410_654_912 * 4 / 16_384
    assert abs(weights.total_bytes - (156_372_783_598 + scales)) <= 1  # each side rounds up its own sum
    assert abs(weights.per_gpu_bytes - (79_023_525_006 + scales / 2)) <= 1
    assert "routed experts mxfp4 0.53125" in weights.notes[1]


def test_estimate_mtp_and_tied_embeddings_notes() -> None:
    llama = arch_of("llama-3-8b-instruct.json")
    weights = weight_bytes(llama, include_mtp=True)
    assert weights is not None
    assert weights.total_bytes == 16_060_522_496
    assert "include_mtp asked for, but the config lists no MTP modules" in weights.notes
    tied = arch_of("llama-3-8b-instruct.json", tie_word_embeddings=True)
    two_stages = weight_bytes(tied, pp=2)
    assert two_stages is not None
    # No LM head of its own: the last stage builds one from the tied embedding (+ the final norm).
    assert two_stages.total_bytes == 16_060_522_496 - 1_050_673_152
    assert two_stages.per_stage_bytes == (16 * 436_224_000 + 1_050_673_152, 16 * 436_224_000 + 1_050_673_152 + 8_192)
    assert any("tied embeddings" in note for note in two_stages.notes)


def test_no_weights_and_no_estimate_gives_none() -> None:
    config = {
        "model_type": "granitemoehybrid",
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "layer_types": ["mamba", "attention"],
        "mamba_n_groups": 1,
        "mamba_d_state": 64,
        "mamba_n_heads": 8,
        "mamba_d_conv": 4,
    }
    assert weight_bytes(parse_config(config)) is None


@pytest.mark.parametrize(("tp", "pp", "needle"), [(0, 1, "TP=0"), (1, 0, "PP=0"), (1, 33, "exceeds the model's 32")])
def test_bad_parallel_sizes(tp: int, pp: int, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        weight_bytes(arch_of("llama-3-8b-instruct.json"), tp=tp, pp=pp)


# A 4-layer llama-shaped model (hidden 256, 4 heads, 2 KV heads x 64, MLP 512, vocab 1000) with an MTP module.
TINY = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def bf16(name: str, *shape: int, dtype: str = "BF16", size: int = 2) -> TensorInfo:
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=math.prod(shape) * size, file="a.safetensors")


def tiny_tensors(layers: int = 4) -> list[TensorInfo]:
    out = [bf16("model.embed_tokens.weight", 1000, 256)]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            bf16(p + "self_attn.q_proj.weight", 256, 256),
            bf16(p + "self_attn.k_proj.weight", 128, 256),
            bf16(p + "self_attn.v_proj.weight", 128, 256),
            bf16(p + "self_attn.o_proj.weight", 256, 256),
            bf16(p + "mlp.gate_proj.weight", 512, 256),
            bf16(p + "mlp.up_proj.weight", 512, 256),
            bf16(p + "mlp.down_proj.weight", 256, 512),
            bf16(p + "input_layernorm.weight", 256),
            bf16(p + "post_attention_layernorm.weight", 256),
        ]
    return [*out, bf16("model.norm.weight", 256), bf16("lm_head.weight", 1000, 256)]


LAYER_BYTES = 2 * (2 * 65536 + 2 * 32768 + 3 * 131072 + 512)  # 1,180,672
KV_BYTES = 2 * 2 * 32768  # 131,072 per layer
NORM_BYTES = 2 * 512  # 1,024 per layer
EMBED_BYTES = 512_000


def headers(tensors: list[TensorInfo]) -> WeightsInfo:
    return WeightsInfo(tensors=tuple(tensors), files=("a.safetensors",), source="/m")


def test_headers_are_exact_and_match_the_estimate() -> None:
    arch = parse_config(TINY, "tiny.json")
    info = headers(tiny_tensors())
    exact = weight_bytes(arch, info)
    estimate = weight_bytes(arch)
    assert exact is not None and estimate is not None
    assert exact.total_bytes == info.total_bytes == 4 * LAYER_BYTES + 2 * EMBED_BYTES + 512 == 5_747_200
    assert exact.exact and not estimate.exact
    assert exact.source == "safetensors headers (1 files, 39 tensors)"
    assert estimate.total_bytes == exact.total_bytes  # the config estimate agrees on a plain bf16 model


@pytest.mark.parametrize(
    ("tp", "pp", "per_stage"),
    [
        (2, 1, ((5_747_200 - 4 * NORM_BYTES - 512) // 2 + 4 * NORM_BYTES + 512,)),
        # TP=4 > 2 KV heads: K/V projections at 1/2 per rank, the rest at 1/4.
        (4, 1, ((5_747_200 - 4 * NORM_BYTES - 512 - 4 * KV_BYTES) // 4 + 4 * KV_BYTES // 2 + 4 * NORM_BYTES + 512,)),
        (1, 2, (2 * LAYER_BYTES + EMBED_BYTES, 2 * LAYER_BYTES + EMBED_BYTES + 512)),
    ],
)
def test_headers_split_by_tp_and_pp(tp: int, pp: int, per_stage: tuple[int, ...]) -> None:
    result = weight_bytes(parse_config(TINY), headers(tiny_tensors()), tp=tp, pp=pp)
    assert result is not None
    assert result.per_stage_bytes == per_stage
    assert result.per_gpu_bytes == max(per_stage)
    assert result.total_bytes == 5_747_200


def test_headers_mtp_tensors_only_when_asked() -> None:
    arch = parse_config(TINY)
    tensors = [
        *tiny_tensors(),
        bf16("mtp.fc.weight", 256, 512),  # Qwen3-Next style MTP prefix
        bf16("model.layers.4.eh_proj.weight", 256, 512),  # DeepSeek style: layer index past the last layer
        bf16("model.layers.4.embed_tokens.weight", 1000, 256),  # DeepSeek MTP's copy of the embedding
        bf16("model.layers.4.shared_head.head.weight", 1000, 256),
    ]
    without = weight_bytes(arch, headers(tensors))
    with_mtp = weight_bytes(arch, headers(tensors), include_mtp=True)
    assert without is not None and with_mtp is not None
    assert without.total_bytes == 5_747_200
    assert with_mtp.total_bytes == 5_747_200 + 2 * 262_144  # the copies are never counted
    assert "2 MTP tensors not counted: the engine loads them only for speculative method mtp" in without.notes
    assert any("2 MTP copies of the embedding/LM head" in note for note in with_mtp.notes)
    two_stages = weight_bytes(arch, headers(tensors), pp=2, include_mtp=True)
    assert two_stages is not None
    assert two_stages.per_stage_bytes[1] == 2 * LAYER_BYTES + EMBED_BYTES + 512 + 2 * 262_144


def test_headers_cast_float32_but_keep_scales() -> None:
    arch = parse_config(TINY)
    tensors = [
        *tiny_tensors(),
        bf16("model.layers.0.mlp.extra.weight", 256, 256, dtype="F32", size=4),  # loaded as bf16
        bf16("model.layers.0.mlp.down_proj.weight_scale_inv", 2, 4, dtype="F32", size=4),  # a scale stays fp32
        bf16("model.layers.0.mlp.up_proj.qweight", 512, 128, dtype="F8_E4M3", size=1),  # stored bytes
    ]
    result = weight_bytes(arch, headers(tensors))
    assert result is not None
    assert result.total_bytes == 5_747_200 + 65_536 * 2 + 8 * 4 + 65_536
    assert "1 floating-point tensors counted at bfloat16, as the engine loads them" in result.notes


def test_headers_replicate_routers_and_mla_down_projections() -> None:
    arch = parse_config(TINY)
    tensors = [
        *tiny_tensors(),
        bf16("model.layers.0.mlp.gate.weight", 8, 256),  # MoE router
        bf16("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 96, 256),
    ]
    one = weight_bytes(arch, headers(tensors), tp=1)
    four = weight_bytes(arch, headers(tensors), tp=4)
    assert one is not None and four is not None
    extra = 2 * (8 * 256 + 96 * 256)
    base = weight_bytes(arch, headers(tiny_tensors()), tp=4)
    assert base is not None
    assert four.per_gpu_bytes == base.per_gpu_bytes + extra  # whole on every rank
    assert one.total_bytes == 5_747_200 + extra


def test_empty_headers_fall_back_to_the_estimate() -> None:
    arch = parse_config(TINY)
    result = weight_bytes(arch, WeightsInfo(tensors=(), files=()))
    assert result is not None and not result.exact


@pytest.mark.parametrize(("tp", "expected"), [(1, 5_111_970_304), (2, 2_555_985_152)])
def test_drafter_estimate(tp: int, expected: int) -> None:
    drafter = parse_drafter(load("dflash2-drafter.json"), "dflash", "dflash2-drafter.json")
    result = drafter_weight_bytes(drafter, tp=tp)
    assert result is not None
    assert (result.total_bytes, result.per_gpu_bytes, result.exact) == (5_111_970_304, expected, False)


def test_drafter_headers_and_unknown() -> None:
    drafter = parse_drafter(load("dflash2-drafter.json"), "dflash")
    info = headers([bf16("fc.weight", 6656, 33280), bf16("norm.weight", 6656)])
    result = drafter_weight_bytes(drafter, info, tp=2)
    assert result is not None
    assert result.exact and result.total_bytes == 2 * (6656 * 33280 + 6656)
    assert result.per_gpu_bytes == (6656 * 33280 + 6656)
    bare = parse_drafter({**TINY, "num_hidden_layers": 1, "intermediate_size": None}, "eagle3")
    assert drafter_weight_bytes(bare) is None
    with pytest.raises(InputError, match="TP=0"):
        drafter_weight_bytes(drafter, tp=0)


def test_a_checkpoint_total_is_split_as_the_estimate_splits_it_and_mtp_counts_only_when_it_drafts() -> None:
    arch = arch_of("deepseek-v4-flash.json")
    total = 159_609_485_896  # the release index's total_size, MTP layer included
    drafting = weights_from_checkpoint_total(arch, total, tp=2, include_mtp=True)
    plain = weights_from_checkpoint_total(arch, total, tp=2)
    assert drafting is not None and plain is not None
    assert abs(drafting.total_bytes - total) <= 1  # everything stored is loaded when MTP drafts
    stored, without_mtp = (weight_bytes(arch, tp=2, include_mtp=m) for m in (True, False))
    assert stored is not None and without_mtp is not None
    # Without MTP the MTP layer's share is left out, in the estimate's proportion of the stored total.
    assert abs(plain.total_bytes - total * without_mtp.total_bytes / stored.total_bytes) <= 1
    assert abs(plain.per_gpu_bytes - without_mtp.per_gpu_bytes * total / stored.total_bytes) <= 1
    assert any("MTP modules' share" in note for note in plain.notes)
