"""vLLM's planning hooks (its EngineSpec's): the capacity model on resolved settings, its fallback on an
observed pool, the witness request, the KV-usage counting, and what its flags say about data parallelism.

Pure. The accounting modules load when a hook is first called, so that the registry stays cheap to import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from dspark.capacity import CapacitySummary
from dspark.capacity.result import CapacityDetail, CapacityInputs, CapacityResult
from dspark.core.errors import InputError, SettingsError
from dspark.core.findings import Finding, gib
from dspark.engines.spec import PlannerInput

if TYPE_CHECKING:
    from dspark.capacity.usage import KVCounting
    from dspark.engines.vllm.kv_types import CpuFeatures, VllmCapacity, VllmRefusal
    from dspark.engines.vllm.options import VllmOptions
    from dspark.engines.vllm.profile_trace import TraceAsk, TraceOutcome
    from dspark.hardware import GpuInfo
    from dspark.model.architecture import Drafter, ModelArchitecture
    from dspark.model.weights import WeightBytes

GIB = 1 << 30
# vLLM's CPU build: the runtime (torch, the engine process, its API server) beside the KV cache and weights.
CPU_RUNTIME_BYTES = 2 * GIB
# vLLM serve's batch default for GPUs of >= 70 GiB (EngineArgs.get_batch_defaults) unless set.
SERVE_MAX_NUM_BATCHED_TOKENS = 8192


def vllm_options(options: VllmOptions, s: CapacityInputs) -> VllmOptions:
    """The vLLM options the launch will pass: resolved settings win over the pasted flags."""
    spec = s.speculative
    overlay: dict[str, Any] = {
        "model": s.model,  # the path the engine sees (vLLM re-detects MTP methods from it)
        "max_num_seqs": s.max_num_seqs,
        "kv_cache_memory_bytes": s.kv_cache_memory_bytes,
        "max_model_len": s.max_model_len,
        "tensor_parallel_size": s.tensor_parallel_size,
        "pipeline_parallel_size": s.pipeline_parallel_size,
        "gpu_memory_utilization": s.engine_values.get("gpu_memory_utilization"),
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "enable_prefix_caching": s.enable_prefix_caching,
        "kv_cache_dtype": None if s.kv_cache_dtype == "auto" else s.kv_cache_dtype,
    }
    if spec is not None:
        overlay["speculative_method"] = options.speculative_method or spec.method
        overlay["speculative_model"] = options.speculative_model or spec.draft_model
    if s.num_speculative_tokens is not None:
        overlay["num_speculative_tokens"] = s.num_speculative_tokens
    elif spec is not None and options.num_speculative_tokens is None:
        overlay["num_speculative_tokens"] = spec.num_speculative_tokens
    return replace(options, **{k: v for k, v in overlay.items() if v is not None})


def _cpu_features(flags: tuple[str, ...] | None, arch: str | None) -> CpuFeatures | None:
    """vLLM's CPU-platform facts from the host's ISA flags; None (vLLM's model assumes AMX x86) when unknown."""
    if flags is None:
        return None
    from dspark.engines.vllm.kv_types import cpu_features_from_flags  # noqa: PLC0415

    return cpu_features_from_flags(flags, arch)


def capacity(arch: ModelArchitecture, options: VllmOptions, s: CapacityInputs, *, gpu: GpuInfo | None,
             weights: WeightBytes | None, drafter: Drafter | None, env: Mapping[str, str],
             cpu_flags: tuple[str, ...] | None = None, cpu_arch: str | None = None,
             version: str | None = None) -> CapacityResult:
    """vLLM's accounting with the resolved settings laid over the pasted engine flags.

    cpu_flags / cpu_arch: the host CPU, for the CPU build (vLLM picks kernels and state dtypes by them).
    """
    from dspark.engines.parallelism import parallel_finding  # noqa: PLC0415
    from dspark.engines.vllm.capacity import compute_vllm_capacity  # noqa: PLC0415 - only the engine in use is imported
    from dspark.engines.vllm.versions import MODELLED_VERSIONS  # noqa: PLC0415

    cpu = _cpu_features(cpu_flags, cpu_arch)
    platform: Literal["cpu", "cuda"] = s.platform
    opts = vllm_options(options, s)
    weights_per_gpu = weights.per_gpu_bytes if weights else None
    engine_env = {**s.recipe_env, **{k: v for k, v in env.items() if k.startswith("VLLM_")}}

    tracer = _activation_tracer(arch, gpu, env, version or MODELLED_VERSIONS[-1], platform)

    def at(options: VllmOptions, weights_bytes: int | None) -> VllmCapacity:
        return compute_vllm_capacity(
            arch, options, platform=platform,
            device_total_bytes=gpu.total_bytes if gpu else None,
            device_free_bytes=gpu.free_bytes if gpu else None,
            device_reserved_bytes=gpu.reserved_bytes if gpu else 0,
            compute_capability=gpu.compute_capability if gpu else None,
            weights_per_gpu_bytes=weights_bytes, drafter=drafter, environ=engine_env,
            device_name=gpu.name if gpu else None, cpu_features=cpu if platform == "cpu" else None,
            engine_version=version or MODELLED_VERSIONS[-1], activation_trace=tracer,
        )

    cap = at(opts, weights_per_gpu)
    refused_tp = parallel_finding("vLLM", cap.tensor_parallel_size, lambda size: _tp_problems(arch, size))
    findings = [*([refused_tp] if refused_tp else []), *_weights_fit(cap, weights, at, opts, arch),
                *(Finding("fail", r.code, r.message + _suggestion(r, cap, weights, at, opts, arch))
                  for r in (*cap.refusals, *cap.checks))]
    if cap.budget.source == "estimate":
        findings.append(Finding("info", "kv-budget-estimate",
                                "KV budget is an estimate (no pin): " + "; ".join(cap.budget.assumptions)))
    for note in cap.notes:
        findings.append(Finding("info", "engine-note", note))
    footprint = _footprint(cap, platform, weights_per_gpu)
    return CapacityResult(cap.summary(), tuple(findings), footprint, cap)


def _activation_tracer(arch: ModelArchitecture, gpu: GpuInfo | None, env: Mapping[str, str], version: str,
                       platform: str) -> Callable[[TraceAsk], TraceOutcome] | None:
    """With DSPARK_PROFILE_TRACE=1, the installed release's traced profile run for an eager CUDA estimate."""
    asked = env.get("DSPARK_PROFILE_TRACE", "").strip()
    if asked not in ("", "0", "1"):
        raise SettingsError(f"DSPARK_PROFILE_TRACE={asked!r} (environment): expected 1 (trace the engine's profile "
                            "run for an eager estimate) or 0 / unset (the heuristic); fix: unset it or set 1")
    if asked != "1" or platform != "cuda" or gpu is None:
        return None
    if gpu.compute_capability is None or not arch.source.endswith(".json"):
        return None
    from dspark.engines.vllm import profile_trace  # noqa: PLC0415 - only a plan that asks for it

    device = profile_trace.DeviceFacts(gpu.name, gpu.compute_capability, gpu.total_bytes,
                                       profile_trace.DEFAULT_SM_COUNT)
    return profile_trace.plan_tracer(arch.source, device, version, env)


def _weights_fit(cap: VllmCapacity, weights: WeightBytes | None, at: Any, opts: VllmOptions,
                 arch: ModelArchitecture) -> list[Finding]:
    """CUDA, KV estimated: the weights per GPU must fit beside the runtime, or vLLM has no memory left for a single
    cache block; when they do not, say by how much and the smallest tensor-parallel size whose plan starts.

    Weights that fit but leave too little for one max-length request are not this: vLLM loads them and then refuses
    the window (_check_enough_kv_cache_memory: "decrease max_model_len (estimated maximum ...)"), which is the
    engine's own refusal, said as vLLM says it (with the tensor-parallel size that would also start it).
    """
    if cap.platform != "cuda" or weights is None or cap.budget.source != "estimate":
        return []
    terms = dict(cap.budget.terms)
    runtime = terms["activation_peak"] + terms["non_torch"] + terms["cudagraphs"]
    room = terms["requested"] - runtime
    if weights.per_gpu_bytes <= room:
        return []
    tp = cap.tensor_parallel_size
    message = (
        f"{gib(weights.per_gpu_bytes)} of weights per GPU (TP={tp}) do not fit: "
        f"{gib(terms['requested'])} (gpu_memory_utilization x total) less {gib(runtime)} of runtime leaves "
        f"{gib(max(0, room))} for weights, {gib(weights.per_gpu_bytes - room)} short, and nothing for the KV cache"
    )
    wider = _wider_tp(cap, weights, at, opts, arch)
    message += f"; {wider}" if wider else "; no tensor-parallel size up to 64 makes it start on this GPU"
    return [Finding("fail", "weights-do-not-fit", message)]


def _wider_tp(cap: VllmCapacity, weights: WeightBytes, at: Any, opts: VllmOptions,
              arch: ModelArchitecture) -> str | None:
    """`--tp 2 would put ... and start with a pool of ...`: the smallest wider TP whose plan starts, or None."""
    tp = cap.tensor_parallel_size
    for size in (2, 4, 8, 16, 32, 64):
        if size <= tp or _tp_problems(arch, size):
            continue  # not wider, or a size vLLM refuses for this model's heads
        per_gpu = weights.per_gpu_bytes * tp // size  # TP shards the weights (a few replicated tensors aside)
        try:
            wider = at(replace(opts, tensor_parallel_size=size), per_gpu)
        except InputError:
            continue  # heads or experts that this size does not divide
        if wider.fits:
            return (f"--tp {size} would put about {gib(per_gpu)} of weights on each GPU "
                    f"and start with a pool of {wider.kv_pool_tokens:,} tokens")
    return None


def _tp_problems(arch: ModelArchitecture, size: int) -> list[str]:
    from dspark.engines.vllm.parallel import tp_problems  # noqa: PLC0415

    return tp_problems(arch, size)


def _suggestion(refusal: VllmRefusal, cap: VllmCapacity, weights: WeightBytes | None, at: Any,
                opts: VllmOptions, arch: ModelArchitecture) -> str:
    extra = []
    if refusal.suggested_max_model_len:
        extra.append(f"max_model_len ≤ {refusal.suggested_max_model_len:,} would fit")
        if refusal.code == "max_model_len_does_not_fit" and cap.platform == "cuda" and weights is not None:
            wider = _wider_tp(cap, weights, at, opts, arch)
            if wider:
                extra.append(f"or, keeping the window, {wider}")
    if refusal.suggested_max_num_seqs:
        extra.append(f"max_num_seqs ≤ {refusal.suggested_max_num_seqs} would fit")
    return f" ({'; '.join(extra)})" if extra else ""


def _footprint(cap: VllmCapacity, platform: str, weights: int | None) -> int:
    """Memory the engine holds per GPU once started: what its budget rests on, plus the KV pool."""
    if platform == "cpu":
        return int((weights or 0) + cap.budget.bytes + CPU_RUNTIME_BYTES)
    if cap.budget.source == "estimate":
        return int(dict(cap.budget.terms)["requested"])  # the engine sizes itself to utilization x total
    # Pinned: weights + pin + the activation / non-torch / graph memory the estimate would also count.
    return int((weights or 0) + cap.budget.bytes + cap.runtime_overhead_bytes)


def observed_capacity(s: CapacityInputs, arch: ModelArchitecture, gpu: GpuInfo | None, *, pool: int, window: int,
                      source: str, reason: str, engine_version: str) -> CapacitySummary:
    """The figures around an observed pool, where dspark does not reproduce vLLM's accounting for the model."""
    from dspark.capacity.seats import expert_coverage, safe_seats_full_window  # noqa: PLC0415
    from dspark.engines.vllm.graphs import vllm_capture_sizes  # noqa: PLC0415

    seats = s.max_num_seqs
    spec = s.speculative.num_speculative_tokens if s.speculative else 0
    batched = s.max_num_batched_tokens or SERVE_MAX_NUM_BATCHED_TOKENS
    graphs = vllm_capture_sizes(max_num_seqs=seats, num_speculative_tokens=spec, max_num_batched_tokens=batched,
                                compute_capability=gpu.compute_capability if gpu else None)
    concurrency = pool / window
    return CapacitySummary(
        engine="vllm", engine_version=engine_version, kv_pool_tokens=pool, max_concurrency=concurrency,
        max_model_len=window, kv_bytes_per_token=0, kv_budget_bytes=s.kv_cache_memory_bytes or 0,
        kv_budget_source="observed", kv_budget_assumptions=(f"pool observed: {source}",),
        cudagraph_max_capture_size=graphs.max_capture_size, cudagraph_capture_sizes=graphs.sizes,
        max_num_seqs=seats, safe_max_num_seqs=safe_seats_full_window(concurrency),
        avg_context_at_max_num_seqs=pool // seats,
        expert_coverage=(
            expert_coverage(arch.moe.num_experts, arch.moe.top_k, seats * (1 + spec)) if arch.moe else None
        ),
        details={"not_modelled": reason},
    )


def witness_request(detail: CapacityDetail, argv: Sequence[str], user_pinned: bool) -> PlannerInput:
    """vLLM's planner is handed the layers' specs and the budget dspark resolved."""
    del argv, user_pinned  # the planner reads neither: the specs carry the settings it takes
    from dspark.engines.vllm.kv_types import VllmCapacity  # noqa: PLC0415
    from dspark.engines.vllm.witness_input import WitnessNotPossibleError, vllm_witness_request  # noqa: PLC0415

    if not isinstance(detail, VllmCapacity) or not detail.engine_layers:
        return PlannerInput(None, "vLLM's planner is handed layer specs, and dspark builds none it can hand over "
                                  "for this model (its own cache layout, e.g. DeepSeek-V4's)")
    try:
        return PlannerInput(vllm_witness_request(detail))
    except WitnessNotPossibleError as exc:
        return PlannerInput(None, str(exc))


def kv_counting(capacity: CapacitySummary) -> KVCounting | None:
    """vLLM's kv_cache_usage_perc counting from the capacity's block groups; None when they are not exported."""
    from dspark.engines.vllm.kv_usage import vllm_counting  # noqa: PLC0415

    return vllm_counting(capacity.details)


def data_parallel(options: VllmOptions) -> tuple[int, bool]:
    """(DP size, DP attention): --data-parallel-size adds replicas of TP × PP GPUs each; no DP attention."""
    return int(options.data_parallel_size or 1), False


def drafter_flags(options: VllmOptions) -> tuple[str | None, str | None]:
    """(speculative method, draft model) as the pasted flags give them (--speculative-config's method, model)."""
    return options.speculative_method, options.speculative_model


