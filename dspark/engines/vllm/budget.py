"""vLLM KV budget: the pin, or the engine's free-memory arithmetic as an estimate; start-up memory gates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

from dspark.core.errors import InputError
from dspark.engines.vllm.graphs import VllmGraphPlan
from dspark.engines.vllm.kv_types import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    GiB,
    KVBudget,
    Platform,
    VllmRefusal,
    format_gib,
)
from dspark.engines.vllm.options import VllmOptions
from dspark.engines.vllm.resolve import Resolved
from dspark.model.architecture import (
    AttentionLayer,
    ModelArchitecture,
    dtype_bytes,
)
from dspark.model.architecture.fields import QK_NORM

# ---------------------------------------------------------------------------------------------
# 5. KV budget
# ---------------------------------------------------------------------------------------------


def _pinned_budget(
    options: VllmOptions, platform: Platform, environ: Mapping[str, str]
) -> tuple[KVBudget | None, VllmRefusal | None]:
    """--kv-cache-memory-bytes, or on CPU VLLM_CPU_KVCACHE_SPACE (whole GiB, and it wins over the flag)."""
    if platform == "cpu":
        space = environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        if space != "":
            try:
                gib = int(space)  # CpuPlatform.check_and_update_config: int(os.environ[...])
            except ValueError:
                msg = f"invalid literal for int() with base 10: {space!r}"
                return None, VllmRefusal("cpu_kvcache_space_invalid", msg)
            return KVBudget(gib * GiB, "pinned", "VLLM_CPU_KVCACHE_SPACE"), None
    if options.kv_cache_memory_bytes is not None:
        return KVBudget(options.kv_cache_memory_bytes, "pinned", "--kv-cache-memory-bytes"), None
    return None, None


CUBLAS_WORKSPACE_BYTES = 32 << 20  # torch's cuBLAS workspace on Hopper (CUBLAS_WORKSPACE_CONFIG :4096:8), per GPU


def moe_workspace_bytes(arch: ModelArchitecture, r: Resolved) -> int:
    """The fused-MoE workspace profile_run allocates for max_num_batched_tokens tokens (unquantised Triton experts).

    TritonExperts.workspace_shapes (same in 0.25.0, 0.32.0 and 0.33.0): workspace1 (M, topk, max(N/2, K)),
    workspace2 (M, topk, max(N, K)) and the output (M, K), with M the batched tokens, N = 2 x the per-rank expert
    intermediate (gate and up), K = hidden. FusedMoEKernel._allocate_buffers (modular_kernel.py) takes one buffer
    of max(workspace1, output) elements, the output reusing workspace1's memory, and workspace2 beside it, from the
    worker's WorkspaceManager.get_simultaneous (each rounded up to 256 B); it stays allocated through the profile.
    """
    moe = arch.moe
    if moe is None or not moe.moe_intermediate_size:
        return 0
    act_bytes = dtype_bytes(r.model_dtype)
    m, k, topk = r.max_num_batched_tokens, arch.hidden_size, moe.top_k
    n = 2 * -(-moe.moe_intermediate_size // r.tp)
    common = max(m * topk * max(n // 2, k), m * k) * act_bytes
    return _round_up(common, 256) + _round_up(m * topk * max(n, k) * act_bytes, 256)


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


_NON_INPLACE_NORM = frozenset({"gemma", "gemma2", "gemma3"})  # GemmaRMSNorm: its fused add returns new tensors


def forward_live_bytes(arch: ModelArchitecture, r: Resolved, compiled: bool = False) -> int | None:
    """The profile forward's live activations at its largest layer block, counted from the layer code; None where not
    modelled (Gated-DeltaNet and Mamba2 layers, no dense width).

    A llama-style decoder layer (Qwen3, Llama, Mistral, Gemma, Mixtral, Qwen3-MoE; vllm/model_executor/models/)
    holds, at its attention's o_proj: the layer's input (normed in place by the fused add-norm, and still the
    caller's), the residual, qkv_proj's output, q and k again where q/k-norm (or, compiled, the native rotary
    embedding) makes new tensors, the attention's output (the profile skips the kernel, not Attention.forward's
    torch.empty) and o_proj's output; at the MLP's down_proj: the caller's input, the residual, the MLP's input,
    gate_up_proj's output (2 x intermediate, alive until the MLP returns), the activation's output (intermediate)
    and down_proj's output; at a fused-MoE block: the same four hidden rows and the router logits, its
    intermediates living in the persistent workspace (moe_workspace_bytes), with a shared expert's MLP in place of
    the routed output while it runs (first), or its output beside the routed one; an MoE model's dense
    layers are an MLP block of their own. Gemma's norms return new tensors, so the caller's residual stays beside
    the new one (one more row at the MLP, two at the attention). MLA models (DeepSeek) get their MLP and MoE blocks
    counted so, and 16 hidden rows for the attention block. In hidden-width columns of the batch, x M x dtype.
    """
    if arch.is_hybrid or arch.num_attention_heads <= 0:
        return None
    h, tp = arch.hidden_size, r.tp
    extra_rows = 1 if arch.model_type in _NON_INPLACE_NORM else 0
    attention_layers = [layer for layer in arch.layers if isinstance(layer, AttentionLayer)]
    if arch.uses_mla:
        # MLA's attention block is not counted (its q/v head widths are not read): 16 hidden rows stand for it.
        attention = 16 * h
    elif attention_layers:
        layer = attention_layers[0]
        q = -(-arch.num_attention_heads // tp) * layer.head_dim
        kv = max(1, layer.num_kv_heads // tp) * layer.head_dim
        # New q and k: q/k-norm makes them; compiled, the native rotary embedding does too (eager, vLLM's rotary
        # kernel rotates in place).
        qk_copy = q + kv if arch.model_type in QK_NORM or compiled else 0
        attention = (2 + 2 * extra_rows) * h + (q + 2 * kv) + qk_copy + q + h
    else:
        return None
    dense = (4 + extra_rows) * h + 3 * -(-arch.intermediate_size // tp) if arch.intermediate_size else None
    if arch.moe is not None:
        # The fused-MoE block: the caller's input, the residual, the block's input and the router logits, then the
        # routed experts' output (FusedMoEKernel.apply's torch.empty_like; their intermediates are the workspace).
        # A shared expert (SharedFusedMoE; at 8,192 tokens above VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD, so
        # SharedExpertsOrder.NO_OVERLAP) runs first inside the opaque moe_forward_shared op, eagerly even when the
        # model is compiled: its gate_up (2 x width, alive until its forward returns), the activation and
        # down_proj's output, where the routed output does not exist yet; its output then stays beside the routed
        # one. Compiled, the graph piece around the op holds one hidden row more than eager (a compiled dense MLP
        # peaks at 4 hidden rows + gate_up + activation, Inductor freeing gate_up before down_proj's output; eager
        # that is 3 rows outside the MLP + its output), so the block is one row wider there.
        moe = arch.moe
        shared = arch.shared_expert_intermediate_size or moe.num_shared_experts * (moe.moe_intermediate_size or 0)
        routed = (5 if compiled else 4) * h + moe.num_experts
        block = max(routed + 3 * -(-shared // tp), routed + h) if shared else routed
        if dense is not None and _has_dense_layers(arch):
            block = max(block, dense)
    elif dense is not None:
        block = dense
    else:
        return None
    return max(attention, block) * r.max_num_batched_tokens * dtype_bytes(r.model_dtype)


def _has_dense_layers(arch: ModelArchitecture) -> bool:
    """Some decoder layers of an MoE model are dense MLPs (first_k_dense_replace, mlp_only_layers): from the
    parameter estimate's layers; without one, assumed when the config names a dense width apart from the experts'."""
    if arch.parameters is not None:
        return any(layer.routed_experts == 0 for layer in arch.parameters.layers)
    moe = arch.moe
    return moe is not None and arch.intermediate_size not in (None, moe.moe_intermediate_size)


def runtime_overhead(
    arch: ModelArchitecture, r: Resolved, graphs: VllmGraphPlan, runner: Literal["v1", "v2"] = "v2"
) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """What a CUDA worker holds beside weights and KV (activation peak, non-torch, graphs), each term named."""
    act_bytes = dtype_bytes(r.model_dtype)
    hidden_row = r.max_num_batched_tokens * arch.hidden_size * act_bytes  # one hidden-wide profile activation
    live = forward_live_bytes(arch, r, graphs.compiled) if r.release.profile_forward_live_rows else None
    # Counted: the layer code's live tensors at the peak block, beside the cuBLAS workspace the first GEMM
    # allocates. Heuristic (layers not counted): ~16 hidden-wide activations of max_num_batched_tokens tokens
    # through a block (measured on an H200 with 0.25.0: 0.96-1.29 GiB for 4,096-hidden dense models at 8,192).
    transient = live + CUBLAS_WORKSPACE_BYTES if live is not None else hidden_row * 16
    # The fused-MoE workspace (TritonExperts.workspace_shapes): persistent through the profile, on top.
    workspace = moe_workspace_bytes(arch, r)
    # _dummy_run runs the MTP drafter's forward on the same max_num_batched_tokens after the target's (0.25 V1
    # GPUModelRunner._dummy_run -> drafter.dummy_run; V2 speculator.propose(dummy_run=True)): its layer peaks as a
    # target layer does, on top of the target's output hidden states, the drafter's embeddings and their concat
    # (Qwen3_5MultiTokenPredictor.forward: cat([embeds, hidden]) -> fc): 4 hidden-wide rows. Measured on the H200
    # (Qwen3.5-27B, 3 MTP tokens): the profile's peak 352 MiB above the same model's without MTP; this gives 320.
    drafter = 4 * hidden_row if r.spec_method == "mtp" else 0
    # Compiled (0.25): the profile's peak holds a transient of its own, reached where the forward's is lower
    # (Qwen3-8B, Llama-3.1-8B, Gemma 3, Phi-4-mini, Qwen3.5; not Mistral's 32k vocab): the arguments of the fused
    # embedding gather + layer 0's RMSNorm kernel (compiled, the IR's rms_norm is the native one,
    # CudaPlatform.get_default_ir_op_priority, so Inductor fuses the gather into it): the whole table (vocab padded
    # to 64, VocabParallelEmbedding, per TP rank) and its two outputs, the gathered rows (the residual) and the
    # normed rows, each hidden-wide; its input ids and norm weight add ~40 KB. Measured: Llama-3.1-8B, Gemma-3-12B
    # and Phi-4-mini to 43 KB, Qwen3-8B 1 MiB above. What allocates it is not established: Inductor's combo-kernel
    # benchmarking (random copies of every argument) was the reading until a start with benchmark_combo_kernel off
    # held the same peak to the byte (Gemma-3-12B, H200, 2026-12-02), so the flags do not remove it here.
    embedding = 0
    if graphs.compiled and r.release.compiled_profile_embedding_transient:
        vocab_rank = -(-(-(-arch.vocab_size // 64) * 64) // r.tp)
        embedding = vocab_rank * arch.hidden_size * act_bytes + 2 * hidden_row
    forward = max(transient + workspace, embedding) + drafter
    # The sampler's dummy batch runs after the forward, with the forward's output and the MoE workspace still
    # allocated; the profile's peak is the larger of the two (0.25: the probe's forward and sampler peaks). The V1
    # runner's _dummy_sampler_run runs top-k/top-p over max_num_seqs fp32 logit rows; the V2 runner's skips them
    # ("the sampler may skip top_k, top_p, and logprobs"), and its peak stays the forward's.
    sampler = r.max_num_seqs * arch.vocab_size * 8 if runner == "v1" else 0
    # What the sampler starts beside: the forward's output, the MoE workspace and the cuBLAS workspace.
    activation = max(forward, hidden_row + workspace + CUBLAS_WORKSPACE_BYTES + sampler) if sampler else forward
    # Heuristic: CUDA context growth after the snapshot (cuBLAS workspaces, attention buffers), NCCL at TP>1.
    non_torch = r.release.non_torch_bytes + (256 * (1 << 20) if r.tp * r.pp > 1 else 0)
    profiles_graphs = runner == "v1" or r.release.v2_runner_profiles_cudagraphs
    if not profiles_graphs:
        graph_bytes = 0
        graph_note = f"CUDA-graph memory: none (vLLM {r.release.version}'s V2 model runner profiles no graphs)"
    elif runner == "v1" and r.release.v1_graph_profile_two_samples and graphs.applied.sizes:
        from dspark.engines.vllm.graph_memory import profile_cudagraph_memory  # noqa: PLC0415 - 0.25/0.26 only

        estimate = profile_cudagraph_memory(
            sizes=graphs.applied.sizes, cudagraph_mode=graphs.cudagraph_mode, max_num_seqs=r.max_num_seqs,
            num_speculative_tokens=r.num_spec, layers=arch.num_layers, hidden_size=arch.hidden_size,
            is_hybrid=arch.is_hybrid, is_moe=arch.moe is not None,
        )
        graph_bytes, graph_note = estimate.bytes, estimate.assumption
    else:
        # Heuristic: profile_cudagraph_memory, ~2 MiB per captured size (0.32/0.33 account graphs their own way).
        graph_bytes = len(graphs.applied.sizes) * 2 * (1 << 20)
        graph_note = "CUDA-graph memory (heuristic) = 2 MiB per capture size (0 when eager / on CPU)"
    terms = (("activation_peak", activation), ("non_torch", non_torch), ("cudagraphs", graph_bytes))
    peak_words = (
        "the layer code's live tensors at its largest block (attention: input, residual, qkv, q/k-norm copies, "
        "output, o_proj; MLP: four hidden rows + 3 x intermediate) x max_num_batched_tokens + the 32 MiB cuBLAS "
        "workspace" if live is not None else "max_num_batched_tokens x hidden x dtype x 16"
    )
    assumptions = [
        f"activation peak ({'counted' if live is not None else 'heuristic'}; "
        f"{_measured_activation_range(arch, r, live is not None)})"
        f" = {peak_words}"
        + (" + the fused-MoE workspace (TritonExperts.workspace_shapes)" if workspace else "")
        + (", or the compiled run's embedding-table transient (vocab x hidden x dtype / TP + 2 hidden rows: "
           "the arguments of the fused embedding gather + RMSNorm kernel, held with Inductor's combo-kernel "
           "benchmarking on and off) when larger"
           if embedding else "")
        + (" + 4 x max_num_batched_tokens x hidden x dtype (the MTP drafter's dummy forward)" if drafter else "")
        + (", or the forward's output + max_num_seqs x vocab x 8 (V1 runner's sampler) when larger"
           if sampler else ""),
        f"non-torch memory (heuristic) = {r.release.non_torch_bytes >> 20} MiB, + 256 MiB NCCL buffers "
        "when TP x PP > 1",
        graph_note,
    ]
    return terms, tuple(assumptions)


# What the engine's own profile peak (Worker.determine_available_memory's torch peak increase) was against this
# estimate on the H200 with vLLM 0.25.0 (tests/device/results/2026-12-01, docs/gpu-truth.md), per class.
_ACTIVATION_MEASURED = {
    "hybrid": "the engine's peak was 1.02-1.03x this for a GDN hybrid (Qwen3.5-27B, with and without MTP)",
    "counted": "the engine's peak was this to 2 KB eager and 0.99-1.04x compiled for the Qwen3, Llama, Mistral, "
               "Gemma 3, Qwen3-MoE and DeepSeek-V2-Lite shapes",
}


def _measured_activation_range(arch: ModelArchitecture, r: Resolved, counted: bool) -> str:
    """The estimate's measured error for the model's class, in words (measured with 0.25.0 only)."""
    if not r.release.compiled_profile_embedding_transient:
        return f"not measured on a GPU with vLLM {r.release.version}"
    cls = "counted" if counted else "hybrid" if arch.is_hybrid else None
    if cls is None:
        return "not measured for this layer class"
    return _ACTIVATION_MEASURED[cls] + " on an H200 with 0.25.0"


def rotary_cache_bytes(arch: ModelArchitecture, model_dtype: str) -> int:
    """The cos/sin tables vLLM keeps on each GPU beside the weights (counted in 'Model loading took')."""
    total = 0
    for t in arch.rotary_tables:
        # get_rope (model_executor/layers/rotary_embedding/__init__.py) builds one table per distinct rope and
        # RotaryEmbeddingBase registers it as the cos_sin_cache buffer in the model dtype, one row per position:
        # LinearScalingRotaryEmbedding max_position x factor; YaRN and DeepSeek-YaRN original x factor;
        # MRotaryEmbedding max_position x 4 (positions_factor); LongRoPE original + max_position; default, llama3
        # and the rest max_position.
        if t.rope_type == "linear":
            rows = int(t.max_position * t.factor)
        elif t.rope_type in ("yarn", "deepseek_yarn"):
            rows = int((t.original_max_position or t.max_position) * t.factor)
        elif t.rope_type == "mrope":
            rows = t.max_position * 4
        elif t.rope_type == "longrope":
            # Phi3LongRoPEScaledRotaryEmbedding: one buffer, the short table (original rows) and the long one
            # (max_position rows) concatenated.
            rows = (t.original_max_position or 0) + t.max_position
        else:
            rows = t.max_position
        total += rows * t.rotary_dim * dtype_bytes(model_dtype)
    return total


def cuda_total(device_total_bytes: int, device_reserved_bytes: int) -> int:
    """The total CUDA reports (cudaMemGetInfo, the worker's MemorySnapshot.total_memory): NVML's total less
    the driver's reservation (NVML v2 `reserved`; on an H200, 150,754,820,096 - 644,939,776 B)."""
    return device_total_bytes - max(0, device_reserved_bytes)


def _estimate_budget(
    arch: ModelArchitecture,
    r: Resolved,
    options: VllmOptions,
    device: tuple[int | None, int],
    weights_per_gpu_bytes: int | None,
    graphs: VllmGraphPlan,
    runner: Literal["v1", "v2"],
) -> KVBudget:
    """requested - weights - activation peak - non-torch - CUDA graphs (Worker.determine_available_memory)."""
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    device_total_bytes, device_reserved_bytes = device
    if device_total_bytes is None:
        raise InputError("no KV budget: pin it (--kv-cache-memory / --kv-cache-memory-bytes) or give device memory")
    total = cuda_total(device_total_bytes, device_reserved_bytes)
    # request_memory (vllm/v1/worker/utils.py, 0.25 to 0.33): ceil(init_snapshot.total_memory x utilisation).
    requested = math.ceil(total * util)
    where = f"CUDA total {total:,} B" + (f" (NVML total less {device_reserved_bytes:,} B reserved)"
                                         if device_reserved_bytes > 0 else "")
    assumptions = [f"requested = ceil({where} x gpu_memory_utilization {util}) = {requested:,} B"]
    if weights_per_gpu_bytes is None:
        per_param = dtype_bytes(arch.dtype)
        weights = (arch.parameter_count or 0) * per_param // max(1, r.tp * r.pp)
        assumptions.append(f"weights unknown: parameter estimate x {per_param} B / (TP x PP)")
    else:
        weights = weights_per_gpu_bytes
    rotary = rotary_cache_bytes(arch, r.model_dtype)
    if rotary:
        assumptions.append(f"rotary cos/sin tables: {rotary:,} B ({len(arch.rotary_tables)} rope(s), held beside "
                           "the weights)")
    overhead, overhead_assumptions = runtime_overhead(arch, r, graphs, runner)
    assumptions += overhead_assumptions
    if r.release.cublas_in_baseline:
        # 0.33 gpu_worker.init_device: cuBLAS handles exist before the start-up snapshot, so their memory is
        # baseline rather than growth after it; the non-torch heuristic above does not separate them.
        assumptions.append(f"vLLM {r.release.version} counts cuBLAS handles in its start-up baseline "
                           "(not separated in the non-torch heuristic)")
    activation, non_torch, graph_bytes = (value for _, value in overhead)
    budget = requested - weights - rotary - activation - non_torch - graph_bytes
    terms = (
        ("requested", requested),
        ("weights", weights),
        ("rotary_caches", rotary),
        ("activation_peak", activation),
        ("non_torch", non_torch),
        ("cudagraphs", graph_bytes),
    )
    return KVBudget(budget, "estimate", "estimate", tuple(assumptions), terms)


def _estimate_cpu_budget(
    arch: ModelArchitecture,
    r: Resolved,
    options: VllmOptions,
    device_total_bytes: int | None,
    weights_per_gpu_bytes: int | None,
) -> KVBudget:
    """CPUWorker.determine_available_memory without a pin: ceil(total x util) - the worker's RSS."""
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if device_total_bytes is None:
        raise InputError("no KV budget: pin it (--kv-cache-memory / VLLM_CPU_KVCACHE_SPACE) or give host memory")
    requested = math.ceil(device_total_bytes * util)
    weights = weights_per_gpu_bytes if weights_per_gpu_bytes is not None else (arch.parameter_count or 0) * 2
    rss = weights + int(1.5 * GiB)
    assumptions = (
        f"requested = ceil(node total x gpu_memory_utilization {util}) = {requested:,} B",
        "worker RSS (heuristic) = weights + 1.5 GiB of Python, torch and vLLM",
    )
    return KVBudget(
        requested - rss, "estimate", "estimate", assumptions, (("requested", requested), ("worker_rss", rss))
    )


def startup_checks(
    r: Resolved,
    options: VllmOptions,
    budget: KVBudget | None,
    device_total_bytes: int | None,
    device_free_bytes: int | None,
    device_reserved_bytes: int = 0,
) -> list[VllmRefusal]:
    """Worker start-up gates: CUDA free >= ceil(util x CUDA total); CPU pinned KV <= the node's available memory."""
    out: list[VllmRefusal] = []
    if device_total_bytes is None or device_free_bytes is None:
        return out
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if r.platform == "cuda":
        device_total_bytes = cuda_total(device_total_bytes, device_reserved_bytes)
    requested = math.ceil(device_total_bytes * util)
    if r.platform == "cuda":
        if device_free_bytes < requested:
            out.append(
                VllmRefusal(
                    "startup_free_memory",
                    f"Free memory on device cuda:0 ({format_gib(device_free_bytes)}/{format_gib(device_total_bytes)} "
                    f"GiB) on startup is less than desired GPU memory utilization ({util}, {format_gib(requested)} "
                    "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                )
            )
        return out
    if budget is not None and budget.source == "pinned":
        if budget.bytes > device_free_bytes:
            out.append(
                VllmRefusal(
                    "cpu_kv_over_available",
                    f"Available memory on node 0 ({format_gib(device_free_bytes)}/"
                    f"{format_gib(device_total_bytes)} GiB) on kv cache allocation is less than requested "
                    f"memory for kv ({format_gib(budget.bytes)} GiB). "
                    "Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other "
                    "processes.",
                )
            )
    elif requested > device_free_bytes:
        out.append(
            VllmRefusal(
                "startup_free_memory",
                f"Available memory on node 0 ({format_gib(device_free_bytes)}/{format_gib(device_total_bytes)} GiB) on "
                f"startup is less than desired CPU memory utilization ({util}, {format_gib(requested)} GiB).",
            )
        )
    return out


def kv_budget(
    arch: ModelArchitecture,
    r: Resolved,
    options: VllmOptions,
    environ: Mapping[str, str],
    device: tuple[int | None, int | None],
    weights_per_gpu_bytes: int | None,
    graphs: VllmGraphPlan,
    runner: Literal["v1", "v2"] = "v2",
    device_reserved_bytes: int = 0,
) -> tuple[KVBudget, list[VllmRefusal]]:
    """The KV budget (pinned, else estimated) and the refusal an invalid VLLM_CPU_KVCACHE_SPACE earns."""
    pinned, refusal = _pinned_budget(options, r.platform, environ)
    if refusal is not None:
        return KVBudget(0, "pinned", "VLLM_CPU_KVCACHE_SPACE (invalid)"), [refusal]
    refusals: list[VllmRefusal] = []
    if pinned is not None:
        return pinned, refusals
    if r.platform == "cpu":
        return _estimate_cpu_budget(arch, r, options, device[0], weights_per_gpu_bytes), refusals
    return _estimate_budget(
        arch, r, options, (device[0], device_reserved_bytes), weights_per_gpu_bytes, graphs, runner
    ), refusals
