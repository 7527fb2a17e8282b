"""The seat model's inputs from a validation report: bytes a step reads, priors for its costs; pure.

Every prior comes with the sentence that says where it comes from; calibration replaces the ones the
measurements can determine (dspark.advise.calibrate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dspark.advise.calibrate import TERM_LABELS
from dspark.advise.model import StepCosts, StepShape
from dspark.capacity import CapacitySummary
from dspark.hardware import GpuInfo
from dspark.model.architecture import (
    AttentionLayer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    dtype_bytes,
)
from dspark.model.weights import WeightBytes, format_bytes_per_parameter
from dspark.perf.gpus import H200_MOE, GemmPrecision, GpuPerf, gemm_precision, gpu_perf, is_known
from dspark.perf.moe import DEFAULT_WIDTH, expert_read_fraction, fused_moe_fraction, runs_wide_tactic

# Every prior below is a physical fact or an engine behaviour; dspark.perf.step says where each term comes from and
# dspark.perf.gpus where each GPU figure does. Calibration (dspark.advise.calibrate) fits them within bounds.
# A step launches about 12 kernels per decoder layer (fused add+norm twice, QKV GEMM, q/k norm + rotary, KV-cache
# write, attention, O GEMM, gate-up GEMM, activation, down GEMM, and an all-reduce or two at TP > 1), plus the
# embedding, the final norm, the logits and the sampler's (vLLM's Qwen3/Llama forward under torch.compile).
KERNELS_PER_LAYER = 12
KERNELS_PER_STEP = 10
# A routed-MoE layer launches about 8 more (vLLM's FusedMoE: router GEMM, topk_softmax, moe_align_block_size, the
# two fused_moe kernels, the activation, moe_sum, the shared expert's), as its 4.2 ms decode step at one stream
# on the lent H200 (Qwen3-30B-A3B shape, 48 layers; 1.7 ms of it reading 3.3 B active parameters) shows.
MOE_EXTRA_KERNELS_PER_LAYER = 8
# Without a CUDA graph (a step above the largest captured size: every long prompt chunk) the MoE layer's host side
# runs too: vLLM's fused_experts (fused_moe.py) allocates its caches, sorts the tokens by expert
# (moe_align_block_size), looks up the Triton config and launches the two fused_moe Triton kernels, each launch
# costing the CPU several times a torch op's. Measured on the lent H200: a 1,024-token prompt alone costs the
# Qwen3-30B-A3B shape 83-85 ms (engine's request_prefill_time; ~30 ms of GPU work), the 8B's eager step ~0.54 ms
# of CPU per layer: ~1.7 ms per MoE layer, about 26 launches more than the dense layer's 12.
MOE_EXTRA_LAUNCHES_PER_LAYER = 26
# The Triton fused-MoE kernel (vLLM's default for BF16 experts) runs at a fraction of a dense GEMM's rate that grows
# with the experts' width: dspark.perf.moe (aiconfigurator's H200 kernel table for vLLM 0.24; 0.66 at Qwen3-30B-A3B's
# 768-wide experts, 0.83 at Mixtral-8x7B's 14,336).
# Each kernel costs a few µs however little it does: the GPU's kernel_floor_s (dspark.perf.gpus.KERNEL_FLOOR_S,
# Hopper's, where no table says otherwise). FP8 linear layers quantise their BF16 input first (vLLM's
# ScaledMMLinearKernel: ops.scaled_fp8_quant), NVFP4 W4A4 ones likewise: a kernel per distinct input, its bytes per
# element the precision's (dspark.perf.gpus.gemm_precision: FP8_QUANT_BYTES, NVFP4_QUANT_BYTES).
# --enforce-eager: each kernel launched from Python through PyTorch's dispatcher and vLLM's custom ops. Measured
# on the lent H200 (vLLM 0.25.0, Qwen3-8B shape): 21 ms a step eager at 1 and 8 streams against 5.2 ms with CUDA
# graphs, ~0.54 ms of CPU per decoder layer: ~45 µs per kernel at 12 per layer.
LAUNCH_S = 45e-6
# The engine's CPU per step (schedule, prepare inputs, process outputs) and per scheduled request: priors for
# vLLM V1 on a server CPU, fitted by `dspark profile`; with async scheduling they hide behind the GPU's step.
CPU_STEP_S = {"cuda": 1.5e-3, "cpu": 5e-3}
CPU_PER_ROW_S = 10e-6
# A request's way from the client to vLLM's engine core (HTTP, the API server's input processing, the ZeroMQ hop)
# and its first token's way back: measured on the lent H200 at 1-2 streams (vLLM 0.25.0), the client's TTFT is
# 5-6 ms above the engine's own request_prefill_time_seconds with nothing queued: ~2.5 ms each way.
ARRIVAL_HOP_S = 2.5e-3
# The API server is one process: it takes requests in turn, so requests sent together reach the engine core apart,
# about 0.5 ms a request (run F's access-log lines, each written just before its request's handoff, 0.1-2 ms apart
# in bursts of 4-128). An idle engine core's input thread decodes and preprocesses a request (its Request and block
# hashes: 0.13 ms a 1,024-token prompt on this project's CPU host, vLLM 0.32), and its busy loop, blocked on the
# queue, adds the first, takes what else is queued and steps (EngineCore._process_input_queue, vLLM 0.25-0.33).
# How many of a burst that first step holds is a race: run F's 14B drained 1-3 ms after the first handoff (one where
# the second came 2 ms after it, two or more where it came within 1 ms), and the recorded points' first steps held 1
# (5.5 of 16 points at 2-8 streams), 2-3 (8.5), 4-7 (1.5) or all 8 (0.5) (vllm:iteration_tokens_total; tests/advise/
# test_recorded_gpu.py LOGGED_FIRST_STEP). 0.25 ms of intake with the 0.5-ms handoffs is the deterministic stand-in:
# the first request alone. Given each point's logged count the model's TTFT is within 10% (or 20 ms) at every point
# whose waves agree; the expected value over the logged frequencies leaves the mean TTFT error as it is (7.75%) and
# puts three points beyond their bounds, so it is not taken (docs/advise.md, "The first step after an idle engine").
API_PER_REQUEST_S = 0.5e-3
INTAKE_S = 0.25e-3
# The same one process streams every step's outputs (AsyncLLM's output_handler, then each request's SSE chunk;
# vLLM 0.25 entrypoints/openai and v1/engine/async_llm.py): a closed-loop client has its request's last token, and
# sends its next, only once the API server is through that step's outputs. Its process CPU (process_cpu_seconds_total
# in the /metrics snapshots before and after each point of runs D, E and F, 40 points of 1-128 streams, dense and
# MoE): 65 µs a streamed token (least squares with a per-point constant and a per-second idle term; rms 0.29 s of
# 0.4-5.9 s). Each request that ends costs it 2 ms more: run F's 14B access log (each request's response start)
# against its per-iteration log put every successor's arrival at the API server 3-46 ms after its predecessor's
# last step, growing with the requests that ended in that step (one: 3-9 ms at 1-64 streams; seven or eight:
# 14-37 ms), and this queue, with the 65 µs and the 2.5 ms hop, places the 263 of them (its 32-stream point
# aside: a one-time stall) within 2.7 ms on average; sent as the step ends, a hop from the engine core, they were
# 22 ms early.
API_PER_TOKEN_S = 65e-6
API_PER_FINISH_S = 2e-3
# GEMM tiles are 64-128 rows: half of the large-GEMM rate at a few dozen tokens (tile occupancy), rising toward it;
# the count is the GPU's (dspark.perf.gpus: gemm_half_tokens, 48 where no table says otherwise).
# Activations the elementwise kernels read and write per token and layer, in hidden-size units (norm in/out twice,
# rotary, residual adds, the activation function's gate and up halves at ~3 hidden each).
ACTIVATION_TOUCHES = 20
# The sampler reads and writes the logits (float32) about four times per sampled row (softmax, top-k/p, draw).
SAMPLER_PASSES = 4
# Tokens a seat keeps per step with k speculative tokens, unless given: half of them accepted, at most 4.
ACCEPTED_SHARE = 0.5
ACCEPTED_CAP = 4.0


@dataclass(frozen=True)
class ModelInputs:
    """The step shape and the prior costs, each prior with its source."""

    shape: StepShape
    prior: StepCosts
    sources: dict[str, str]  # term or quantity -> where its value comes from
    assumptions: tuple[str, ...]


def default_emitted(speculative_tokens: int) -> float:
    """Tokens per seat per step when nothing says: 1 + half the speculative tokens, at most 1 + 4."""
    return 1.0 + min(ACCEPTED_SHARE * speculative_tokens, ACCEPTED_CAP)


def _state_bytes_per_seat(arch: ModelArchitecture, tp: int) -> float:
    """Linear-attention state one seat reads and writes per step, per GPU (convolution window + recurrent state)."""
    total = 0.0
    for layer in arch.layers:
        if isinstance(layer, LinearStateLayer):
            conv = layer.conv_dim * (layer.conv_kernel - 1) * dtype_bytes(arch.dtype)
            ssm = layer.num_v_heads * layer.head_k_dim * layer.head_v_dim * dtype_bytes(layer.ssm_dtype or arch.dtype)
            total += 2 * (conv + ssm) / tp
    return total


def _split_weights(arch: ModelArchitecture, weights: WeightBytes | None, tp: int) -> tuple[float, float, str]:
    """(dense bytes read per step, routed-expert bytes, note) per GPU; embedding tables are gathered, not read."""
    if weights is None:
        return 0.0, 0.0, "weights unknown: a step reads no weights in this model until calibrated"
    per_gpu = float(weights.per_gpu_bytes)
    params = arch.parameters
    if params is None:
        return per_gpu, 0.0, f"weights {per_gpu / 1e9:.1f} GB per GPU, all read every step"
    plain = dtype_bytes(arch.dtype)
    gathered = (params.embedding + params.vision) * plain / tp
    expert = 0.0
    if arch.moe is not None and params.routed_experts:
        bpp = format_bytes_per_parameter(arch.expert_weight_format or arch.weight_format, arch.dtype)
        expert = min(params.routed_experts * bpp / tp, per_gpu)
    dense = max(per_gpu - expert - gathered, 0.0)
    note = (f"weights read per step per GPU: {dense / 1e9:.2f} GB dense"
            + (f" + {expert / 1e9:.2f} GB of routed experts × expert coverage" if expert else "")
            + f" (of {per_gpu / 1e9:.2f} GB held; embeddings are gathered, not read)")
    return dense, expert, note


def _active_params_per_gpu(arch: ModelArchitecture, weights: WeightBytes | None, tp: int) -> float:
    params = arch.parameters
    if params is None:
        return (weights.per_gpu_bytes / dtype_bytes(arch.dtype)) if weights else 0.0
    active = float(params.total - params.embedding - params.vision)
    if arch.moe is not None and params.routed_experts:
        active -= params.routed_experts * (1 - arch.moe.top_k / arch.moe.num_experts)
    return active / tp


def _rate_sources(perf: GpuPerf, peak: float, kernels: int, per_layer: int, sources: dict[str, str]
                  ) -> dict[str, str]:
    """Where the attention rate, T½, the kernel floor, the launch and per-request CPU costs come from."""
    return {
        "attention_flops_per_s": (f"{perf.attention_fraction:.0%} of {perf.label}'s {peak:g} dense TFLOP/s, at "
                                  f"{perf.sustained_clock:.0%} of the rated clock"),
        "gemm_half_tokens": sources["flops_per_s"],
        "kernel_floor_s": (f"{perf.kernel_floor_s * 1e6:g} µs per kernel ({perf.label}), {kernels} kernels per step "
                           f"({per_layer} per layer)"),
        "launch_s": (f"{LAUNCH_S * 1e6:g} µs per kernel launched without CUDA graphs (measured eager on the lent "
                     "H200: ~0.54 ms of CPU per decoder layer)"),
        "cpu_per_row_s": sources["fixed_s"],
    }


def _flops_per_token(arch: ModelArchitecture, weights: WeightBytes | None, tp: int) -> tuple[float, float]:
    """(dense, routed-expert) GEMM FLOPs per token per GPU: 2 per parameter a token passes through, less the
    lm_head (run only for sampled positions: _logits_flops)."""
    active = max(_active_params_per_gpu(arch, weights, tp) - _logits_flops(arch, tp) / 2, 0.0)
    params = arch.parameters
    if arch.moe is not None and params is not None and params.routed_experts:
        expert = params.routed_experts * arch.moe.top_k / arch.moe.num_experts / tp
        return 2.0 * max(active - expert, 0.0), 2.0 * expert
    return 2.0 * active, 0.0


def _logits_flops(arch: ModelArchitecture, tp: int) -> float:
    """The lm_head's FLOPs per sampled position per GPU (vocab split across the group): 2 × vocab × hidden."""
    return 2.0 * arch.vocab_size * arch.hidden_size / tp


def _attention_flops_per_pair(arch: ModelArchitecture, tp: int) -> float:
    """FLOPs per (query, key) pair per GPU: QK^T and PV, 2 each per multiply-add, over the attention layers."""
    heads = max(arch.num_attention_heads // tp, 1) if arch.num_attention_heads else 0
    total = 0.0
    for layer in arch.layers:
        if isinstance(layer, AttentionLayer):
            h = heads or max(layer.num_kv_heads // tp, 1)
            total += 2.0 * h * (layer.head_dim + (layer.head_dim_v or layer.head_dim))
        elif isinstance(layer, MLALayer):  # absorbed MLA: keys are kv_lora_rank + rope wide, values kv_lora_rank
            total += 2.0 * max(heads, 1) * (2 * layer.kv_lora_rank + layer.qk_rope_head_dim)
    return total


def _expert_read(perf: GpuPerf, gbps: float, arch: ModelArchitecture, tp: int, expert_bytes: float) -> float:
    """The fused-MoE kernel's read rate of this model's experts (dspark.perf.moe.expert_read_fraction, by one
    expert's gate-up and down matrices per GPU: 3 × hidden × width × bytes ÷ tp; experts as wide as the GPU's
    slower tactic at its moe_wide_read) where the GPU has the measurement; 0 (the dense bandwidth) otherwise."""
    moe = arch.moe
    if not (perf.expert_fraction and expert_bytes and moe is not None):
        return 0.0
    bpp = format_bytes_per_parameter(arch.expert_weight_format or arch.weight_format, arch.dtype)
    width = moe.moe_intermediate_size or DEFAULT_WIDTH
    size = 3.0 * arch.hidden_size * width * bpp / tp
    wide = perf.moe_wide_read if runs_wide_tactic(width // tp, perf) else 1.0
    return gbps * 1e9 * expert_read_fraction(size, perf.expert_fraction, perf.expert_half_bytes) * wide


def _activation_quant(arch: ModelArchitecture, tp: int, precision: GemmPrecision, notes: list[str]
                      ) -> tuple[float, int]:
    """(bytes per token, kernels per step) of the activation quantisation before each distinct linear input, per
    GPU, where the linear layers' kernel quantises its input (W8A8 FP8, W4A4 NVFP4 on FP4 tensor cores): an attention
    layer's QKV (hidden wide) and O (its heads × head dim, split over the group), a dense MLP's gate-up (hidden) and
    down (intermediate, split); a linear-attention or MLA layer's in and out projections taken as two hidden-wide
    inputs; routed experts quantise inside the fused-MoE kernel (not counted). Nothing for weight-only kernels
    (BF16, W4A16); appends its note to `notes`."""
    per_element = precision.quant_bytes_per_element
    if not per_element:
        return 0.0, 0
    elements, kernels = 0.0, 0
    for layer in arch.layers:
        if isinstance(layer, AttentionLayer) and arch.num_attention_heads:
            elements += arch.hidden_size + arch.num_attention_heads * layer.head_dim / tp
        else:
            elements += 2.0 * arch.hidden_size
        kernels += 2
        if arch.moe is None and arch.intermediate_size:
            elements += arch.hidden_size + arch.intermediate_size / tp
            kernels += 2
    notes.append(f"{precision.label} GEMMs: {kernels} activation-quantisation kernels per step before them "
                 f"({per_element * elements / 1e3:.1f} kB per token read and written, with the elementwise kernels)")
    return per_element * elements, kernels


def _gemm_rates(arch: ModelArchitecture, perf: GpuPerf, notes: list[str], sources: dict[str, str],
                kv_cache_dtype: str | None = None) -> tuple[GemmPrecision, float, float, float, float]:
    """(the linear layers' precision, their rate and the routed experts' at the sustained clock, FLOP/s; the dense
    peak attention is priced from, TFLOP/s; the calibration ceiling, FLOP/s) by weight format on this GPU
    (dspark.perf.gpus.gemm_precision: NVFP4 on FP4 tensor cores where the GPU has them, the BF16 rate for
    weight-only 4-bit kernels; routed experts by their own format). Attention follows the KV cache's dtype, not
    the weights': FlashAttention and FlashInfer compute QK^T and PV in the dtype they read the cache in (an FP8
    cache: FA3's e4m3 path, the query quantised with it), so the FP8 peak only with an FP8 cache, else the BF16
    peak ("auto" keeps the model's activation dtype, BF16 beside FP8 or 4-bit weights). The ceiling is the
    faster of the two GEMM peaks."""
    precision = gemm_precision(perf, arch.weight_format)
    expert_precision = gemm_precision(perf, arch.expert_weight_format or arch.weight_format)
    flops = precision.peak_tflops * 1e12 * precision.fraction * perf.sustained_clock
    expert_rate = expert_precision.peak_tflops * 1e12 * expert_precision.fraction * perf.sustained_clock
    fp8_cache = (kv_cache_dtype or "").startswith("fp8") and perf.fp8_tflops > 0
    attention_peak = perf.fp8_tflops if fp8_cache else perf.bf16_tflops
    sources["flops_per_s"] = (f"{precision.fraction:.0%} of {perf.label}'s {precision.peak_tflops:g} dense "
                              f"{precision.label} TFLOP/s on {precision.kernel}, reached by large GEMMs, at "
                              f"{perf.sustained_clock:.0%} of the rated clock under the power cap; half of that at "
                              f"{perf.gemm_half_tokens:g} tokens (tile occupancy)")
    if arch.moe is not None and expert_precision != precision:
        notes.append(f"routed experts ({arch.expert_weight_format}): {expert_precision.fraction:.0%} of "
                     f"{perf.label}'s {expert_precision.peak_tflops:g} dense {expert_precision.label} TFLOP/s "
                     f"({expert_precision.kernel})")
    ceiling = max(precision.peak_tflops, expert_precision.peak_tflops) * 1e12
    return precision, flops, expert_rate, attention_peak, ceiling


def _moe_rate(arch: ModelArchitecture, tp: int, perf: GpuPerf) -> tuple[float, list[str]]:
    """The fused-MoE kernel's fraction of the dense GEMM rate for this model's experts (0 without any), and its note."""
    moe = arch.moe
    if moe is None:
        return 0.0, []
    fraction = fused_moe_fraction(moe.moe_intermediate_size, tp, perf)
    width = f"{moe.moe_intermediate_size:,}" if moe.moe_intermediate_size else "an assumed 768"
    table = "H200" if (perf.moe_rate_fraction, perf.moe_width_half) == H200_MOE else perf.label
    return fraction, [f"routed experts' GEMMs at {fraction:.0%} of the dense rate (the fused-MoE kernel at "
                      f"{width}-wide experts" + (f", {tp} GPUs sharing each" if tp > 1 else "")
                      + f": aiconfigurator's {table} table for vLLM 0.24, dspark.perf.moe)"]


def model_inputs(
    arch: ModelArchitecture,
    weights: WeightBytes | None,
    capacity: CapacitySummary,
    gpu: GpuInfo | None,
    *,
    platform: str,
    tp: int,
    speculative_tokens: int,
    emitted_per_step: float | None = None,
    observed_prefill_s: tuple[float, str] | None = None,
    graph_sizes: Sequence[int] | None = None,
    kv_cache_dtype: str | None = None,
) -> ModelInputs:
    """Shape and priors for one configuration; `observed_prefill_s` pins the prefill cost (value, source);
    `graph_sizes`: the captured CUDA-graph sizes to run steps in (default: the capacity's); `kv_cache_dtype`: the
    engine's setting ("auto", "fp8", ...), which sets the dtype attention computes in."""
    sources: dict[str, str] = {}
    notes: list[str] = []
    dense, expert, weight_note = _split_weights(arch, weights, tp)
    notes.append(weight_note)
    name = gpu.name if gpu is not None else ""
    perf = gpu_perf(name, platform)
    gbps = perf.bandwidth_gbps if is_known(perf) else ((gpu.bandwidth_gbps if gpu else None) or perf.bandwidth_gbps)
    fraction = perf.bandwidth_fraction
    if is_known(perf):
        sources["bandwidth_bytes_per_s"] = f"{fraction:.0%} of {perf.label}'s {gbps:,.0f} GB/s ({perf.source})"
    else:
        sources["bandwidth_bytes_per_s"] = f"{gbps:g} GB/s: no figure for {name or 'this device'}, a placeholder"
    precision, flops, expert_rate, peak, ceiling = _gemm_rates(arch, perf, notes, sources, kv_cache_dtype)
    dense_flops, expert_flops = _flops_per_token(arch, weights, tp)
    sources["per_token_s"] = (f"the sampler: {SAMPLER_PASSES} float32 passes over {arch.vocab_size:,} logits per "
                              "sampled row")
    per_token = SAMPLER_PASSES * 4.0 * arch.vocab_size / (gbps * 1e9 * fraction)
    prefill = 0.0
    sources["prefill_per_token_s"] = "the prompt's GEMM and attention compute (the roofline above)"  # noqa: S105
    if observed_prefill_s is not None:
        prefill, sources["prefill_per_token_s"] = observed_prefill_s
    cpu = platform == "cpu"
    fixed = CPU_STEP_S["cpu" if cpu else "cuda"]
    sources["fixed_s"] = (f"{fixed * 1e3:g} ms of the engine's CPU per step + {CPU_PER_ROW_S * 1e6:g} µs per "
                          "request (scheduling, input preparation, output processing): a prior")
    sizes = tuple(sorted(capacity.cudagraph_capture_sizes if graph_sizes is None else graph_sizes))
    eager = not cpu and not sizes
    async_sched = bool(capacity.details.get("async_scheduling"))
    attn_layers = sum(1 for layer in arch.layers if not isinstance(layer, LinearStateLayer))
    if emitted_per_step is None:
        emitted_per_step = default_emitted(speculative_tokens)
        sources["emitted_per_step"] = (f"default: 1 + half of {speculative_tokens} speculative tokens accepted, "
                                       f"at most 1 + {ACCEPTED_CAP:g}") if speculative_tokens else "no speculation"
    else:
        sources["emitted_per_step"] = "given (--accepted-tokens)"
    moe = arch.moe
    act = dtype_bytes(arch.dtype)
    layers = len(arch.layers)
    per_layer = KERNELS_PER_LAYER + (MOE_EXTRA_KERNELS_PER_LAYER if moe is not None else 0)
    quant_bytes, quant_kernels = _activation_quant(arch, tp, precision, notes)
    kernels = layers * per_layer + KERNELS_PER_STEP + quant_kernels
    shape = StepShape(
        dense_weight_bytes=dense, expert_weight_bytes=expert,
        num_experts=moe.num_experts if moe else None, top_k=moe.top_k if moe else None,
        kv_bytes_per_token=float(capacity.kv_bytes_per_token),
        state_bytes_per_seat=_state_bytes_per_seat(arch, tp),
        speculative_tokens=speculative_tokens, emitted_per_step=emitted_per_step,
        dense_flops_per_token=dense_flops, expert_flops_per_token=expert_flops,
        logits_flops_per_row=_logits_flops(arch, tp),
        attention_flops_per_pair=_attention_flops_per_pair(arch, tp),
        activation_bytes_per_token=ACTIVATION_TOUCHES * arch.hidden_size * act * layers / tp + quant_bytes,
        kernels_per_step=kernels,
        launches_per_step=kernels + (layers * (MOE_EXTRA_LAUNCHES_PER_LAYER - MOE_EXTRA_KERNELS_PER_LAYER)
                                     if moe else 0),
        graph_sizes=sizes, eager=eager, async_scheduling=async_sched,
        allreduces_per_step=2 * layers if tp > 1 else 0, allreduce_bytes_per_token=float(arch.hidden_size * act),
        link_bytes_per_s=perf.link_gbps * 1e9, collective_latency_s=perf.collective_latency_s, tp=tp,
    )
    notes.append(("CUDA graphs captured up to " + f"{sizes[-1]} tokens (at the widest seat count): a smaller batch "
                  "runs padded to the next size, a larger one without a graph"
                  if sizes else "no CUDA graphs (--enforce-eager): each kernel waits for its launch from the CPU"
                  if eager else "no CUDA graphs")
                 + ("; async scheduling: the engine's CPU time per step hides behind the GPU's" if async_sched
                    else "; the engine's CPU time per step adds to the GPU's (no async scheduling)")
                 + f"; {attn_layers} attention layer(s)")
    notes.append(f"KV read per step: {capacity.kv_bytes_per_token:,} B per token of context per GPU"
                 + (f"; linear state {shape.state_bytes_per_seat / 1e6:.1f} MB per seat read and written"
                    if shape.state_bytes_per_seat else ""))
    moe_fraction, moe_note = _moe_rate(arch, tp, perf)
    notes += moe_note
    prior = StepCosts(
        fixed_s=fixed, bandwidth_bytes_per_s=gbps * 1e9 * fraction, per_token_s=per_token,
        prefill_per_token_s=prefill, flops_per_s=flops, gemm_half_tokens=perf.gemm_half_tokens,
        attention_flops_per_s=peak * 1e12 * perf.attention_fraction * perf.sustained_clock,
        peak_flops_per_s=ceiling,
        peak_bandwidth_bytes_per_s=gbps * 1e9,
        kernel_floor_s=0.0 if cpu else perf.kernel_floor_s,
        # A weight-bound GEMM's unhidden tensor-core share (dspark.perf.gpus, measured at the rated clock): the
        # model's GEMM rate is at the sustained clock, so the share times the sustained clock.
        gemm_unhidden=perf.gemm_unhidden * perf.sustained_clock,
        launch_s=0.0 if cpu else LAUNCH_S, cpu_per_row_s=CPU_PER_ROW_S,
        kv_bandwidth_bytes_per_s=gbps * 1e9 * perf.kv_fraction,
        expert_flops_per_s=expert_rate * moe_fraction,  # 0 without routed experts
        expert_bandwidth_bytes_per_s=_expert_read(perf, gbps, arch, tp, expert),
        expert_small_tile_bandwidth_bytes_per_s=gbps * 1e9 * perf.expert_small_tile_fraction if expert else 0.0,
        expert_small_tile_tokens=float(perf.expert_small_tile_tokens) if expert else 0.0,
        arrival_hop_s=0.0 if cpu else ARRIVAL_HOP_S, api_per_request_s=0.0 if cpu else API_PER_REQUEST_S,
        api_per_token_s=0.0 if cpu else API_PER_TOKEN_S, api_per_finish_s=0.0 if cpu else API_PER_FINISH_S,
        intake_s=0.0 if cpu else INTAKE_S)
    sources["kv_bandwidth_bytes_per_s"] = (f"{perf.kv_fraction:.0%} of {perf.label}'s {gbps:,.0f} GB/s: paged KV "
                                           "reads of decode attention" if is_known(perf) else
                                           sources["bandwidth_bytes_per_s"])
    sources.update(_rate_sources(perf, peak, shape.kernels_per_step, per_layer, sources))
    return ModelInputs(shape=shape, prior=prior, sources=sources, assumptions=tuple(notes))


def describe_costs(costs: StepCosts, fitted: Sequence[str], sources: dict[str, str], points: int) -> list[str]:
    """One line per cost term: its value, and whether it was fitted (from how many points) or where it comes from."""
    values = {
        "fixed_s": f"{costs.fixed_s * 1e3:.2f} ms",
        "cpu_per_row_s": f"{costs.cpu_per_row_s * 1e6:.1f} µs",
        "bandwidth_bytes_per_s": f"{costs.bandwidth_bytes_per_s / 1e9:.1f} GB/s",
        "kv_bandwidth_bytes_per_s": f"{(costs.kv_bandwidth_bytes_per_s or costs.bandwidth_bytes_per_s) / 1e9:.1f} GB/s",
        "flops_per_s": f"{costs.flops_per_s / 1e12:.1f} TFLOP/s",
        "gemm_half_tokens": f"{costs.gemm_half_tokens:.0f} tokens",
        "attention_flops_per_s": f"{costs.attention_flops_per_s / 1e12:.1f} TFLOP/s",
        "kernel_floor_s": f"{costs.kernel_floor_s * 1e6:.2f} µs",
        "launch_s": f"{costs.launch_s * 1e6:.1f} µs",
        "per_token_s": f"{costs.per_token_s * 1e6:.2f} µs",
        "prefill_per_token_s": (f"{costs.prefill_per_token_s * 1e3:.4f} ms" if costs.prefill_per_token_s
                                else "computed"),
        "routing_spread": f"{costs.routing_spread:.2f}",
    }
    shown = [t for t in TERM_LABELS if t != "routing_spread" or t in fitted]  # a MoE's, and only where fitted
    return [f"{TERM_LABELS[t]}: {values[t]} ("
            + (f"fitted to {points} measured point(s))" if t in fitted else f"prior: {sources.get(t, '?')})")
            for t in shown]
