"""The GPU priors for the GPUs no run measured (H100 SXM, B200), against the measured kernel rows they come from.

tests/perf/data/aic_rows.json is benchmarks/aic_gpu_priors.py's extract of aiconfigurator-core 0.12's tables for
vLLM 0.24 (each block names its parquet file and filters): the figures that script derives per GPU and the rows
checked here. dspark's step model prices each op the way the advisor does (dspark.perf.step, the GPU's figures of
dspark.perf.gpus, the fused-MoE curves of dspark.perf.moe) at the rated clock (the tables' kernels run for
microseconds, below any power cap: the sustained clock is not in them), and each op's cost is held to the
measured latency within a bound stated per op class. The H200's rows are checked the same way, at its figures as
they were, so that nothing regresses there.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from dspark.advise.inputs import MOE_EXTRA_KERNELS_PER_LAYER, model_inputs
from dspark.perf.gpus import FP8_QUANT_BYTES, KERNEL_FLOOR_S, GpuPerf, gpu_perf
from dspark.perf.moe import expert_read_fraction, fused_moe_fraction
from dspark.perf.step import StepCosts, StepShape, cost_table, step_seconds

DATA = json.loads((Path(__file__).parent / "data" / "aic_rows.json").read_text())
NVML = {"h200_sxm": "NVIDIA H200", "h100_sxm": "NVIDIA H100 80GB HBM3", "b200_sxm": "NVIDIA B200"}
KV_PER_TOKEN = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, BF16: one layer (the tables' unit)
PAIR_FLOPS = 4 * 32 * 128  # QK^T and PV for 32 query heads of 128, per (query, key) pair, one layer


def _rows(gpu: str, op: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DATA["gpus"][gpu]["rows"][op]["rows"]
    assert rows, (gpu, op)
    return rows


def _costs(perf: GpuPerf, fp8: bool = False) -> StepCosts:
    """The advisor's GPU-dependent rates (dspark.advise.inputs.model_inputs) at the rated clock."""
    peak = (perf.fp8_tflops if fp8 else perf.bf16_tflops) * 1e12
    bw = perf.bandwidth_gbps * 1e9
    return StepCosts(fixed_s=0.0, bandwidth_bytes_per_s=bw * perf.bandwidth_fraction,
                     flops_per_s=peak * perf.gemm_fraction_for(fp8), gemm_half_tokens=perf.gemm_half_tokens,
                     attention_flops_per_s=perf.bf16_tflops * 1e12 * perf.attention_fraction,
                     kernel_floor_s=perf.kernel_floor_s, gemm_unhidden=perf.gemm_unhidden,
                     kv_bandwidth_bytes_per_s=bw * perf.kv_fraction,
                     expert_small_tile_bandwidth_bytes_per_s=bw * perf.expert_small_tile_fraction,
                     expert_small_tile_tokens=float(perf.expert_small_tile_tokens))


def _shape(**kw: Any) -> StepShape:
    base: dict[str, Any] = {"dense_weight_bytes": 0.0, "expert_weight_bytes": 0.0, "num_experts": None,
                            "top_k": None, "kv_bytes_per_token": 0.0, "state_bytes_per_seat": 0.0,
                            "speculative_tokens": 0, "emitted_per_step": 1.0, "kernels_per_step": 1}
    return StepShape(**{**base, **kw})


def _gemm_errors(gpu: str, fp8: bool) -> dict[tuple[int, int, int], float]:
    perf = gpu_perf(NVML[gpu])
    costs = _costs(perf, fp8)
    out = {}
    for r in _rows(gpu, "gemm_fp8" if fp8 else "gemm_bf16"):
        # An FP8 row times the activation quantisation kernel too (one more kernel, its input read and FP8 written)
        shape = _shape(dense_weight_bytes=float(r["n"] * r["k"] * (1 if fp8 else 2)),
                       dense_flops_per_token=2.0 * r["n"] * r["k"],
                       activation_bytes_per_token=float(FP8_QUANT_BYTES * r["k"]) if fp8 else 0.0,
                       kernels_per_step=2 if fp8 else 1)
        out[(r["m"], r["n"], r["k"])] = step_seconds(cost_table(costs, shape), r["m"], 0.0, 0) / (
            r["latency"] * 1e-3) - 1
    return out


def _rms(errors: list[float]) -> float:
    return math.sqrt(sum(math.log1p(e) ** 2 for e in errors) / len(errors))


def test_the_extract_names_its_source_and_the_datasheet_figures_match_dsparks() -> None:
    assert DATA["tool"] == "aiconfigurator-core" and DATA["version"] == "0.12.0"
    assert DATA["backend"] == "vllm" and DATA["backend_version"] == "0.24.0"
    for gpu, name in NVML.items():
        perf = gpu_perf(name)
        assert DATA["peaks"][gpu] == [perf.bandwidth_gbps, perf.bf16_tflops, perf.fp8_tflops]
        for block in DATA["gpus"][gpu]["rows"].values():
            assert block["file"].startswith(f"systems/data/{gpu}/") and "/vllm/0.24.0/" in block["file"]
            assert block["filter"]


@pytest.mark.parametrize("gpu", ["h100_sxm", "b200_sxm"])
def test_each_new_figure_is_the_one_its_table_gives(gpu: str) -> None:
    """The H100's and B200's fractions are the script's derivations, rounded (the T½ and the sustained clock are
    the exceptions dspark.perf.gpus explains: carried from the H200)."""
    fig = DATA["gpus"][gpu]["figures"]
    perf = gpu_perf(NVML[gpu])
    assert perf.gemm_fraction == pytest.approx(fig["gemm_fraction"], abs=0.006)
    assert perf.fp8_gemm_fraction == pytest.approx(fig["fp8_gemm_fraction"], abs=0.006)
    assert perf.gemm_unhidden == pytest.approx(fig["gemm_unhidden"], abs=0.006)
    assert perf.attention_fraction == pytest.approx(fig["attention_fraction"], abs=0.006)
    assert perf.kv_fraction == pytest.approx(fig["kv_fraction"], abs=0.006)
    assert perf.expert_fraction == pytest.approx(fig["expert_fraction"], abs=0.006)
    assert perf.expert_half_bytes == pytest.approx(fig["expert_half_bytes"], rel=0.02, abs=1e3)
    assert perf.moe_rate_fraction == pytest.approx(fig["moe_rate_fraction"], abs=0.006)
    assert perf.moe_width_half == pytest.approx(fig["moe_width_half"], rel=0.02, abs=0.5)
    assert perf.moe_wide_width == fig.get("moe_wide_width", 0)
    assert perf.moe_wide_rate == pytest.approx(fig.get("moe_wide_rate", 1.0), abs=0.006)
    assert perf.moe_wide_read == pytest.approx(fig.get("moe_wide_read", 1.0), abs=0.006)
    assert perf.expert_small_tile_tokens == fig.get("expert_small_tile_tokens", 0)
    assert perf.expert_small_tile_fraction == pytest.approx(fig.get("expert_small_tile_fraction", 0.0), abs=0.006)
    h200 = DATA["gpus"]["h200_sxm"]["figures"]
    # T½: the H200's 48 times the ratio of the two tables' own fits (the same die: the H200's)
    expected = 48.0 if gpu == "h100_sxm" else 48.0 * fig["gemm_half_tokens_fit"] / h200["gemm_half_tokens_fit"]
    assert perf.gemm_half_tokens == pytest.approx(expected, abs=0.5)


def test_the_h200s_figures_are_as_they_were_and_its_own_tables_agree_with_them() -> None:
    """The H200 keeps its figures (measured on the lent H200 where it could be); the script, run on its tables,
    gives them back within a few points, which is what makes the same script's H100 and B200 figures comparable.
    FP8 is the exception: the table's per-tensor FP8 GEMM reaches 0.49 of the FP8 peak, not the BF16 fraction."""
    perf = gpu_perf("NVIDIA H200")
    assert (perf.gemm_fraction, perf.sustained_clock, perf.gemm_unhidden, perf.kv_fraction) == (0.80, 0.80, 0.22, 0.90)
    assert (perf.attention_fraction, perf.gemm_half_tokens) == (0.62, 48.0)
    assert perf.expert_fraction == 4.14 / 4.8 and perf.expert_half_bytes == 0.87e6
    assert perf.moe_rate_fraction * 0.8 * 989.0 == pytest.approx(670.0) and perf.moe_width_half == 220.0
    fig = DATA["gpus"]["h200_sxm"]["figures"]
    assert fig["gemm_fraction"] == pytest.approx(perf.gemm_fraction, abs=0.01)
    assert fig["gemm_unhidden"] == pytest.approx(perf.gemm_unhidden, abs=0.015)
    assert fig["kv_fraction"] == pytest.approx(perf.kv_fraction, abs=0.03)
    assert fig["attention_fraction"] == pytest.approx(perf.attention_fraction, abs=0.03)
    assert fig["moe_rate_tflops"] == pytest.approx(670.0, rel=0.01)
    assert fig["moe_width_half"] == pytest.approx(220.0, rel=0.01)
    assert fig["expert_fraction"] == pytest.approx(perf.expert_fraction, abs=0.005)
    assert fig["expert_half_bytes"] == pytest.approx(perf.expert_half_bytes, rel=0.01)
    assert perf.fp8_gemm_fraction == pytest.approx(fig["fp8_gemm_fraction"], abs=0.006)


@pytest.mark.parametrize(("gpu", "worst", "rms"), [("h200_sxm", 0.17, 0.09), ("h100_sxm", 0.21, 0.09),
                                                   ("b200_sxm", 0.22, 0.12)])
def test_a_dense_gemm_costs_what_the_table_measured(gpu: str, worst: float, rms: float) -> None:
    """The Qwen3-8B layer's four BF16 GEMMs at 1-8,192 rows (weight-bound to compute-bound): every row within
    `worst`, rms log error under `rms` (H200 ±16%, rms 8%; H100 ±20%, 7.7%; B200 ±21%, 10.7%)."""
    errors = _gemm_errors(gpu, fp8=False)
    assert len(errors) == 28
    assert max(abs(e) for e in errors.values()) < worst, errors
    assert _rms(list(errors.values())) < rms


@pytest.mark.parametrize("gpu", list(NVML))
def test_an_fp8_gemm_with_its_activation_quantisation_costs_about_what_the_table_measured(gpu: str) -> None:
    """FP8 (per-tensor CUTLASS): each row also times vLLM's activation quantisation kernel (the collector runs the
    layer's forward on BF16 input), which the model prices as one more kernel reading 2 B and writing 1 B per input
    element. From 512 rows (where the fraction was taken, net of that kernel) within -40%/+56%, rms under 28%; at
    1-128 rows on Hopper within 27% (before the kernel was priced: 4-43% fast); the B200's single-row rows take
    24-33 µs whatever the shape (a tactic of its CUTLASS FP8 dispatch at one row, 2.6× its 8-row time) and stay
    58-69% fast, asserted as such, as are its 8-32-row rows (within 30%)."""
    errors = _gemm_errors(gpu, fp8=True)
    big = [e for (m, _n, _k), e in errors.items() if m >= 512]
    assert all(-0.40 < e < 0.56 for e in big), big
    assert _rms(big) < 0.28
    small = {key: e for key, e in errors.items() if key[0] <= 128}
    assert len(small) == 16
    if gpu != "b200_sxm":
        assert all(abs(e) < 0.27 for e in small.values()), small
        return
    assert all(-0.75 < e < -0.5 for (m, _n, _k), e in small.items() if m == 1), small
    assert all(abs(e) < 0.30 for (m, _n, _k), e in small.items() if 8 <= m <= 32), small


@pytest.mark.parametrize("gpu", list(NVML))
def test_the_fp8_quantisation_kernel_costs_what_its_own_table_measured(gpu: str) -> None:
    """vLLM's static FP8 activation quantisation (quantize/scale_matrix_perf) at 1-8,192 rows of 4,096 and 12,288:
    priced as one kernel floor plus 3 B per element at the elementwise rate. Where it moves 64 MB or more within 30%
    (H200 +11/+12%, H100 +12/+15%, B200 +1% to +27%); at up to 32 rows (one kernel floor) within 40%; between those
    its input stays in L2 and the kernel outruns the bandwidth, so the model is the slower there, never the faster
    by more than 20%."""
    costs = _costs(gpu_perf(NVML[gpu]))
    rows = _rows(gpu, "fp8_quant")
    assert len(rows) == 14
    for r in rows:
        moved = FP8_QUANT_BYTES * r["m"] * r["k"]
        table = cost_table(costs, _shape(activation_bytes_per_token=float(FP8_QUANT_BYTES * r["k"])))
        err = step_seconds(table, r["m"], 0.0, 0) / (r["latency"] * 1e-3) - 1
        bound = (-0.30, 0.30) if moved >= 64e6 else (-0.40, 0.40) if r["m"] <= 32 else (-0.20, 1.0)
        assert bound[0] < err < bound[1], (r, err)


def test_the_kernel_floor_is_hoppers_tiniest_gemm_and_the_b200s_is_not_taken_from_its_own() -> None:
    """The tiniest BF16 GEMMs (one row, n and k at most 256: 16 each) cost one kernel floor: on the H200 and H100
    within 15% of 2.5 µs. The B200's take 0.72 of the H200's; its floor stays 2.5 µs (dspark.perf.gpus: scaled by
    that ratio its GEMM rows at 1-128 rows, up to 21% fast, would be up to 28% fast), so there the model is the
    slower on these rows (14-39%)."""
    for gpu, name in NVML.items():
        perf = gpu_perf(name)
        assert perf.kernel_floor_s == KERNEL_FLOOR_S
        errors = [step_seconds(cost_table(_costs(perf), _shape(dense_weight_bytes=2.0 * r["n"] * r["k"],
                                                               dense_flops_per_token=2.0 * r["n"] * r["k"])),
                               1, 0.0, 0) / (r["latency"] * 1e-3) - 1 for r in _rows(gpu, "gemm_tiny")]
        assert len(errors) == 16
        if gpu == "b200_sxm":
            assert all(0.10 < e < 0.45 for e in errors), errors
        else:
            assert all(abs(e) < 0.15 for e in errors), errors
    tiny = {gpu: DATA["gpus"][gpu]["figures"]["tiny_gemm_us"] for gpu in NVML}
    assert tiny["h200_sxm"] == pytest.approx(2.5, rel=0.05) and tiny["h100_sxm"] == pytest.approx(2.5, rel=0.06)
    assert 0.65 < tiny["b200_sxm"] / tiny["h200_sxm"] < 0.78


@pytest.mark.parametrize("gpu", list(NVML))
def test_a_decode_attention_read_costs_what_the_table_measured(gpu: str) -> None:
    """Decode attention of 32 query / 8 KV heads: the KV read at the GPU's paged-KV rate. Where it reads 256 MB or
    more (32-128 rows of 4-16k tokens, 8 rows of 16k) within 20% (the rate is the difference of two context lengths,
    as the H200's was measured; H200 -6% to +1%, H100 -19% to -2%, B200 -11% to -2%); below that the kernel's fixed
    latency, which the model holds at one kernel floor, makes the model the faster, never the slower."""
    perf = gpu_perf(NVML[gpu])
    shape = _shape(kv_bytes_per_token=float(KV_PER_TOKEN), attention_flops_per_pair=PAIR_FLOPS)
    table = cost_table(_costs(perf), shape)
    big = []
    for r in _rows(gpu, "decode_attention"):
        rows, context = r["batch_size"], r["batch_size"] * (r["step"] + 1.0)
        err = step_seconds(table, rows, context, 0) / (r["latency"] * 1e-3) - 1
        assert err < 0.05, (r, err)
        if context * KV_PER_TOKEN >= 256e6:
            big.append(err)
    assert len(big) >= 4 and all(abs(e) < 0.20 for e in big), big


@pytest.mark.parametrize("gpu", list(NVML))
def test_prefill_attention_costs_what_the_table_measured_at_long_prompts(gpu: str) -> None:
    """Causal prefill attention of one prompt: within 12% at 16k tokens (where the attention fraction was taken,
    4-16k), within 30% at 4k; at 1k the kernel's ramp makes the model 50-65% fast (asserted as such)."""
    perf = gpu_perf(NVML[gpu])
    table = cost_table(_costs(perf), _shape(attention_flops_per_pair=PAIR_FLOPS))
    err = {r["isl"]: step_seconds(table, 0, 0.0, r["isl"], pairs=r["isl"] ** 2 / 2) / (r["latency"] * 1e-3) - 1
           for r in _rows(gpu, "prefill_attention")}
    assert abs(err[16384]) < 0.12 and abs(err[4096]) < 0.30 and -0.70 < err[1024] < 0, err


def _moe_errors(gpu: str) -> dict[tuple[int, int], float]:
    """(expert width, tokens) -> the model's error on the table's fused-MoE layer, as the advisor prices it."""
    perf = gpu_perf(NVML[gpu])
    base = _costs(perf)
    errors = {}
    for r in _rows(gpu, "moe"):
        h, n, k, e, t = r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"], r["num_tokens"]
        size = 3.0 * h * n * 2
        read = expert_read_fraction(size, perf.expert_fraction, perf.expert_half_bytes) * (
            perf.moe_wide_read if perf.moe_wide_width and n >= perf.moe_wide_width else 1.0)
        costs = dataclasses.replace(base, expert_flops_per_s=base.flops_per_s * fused_moe_fraction(n, 1, perf),
                                    expert_bandwidth_bytes_per_s=perf.bandwidth_gbps * 1e9 * read)
        shape = _shape(expert_weight_bytes=e * size, num_experts=e, top_k=k, expert_flops_per_token=6.0 * h * n * k,
                       kernels_per_step=MOE_EXTRA_KERNELS_PER_LAYER)
        errors[(n, t)] = step_seconds(cost_table(costs, shape), t, 0.0, 0) / (r["latency"] * 1e-3) - 1
    return errors


@pytest.mark.parametrize(("gpu", "worst"), [("h200_sxm", 0.22), ("h100_sxm", 0.14), ("b200_sxm", 0.30)])
def test_a_fused_moe_layer_costs_what_the_table_measured(gpu: str, worst: float) -> None:
    """Qwen3-30B-A3B's (128 experts, top-8, 768 wide) and Mixtral's (8, top-2, 14,336) BF16 expert layers at 1-16,384
    tokens on the GPU's default kernel, with dspark's expert coverage, the GPU's expert read rates and fused-MoE
    compute fraction and the MoE layer's extra kernels: H200 within 21%, H100 13%, B200 29% (35% before its
    TRT-LLM kernel's small-tile reads were priced)."""
    errors = {key: e for key, e in _moe_errors(gpu).items() if key[1] in (1, 8, 32, 128, 1024, 4096, 16384)}
    assert len(errors) == 14 and max(abs(x) for x in errors.values()) < worst, errors


def test_the_b200s_moe_kernel_reads_wide_experts_by_its_token_tile() -> None:
    """FlashInfer's TRT-LLM BF16 MoE picks its token tile from the tokens per expert: Mixtral's layer (8 experts,
    top-2) takes 0.40 ms at 4-32 tokens (up to 8 per expert: 7.1 TB/s) and 0.71 ms at 48-256 (4.0 TB/s). The
    model's two read rates (expert_small_tile_fraction; the curve times moe_wide_read) put every one of those rows
    within 12% (before: 7-17% slow at 1-32 tokens, 21% fast at 128) and the step from 32 to 48 tokens within 10% of
    the table's. At 512-1,024 tokens (128-256 per expert) its GEMMs reach their rate sooner than the dense T½ lets
    the model's: 20-50% slow there, asserted as such (a limit, docs/advise.md)."""
    errors = {t: e for (n, t), e in _moe_errors("b200_sxm").items() if n == 14336}
    assert all(abs(errors[t]) < 0.12 for t in (1, 4, 8, 16, 32, 48, 128, 256)), errors
    lat = {r["num_tokens"]: r["latency"] for r in _rows("b200_sxm", "moe") if r["inter_size"] == 14336}
    step = (1 + errors[48]) * lat[48] / ((1 + errors[32]) * lat[32])
    assert step == pytest.approx(lat[48] / lat[32], rel=0.10) and lat[48] / lat[32] > 1.6
    assert all(0.20 < errors[t] < 0.50 for t in (512, 1024)), errors


def test_the_rtx_5090_takes_only_the_memory_side_of_the_rtx_pro_6000s_tables() -> None:
    """The same GB202 die and 1,792 GB/s of GDDR7: the paged-KV and expert read rates carry over; the compute side
    does not (the PRO's BF16 tensor cores accumulate in FP32 at twice the GeForce part's rate), so the 5090's GEMM
    figures stay the placeholders, as do GB10's (no table, no analogue)."""
    fig = DATA["gpus"]["rtx_pro_6000_server"]["figures"]
    rtx = gpu_perf("NVIDIA GeForce RTX 5090")
    assert DATA["peaks"]["rtx_pro_6000_server"][0] == rtx.bandwidth_gbps
    assert rtx.kv_fraction == pytest.approx(fig["kv_fraction"], abs=0.006)
    assert rtx.expert_fraction == pytest.approx(fig["expert_fraction"], abs=0.006)
    assert rtx.expert_half_bytes == pytest.approx(fig["expert_half_bytes"], rel=0.02)
    assert DATA["peaks"]["rtx_pro_6000_server"][1] > 2 * rtx.bf16_tflops
    placeholder = GpuPerf("x", "x", 1.0, 1.0, 1.0, 1.0, 0.0)
    for name in ("NVIDIA GeForce RTX 5090", "NVIDIA GB10"):
        perf = gpu_perf(name)
        for field in ("gemm_fraction", "sustained_clock", "gemm_unhidden", "attention_fraction", "fp8_gemm_fraction",
                      "gemm_half_tokens", "moe_rate_fraction", "moe_width_half"):
            assert getattr(perf, field) == getattr(placeholder, field), (name, field)
    gb10 = gpu_perf("NVIDIA GB10")
    assert (gb10.kv_fraction, gb10.expert_fraction) == (placeholder.kv_fraction, 0.0)


@pytest.mark.parametrize(("profile", "gpu"), [("h100-80gb", "h100_sxm"), ("b200", "b200_sxm"), ("h200", "h200_sxm")])
def test_the_advisor_prices_a_model_with_these_figures(tmp_path: Path, profile: str, gpu: str) -> None:
    """dspark's advisor on the hardware profile (a Qwen3-30B-A3B-shaped config) takes exactly these rates, at the
    GPU's sustained clock: the per-op checks above check what a user gets."""
    from dspark.planning.validate import ValidateRequest, validate  # noqa: PLC0415 - the planner is heavy

    model = tmp_path / "m"
    model.mkdir()
    config = Path(__file__).resolve().parents[1] / "device" / "configs" / "qwen3-30b-a3b.json"
    (model / "config.json").write_text(config.read_text())
    report = validate(ValidateRequest(flags={"model": str(model), "hardware": profile, "engine": "vllm"},
                                      engine_version="0.25.0"))
    perf = gpu_perf(report.hardware.gpus[0].name)
    assert perf == gpu_perf(NVML[gpu])
    prior = model_inputs(report.architecture, report.weights, report.capacity, report.hardware.gpus[0],
                         platform="cuda", tp=1, speculative_tokens=0).prior
    rated = _costs(perf)
    clock = perf.sustained_clock
    assert prior.flops_per_s == pytest.approx(rated.flops_per_s * clock)
    assert prior.attention_flops_per_s == pytest.approx(rated.attention_flops_per_s * clock)
    assert prior.gemm_unhidden == pytest.approx(perf.gemm_unhidden * clock)
    assert prior.gemm_half_tokens == perf.gemm_half_tokens
    assert prior.kv_bandwidth_bytes_per_s == pytest.approx(rated.kv_bandwidth_bytes_per_s)
    assert prior.expert_flops_per_s == pytest.approx(prior.flops_per_s * fused_moe_fraction(768, 1, perf))
    size = 3.0 * 2048 * 768 * 2
    assert prior.expert_bandwidth_bytes_per_s == pytest.approx(
        perf.bandwidth_gbps * 1e9 * expert_read_fraction(size, perf.expert_fraction, perf.expert_half_bytes))


@pytest.mark.parametrize("profile", ["h100-80gb", "h200", "b200"])
def test_the_advisor_adds_the_fp8_quantisation_kernels_only_for_fp8_weights(tmp_path: Path, profile: str) -> None:
    """Qwen3-8B's shape in FP8 (tests/device/configs/qwen3-8b-fp8.json) against the same shape in BF16: four more
    kernels per layer (QKV, O, gate-up, down inputs) and 3 B per input element per token (2 × hidden + heads ×
    head dim + intermediate per layer); the FP8 peak is the datasheet's calibration bound; BF16 gets neither."""
    from dspark.planning.validate import ValidateRequest, validate  # noqa: PLC0415 - the planner is heavy

    configs = Path(__file__).resolve().parents[1] / "device" / "configs"
    got = {}
    for name in ("qwen3-8b", "qwen3-8b-fp8"):
        model = tmp_path / name
        model.mkdir()
        (model / "config.json").write_text((configs / f"{name}.json").read_text())
        report = validate(ValidateRequest(flags={"model": str(model), "hardware": profile, "engine": "vllm"},
                                          engine_version="0.25.0"))
        got[name] = model_inputs(report.architecture, report.weights, report.capacity, report.hardware.gpus[0],
                                 platform="cuda", tp=1, speculative_tokens=0)
    arch = json.loads((configs / "qwen3-8b-fp8.json").read_text())
    layers, hidden = arch["num_hidden_layers"], arch["hidden_size"]
    per_layer = 2 * hidden + arch["num_attention_heads"] * arch.get("head_dim", 128) + arch["intermediate_size"]
    bf16, fp8 = got["qwen3-8b"], got["qwen3-8b-fp8"]
    assert fp8.shape.kernels_per_step - bf16.shape.kernels_per_step == 4 * layers
    assert fp8.shape.activation_bytes_per_token - bf16.shape.activation_bytes_per_token == pytest.approx(
        FP8_QUANT_BYTES * per_layer * layers)
    assert any("activation-quantisation" in note for note in fp8.assumptions)
    assert not any("activation-quantisation" in note for note in bf16.assumptions)
    perf = gpu_perf(NVML[{"h100-80gb": "h100_sxm", "b200": "b200_sxm", "h200": "h200_sxm"}[profile]])
    assert fp8.prior.peak_flops_per_s == perf.fp8_tflops * 1e12
    assert bf16.prior.peak_flops_per_s == perf.bf16_tflops * 1e12
    assert fp8.prior.flops_per_s == pytest.approx(
        perf.fp8_tflops * 1e12 * perf.fp8_gemm_fraction * perf.sustained_clock)
