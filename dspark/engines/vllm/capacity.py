"""vLLM's KV-cache accounting as vllm 0.32.0 computes it (pure: same inputs, same numbers, no I/O).

The figures are the engine's own boot-log line, predicted before launch:
  "{CPU|GPU} KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx"
(kv_cache_utils.update_kv_cache_capacity). The steps follow the engine's order, each citing the
0.32.0 function it mirrors:
  1. settings: EngineArgs defaults (arg_utils.get_batch_defaults, _set_default_*), the platform hook
     (platforms/cpu.py CpuPlatform.check_and_update_config: block size 128, MLA, SSM dtype, the
     VLLM_CPU_KVCACHE_SPACE pin), hybrid mode (models/config.py MambaModelConfig);
  2. block size for hybrids (platforms/interface.py Platform._align_hybrid_block_size);
  3. one KV-cache spec per layer (kv_cache_interface.py page_size_bytes; layers' get_kv_cache_spec);
  4. groups (kv_cache_utils.get_kv_cache_groups), bytes per block, num_blocks from the KV budget;
  5. the admission check and auto-fit (get_kv_cache_configs, _check_enough_kv_cache_memory);
  6. concurrency and pool (get_max_concurrency_for_kv_cache_config, get_kv_cache_capacity).
Modules: resolve (1), layer_specs (2-3), groups (4-5), budget (the KV budget), kv_types (the values);
versions names what each modelled release does differently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from dspark.core.errors import InputError
from dspark.engines.vllm.budget import kv_budget, runtime_overhead, startup_checks
from dspark.engines.vllm.deepseek_v4_detect import is_deepseek_v4
from dspark.engines.vllm.graphs import CaptureSizeError, VllmGraphPlan, vllm_graph_plan
from dspark.engines.vllm.groups import fit_blocks
from dspark.engines.vllm.kv_types import (
    CpuFeatures,
    KVBudget,
    KVGroup,
    LayerSpec,
    Platform,
    VllmCapacity,
    VllmNotModelledError,
    VllmRefusal,
    cpu_features_from_flags,
    format_gib,
    kv_cache_line,
)
from dspark.engines.vllm.layer_specs import (
    align_hybrid,
    engine_layer_specs,
    final_specs,
    prefill_lookahead_tokens,
)
from dspark.engines.vllm.options import VllmOptions
from dspark.engines.vllm.resolve import (
    Resolved,
    async_scheduling,
    max_concurrent_batches,
    max_in_flight,
    model_runner,
    resolve,
)
from dspark.engines.vllm.versions import MODELLED_VERSIONS, RELEASES
from dspark.model.architecture import (
    AttentionLayer,
    Drafter,
    ModelArchitecture,
)

if TYPE_CHECKING:
    from dspark.engines.vllm.profile_trace import TraceAsk, TraceOutcome


def _mamba_seats_refusal(max_num_seqs: int, num_blocks: int) -> VllmRefusal:
    """CompilationConfig (FULL decode graphs, mamba layers): one state block per decoding sequence."""
    return VllmRefusal(
        "max_num_seqs_over_mamba_blocks",
        f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({num_blocks}). Each decode "
        "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
        f"max_num_seqs to at most {num_blocks} or increase gpu_memory_utilization.",
        suggested_max_num_seqs=num_blocks,
    )


def _cpu_attention_refusal(arch: ModelArchitecture, kv_cache_dtype: str, cpu: CpuFeatures) -> VllmRefusal | None:
    """What the CPU build's attention raises once the pool is sized (cpu_attn.py: _get_attn_isa, 0.32), where
    releases without the config-time check (0.33's cpu_checks_kv_dtype) print their KV line first."""
    quantized = kv_cache_dtype.startswith("fp8") or kv_cache_dtype.endswith("per_token_head")  # is_quantized_kv_cache
    if arch.uses_mla or not quantized:
        return None  # MLA runs CPU_MLA, which never asks for an attention ISA
    head_size = next((layer.head_dim for layer in arch.layers if isinstance(layer, AttentionLayer)), None)
    if head_size is not None and head_size % 32 != 0 and head_size % 16 == 0:
        return VllmRefusal("cpu_kv_cache_dtype", "FP8 KV cache requires head_size divisible by 32 on CPU "
                           f"(head_size {head_size}): use --kv-cache-dtype auto for this model.")
    if not (cpu.amx or cpu.avx512):
        return VllmRefusal("cpu_kv_cache_dtype", "FP8 KV cache on CPU requires x86 with AVX-512 or AMX (this host "
                           "has neither): use --kv-cache-dtype auto here, or an x86 host with AVX-512 or AMX.")
    return None


def _traced_budget(budget: KVBudget, trace: Callable[[TraceAsk], TraceOutcome], r: Resolved,
                   graphs: VllmGraphPlan, notes: list[str]) -> tuple[KVBudget, int]:
    """The estimate on the traced activation peak where it applies (profile_trace.apply_trace); what it lost."""
    from dspark.engines.vllm.profile_trace import TraceAsk, apply_trace  # noqa: PLC0415 - asked-for plans only

    ask = TraceAsk(r.max_num_batched_tokens, r.max_num_seqs, r.max_model_len, r.model_dtype, r.kv_cache_dtype)
    traced, lost, words = apply_trace(budget, trace, ask, compiled=graphs.compiled, parallel=r.tp * r.pp,
                                      speculative=r.spec_method is not None)
    if traced is budget:
        notes.append(words)  # why the heuristic stands (the traced figure's words are among the assumptions)
    return traced, lost


def compute_vllm_capacity(
    arch: ModelArchitecture,
    options: VllmOptions,
    *,
    platform: Literal["cpu", "cuda"],
    device_total_bytes: int | None,
    device_free_bytes: int | None,
    compute_capability: tuple[int, int] | None,
    weights_per_gpu_bytes: int | None,
    drafter: Drafter | None = None,
    engine_version: str = MODELLED_VERSIONS[-1],
    environ: Mapping[str, str] | None = None,
    cpu_features: CpuFeatures | None = None,
    device_name: str | None = None,
    usage_context: Literal["serve", "llm"] = "serve",
    cuda_runtime_major: int | None = None,
    device_reserved_bytes: int = 0,
    activation_trace: Callable[[TraceAsk], TraceOutcome] | None = None,
) -> VllmCapacity:
    """vLLM's KV pool, Maximum concurrency, blocks, groups and refusals for one launch, as `engine_version` does.

    environ: the engine's environment (VLLM_CPU_KVCACHE_SPACE, VLLM_ALLOW_LONG_MAX_MODEL_LEN,
    VLLM_USE_V2_MODEL_RUNNER); cpu_features defaults to an AMX + AVX512-BF16 x86 host; usage_context
    "serve" is `vllm serve` (OPENAI_API_SERVER defaults), "llm" the offline LLM class; cuda_runtime_major
    is torch's CUDA major (0.33 picks its GDN prefill kernel by it; None: assumed >= 13, said in the notes);
    device_reserved_bytes is the driver's reservation (NVML v2), which the total CUDA reports leaves out.
    activation_trace: the installed release's traced profile run (profile_trace.plan_tracer), used for an
    eager single-rank CUDA estimate in place of the activation heuristic.
    Raises VllmNotModelledError for accounting dspark does not reproduce, InputError for bad input.
    """
    if engine_version not in RELEASES:
        raise VllmNotModelledError(
            f"vLLM {engine_version}: only {', '.join(MODELLED_VERSIONS)} are modelled",
            hint="plan for a modelled version (--engine-version) or let the installed engine's planner judge",
        )
    rel = RELEASES[engine_version]
    env = dict(environ or {})
    cpu = cpu_features or CpuFeatures()
    r = resolve(
        arch, options, platform, (device_total_bytes, device_name), compute_capability, drafter, env, cpu,
        usage_context, rel, cuda_runtime_major,
    )
    notes = list(r.notes)
    if platform == "cpu" and cpu_features is None:
        notes.append("CPU features assumed: x86 with AMX and AVX512-BF16")
    hybrid = align_hybrid(arch, r) if arch.is_hybrid else None
    block = hybrid.block_size if hybrid else r.block_size
    if hybrid and hybrid.note:
        notes.append(hybrid.note)
    if hybrid and hybrid.mode == "align" and not r.chunked_prefill:
        raise InputError("Chunked prefill is required for mamba cache mode 'align' (prefix caching on a hybrid)")

    runner = model_runner(platform, r.spec_method, env, rel, arch)
    graphs = _graphs(r, options, platform, compute_capability, runner)
    budget, refusals = kv_budget(
        arch, r, options, env, (device_total_bytes, device_free_bytes), weights_per_gpu_bytes, graphs, runner,
        device_reserved_bytes,
    )
    traced_lost = 0
    if activation_trace is not None and platform == "cuda" and budget.source == "estimate" and budget.terms:
        budget, traced_lost = _traced_budget(budget, activation_trace, r, graphs, notes)
    checks = startup_checks(r, options, budget, device_total_bytes, device_free_bytes, device_reserved_bytes)
    in_flight = max_in_flight(platform, r, runner)
    batches = max_concurrent_batches(platform, r, runner)
    # What sliding-window / chunked-local admission counts: the in-flight tokens, or (0.25) one batch's.
    admitted = in_flight if rel.admission_counts_in_flight else r.max_num_batched_tokens
    context_bytes: int | None = None
    if is_deepseek_v4(arch):  # its own caches and block-outermost packing (engines/vllm/deepseek_v4.py)
        from dspark.engines.vllm.deepseek_v4_fit import deepseek_v4_fit  # noqa: PLC0415 - only this model's plans

        specs, fit, context_bytes = deepseek_v4_fit(arch, r, options, budget.bytes, admitted, engine_version)
    else:
        specs = final_specs(arch, r, options, hybrid, block)
        fit = fit_blocks(specs, r, options, budget.bytes, admitted, arch.num_layers)
    # Config-time refusals (method re-detection, an invalid VLLM_CPU_KVCACHE_SPACE) stop the engine before
    # it sizes anything; only without them do the KV checks speak.
    refusals = [*r.refusals, *refusals] or fit.refusals
    notes += fit.notes

    per_request = sum(g.blocks_per_request for g in fit.groups)
    max_concurrency = fit.num_blocks / per_request  # get_max_concurrency_for_kv_cache_config
    pool = int(max_concurrency * fit.max_model_len)  # get_kv_cache_capacity
    line = None
    if not refusals and not checks:
        line = kv_cache_line(platform, pool, fit.max_model_len, max_concurrency)
    if platform == "cpu" and not rel.cpu_checks_kv_dtype and not refusals:
        late = _cpu_attention_refusal(arch, r.kv_cache_dtype, cpu)  # raised after the KV line
        if late is not None:
            refusals.append(late)
    if platform == "cuda" and hybrid is not None and graphs.applied.sizes and r.max_num_seqs > fit.num_blocks:
        refusals.append(_mamba_seats_refusal(r.max_num_seqs, fit.num_blocks))  # raised after the KV line

    return VllmCapacity(
        engine_version=engine_version,
        platform=platform,
        max_model_len=fit.max_model_len,
        max_model_len_source=r.max_model_len_source,
        max_num_seqs=r.max_num_seqs,
        max_num_batched_tokens=r.max_num_batched_tokens,
        tensor_parallel_size=r.tp,
        pipeline_parallel_size=r.pp,
        block_size=block,
        kv_cache_dtype=r.kv_cache_dtype,
        enable_prefix_caching=r.prefix_caching,
        enable_chunked_prefill=r.chunked_prefill,
        mamba_cache_mode=hybrid.mode if hybrid else None,
        mamba_block_size=hybrid.mamba_block_size if hybrid else None,
        mamba_state_dtypes=(hybrid.state.conv_dtype, hybrid.state.ssm_dtype) if hybrid else None,
        mamba_page_bytes=hybrid.state.page_bytes if hybrid else None,
        mamba_page_padded_bytes=hybrid.padded_page if hybrid else None,
        speculative_method=r.spec_method,
        num_speculative_tokens=r.num_spec,
        layers=tuple(specs),
        groups=tuple(fit.groups),
        bytes_per_block=fit.bytes_per_block,
        budget=budget,
        num_blocks=fit.num_blocks,
        blocks_per_request=per_request,
        max_concurrency=max_concurrency,
        kv_pool_tokens=pool,
        kv_line=line,
        graphs=graphs,
        refusals=tuple(refusals),
        checks=tuple(checks),
        notes=tuple(notes),
        moe=(arch.moe.num_experts, arch.moe.top_k) if arch.moe else None,
        runtime_overhead_bytes=(
            sum(v for _, v in runtime_overhead(arch, r, graphs, runner)[0]) + traced_lost if platform == "cuda" else 0
        ),
        context_bytes_per_token=context_bytes,
        engine_layers=() if is_deepseek_v4(arch) else tuple(engine_layer_specs(arch, r, hybrid, block)),
        prefill_lookahead_tokens=prefill_lookahead_tokens(arch, r),
        max_in_flight_tokens=in_flight,
        async_scheduling=async_scheduling(platform, r, runner),
        max_concurrent_batches=batches,
        auto_fit=r.auto_fit,
        engine_max_model_len=r.max_model_len,
        model_layers=arch.num_layers,
        disable_hybrid_kv_cache_manager=bool(options.disable_hybrid_kv_cache_manager),
        num_gpu_blocks_override=options.num_gpu_blocks_override,
    )


def _graphs(
    r: Resolved,
    options: VllmOptions,
    platform: Platform,
    compute_capability: tuple[int, int] | None,
    runner: Literal["v1", "v2"],
) -> VllmGraphPlan:
    """The capture plan (dspark.engines.vllm.graphs) for the resolved seats, spec tokens and prefill budget."""
    try:
        return vllm_graph_plan(
            platform=platform,
            enforce_eager=bool(options.enforce_eager),
            max_num_seqs=r.max_num_seqs,
            num_speculative_tokens=r.num_spec,
            max_num_batched_tokens=r.max_num_batched_tokens,
            compute_capability=compute_capability,
            performance_mode=options.performance_mode or "balanced",
            max_cudagraph_capture_size=options.max_cudagraph_capture_size,
            cudagraph_capture_sizes=options.cudagraph_capture_sizes,
            cudagraph_mode=options.cudagraph_mode,
            model_runner=runner,
            add_uniform_decode=r.release.capture_sizes_add_uniform_decode,
            blackwell_ceiling=r.release.blackwell_capture_ceiling,
        )
    except CaptureSizeError as exc:
        raise InputError(f"CUDA-graph settings vLLM would refuse: {exc}") from None


__all__ = [
    "CpuFeatures",
    "KVBudget",
    "KVGroup",
    "LayerSpec",
    "VllmCapacity",
    "VllmNotModelledError",
    "VllmRefusal",
    "compute_vllm_capacity",
    "cpu_features_from_flags",
    "format_gib",
    "kv_cache_line",
]
