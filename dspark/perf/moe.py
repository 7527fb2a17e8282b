"""The fused-MoE kernel's GEMM rate against a dense GEMM's, by the experts' width; pure, no data read at run time.

Source: aiconfigurator-core's measured kernel table for vLLM 0.24.0 on the H200 SXM
(`systems/data/h200_sxm/moe/vllm/0.24.0/moe_perf.parquet`): the rows of vLLM's default BF16 path
(kernel_source `vllm_unquantizedfusedmoe_triton_tritonexperts`, moe_dtype bfloat16), one GPU (moe_tp_size 1,
moe_ep_size 1), evenly routed tokens (distribution `balanced`, as dspark's expert coverage assumes). A row's rate is
6 · tokens · top-k · hidden · width FLOP (gate-up and down GEMMs of each routed token) over its latency. Only rows
the GEMMs bound are taken: 4,096-16,384 tokens, and the experts' weights (E · 3 · hidden · width · 2 B) read at
4.8 TB/s under a quarter of the latency. Each rate is divided by dspark's tile-occupancy factor at the row's tokens
per expert (t / (t + GEMM_HALF_TOKENS), the factor the step model applies itself) and the median per shape kept:
MOE_TABLE_TFLOPS. Those 14 shapes' rates grow with the experts' width and level off,
R(N) = RATE_MAX_TFLOPS · N / (N + WIDTH_HALF), fitted to them by least squares on log R (rms error 10%; Qwen3-30B's
and Mixtral's own rows within 2% and 4%). The dense rate it is a fraction of is dspark's large-GEMM rate at the
rated clock, 0.8 × 989 = 791 TFLOP/s (dspark.perf.gpus: aiconfigurator's torch-linear rows for the 8B's layer
shapes, measured on the same table's GPU), so a fraction times dspark's dense rate is the kernel's rate at the
sustained clock. With tensor parallelism vLLM's FusedMoE splits each expert's width across the GPUs: the width per
GPU is what the kernel sees.

The other GPUs' curves (dspark.perf.gpus: moe_rate_fraction, moe_width_half, expert_fraction, expert_half_bytes)
come from their own tables the same way (benchmarks/aic_gpu_priors.py): the H100's Triton kernel, the B200's
FlashInfer TRT-LLM one (vLLM's unquantized-MoE oracle tries FlashInfer first on CUDA and moves it back on Hopper
only), fitted up to 5,120-wide experts, with a factor for its slower tactic from 8,192 wide (wide_factor).
"""

from __future__ import annotations

from dspark.perf.gpus import GpuPerf, gpu_perf

# (hidden, expert width, top-k, experts) -> TFLOP/s at large tokens per expert (the median described above).
MOE_TABLE_TFLOPS: dict[tuple[int, int, int, int], float] = {
    (2048, 512, 8, 256): 458.4,
    (2048, 768, 8, 128): 531.0,  # Qwen3-30B-A3B
    (2048, 5120, 22, 512): 776.8,
    (2688, 1856, 6, 128): 754.5,
    (2816, 704, 8, 128): 508.2,
    (3072, 1024, 8, 256): 559.8,
    (4096, 1536, 8, 128): 582.1,
    (4096, 2048, 8, 256): 594.7,
    (4096, 14336, 2, 8): 684.8,  # Mixtral-8x7B
    (5120, 8192, 1, 16): 607.2,
    (6144, 2048, 8, 256): 546.7,
    (6144, 2560, 8, 160): 522.9,
    (6144, 3072, 4, 128): 611.7,
    (6144, 16384, 2, 8): 621.2,
}
RATE_MAX_TFLOPS = 670.0
WIDTH_HALF = 220.0
_H200 = gpu_perf("h200")
DENSE_TFLOPS = _H200.gemm_fraction * _H200.bf16_tflops  # dspark's H200 large-GEMM rate at the rated clock: 791
# Width assumed when a config does not give it: Qwen3-30B-A3B's, the narrow experts the first prior came from.
DEFAULT_WIDTH = 768


def fused_moe_tflops(width: int) -> float:
    """The fitted fused-MoE rate (TFLOP/s at the H200's rated clock) for experts `width` wide (per GPU)."""
    if width <= 0:
        raise ValueError(f"expert width must be positive, not {width}")
    return RATE_MAX_TFLOPS * width / (width + WIDTH_HALF)


def fused_moe_fraction(width: int | None, tp: int = 1, perf: GpuPerf = _H200) -> float:
    """The fused-MoE kernel's rate as a fraction of `perf`'s dense GEMM rate, for experts `width` wide split over
    `tp` GPUs (unknown width: DEFAULT_WIDTH): perf.moe_rate_fraction × N / (N + perf.moe_width_half), the H200's
    RATE_MAX_TFLOPS / DENSE_TFLOPS and WIDTH_HALF by default (a GPU's own fit where its table has one:
    dspark.perf.gpus)."""
    if tp < 1:
        raise ValueError(f"tensor parallel size must be at least 1, not {tp}")
    per_gpu = max((width or DEFAULT_WIDTH) // tp, 1)
    return perf.moe_rate_fraction * per_gpu / (per_gpu + perf.moe_width_half) * wide_factor(per_gpu, perf)


def runs_wide_tactic(width_per_gpu: int, perf: GpuPerf) -> bool:
    """Whether `perf`'s fused-MoE kernel runs its slower tactic for experts this wide per GPU (from moe_wide_width
    on; never where it has none)."""
    return bool(perf.moe_wide_width) and width_per_gpu >= perf.moe_wide_width


def wide_factor(width_per_gpu: int, perf: GpuPerf) -> float:
    """The GEMM-rate factor of the kernel's slower tactic for experts this wide per GPU on `perf` (1 below its
    moe_wide_width or where it has none)."""
    return perf.moe_wide_rate if runs_wide_tactic(width_per_gpu, perf) else 1.0


# The fused-MoE kernel's read rate of the routed experts' weights, by an expert's size (its gate-up and down
# matrices per GPU), where the step reads them and computes little: aiconfigurator-core's same H200 table
# (`moe_perf.parquet`, vLLM's default BF16 Triton path, moe_tp_size 1, balanced), its rows where every expert is
# touched (tokens × top-k ≥ 4 × experts) and the GEMMs take under 0.3 of the latency at 500 TFLOP/s: experts ×
# bytes per expert ÷ latency, the median per shape. Fourteen shapes (two whose rates exceed the 4.8 TB/s peak,
# i.e. whose rows do not touch every expert, left out) from 6.3 MB to 604 MB an expert: 3.67 TB/s at 6.3 MB, 3.78
# at Qwen3-30B-A3B's 9.4, 4.0-4.3 from 19 MB up, 4.15 at Mixtral's 352. Least squares on log rate:
# R(S) = EXPERT_READ_MAX × S / (S + EXPERT_HALF_BYTES), 4.14 TB/s and 0.87 MB (rms error 2.9%). The lent H200's own
# timing of vLLM's fused_experts on one Mixtral layer (tests/device/results/2026-12-02-moe-routing) read 4.0-4.24
# TB/s with all eight experts touched at 8-128 tokens, and run E's decode-only steps of Mixtral (its per-iteration
# log) grew 77-84 µs per 352 MB expert touched from 1 to 16 rows (4.2-4.6 TB/s); the dense prior reads 3.84.
# (hidden, expert width, top-k, experts) -> the median read rate (TB/s) described above.
EXPERT_READ_TABLE_TBPS: dict[tuple[int, int, int, int], float] = {
    (2048, 512, 8, 256): 3.67, (2048, 768, 8, 128): 3.78, (2816, 704, 8, 128): 3.73, (3072, 1024, 8, 256): 4.02,
    (4096, 1024, 10, 512): 3.97, (4096, 1536, 8, 128): 4.08, (4096, 2048, 8, 256): 4.20,
    (4096, 14336, 2, 8): 4.15, (5120, 8192, 1, 16): 3.91, (5120, 8192, 1, 128): 3.94, (6144, 2048, 8, 256): 4.20,
    (6144, 2560, 8, 160): 4.19, (6144, 3072, 4, 128): 4.34, (6144, 16384, 2, 8): 4.08,
}
EXPERT_READ_MAX_FRACTION = 4.14 / 4.8  # of the H200's peak bandwidth
EXPERT_HALF_BYTES = 0.87e6


def expert_read_fraction(expert_bytes: float, peak_fraction: float = EXPERT_READ_MAX_FRACTION,
                         half_bytes: float = EXPERT_HALF_BYTES) -> float:
    """The fraction of peak bandwidth at which the fused-MoE kernel reads experts of `expert_bytes` each (per GPU):
    peak_fraction × S / (S + half_bytes) (the H200's fit by default; a GPU's own: dspark.perf.gpus)."""
    if expert_bytes <= 0:
        raise ValueError(f"expert size must be positive, not {expert_bytes}")
    if half_bytes < 0:
        raise ValueError(f"the half-rate expert size cannot be negative, not {half_bytes}")
    return peak_fraction * expert_bytes / (expert_bytes + half_bytes)
