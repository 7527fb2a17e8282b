"""Every GPU dspark ships a profile for has the step-time model's figures; the rest get labelled placeholders."""

from __future__ import annotations

import pytest

from dspark.hardware.profiles import get_profile, profile_names
from dspark.perf.gpus import CPU, UNKNOWN, gemm_precision, gpu_perf, is_known


def test_every_shipped_profile_has_datasheet_figures() -> None:
    for name in profile_names():
        gpu = get_profile(name).gpus[0]
        perf = gpu_perf(gpu.name)
        assert is_known(perf), name
        assert perf.bandwidth_gbps == gpu.bandwidth_gbps  # the same datasheet figure as the hardware profile
        assert 0 < perf.bf16_tflops < perf.fp8_tflops
        assert 0 < perf.bandwidth_fraction <= 1 and 0 < perf.gemm_fraction <= 1 and 0 < perf.attention_fraction <= 1
        assert perf.source


def test_unknown_devices_get_placeholders() -> None:
    assert gpu_perf("NVIDIA H200", platform="cpu") is CPU
    assert gpu_perf("Some Future GPU") is UNKNOWN and not is_known(UNKNOWN)
    assert "placeholder" in UNKNOWN.label and "placeholder" in CPU.label


def test_a_pcie_h100_is_not_taken_for_an_sxm_one() -> None:
    assert gpu_perf("NVIDIA H100 PCIe").bandwidth_gbps == 2000.0
    assert gpu_perf("NVIDIA H100 80GB HBM3").bandwidth_gbps == 3350.0
    assert gpu_perf("NVIDIA A100-SXM4-80GB").label == "A100"


def test_the_sustained_clock_is_a_fraction_and_measured_where_the_h200_says_so() -> None:
    for perf in (*[gpu_perf(get_profile(n).gpus[0].name) for n in profile_names()], CPU, UNKNOWN):
        assert 0.5 < perf.sustained_clock <= 1.0, perf.label
    h200 = gpu_perf("NVIDIA H200")
    assert h200.sustained_clock == 0.80 and "1,395-1,530 MHz" in h200.source
    assert CPU.sustained_clock == 1.0


def test_the_unhidden_gemm_share_and_the_kv_rate_are_each_gpus_own_where_measured() -> None:
    """gemm_unhidden, the paged-KV fraction and the fused-MoE expert read rate: the H200's from its run and tables,
    the H100's and B200's from their tables (tests/perf/test_aic_priors.py), the RTX 5090's memory side from the RTX
    PRO 6000's; GB10, with no table, keeps none, 0.65 and the dense bandwidth."""
    h200 = gpu_perf("NVIDIA H200")
    assert h200.gemm_unhidden == 0.22 and h200.kv_fraction == 0.90
    assert h200.expert_fraction == pytest.approx(4.14 / 4.8)
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA B200"):
        perf = gpu_perf(name)
        assert 0.15 < perf.gemm_unhidden < 0.35 and 0.85 < perf.kv_fraction < 1.0 and 0.5 < perf.expert_fraction < 1
        assert "aiconfigurator" in perf.source
    rtx = gpu_perf("NVIDIA GeForce RTX 5090")
    assert rtx.gemm_unhidden == 0.0 and 0.8 < rtx.kv_fraction < 0.9 and 0.8 < rtx.expert_fraction < 0.85
    gb10 = gpu_perf("NVIDIA GB10")
    assert gb10.gemm_unhidden == 0.0 and gb10.kv_fraction == 0.65 and gb10.expert_fraction == 0.0


def test_fp4_tensor_cores_are_blackwell_s_alone_at_twice_the_fp8_rate() -> None:
    """FP4 dense peaks from the datasheets (B200 9,000 = 144 PFLOP/s sparse ÷ 8 GPUs ÷ 2; GB10 500 = 1 PFLOP/s
    sparse ÷ 2; the RTX 5090's 1,676 = 3,352 sparse), 0 on Hopper, Ampere and Ada, which have none."""
    fp4 = {g: gpu_perf(g).fp4_tflops for g in ("NVIDIA B200", "NVIDIA GB10", "NVIDIA GeForce RTX 5090",
                                                 "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB",
                                                 "NVIDIA L40S", "NVIDIA GeForce RTX 4090")}
    assert fp4 == {"NVIDIA B200": 9000.0, "NVIDIA GB10": 500.0, "NVIDIA GeForce RTX 5090": 1676.0,
                   "NVIDIA H100 80GB HBM3": 0.0, "NVIDIA H200": 0.0, "NVIDIA A100-SXM4-80GB": 0.0,
                   "NVIDIA L40S": 0.0, "NVIDIA GeForce RTX 4090": 0.0}
    for name in ("NVIDIA B200", "NVIDIA GB10"):
        assert gpu_perf(name).fp4_tflops == 2 * gpu_perf(name).fp8_tflops


@pytest.mark.parametrize("name", ["NVIDIA B200", "NVIDIA GB10", "NVIDIA GeForce RTX 5090"])
def test_nvfp4_runs_w4a4_on_fp4_tensor_cores_with_its_quantisation_kernel(name: str) -> None:
    perf = gpu_perf(name)
    p = gemm_precision(perf, "nvfp4")
    assert (p.label, p.peak_tflops) == ("FP4", perf.fp4_tflops)
    assert p.fraction == perf.gemm_fraction_for(True)  # no FP4 table: the FP8 fraction stands in
    assert p.quant_bytes_per_element == pytest.approx(2 + 0.5 + 1 / 16)


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])
def test_nvfp4_without_fp4_tensor_cores_is_weight_only_at_the_bf16_rate(name: str) -> None:
    perf = gpu_perf(name)
    p = gemm_precision(perf, "nvfp4")
    assert (p.label, p.peak_tflops, p.fraction, p.quant_bytes_per_element) == (
        "BF16", perf.bf16_tflops, perf.gemm_fraction, 0.0)
    assert "Marlin" in p.kernel


@pytest.mark.parametrize("name", ["NVIDIA B200", "NVIDIA GB10", "NVIDIA H200"])
def test_mxfp4_is_weight_only_and_fp8_and_bf16_keep_their_rates(name: str) -> None:
    perf = gpu_perf(name)
    mx = gemm_precision(perf, "mxfp4")
    assert (mx.label, mx.peak_tflops, mx.fraction, mx.quant_bytes_per_element) == (
        "BF16", perf.bf16_tflops, perf.gemm_fraction, 0.0)
    fp8 = gemm_precision(perf, "fp8")
    assert (fp8.peak_tflops, fp8.fraction, fp8.quant_bytes_per_element) == (
        perf.fp8_tflops, perf.gemm_fraction_for(True), 3.0)
    for fmt in (None, "int4", "bfloat16"):
        assert gemm_precision(perf, fmt).peak_tflops == perf.bf16_tflops
