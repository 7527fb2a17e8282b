"""vLLM KV budget: the pin, or the engine's free-memory arithmetic as an estimate; start-up memory gates."""

from __future__ import annotations

import math
from collections.abc import Mapping

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
    ModelArchitecture,
    dtype_bytes,
)

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


def runtime_overhead(
    arch: ModelArchitecture, r: Resolved, graphs: VllmGraphPlan
) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """What a CUDA worker holds beside weights and KV (activation peak, non-torch, graphs): heuristics, named."""
    # Heuristic: profile_run's transient peak is the hidden states of max_num_batched_tokens tokens through
    # a block (~16 hidden-wide bf16 activations) plus fp32 logits and probabilities for max_num_seqs rows.
    act_bytes = dtype_bytes(r.model_dtype)
    activation = r.max_num_batched_tokens * arch.hidden_size * act_bytes * 16 + r.max_num_seqs * arch.vocab_size * 8
    # Heuristic: CUDA context growth after the snapshot (cuBLAS workspaces, attention buffers), NCCL at TP>1.
    non_torch = 512 * (1 << 20) + (256 * (1 << 20) if r.tp * r.pp > 1 else 0)
    # Heuristic: profile_cudagraph_memory, ~2 MiB per captured size (FULL_AND_PIECEWISE: two graphs each).
    graph_bytes = len(graphs.applied.sizes) * 2 * (1 << 20)
    terms = (("activation_peak", activation), ("non_torch", non_torch), ("cudagraphs", graph_bytes))
    assumptions = (
        "activation peak (heuristic) = max_num_batched_tokens x hidden x dtype x 16 + max_num_seqs x vocab x 8",
        "non-torch memory (heuristic) = 512 MiB, + 256 MiB NCCL buffers when TP x PP > 1",
        "CUDA-graph memory (heuristic) = 2 MiB per capture size (0 when eager / on CPU)",
    )
    return terms, assumptions


def _estimate_budget(
    arch: ModelArchitecture,
    r: Resolved,
    options: VllmOptions,
    device_total_bytes: int | None,
    weights_per_gpu_bytes: int | None,
    graphs: VllmGraphPlan,
) -> KVBudget:
    """requested - weights - activation peak - non-torch - CUDA graphs (Worker.determine_available_memory)."""
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if device_total_bytes is None:
        raise InputError("no KV budget: pin it (--kv-cache-memory / --kv-cache-memory-bytes) or give device memory")
    requested = math.ceil(device_total_bytes * util)
    assumptions = [f"requested = ceil(total x gpu_memory_utilization {util}) = {requested:,} B"]
    if weights_per_gpu_bytes is None:
        per_param = dtype_bytes(arch.dtype)
        weights = (arch.parameter_count or 0) * per_param // max(1, r.tp * r.pp)
        assumptions.append(f"weights unknown: parameter estimate x {per_param} B / (TP x PP)")
    else:
        weights = weights_per_gpu_bytes
    overhead, overhead_assumptions = runtime_overhead(arch, r, graphs)
    assumptions += overhead_assumptions
    if r.release.cublas_in_baseline:
        # 0.33 gpu_worker.init_device: cuBLAS handles exist before the start-up snapshot, so their memory is
        # baseline rather than growth after it; the non-torch heuristic above does not separate them.
        assumptions.append(f"vLLM {r.release.version} counts cuBLAS handles in its start-up baseline "
                           "(not separated in the non-torch heuristic)")
    activation, non_torch, graph_bytes = (value for _, value in overhead)
    budget = requested - weights - activation - non_torch - graph_bytes
    terms = (
        ("requested", requested),
        ("weights", weights),
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
) -> list[VllmRefusal]:
    """Worker start-up gates: CUDA free >= ceil(util x total); CPU pinned KV <= the node's available memory."""
    out: list[VllmRefusal] = []
    if device_total_bytes is None or device_free_bytes is None:
        return out
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
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
    return _estimate_budget(arch, r, options, device[0], weights_per_gpu_bytes, graphs), refusals
