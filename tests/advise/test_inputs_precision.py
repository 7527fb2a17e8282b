"""The linear layers' rate by weight format and GPU (dspark.advise.inputs, dspark.perf.gpus.gemm_precision): NVFP4
on FP4 tensor cores where the GPU has them, weight-only at the BF16 rate with 4-bit reads where it has not; FP8 as
it was; the calibration ceiling follows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark.advise.inputs import ModelInputs, model_inputs
from dspark.advise.model import decode_step_s
from dspark.perf.gpus import gpu_perf
from dspark.planning.validate import ValidateRequest, validate

CONFIGS = Path(__file__).resolve().parents[1] / "device" / "configs"
NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
MXFP4 = {"quant_method": "mxfp4"}


def _inputs(tmp_path: Path, config: str, profile: str, quant: dict[str, Any] | None,
            kv_cache_dtype: str | None = None) -> ModelInputs:
    arch = json.loads((CONFIGS / f"{config}.json").read_text())
    if quant is not None:
        arch["quantization_config"] = quant
    model = tmp_path / (f"{config}-{profile}-{(quant or {}).get('quant_algo', (quant or {}).get('quant_method'))}"
                        f"-{kv_cache_dtype}")
    model.mkdir()
    (model / "config.json").write_text(json.dumps(arch))
    report = validate(ValidateRequest(flags={"model": str(model), "hardware": profile, "engine": "vllm"},
                                      engine_version="0.25.0"))
    return model_inputs(report.architecture, report.weights, report.capacity, report.hardware.gpus[0],
                        platform="cuda", tp=1, speculative_tokens=0, kv_cache_dtype=kv_cache_dtype)


def test_nvfp4_on_a_b200_runs_at_its_fp4_rate_with_a_quantisation_kernel_per_input(tmp_path: Path) -> None:
    b200 = gpu_perf("NVIDIA B200")
    bf16 = _inputs(tmp_path, "qwen3-8b", "b200", None)
    fp8 = _inputs(tmp_path, "qwen3-8b-fp8", "b200", None)
    fp4 = _inputs(tmp_path, "qwen3-8b", "b200", NVFP4)
    assert fp4.prior.flops_per_s == pytest.approx(9000e12 * b200.fp8_gemm_fraction * b200.sustained_clock)
    assert fp4.prior.flops_per_s == pytest.approx(2 * fp8.prior.flops_per_s)
    assert fp4.prior.peak_flops_per_s == 9000e12 and fp8.prior.peak_flops_per_s == 4500e12
    layers = 36
    assert fp4.shape.kernels_per_step == fp8.shape.kernels_per_step == bf16.shape.kernels_per_step + 4 * layers
    quant = fp4.shape.activation_bytes_per_token - bf16.shape.activation_bytes_per_token
    fp8_quant = fp8.shape.activation_bytes_per_token - bf16.shape.activation_bytes_per_token
    assert quant == pytest.approx(fp8_quant * (2 + 0.5 + 1 / 16) / 3)  # the same inputs, FP4 written
    assert "FP4" in fp4.sources["flops_per_s"] and "scaled_fp4_quant" in fp4.sources["flops_per_s"]
    # Attention stays in BF16 beside 4-bit weights.
    assert fp4.prior.attention_flops_per_s == bf16.prior.attention_flops_per_s


def test_nvfp4_on_an_h200_reads_4_bit_weights_but_computes_at_the_bf16_rate(tmp_path: Path) -> None:
    bf16 = _inputs(tmp_path, "qwen3-8b", "h200", None)
    fp8 = _inputs(tmp_path, "qwen3-8b-fp8", "h200", None)
    fp4 = _inputs(tmp_path, "qwen3-8b", "h200", NVFP4)
    b200 = _inputs(tmp_path, "qwen3-8b", "b200", NVFP4)
    assert fp4.prior.flops_per_s == bf16.prior.flops_per_s == pytest.approx(989e12 * 0.80 * 0.80)
    assert fp4.prior.peak_flops_per_s == bf16.prior.peak_flops_per_s == 989e12
    assert fp4.shape.kernels_per_step == bf16.shape.kernels_per_step  # Marlin W4A16: no quantisation kernel
    assert fp4.shape.activation_bytes_per_token == bf16.shape.activation_bytes_per_token
    assert "Marlin" in fp4.sources["flops_per_s"]
    # The weights are read at 4 bits (+ an FP8 scale per 16: 0.5625 B a parameter), as capacity counts them: the same
    # bytes as on the B200; the lm_head (BF16 in every checkpoint here) apart, 0.5625 of FP8's, 0.28 of BF16's.
    assert fp4.shape.dense_weight_bytes == b200.shape.dense_weight_bytes
    arch = json.loads((CONFIGS / "qwen3-8b.json").read_text())
    head = 2.0 * arch["vocab_size"] * arch["hidden_size"]
    linear = {k: v.shape.dense_weight_bytes - head for k, v in (("bf16", bf16), ("fp8", fp8), ("fp4", fp4))}
    assert linear["fp4"] / linear["fp8"] == pytest.approx(0.5625, rel=2e-3)
    assert linear["fp4"] / linear["bf16"] == pytest.approx(0.5625 / 2, rel=2e-3)
    # So its decode step is the faster one at one stream, its prompt GEMMs as slow as BF16's.
    one = {k: decode_step_s(v.prior, v.shape, 1, 1024.0) for k, v in (("bf16", bf16), ("fp4", fp4))}
    assert one["fp4"] < 0.6 * one["bf16"]


def test_fp8_keeps_its_rate_and_ceiling_and_attention_follows_the_kv_cache(tmp_path: Path) -> None:
    """FP8 weights: GEMMs at the FP8 rate; attention at the BF16 peak with the cache in the model's dtype ("auto"),
    at the FP8 peak only with an FP8 cache (FlashAttention computes in the dtype it reads the cache in)."""
    for profile, name in (("h200", "NVIDIA H200"), ("b200", "NVIDIA B200")):
        perf = gpu_perf(name)
        fp8 = _inputs(tmp_path, "qwen3-8b-fp8", profile, None, "auto")
        assert fp8.prior.flops_per_s == pytest.approx(perf.fp8_tflops * 1e12 * perf.fp8_gemm_fraction
                                                      * perf.sustained_clock)
        assert fp8.prior.peak_flops_per_s == perf.fp8_tflops * 1e12
        assert fp8.prior.attention_flops_per_s == pytest.approx(perf.bf16_tflops * 1e12 * perf.attention_fraction
                                                                * perf.sustained_clock)
        fp8_cache = _inputs(tmp_path, "qwen3-8b-fp8", profile, None, "fp8")
        assert fp8_cache.prior.attention_flops_per_s == pytest.approx(
            perf.fp8_tflops * 1e12 * perf.attention_fraction * perf.sustained_clock)
        bf16_fp8_cache = _inputs(tmp_path, "qwen3-8b", profile, None, "fp8_e4m3")
        assert bf16_fp8_cache.prior.attention_flops_per_s == fp8_cache.prior.attention_flops_per_s


def test_mxfp4_experts_run_weight_only_beside_fp4_rate_dense_layers(tmp_path: Path) -> None:
    """A MoE's routed experts at their own format's rate: NVFP4 experts on the B200's FP4 tensor cores, MXFP4
    (weight-only) at its BF16 rate; on the H200 both at the BF16 rate."""
    b200 = gpu_perf("NVIDIA B200")
    nv = _inputs(tmp_path, "qwen3-30b-a3b", "b200", NVFP4)
    mx = _inputs(tmp_path, "qwen3-30b-a3b", "b200", MXFP4)
    bf = _inputs(tmp_path, "qwen3-30b-a3b", "b200", None)
    assert nv.prior.expert_flops_per_s / nv.prior.flops_per_s == pytest.approx(
        bf.prior.expert_flops_per_s / bf.prior.flops_per_s)
    assert nv.prior.expert_flops_per_s == pytest.approx(bf.prior.expert_flops_per_s * 9000 * b200.fp8_gemm_fraction
                                                        / (2250 * b200.gemm_fraction))
    assert mx.prior.expert_flops_per_s == pytest.approx(bf.prior.expert_flops_per_s)
    assert mx.prior.peak_flops_per_s == 2250e12
    h200_nv = _inputs(tmp_path, "qwen3-30b-a3b", "h200", NVFP4)
    h200_bf = _inputs(tmp_path, "qwen3-30b-a3b", "h200", None)
    assert h200_nv.prior.expert_flops_per_s == pytest.approx(h200_bf.prior.expert_flops_per_s)
    assert h200_nv.shape.expert_weight_bytes < 0.3 * h200_bf.shape.expert_weight_bytes
