"""The step-time model: what one engine step costs, per op class, on the GPU and around it; pure (stdlib only).

A step the scheduler forms holds decode rows (each verifying q = 1 + speculative tokens against its context) and
prompt chunks (each n tokens against a prefix of p). Per GPU of the tensor-parallel group it costs

    gpu = max(weights read + u · FLOPs ÷ peak, FLOPs ÷ (peak × eff(T)))   linear layers, T padded to the graph size
        + max(KV and state read ÷ KV rate, attention FLOPs ÷ rate)  decode rows at their context, chunks vs prefix
        + activations read and written ÷ bandwidth                   norms, rotary, activation functions
        + kernels × per-kernel floor                                 each kernel's fixed latency, even in a graph
        + sampled positions × sampler cost + all-reduces (TP > 1)   every verified token, and a prompt's last
    cpu = per-step scheduling + per-row input preparation and output processing
    launch = kernels × launch cost without a CUDA graph (--enforce-eager, or T above the largest captured
             size), else 0
    step = max(gpu, cpu + launch) with async scheduling (one CPU thread schedules and launches), else
           cpu + max(gpu, launch)

Where each term comes from:
- Roofline per op class (max of memory and compute time, not their sum): a kernel streams its operands while its
  tensor cores work; decode reads every weight once per step whatever the row count (the seed deployment:
  decode at 78-85% of GB10's bandwidth at 1-7% of compute).
- MoE expert coverage: a step of T tokens with top-k routing over E experts touches 1 − (1 − k/E)^T of them
  (docs/advise.md), so the expert bytes read grow with T; each expert's GEMM sees T·k/E tokens. Tokens that
  share experts more than even, independent routing does cover fewer: 1 − (1 − k/E)^(1 + (T − 1)·s), s the
  routing spread (1 by default; a profile's decode steps at a few rows pin it, dspark.advise.calibrate).
- The routed experts' weights are read by the fused-MoE kernel at a rate of their own, which grows with an
  expert's size (dspark.perf.moe.expert_read_fraction: aiconfigurator's H200 fused-MoE table and the lent H200's
  own timing of vLLM's fused_experts on Mixtral's layer). A kernel that picks its token tile from the tokens per
  expert (FlashInfer's TRT-LLM MoE on the B200) reads at another rate while T·k/E stays within its smallest tile
  (expert_small_tile_tokens; dspark.perf.gpus).
- FP8 weights: each distinct input of an FP8 linear layer is first quantised to FP8 by a kernel of its own
  (vLLM's ScaledMMLinearKernel: ops.scaled_fp8_quant), 2 B read and 1 B written per element, priced with the
  elementwise kernels (its bytes in activation_bytes_per_token, one kernel floor each; dspark.perf.gpus). NVFP4
  weights on FP4 tensor cores (W4A4) likewise (ops.scaled_fp4_quant: 2 B read, 0.5625 B written); weight-only
  4-bit kernels (Marlin W4A16 on Hopper, MXFP4) quantise nothing and run at the BF16 rate
  (dspark.perf.gpus.gemm_precision).
- The lm_head runs only for the positions the step samples (vLLM's compute_logits on the sampled hidden states:
  every decode position, a prompt chunk's last token), not for every prompt token.
- A weight-bound GEMM does not hide all of its tensor-core work behind its weight stream: its memory side is
  weights ÷ bandwidth + u · FLOPs ÷ flops_per_s (u = gemm_unhidden, on the dense GEMMs and the lm_head; 0 in the
  fused-MoE kernel, which was measured without it). aiconfigurator's H200 table of vLLM 0.24's torch linear
  (bf16 gemm_perf.parquet: 128 shapes of 64 MB to 2 GB of weights, at the rows where they stay weight-bound)
  takes 2% longer at 16 rows than at one, 3.5% at 32, 6.8% at 64, 13% at 96: the time beyond the one-row GEMM
  is 0.2-0.26 of the FLOPs at the rated 791 TFLOP/s at 32-112 rows (median 0.23; 0.22 over 8-128 rows), the same
  share at every row count, hence u = 0.22 at the rated clock. The H200's decode steps of 64 rows ran 0.4-0.5 ms
  above the model without it (a captured size: no padding), 0.12-0.15 at 1-16 rows.
- GEMM efficiency eff(T) = T / (T + T_half), times the fraction a decoder layer's GEMMs reach at large T:
  cuBLAS/CUTLASS tiles are 64-128 rows, so a GEMM of few rows wastes most of a tile (the best single GEMM on the
  lent H200: ~790 of 989 TFLOP/s; aiconfigurator's GEMM tables show the same rise with M).
- Attention: paged KV read per decode row at its context (vLLM's FlashAttention/FlashInfer decode kernels read
  the row's 16-token blocks, scattered in the pool: a lower rate than a streaming read); FLOPs 4 · layers ·
  heads · head_dim per (query, key) pair; a prompt chunk of n tokens after a prefix of p is n·(p + n/2) pairs.
- CUDA-graph padding: vLLM runs a batch of T ≤ the largest captured size in the smallest captured graph ≥ T
  (vllm/v1/worker/gpu_model_runner.py, _get_cudagraph_and_dp_padding / cudagraph_dispatcher; the sizes are
  dspark.engines.vllm.graphs'), so padded rows cost GEMM FLOPs; eager steps are not padded.
- Per-kernel floor: a kernel costs a few µs however little it does (launch within a graph, tail, the next
  kernel's ramp); aiconfigurator prices each elementwise op at bytes ÷ (0.8 × bandwidth) + 3 µs; its tables' tiniest
  GEMMs take 2.6 µs on Hopper, 1.9 on the B200 (dspark.perf.gpus: kernel_floor_s).
- Eager launch gap: with --enforce-eager every kernel is launched from Python through PyTorch's dispatcher
  (~12 µs each), and a step of small kernels waits on the CPU (vLLM's docs: CUDA graphs exist to remove it); a
  batch above the largest captured size runs without a graph too (the cudagraph dispatcher finds none).
- Async scheduling (vLLM's AsyncScheduler, on by default on CUDA): the next step is scheduled while this one runs
  on the GPU (vllm/v1/engine/core.py, step_with_batch_queue), so CPU time hides behind GPU time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

# The terms' arithmetic is dspark_inside.step_cost, the very file the engine-side replay evaluates (one copy),
# imported here by its name in the dspark package it ships in. mypy reads it by its engine-side name (mypy_path:
# dspark/_inside_root), so that the file has one module name there; the code is the same file either way.
if TYPE_CHECKING:
    from dspark_inside.step_cost import cpu_seconds, step_seconds, step_terms
else:
    from dspark._inside_root.dspark_inside.step_cost import cpu_seconds, step_seconds, step_terms

__all__ = ["StepCosts", "StepShape", "cost_table", "cpu_seconds", "step_seconds", "step_terms"]


@dataclass(frozen=True)
class StepCosts:
    """The coefficients of the step-time model: each a prior (dspark.perf.priors) or fitted (advise.calibrate)."""

    fixed_s: float  # CPU per step: scheduling, input preparation, output processing
    bandwidth_bytes_per_s: float  # achieved rate of large reads (weights, KV, activations)
    per_token_s: float = 0.0  # GPU per sampled row: logits, sampler
    prefill_per_token_s: float = 0.0  # a measured cost per prompt token, in place of the prompt's compute (0: none)
    flops_per_s: float = math.inf  # dense GEMM rate reached by large GEMMs (peak × fraction)
    gemm_half_tokens: float = 64.0  # tokens at which a GEMM reaches half of flops_per_s
    attention_flops_per_s: float = math.inf  # attention kernels' rate in prefill
    kernel_floor_s: float = 0.0  # fixed latency of one kernel in a step
    # Of a weight-bound dense GEMM's tensor-core time at flops_per_s, the share its weight stream does not hide
    gemm_unhidden: float = 0.0
    launch_s: float = 0.0  # CPU cost of launching one kernel without CUDA graphs
    cpu_per_row_s: float = 0.0  # CPU per scheduled request per step
    kv_bandwidth_bytes_per_s: float = 0.0  # achieved rate of paged KV reads (0: bandwidth_bytes_per_s)
    expert_flops_per_s: float = 0.0  # the fused-MoE kernel's rate at large per-expert token counts (0: flops_per_s)
    expert_bandwidth_bytes_per_s: float = 0.0  # the fused-MoE kernel's read rate of routed experts (0: bandwidth)
    # ... at up to expert_small_tile_tokens tokens per expert, where the kernel runs its smallest token tile (0: none)
    expert_small_tile_bandwidth_bytes_per_s: float = 0.0
    expert_small_tile_tokens: float = 0.0
    arrival_hop_s: float = 0.0  # client -> engine core (and first token -> client): HTTP, API server, IPC
    api_per_request_s: float = 0.0  # the API server's own time per request, one request after another
    api_per_token_s: float = 0.0  # ... per token it streams (every step's outputs pass through it)
    api_per_finish_s: float = 0.0  # ... per request that ends (its last chunks, the response's end)
    intake_s: float = 0.0  # an idle engine core: from the first request's arrival to its first schedule()
    # Of a step's tokens after its first, the share that pick their experts independently of the others: a step
    # of T tokens covers 1 − (1 − k/E)^(1 + (T − 1) · spread) of the experts. 1 (the prior): independent, even
    # top-k routing; below 1: tokens that share experts (a router that favours some); fitted from decode steps.
    routing_spread: float = 1.0
    # The device's datasheet rates (dense, for the weights' precision; memory): what a fitted rate never exceeds
    peak_flops_per_s: float = math.inf
    peak_bandwidth_bytes_per_s: float = math.inf


@dataclass(frozen=True)
class StepShape:
    """What a step reads and computes per GPU, and how the engine runs it (graphs, async scheduling, TP)."""

    dense_weight_bytes: float  # read whole every step
    expert_weight_bytes: float  # routed experts: the share read follows expert coverage
    num_experts: int | None
    top_k: int | None
    kv_bytes_per_token: float  # KV read per token of context held
    state_bytes_per_seat: float  # linear-attention state read and written per seat
    speculative_tokens: int  # proposed per step: each seat verifies 1 + this many tokens
    emitted_per_step: float  # tokens a seat keeps per step: 1 + accepted speculative tokens
    dense_flops_per_token: float = 0.0  # 2 × dense parameters a token passes through (not the lm_head)
    logits_flops_per_row: float = 0.0  # 2 × vocab × hidden: the lm_head, run only for the positions sampled
    expert_flops_per_token: float = 0.0  # 2 × routed-expert parameters a token passes through (its top-k)
    attention_flops_per_pair: float = 0.0  # 4 × attention layers × query heads × head dim, per GPU
    activation_bytes_per_token: float = 0.0  # activations read and written by the elementwise kernels
    kernels_per_step: int = 0  # kernels one forward launches (layers × kernels per layer + the sampler's)
    launches_per_step: int = 0  # launches of a step run without a graph, host-side ops included (0: kernels)
    graph_sizes: tuple[int, ...] = ()  # captured CUDA-graph batch sizes, ascending (empty: none)
    eager: bool = False  # no CUDA graphs (--enforce-eager)
    async_scheduling: bool = False
    allreduces_per_step: int = 0  # tensor-parallel all-reduces per forward (2 per layer at TP > 1)
    allreduce_bytes_per_token: float = 0.0  # hidden size × activation bytes
    link_bytes_per_s: float = math.inf  # per direction between the group's GPUs
    collective_latency_s: float = 0.0
    tp: int = 1
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def query_len(self) -> int:
        """Tokens one seat puts through the model per decode step."""
        return 1 + self.speculative_tokens


def cost_table(costs: StepCosts, shape: StepShape) -> dict[str, Any]:
    """The flat, JSON-able table step_seconds reads (what the engine-side replay is handed).

    prefill_observed is 1 where prefill_per_token_s is a measured cost that replaces the prompt's compute; else
    prefill_per_token_s is only what a caller may set as the prompt's marginal cost (the replay's prefill share).
    """
    table: dict[str, Any] = dict(asdict(costs))
    for key, value in asdict(shape).items():
        if key == "notes":
            continue
        if isinstance(value, bool):
            table[key] = 1.0 if value else 0.0
        elif isinstance(value, tuple):
            table[key] = [int(v) for v in value]
        else:
            table[key] = float(value or 0)
    table["query_len"] = float(shape.query_len)
    table["prefill_observed"] = 1.0 if costs.prefill_per_token_s > 0 else 0.0
    for key, value in table.items():  # JSON has no infinity: a rate without a limit is 0 ("none")
        if isinstance(value, float) and math.isinf(value):
            table[key] = 0.0
    return table

