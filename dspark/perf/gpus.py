"""Per-GPU facts and priors for the step-time model: datasheet peaks and the fractions kernels reach; pure.

Sources (docs/advise.md has the table with links):
- Memory bandwidth: the vendors' datasheets (H100 SXM 3.35 TB/s, H200 4.8 TB/s, B200 8 TB/s, RTX 5090 1,792 GB/s,
  GB10 273 GB/s), the same figures as dspark.hardware.profiles.
- Dense tensor throughput (no sparsity): H100/H200 SXM 989 TFLOP/s BF16, 1,979 FP8 (NVIDIA H100/H200 datasheets;
  H100 PCIe 756 / 1,513 at 2 TB/s, H100 NVL 835 / 1,671 at 3.9 TB/s);
  B200 2,250 BF16, 4,500 FP8 (DGX B200 datasheet: 72 PFLOP/s FP8 sparse for 8 GPUs); RTX 5090 209.5 BF16 with
  FP32 accumulate, 419 FP8 (RTX Blackwell whitepaper); GB10 125 BF16, 250 FP8 (1 PFLOP/s FP4 sparse, halved per
  precision step and for sparsity).
- FP4 tensor cores (fp4_tflops, dense; 0 where the GPU has none): Blackwell only. B200 9,000 (DGX B200 datasheet:
  144 PFLOP/s FP4 sparse for 8 GPUs), GB10 500 (DGX Spark datasheet: 1 PFLOP/s FP4 with sparsity), RTX 5090 1,676
  (RTX Blackwell whitepaper: 3,352 FP4 sparse, the "AI TOPS", listed with FP32 accumulate: the GeForce part halves
  FP8 and BF16 with FP32 accumulate, not FP4). Hopper (H100, H200), Ampere and Ada have none: 0.
- Which kernel a weight format runs on (gemm_precision below; vLLM's kernel choice by compute capability): FP8 on
  W8A8 CUTLASS scaled_mm after scaled_fp8_quant everywhere with FP8 tensor cores. NVFP4 (ModelOpt "NVFP4", W4A4)
  where cutlass_scaled_mm_supports_fp4(capability) holds (SM100 and SM12x builds: B200, RTX 5090, GB10's SM121):
  a CUTLASS or FlashInfer FP4 GEMM after ops.scaled_fp4_quant quantises the BF16 input to FP4 with one FP8 scale
  per 16 values (2 B read, 0.5 + 1/16 B written per element); elsewhere (SM90: H100, H200) the Marlin FP4 kernel
  (is_fp4_marlin_supported: SM75+): weight-only W4A16, 4-bit weights dequantised in the kernel, BF16 tensor cores,
  no activation quantisation. MXFP4 weight-only checkpoints (gpt-oss, DeepSeek-V4's experts) run W4A16 on every
  GPU by default: vLLM's MXFP4 MoE prefers its BF16-activation backends (FlashInfer TRT-LLM MXFP4 x BF16 on SM100,
  Marlin on SM12x, Triton on SM90) and its linear takes Marlin unless the checkpoint quantises activations too.
  An FP4 GEMM's fraction of the FP4 peak is unmeasured (no table): the GPU's FP8 fraction (the same block-scaled
  CUTLASS family, net of its quantisation kernel) stands in, its BF16 fraction where it has none.
- Achieved fractions: large reads reach ~0.8 of peak bandwidth (the seed deployment's decode read 78-85% of
  GB10's 273 GB/s; aiconfigurator prices its elementwise ops at 0.8 of bandwidth); decode attention reads paged
  KV (vLLM's 16-token blocks, scattered in the pool) at ~0.9 (H200 0.90, H100 0.95, B200 0.92; the RTX 5090 0.855
  by its memory's analogue) and 0.65 where nothing was measured (GB10: the seed deployment's SGLang 27B steps at
  1, 8 and 18 seats fit with it). The H200's figure is the difference of
  decode-only steps with the same rows at two context lengths, which leaves only the KV read (weights, GEMMs,
  kernels and CPU are the same): vLLM's per-iteration log of runs E and F (tests/device/results/2026-12-02-clock-E,
  -F), 1,024- against 4,096-token prompts, mean step 6.80 / 10.10 ms at 32 rows (Qwen3-8B shape), 10.27 / 13.94
  (Qwen3-14B), 5.81 / 6.65 and 9.13 / 10.06 at 8 rows: 4.29-4.39 TB/s, 0.89-0.915 of peak. (It was 0.8, from
  the excess over the one-row step, which also holds the GEMMs' unhidden share below.) the GEMMs of a decoder layer
  reach ~0.8 of dense peak at the rated clock (~790 of 989 TFLOP/s measured on the lent H200; aiconfigurator's
  H200 table for vLLM 0.24's torch linear: 780-860 TFLOP/s for the Qwen3-8B layer shapes at 1-4k tokens);
  attention kernels in prefill ~0.62 of dense peak (FlashAttention-3 on Hopper, causal, head dim 128: ~610-660
  TFLOP/s of 989 at 2-16k tokens, Shah et al. 2024); the H100's and B200's from their tables (0.80 / 0.61,
  0.68 / 0.51).
- Unhidden GEMM share (gemm_unhidden): a weight-bound GEMM of m rows takes longer than one row's by 0.22 of its
  FLOPs at the rated large-GEMM rate (dspark.perf.step: aiconfigurator's H200 torch-linear table for vLLM 0.24,
  128 weight-bound shapes at 8-128 rows); 0.29 on the H100 and 0.21 on the B200 from their tables the same way.
  No table for the RTX 5090 or GB10: 0 there.
- The GPUs no run measured (H100 SXM, B200): every kernel rate above from aiconfigurator-core 0.12's measured
  tables for vLLM 0.24 (systems/data/<gpu>/{gemm,attention,moe}/vllm/0.24.0), derived the way the H200's were
  by benchmarks/aic_gpu_priors.py, which also extracts the rows tests/perf/test_aic_priors.py checks the step
  model's per-op costs against (tests/perf/data/aic_rows.json, with the table files and filters). Run on the
  H200's own tables the same script gives back its figures (GEMMs 0.80, unhidden share 0.23, KV 0.88, prefill
  attention 0.60, the fused-MoE fits 671 TFLOP/s / 219 wide and 4.14 TB/s / 0.87 MB) except FP8: the per-tensor
  FP8 GEMM reaches 0.52 of the FP8 peak there (1,038 TFLOP/s over the 8B's shapes at 1-4k rows), not the BF16
  fraction it was given before (fp8_gemm_fraction). Each GPU's comment below gives its rows, fits and errors.
- FP8 activation quantisation: vLLM's FP8 linear (ScaledMMLinearKernel.apply_weights, vllm/model_executor/layers/
  quantization/kernels/scaled_mm/ in 0.25; QuantFP8 -> ops.scaled_fp8_quant) quantises its BF16 input to FP8 in
  a kernel of its own before the GEMM: it reads 2 B and writes 1 B per input element, and aiconfigurator's GEMM
  collector times it inside every FP8 row (RowParallelLinear.forward on BF16 input, a static input scale). Its
  own table (quantize/vllm/0.24.0/scale_matrix_perf.parquet, static per-tensor) puts it at 1.9-2.2 µs at up to
  16 rows (H200 1.93, H100 2.02, B200 2.16: one kernel floor) and 0.84 / 0.88 / 0.74 of peak bandwidth at 4k-32k
  rows (the elementwise rate, 0.8, prices it); the FP8 GEMM fractions above are the rows' latency less it.
  dspark.advise.inputs adds one such kernel per distinct FP8 linear input (QKV, O, gate-up, down).
- Per-kernel floor (kernel_floor_s): 2.5 µs, Hopper's (the H200's tables: its tiniest GEMMs, one row, n and k
  ≤ 256, 2.60 µs; the quantisation kernel 1.9; the H100's 2.63). The B200's tiniest GEMMs take 1.86 µs, but a
  floor scaled by that ratio makes its GEMM rows and decode steps faster than its tables (its comment below), so
  it keeps 2.5 too: a per-GPU field where a measurement of whole steps (not of the tiniest kernels) says more.
- Sustained clock: dense tensor-core work holds the board at its power cap, where the SM clock settles below
  the one the peak is quoted at (989 TFLOP/s = 132 SMs × 4,096 BF16 FLOP per clock × 1.83 GHz): the lent H200
  (700 W) ran at 1,395-1,530 MHz in its prompt-heavy stretches (nvidia-smi once a second, up to 696 W), 0.80 of
  1.83 GHz, and its prompts priced at the rated clock come out 10-25% fast at 16-128 streams. The H100 SXM takes
  it (the same die at the same 700 W cap); the others, without a measurement, get 0.9 (aiconfigurator's tables
  time microsecond kernels and cannot show a power cap): the B200's GEMMs at 0.68 × 0.9 of peak, the RTX 5090's
  and GB10's at the 0.72 they had.
- Interconnect for tensor parallelism: NVLink 4 (H100/H200, 450 GB/s per direction) and NVLink 5 (B200, 900),
  PCIe 5 x16 (RTX 5090, ~64 GB/s per direction, ~50 usable), ConnectX-7 200 Gb/s between two DGX Sparks
  (25 GB/s); each all-reduce also pays a latency (~10 µs NVLink, ~25 µs PCIe, ~40 µs over the network).
"""

from __future__ import annotations

from dataclasses import dataclass

# The H200's fused-MoE fit (dspark.perf.moe): 670 TFLOP/s at wide experts of its 0.8 × 989 dense rate, half at 220.
# Each kernel costs a few µs however little it does; aiconfigurator prices an elementwise op at 3 µs on Hopper, and
# its H200 and H100 tables time their tiniest GEMMs at 2.6 µs: the floor where no GPU says otherwise.
KERNEL_FLOOR_S = 2.5e-6
H200_MOE = (670.0 / (0.80 * 989.0), 220.0)


@dataclass(frozen=True)
class GpuPerf:
    """One GPU's datasheet peaks and the priors for what kernels reach of them."""

    key: str  # matched (lower case) inside the NVML name
    label: str
    bandwidth_gbps: float  # peak memory bandwidth, GB/s
    bf16_tflops: float  # dense tensor, no sparsity
    fp8_tflops: float
    link_gbps: float  # per direction, between the GPUs of one tensor-parallel group
    collective_latency_s: float  # one all-reduce's fixed cost
    bandwidth_fraction: float = 0.80  # large streaming reads: weights, activations
    kv_fraction: float = 0.65  # paged KV reads of decode attention (16-token blocks scattered in the pool)
    gemm_fraction: float = 0.80  # a layer's GEMMs at the rated clock (tile and wave quantization)
    attention_fraction: float = 0.62
    # The SM clock that long tensor-core work sustains at the board's power cap, over the clock the datasheet's
    # peak is quoted at: the rates above are reached at the rated clock, prompts run at this one.
    sustained_clock: float = 0.90
    # Of a weight-bound GEMM's tensor-core time at the large-GEMM rate (rated clock), the share its weight stream
    # does not hide (dspark.perf.step): measured on Hopper only (aiconfigurator's H200 torch-linear table), 0
    # (none priced) elsewhere.
    gemm_unhidden: float = 0.0
    # The fused-MoE kernel's read rate of routed experts at large experts, as a fraction of peak, and the expert size
    # (gate-up and down per GPU, bytes) at which it reaches half of that (dspark.perf.moe.expert_read_fraction;
    # 0: the dense bandwidth fraction, where nothing was measured).
    expert_fraction: float = 0.0
    expert_half_bytes: float = 0.87e6
    # The per-tensor FP8 GEMM's fraction of the FP8 peak at the rated clock, the activation-quantisation kernel
    # before it not included (0: gemm_fraction).
    fp8_gemm_fraction: float = 0.0
    # Dense FP4 tensor peak, TFLOP/s (0: no FP4 tensor cores, NVFP4 runs weight-only at the BF16 rate), and the FP4
    # GEMM's fraction of it at the rated clock, its quantisation kernel apart (0: fp8_gemm_fraction, a placeholder).
    fp4_tflops: float = 0.0
    fp4_gemm_fraction: float = 0.0
    # One kernel's fixed latency in a step (launch within a graph, tail, the next kernel's ramp): Hopper's
    # (KERNEL_FLOOR_S) unless a GPU's tables time its tiniest GEMMs otherwise (dspark.advise.inputs prices each
    # kernel so).
    kernel_floor_s: float = KERNEL_FLOOR_S
    # Tokens at which a GEMM reaches half of the large-GEMM rate (tile occupancy): eff(T) = T / (T + this).
    gemm_half_tokens: float = 48.0
    # The fused-MoE kernel's GEMM rate as a fraction of the dense large-GEMM rate at wide experts, and the expert
    # width (per GPU) at which it reaches half of that (dspark.perf.moe.fused_moe_fraction). Default: the H200's
    # Triton fit (670 of 791 TFLOP/s, 220 wide), where no table was measured.
    moe_rate_fraction: float = H200_MOE[0]
    moe_width_half: float = H200_MOE[1]
    # From this expert width per GPU on (0: none), the kernel runs a slower tactic: its GEMM rate times this factor
    # (the B200's FlashInfer TRT-LLM BF16 kernel).
    moe_wide_width: int = 0
    moe_wide_rate: float = 1.0
    # ... and reads such experts at this factor of the read curve (expert_fraction, expert_half_bytes)
    moe_wide_read: float = 1.0
    # Up to this many tokens per expert (tokens × top-k ÷ experts; 0: no such regime) the kernel runs its smallest
    # token tile and reads the routed experts at expert_small_tile_fraction of peak, whatever their size or width
    # (the B200's FlashInfer TRT-LLM BF16 kernel); the read curve above applies beyond it.
    expert_small_tile_tokens: int = 0
    expert_small_tile_fraction: float = 0.0
    source: str = ""

    def gemm_fraction_for(self, fp8: bool) -> float:
        """The large-GEMM fraction of the peak for BF16 or FP8 weights (FP8: fp8_gemm_fraction where measured)."""
        return (self.fp8_gemm_fraction or self.gemm_fraction) if fp8 else self.gemm_fraction


# Bytes per input element an activation-quantisation kernel reads and writes: FP8 (BF16 read, FP8 written) and
# NVFP4 (BF16 read, E2M1 written, one FP8 scale per 16 values).
FP8_QUANT_BYTES = 3.0
NVFP4_QUANT_BYTES = 2.0 + 0.5 + 1.0 / 16


@dataclass(frozen=True)
class GemmPrecision:
    """What a weight format's GEMMs run at on one GPU: the tensor peak and the fraction of it reached, and the
    activation-quantisation kernel before each linear input (bytes per element; 0: none)."""

    label: str  # "BF16", "FP8", "FP4"
    peak_tflops: float
    fraction: float
    quant_bytes_per_element: float
    kernel: str  # what vLLM runs, for the notes


def gemm_precision(perf: GpuPerf, weight_format: str | None) -> GemmPrecision:
    """The rate a weight format's GEMMs run at on `perf` (the kernel vLLM picks for it: module docstring)."""
    if weight_format == "fp8":
        return GemmPrecision("FP8", perf.fp8_tflops, perf.gemm_fraction_for(True), FP8_QUANT_BYTES,
                             "W8A8 FP8 (CUTLASS scaled_mm after scaled_fp8_quant)")
    if weight_format == "nvfp4" and perf.fp4_tflops:
        fraction = perf.fp4_gemm_fraction or perf.gemm_fraction_for(True)
        return GemmPrecision("FP4", perf.fp4_tflops, fraction, NVFP4_QUANT_BYTES,
                             "W4A4 NVFP4 (CUTLASS/FlashInfer FP4 GEMM after scaled_fp4_quant)")
    if weight_format in ("nvfp4", "mxfp4"):
        why = "no FP4 tensor cores: Marlin FP4" if weight_format == "nvfp4" else "MXFP4 weight-only"
        return GemmPrecision("BF16", perf.bf16_tflops, perf.gemm_fraction, 0.0,
                             f"W4A16 ({why}; 4-bit weights dequantised in the kernel, BF16 tensor cores)")
    return GemmPrecision("BF16", perf.bf16_tflops, perf.gemm_fraction, 0.0, "BF16")


GPUS: tuple[GpuPerf, ...] = (
    # More specific names first (an "H100 PCIe" is not an H100 SXM).
    GpuPerf("h100 pcie", "H100 PCIe", 2000.0, 756.0, 1513.0, 300.0, 10e-6, source="NVIDIA H100 datasheet (PCIe)"),
    GpuPerf("h100 nvl", "H100 NVL", 3900.0, 835.0, 1671.0, 300.0, 10e-6, source="NVIDIA H100 datasheet (NVL)"),
    GpuPerf("h200", "H200", 4800.0, 989.0, 1979.0, 450.0, 10e-6, kv_fraction=0.90, sustained_clock=0.80,
            gemm_unhidden=0.22, expert_fraction=4.14 / 4.8, fp8_gemm_fraction=0.52,
            source="NVIDIA H200 datasheet; GEMM fraction measured on the lent H200 (~790 of 989 TFLOP/s); "
                   "sustained clock 1,395-1,530 MHz under prompt-heavy load at its 700 W cap (nvidia-smi, "
                   "tests/device/results/2026-12-02-clock) of the 1,830 MHz its 989 TFLOP/s is rated at; "
                   "FP8 GEMMs, MoE and KV rates from aiconfigurator-core 0.12's H200 tables (vLLM 0.24)"),
    # aiconfigurator-core 0.12's h100_sxm tables for vLLM 0.24 (benchmarks/aic_gpu_priors.py; docs/advise.md): BF16
    # torch linear 795 TFLOP/s (0.80) over the 8B's shapes at 1-4k rows (649-903, 100 rows); unhidden share 0.29 (median
    # of 2,944 weight-bound rows, 128 shapes, 8-128 rows; 0.39 at 8 rows to 0.16 at 128); per-tensor FP8 968 TFLOP/s
    # (0.49 of 1,979) net of the activation quantisation kernel each row also times; the kernel floor the H200's (its
    # tiniest GEMMs 2.63 µs against the H200's 2.60); FA3 prefill 0.61 of 989 at 4-16k tokens (520-664); FA3 decode's
    # paged KV 0.95 of 3.35 TB/s (the difference of two context lengths at the same batch, 8-128 rows, as the H200's 0.9
    # was measured; the H200's table gives 0.88 the same way); Triton fused MoE 521 TFLOP/s at wide experts = 0.655 of
    # the dense rate, half at 100 wide (8 shapes, rms 2.7%), expert reads 2.86 TB/s = 0.855 of peak, half at 0.49 MB (13
    # shapes, rms 2.9%). The sustained clock: the H200's (the same GH100 die at the same 700 W cap); the tables' short
    # kernels show no throttle (largest GEMMs at 1.03 of the mid-sized ones' rate).
    GpuPerf("h100", "H100 SXM", 3350.0, 989.0, 1979.0, 450.0, 10e-6, kv_fraction=0.95, sustained_clock=0.80,
            gemm_unhidden=0.29, expert_fraction=0.855, expert_half_bytes=0.49e6, fp8_gemm_fraction=0.49,
            attention_fraction=0.61, moe_rate_fraction=0.655, moe_width_half=100.0,
            source="NVIDIA H100 datasheet (SXM); kernel rates from aiconfigurator-core 0.12's H100 SXM tables "
                   "(vLLM 0.24); sustained clock: the H200's GH100 die at the same 700 W cap"),
    # aiconfigurator-core 0.12's b200_sxm tables for vLLM 0.24: BF16 torch linear 1,534 TFLOP/s (0.68 of 2,250;
    # 1,185-1,956 over the 8B's shapes at 1-4k rows); T½ 78 (the H200's 48 × the ratio of the two tables' fits of T½ at
    # 128-16k rows with their own rate and share, 209 / 129); unhidden share 0.21 (2,944 rows, 128 shapes; 0.20-0.25 at
    # 32-128 rows); per-tensor FP8 1,837 TFLOP/s (0.41 of 4,500) net of the activation quantisation kernel timed inside
    # each row; FlashInfer TRT-LLM prefill 0.51 of 2,250 at 4-16k tokens (830-1,295); its decode kernel reads paged KV
    # at 0.92 of 8 TB/s (differences of two context lengths, 8-128 rows). Kernel floor: Hopper's 2.5 µs, though its
    # tiniest GEMMs (one row, n and k ≤ 256) take 1.86 µs against the H200's 2.60: at 0.72 × 2.5 its BF16 GEMM rows,
    # already up to 21% fast at 1-128 rows, come out up to 28% fast, and its decode steps 4-12% faster than
    # aiconfigurator's own sum of these tables (the floor also carries mid-sized kernels' ramp, which the tiniest do not
    # show). The BF16 fused MoE runs FlashInfer's TRT-LLM kernel (vLLM's first choice off Hopper), which picks its token
    # tile from the tokens per expert: up to 8 per expert it reads the routed experts at 0.89 of peak (7.15 TB/s; 12
    # shapes, 0.80-0.92; Mixtral's layer 0.40 ms at 4-32 tokens), beyond that on the curve 6.22 TB/s = 0.78 of peak,
    # half at 0.37 MB (8 narrow shapes, rms 2.5%), and experts from 8,192 wide (Mixtral's 14,336; 3 shapes) at 0.65 of
    # it (0.64-0.67: Mixtral's 0.71 ms at 48-512 tokens, 4.0 TB/s). Its GEMMs: up to 5,120-wide experts 1,163 TFLOP/s at
    # wide experts = 0.76 of the dense rate, half at 163 wide (9 shapes, rms 14%); from 8,192 wide 0.49 of that rate
    # (0.47-0.54). No sustained-clock figure (the tables' short kernels cannot show a power cap: the largest GEMMs at
    # 0.96 of the mid-sized ones' rate): the 0.9 placeholder stays.
    GpuPerf("b200", "B200", 8000.0, 2250.0, 4500.0, 900.0, 10e-6, gemm_fraction=0.68, kv_fraction=0.92,
            gemm_unhidden=0.21, expert_fraction=0.78, expert_half_bytes=0.37e6, fp8_gemm_fraction=0.41,
            attention_fraction=0.51, gemm_half_tokens=78.0, moe_rate_fraction=0.76, moe_width_half=163.0,
            moe_wide_width=8192, moe_wide_rate=0.49, moe_wide_read=0.65, expert_small_tile_tokens=8,
            expert_small_tile_fraction=0.89, fp4_tflops=9000.0,
            source="NVIDIA DGX B200 datasheet; kernel rates from aiconfigurator-core 0.12's B200 SXM tables "
                   "(vLLM 0.24); sustained clock a placeholder"),
    # No table for the RTX 5090. aiconfigurator's rtx_pro_6000_server (RTX PRO 6000 Blackwell Server: the same
    # GB202 die, 188 of its SMs against the 5090's 170, the same 512-bit GDDR7 at 1,792 GB/s, 600 W against 575)
    # stands in for the memory side only: paged KV 0.855 of peak (FA2 decode, differences of two context lengths,
    # 8-128 rows), fused-MoE expert reads 1.48 TB/s = 0.82, half at 0.28 MB (14 shapes, rms 1.4%). Not for the
    # compute side: the PRO's BF16 tensor cores accumulate in FP32 at full rate (503.8 TFLOP/s dense at 2,617
    # MHz), the GeForce part's at half (209.5), so its rates (373 TFLOP/s, 0.74) are no measurement of the 5090's.
    GpuPerf("rtx 5090", "RTX 5090", 1792.0, 209.5, 419.0, 50.0, 25e-6, kv_fraction=0.855,
            expert_fraction=0.82, expert_half_bytes=0.28e6, fp4_tflops=1676.0,
            source="NVIDIA RTX Blackwell GPU architecture whitepaper (GeForce RTX 5090); memory-side rates from "
                   "aiconfigurator-core 0.12's RTX PRO 6000 Blackwell Server tables (the same GB202 and GDDR7)"),
    # No aiconfigurator table for GB10 (sm_121, LPDDR5x) or an analogue of its memory: the seed deployment's decode
    # read (78-85% of 273 GB/s: bandwidth_fraction 0.8) is its only measurement; every other fraction a placeholder.
    GpuPerf("gb10", "GB10", 273.0, 125.0, 250.0, 25.0, 40e-6, fp4_tflops=500.0,
            source="NVIDIA DGX Spark datasheet (1 PFLOP/s FP4 sparse); ConnectX-7 200 Gb/s between two Sparks"),
    # Not shipped as profiles, seen on NVML hosts: no FP8 tensor cores on the A100 (its BF16 rate stands in).
    GpuPerf("a100", "A100", 2039.0, 312.0, 312.0, 300.0, 10e-6, source="NVIDIA A100 datasheet (80 GB SXM)"),
    GpuPerf("l40s", "L40S", 864.0, 362.0, 733.0, 25.0, 25e-6, source="NVIDIA L40S datasheet"),
    GpuPerf("rtx 4090", "RTX 4090", 1008.0, 165.2, 330.3, 25.0, 25e-6,
            source="NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090, FP32 accumulate)"),
)

# No figure for the device (a CPU engine, an unknown GPU): placeholders, labelled as such wherever shown.
CPU = GpuPerf("cpu", "CPU (placeholder)", 20.0, 0.5, 0.5, 10.0, 50e-6, bandwidth_fraction=1.0, kv_fraction=1.0,
              gemm_fraction=1.0, attention_fraction=1.0, sustained_clock=1.0,
              source="a placeholder: dspark has no figures for a CPU engine")
UNKNOWN = GpuPerf("?", "unknown GPU (placeholder)", 1000.0, 100.0, 200.0, 50.0, 25e-6,
                  source="a placeholder: dspark has no figures for this GPU")


def gpu_perf(name: str, platform: str = "cuda") -> GpuPerf:
    """The figures of the GPU NVML calls `name` (CPU placeholders on the cpu platform, UNKNOWN otherwise)."""
    if platform == "cpu":
        return CPU
    low = name.lower()
    return next((g for g in GPUS if g.key in low), UNKNOWN)


def is_known(perf: GpuPerf) -> bool:
    """Whether the figures are a GPU's own (not a placeholder)."""
    return perf in GPUS
