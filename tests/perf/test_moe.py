"""The fused-MoE rate by expert width: the fitted curve against the kernel-table rows it was derived from."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from dspark.perf.gpus import gpu_perf
from dspark.perf.moe import (
    DEFAULT_WIDTH,
    DENSE_TFLOPS,
    EXPERT_READ_TABLE_TBPS,
    MOE_TABLE_TFLOPS,
    expert_read_fraction,
    fused_moe_fraction,
    fused_moe_tflops,
    wide_factor,
)


def test_the_curve_follows_the_table_rows_it_was_fitted_to() -> None:
    """rms log error of the fit about 10% over the 14 shapes; Qwen3-30B-A3B's and Mixtral's rows within 5%."""
    errors = [math.log(fused_moe_tflops(width) / rate) for (_h, width, _k, _e), rate in MOE_TABLE_TFLOPS.items()]
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) < 0.11
    assert fused_moe_tflops(768) == pytest.approx(MOE_TABLE_TFLOPS[(2048, 768, 8, 128)], rel=0.05)
    assert fused_moe_tflops(14336) == pytest.approx(MOE_TABLE_TFLOPS[(4096, 14336, 2, 8)], rel=0.05)


def test_wider_experts_run_closer_to_the_dense_rate_and_never_above_it() -> None:
    rng = random.Random(5)  # noqa: S311 - widths to test, not secrets
    widths = sorted(rng.randint(1, 40000) for _ in range(200))
    fractions = [fused_moe_fraction(w) for w in widths]
    assert all(a <= b for a, b in itertools.pairwise(fractions))
    assert all(0 < f < 0.85 for f in fractions)
    # the Qwen3-30B-A3B prior it replaces (0.65) and Mixtral's wide experts
    assert fused_moe_fraction(768) == pytest.approx(0.65, abs=0.02)
    assert fused_moe_fraction(14336) == pytest.approx(0.83, abs=0.01)


def test_tensor_parallel_splits_the_width_and_unknown_width_is_the_narrow_default() -> None:
    assert fused_moe_fraction(14336, 2) == fused_moe_fraction(7168)
    assert fused_moe_fraction(768, 4) < fused_moe_fraction(768, 2) < fused_moe_fraction(768)
    assert fused_moe_fraction(None) == fused_moe_fraction(DEFAULT_WIDTH)
    for bad in (0, -5):
        with pytest.raises(ValueError, match="tensor parallel"):
            fused_moe_fraction(768, bad)
        with pytest.raises(ValueError, match="width"):
            fused_moe_tflops(bad)


def test_the_dense_rate_it_is_a_fraction_of_is_dsparks_h200_gemm_rate() -> None:
    h200 = gpu_perf("NVIDIA H200")
    assert h200.gemm_fraction * h200.bf16_tflops == pytest.approx(DENSE_TFLOPS)


def test_the_h200_reads_experts_as_the_step_model_prices_them() -> None:
    """tests/device/results/2026-12-02-moe-routing: under vLLM's dummy weights Mixtral's router spreads random tokens
    evenly (coverage within 1 point of 1 − (1 − k/E)^T), and vLLM's fused-MoE kernel takes a time proportional to
    the experts a step touches (from 4 of them up, within 10% of one per-expert time) at a rate within the
    calibration's bandwidth bounds (0.24-1.0 of the 4.8 TB/s peak) and within 5% of 0.86 of the peak (run E's
    profile-fitted bandwidth); the priors' 0.8 of the peak is below it."""
    data = json.loads((Path(__file__).resolve().parents[1] / "device/results/2026-12-02-moe-routing/"
                       "moe-routing.json").read_text())
    for tokens, cov in data["routing"]["coverage"].items():
        assert cov["sampled"] == pytest.approx(1 - (1 - 2 / 8) ** int(tokens), abs=0.01)
    rows = [r for r in data["kernel"]["rows"] if "seconds" in r and r["experts_touched"] >= 4]
    per_expert = [r["seconds"] / r["experts_touched"] for r in rows]
    assert len(rows) >= 10 and max(per_expert) / min(per_expert) < 1.10
    full = [r["bytes_per_s"] for r in rows if r["experts_touched"] == 8]
    peak = gpu_perf("NVIDIA H200").bandwidth_gbps * 1e9
    assert all(0.24 * peak < b < peak for b in full)
    assert sum(full) / len(full) == pytest.approx(0.86 * peak, rel=0.05)
    assert gpu_perf("NVIDIA H200").bandwidth_fraction < min(full) / peak


def test_the_expert_read_curve_follows_its_table_rows_and_grows_with_the_expert() -> None:
    """R(S) against the 14 shapes' read rates (rms log error under 3.5%), Qwen3-30B-A3B's and Mixtral's within 2%
    and 1%; monotone in the expert's size, below the peak, refused for no size."""
    def rate(h: int, n: int) -> float:
        return 4.8 * expert_read_fraction(3.0 * h * n * 2)

    errors = [math.log(rate(h, n) / r) for (h, n, _k, _e), r in EXPERT_READ_TABLE_TBPS.items()]
    assert math.sqrt(sum(e * e for e in errors) / len(errors)) < 0.035
    assert rate(2048, 768) == pytest.approx(EXPERT_READ_TABLE_TBPS[(2048, 768, 8, 128)], rel=0.02)
    assert rate(4096, 14336) == pytest.approx(EXPERT_READ_TABLE_TBPS[(4096, 14336, 2, 8)], rel=0.01)
    sizes = sorted(random.Random(3).uniform(1e5, 2e9) for _ in range(50))  # noqa: S311 - test inputs
    fractions = [expert_read_fraction(size) for size in sizes]
    assert fractions == sorted(fractions) and all(0 < f < 1 for f in fractions)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="positive"):
            expert_read_fraction(bad)


def test_the_h200s_mixtral_reads_its_experts_at_the_kernels_rate_and_the_dense_weights_at_the_bandwidth() -> None:
    """The step model reads routed experts at expert_bandwidth_bytes_per_s and the dense weights at the bandwidth:
    an 8-expert top-2 step of one token reads a quarter of the experts at the kernel's rate."""
    from dspark.perf.step import StepCosts, StepShape, cost_table, step_terms  # noqa: PLC0415

    shape = StepShape(dense_weight_bytes=3e9, expert_weight_bytes=90e9, num_experts=8, top_k=2,
                      kv_bytes_per_token=0.0, state_bytes_per_seat=0.0, speculative_tokens=0, emitted_per_step=1.0)
    costs = StepCosts(fixed_s=0.0, bandwidth_bytes_per_s=3.84e12, expert_bandwidth_bytes_per_s=4.13e12)
    assert step_terms(cost_table(costs, shape), 1, 0.0, 0)["gemm"] == pytest.approx(3e9 / 3.84e12 + 22.5e9 / 4.13e12)
    dense_only = StepCosts(fixed_s=0.0, bandwidth_bytes_per_s=3.84e12)
    assert step_terms(cost_table(dense_only, shape), 1, 0.0, 0)["gemm"] == pytest.approx(25.5e9 / 3.84e12)


def test_a_slower_wide_expert_tactic_applies_from_its_width_on_and_only_where_a_gpu_has_one() -> None:
    """The B200's fused-MoE rate drops to moe_wide_rate of its curve from moe_wide_width per GPU (Mixtral's 14,336
    at TP 1, not at TP 2: 7,168 a GPU); the H200 and the GPUs without a table have no such step."""
    b200 = gpu_perf("NVIDIA B200")
    assert wide_factor(b200.moe_wide_width - 1, b200) == 1.0 and wide_factor(b200.moe_wide_width, b200) < 0.6
    curve = b200.moe_rate_fraction * 14336 / (14336 + b200.moe_width_half)
    assert fused_moe_fraction(14336, 1, b200) == pytest.approx(curve * b200.moe_wide_rate)
    assert fused_moe_fraction(14336, 2, b200) > fused_moe_fraction(14336, 1, b200)
    for name in ("NVIDIA H200", "NVIDIA GB10", "NVIDIA GeForce RTX 5090"):
        perf = gpu_perf(name)
        assert all(wide_factor(w, perf) == 1.0 for w in (1, 768, 14336, 100_000))
        assert fused_moe_fraction(768, 1, perf) == fused_moe_fraction(768)  # the H200's curve


def test_a_gpus_own_read_curve_and_a_refused_half_size() -> None:
    """expert_read_fraction with a GPU's own peak fraction and half size (the B200's 0.78, 0.37 MB) differs from the
    H200's; a flat curve (half size 0) is its peak fraction at every size; a negative half size is refused."""
    b200 = gpu_perf("NVIDIA B200")
    own = expert_read_fraction(9.4e6, b200.expert_fraction, b200.expert_half_bytes)
    assert own == pytest.approx(0.78 * 9.4e6 / (9.4e6 + 0.37e6)) and own != expert_read_fraction(9.4e6)
    rng = random.Random(11)  # noqa: S311 - test inputs
    for size in (rng.uniform(1e3, 1e10) for _ in range(20)):
        assert expert_read_fraction(size, 0.7, 0.0) == pytest.approx(0.7)
    for bad in (-1.0, -1e6):
        with pytest.raises(ValueError, match="negative"):
            expert_read_fraction(1e6, 0.8, bad)
