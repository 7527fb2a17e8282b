"""Per-GPU facts and priors for the step-time model: datasheet peaks and the fractions kernels reach; pure.

Sources (docs/advise.md has the table with links):
- Memory bandwidth: the vendors' datasheets (H100 SXM 3.35 TB/s, H200 4.8 TB/s, B200 8 TB/s, RTX 5090 1,792 GB/s,
  GB10 273 GB/s), the same figures as dspark.hardware.profiles.
- Dense tensor throughput (no sparsity): H100/H200 SXM 989 TFLOP/s BF16, 1,979 FP8 (NVIDIA H100/H200 datasheets;
  H100 PCIe 756 / 1,513 at 2 TB/s, H100 NVL 835 / 1,671 at 3.9 TB/s);
  B200 2,250 BF16, 4,500 FP8 (DGX B200 datasheet: 72 PFLOP/s FP8 sparse for 8 GPUs); RTX 5090 209.5 BF16 with
  FP32 accumulate, 419 FP8 (RTX Blackwell whitepaper); GB10 125 BF16, 250 FP8 (1 PFLOP/s FP4 sparse, halved per
  precision step and for sparsity).
- Achieved fractions: large reads reach ~0.8 of peak bandwidth (the seed deployment's decode read 78-85% of
  GB10's 273 GB/s; aiconfigurator prices its elementwise ops at 0.8 of bandwidth); decode attention reads paged
  KV (vLLM's 16-token blocks, scattered in the pool) at ~0.9 on Hopper and 0.65 where nothing was measured (the
  seed deployment's SGLang 27B steps at 1, 8 and 18 seats fit with it). The H200's figure is the difference of
  decode-only steps with the same rows at two context lengths, which leaves only the KV read (weights, GEMMs,
  kernels and CPU are the same): vLLM's per-iteration log of runs E and F (tests/device/results/2026-12-02-clock-E,
  -F), 1,024- against 4,096-token prompts, mean step 6.80 / 10.10 ms at 32 rows (Qwen3-8B shape), 10.27 / 13.94
  (Qwen3-14B), 5.81 / 6.65 and 9.13 / 10.06 at 8 rows: 4.29-4.39 TB/s, 0.89-0.915 of peak. (It was 0.8, from
  the excess over the one-row step, which also holds the GEMMs' unhidden share below.) the GEMMs of a decoder layer
  reach ~0.8 of dense peak at the rated clock (~790 of 989 TFLOP/s measured on the lent H200; aiconfigurator's
  H200 table for vLLM 0.24's torch linear: 780-860 TFLOP/s for the Qwen3-8B layer shapes at 1-4k tokens);
  attention kernels in prefill ~0.62 of dense peak (FlashAttention-3 on Hopper, causal, head dim 128: ~610-660
  TFLOP/s of 989 at 2-16k tokens, Shah et al. 2024).
- Unhidden GEMM share (gemm_unhidden, Hopper): a weight-bound GEMM of m rows takes longer than one row's by 0.22
  of its FLOPs at the rated large-GEMM rate (dspark.perf.step: aiconfigurator's H200 torch-linear table for vLLM
  0.24, 128 weight-bound shapes at 8-128 rows). No table for the other GPUs: 0 there.
- Sustained clock: dense tensor-core work holds the board at its power cap, where the SM clock settles below
  the one the peak is quoted at (989 TFLOP/s = 132 SMs × 4,096 BF16 FLOP per clock × 1.83 GHz): the lent H200
  (700 W) ran at 1,395-1,530 MHz in its prompt-heavy stretches (nvidia-smi once a second, up to 696 W), 0.80 of
  1.83 GHz, and its prompts priced at the rated clock come out 10-25% fast at 16-128 streams. GPUs without a
  measurement get 0.9 (their GEMM rate as before: 0.72 of peak).
- Interconnect for tensor parallelism: NVLink 4 (H100/H200, 450 GB/s per direction) and NVLink 5 (B200, 900),
  PCIe 5 x16 (RTX 5090, ~64 GB/s per direction, ~50 usable), ConnectX-7 200 Gb/s between two DGX Sparks
  (25 GB/s); each all-reduce also pays a latency (~10 µs NVLink, ~25 µs PCIe, ~40 µs over the network).
"""

from __future__ import annotations

from dataclasses import dataclass


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
    # The fused-MoE kernel's read rate of routed experts at large experts, as a fraction of peak (dspark.perf.moe:
    # the H200's; 0: the dense bandwidth fraction, where nothing was measured).
    expert_fraction: float = 0.0
    source: str = ""


GPUS: tuple[GpuPerf, ...] = (
    # More specific names first (an "H100 PCIe" is not an H100 SXM).
    GpuPerf("h100 pcie", "H100 PCIe", 2000.0, 756.0, 1513.0, 300.0, 10e-6, source="NVIDIA H100 datasheet (PCIe)"),
    GpuPerf("h100 nvl", "H100 NVL", 3900.0, 835.0, 1671.0, 300.0, 10e-6, source="NVIDIA H100 datasheet (NVL)"),
    GpuPerf("h200", "H200", 4800.0, 989.0, 1979.0, 450.0, 10e-6, kv_fraction=0.90, sustained_clock=0.80,
            gemm_unhidden=0.22, expert_fraction=4.14 / 4.8,
            source="NVIDIA H200 datasheet; GEMM fraction measured on the lent H200 (~790 of 989 TFLOP/s); "
                   "sustained clock 1,395-1,530 MHz under prompt-heavy load at its 700 W cap (nvidia-smi, "
                   "tests/device/results/2026-12-02-clock) of the 1,830 MHz its 989 TFLOP/s is rated at"),
    GpuPerf("h100", "H100 SXM", 3350.0, 989.0, 1979.0, 450.0, 10e-6, kv_fraction=0.90, sustained_clock=0.80,
            gemm_unhidden=0.22, expert_fraction=4.14 / 4.8,
            source="NVIDIA H100 datasheet (SXM); the H200's GH100 die at the same 700 W cap"),
    GpuPerf("b200", "B200", 8000.0, 2250.0, 4500.0, 900.0, 10e-6, source="NVIDIA DGX B200 datasheet"),
    GpuPerf("rtx 5090", "RTX 5090", 1792.0, 209.5, 419.0, 50.0, 25e-6,
            source="NVIDIA RTX Blackwell GPU architecture whitepaper (GeForce RTX 5090)"),
    GpuPerf("gb10", "GB10", 273.0, 125.0, 250.0, 25.0, 40e-6,
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
