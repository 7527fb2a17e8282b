"""From resolved settings to one engine's capacity: overlay the settings on the engine options, call its model.

Pure: the GPU figures, weights and environment come in as arguments. Also says how much memory the engine
will hold per GPU (its footprint), which the memory checks compare with free memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dspark.capacity import CapacitySummary
from dspark.config.settings import ResolvedSettings
from dspark.core.errors import InputError
from dspark.core.findings import Finding
from dspark.hardware import GpuInfo
from dspark.model.architecture import Drafter, ModelArchitecture
from dspark.model.weights import WeightBytes
from dspark.planning.findings import gib

if TYPE_CHECKING:
    from dspark.config.recipes import Recipe

GIB = 1 << 30
# vLLM's CPU build: the runtime (torch, the engine process, its API server) beside the KV cache and weights.
CPU_RUNTIME_BYTES = 2 * GIB


@dataclass(frozen=True)
class CapacityResult:
    """An engine's figures, what it would refuse, and its memory footprint per GPU (None when unknown)."""

    summary: CapacitySummary
    findings: tuple[Finding, ...]
    footprint_bytes: int | None
    detail: Any  # VllmCapacity or SglangCapacity


def compute_capacity(
    engine: str,
    arch: ModelArchitecture,
    options: Any,
    settings: ResolvedSettings,
    recipe: Recipe | None,
    *,
    gpu: GpuInfo | None,
    weights: WeightBytes | None,
    drafter: Drafter | None,
    env: Mapping[str, str],
    cpu_flags: tuple[str, ...] | None = None,
    cpu_arch: str | None = None,
    engine_version: str | None = None,
) -> CapacityResult:
    """Dispatch to the engine's accounting with the resolved settings laid over the pasted engine flags.

    cpu_flags / cpu_arch: the host CPU, for CPU engines (vLLM picks kernels and state dtypes by them).
    """
    if engine not in _MODELS:
        raise InputError(f"no capacity model for engine {engine!r}", hint=f"use one of: {', '.join(_MODELS)}")
    return _MODELS[engine](arch, options, settings, recipe, gpu=gpu, weights=weights, drafter=drafter, env=env,
                           cpu=_cpu_features(cpu_flags, cpu_arch), version=engine_version)


def _vllm_options(options: Any, s: ResolvedSettings, recipe: Recipe | None) -> Any:
    """The vLLM options the launch will pass: resolved settings win over the pasted flags."""
    spec = recipe.speculative if recipe is not None else None
    overlay: dict[str, Any] = {
        "model": s.model.value,  # the path the engine sees (vLLM re-detects MTP methods from it)
        "max_num_seqs": s.max_num_seqs.value,
        "kv_cache_memory_bytes": s.kv_cache_memory_bytes.value,
        "max_model_len": s.max_model_len.value,
        "tensor_parallel_size": s.tensor_parallel_size.value,
        "pipeline_parallel_size": s.pipeline_parallel_size.value,
        "gpu_memory_utilization": s.gpu_memory_utilization.value,
        "max_num_batched_tokens": s.max_num_batched_tokens.value,
        "enable_prefix_caching": s.enable_prefix_caching.value,
        "kv_cache_dtype": None if s.kv_cache_dtype.value == "auto" else s.kv_cache_dtype.value,
    }
    if spec is not None:
        overlay["speculative_method"] = options.speculative_method or spec.method
        overlay["speculative_model"] = options.speculative_model or spec.draft_model
    if s.num_speculative_tokens.value is not None:
        overlay["num_speculative_tokens"] = s.num_speculative_tokens.value
    elif spec is not None and options.num_speculative_tokens is None:
        overlay["num_speculative_tokens"] = spec.num_speculative_tokens
    return replace(options, **{k: v for k, v in overlay.items() if v is not None})


def _cpu_features(flags: tuple[str, ...] | None, arch: str | None) -> Any:
    """vLLM's CPU-platform facts from the host's ISA flags; None (vLLM's model assumes AMX x86) when unknown."""
    if flags is None:
        return None
    from dspark.engines.vllm.capacity import cpu_features_from_flags  # noqa: PLC0415

    return cpu_features_from_flags(flags, arch)


def _vllm(arch: ModelArchitecture, options: Any, s: ResolvedSettings, recipe: Recipe | None, *, gpu: GpuInfo | None,
          weights: WeightBytes | None, drafter: Drafter | None, env: Mapping[str, str], cpu: Any,
          version: str | None) -> CapacityResult:
    from dspark.engines.vllm.capacity import compute_vllm_capacity  # noqa: PLC0415 - only the engine in use is imported
    from dspark.engines.vllm.versions import MODELLED_VERSIONS  # noqa: PLC0415

    platform: Literal["cpu", "cuda"] = "cpu" if s.platform.value == "cpu" else "cuda"
    opts = _vllm_options(options, s, recipe)
    weights_per_gpu = weights.per_gpu_bytes if weights else None
    engine_env = {**(recipe.env if recipe else {}), **{k: v for k, v in env.items() if k.startswith("VLLM_")}}

    def at(options: Any, weights_bytes: int | None) -> Any:
        return compute_vllm_capacity(
            arch, options, platform=platform,
            device_total_bytes=gpu.total_bytes if gpu else None,
            device_free_bytes=gpu.free_bytes if gpu else None,
            device_reserved_bytes=gpu.reserved_bytes if gpu else 0,
            compute_capability=gpu.compute_capability if gpu else None,
            weights_per_gpu_bytes=weights_bytes, drafter=drafter, environ=engine_env,
            device_name=gpu.name if gpu else None, cpu_features=cpu if platform == "cpu" else None,
            engine_version=version or MODELLED_VERSIONS[-1],
        )

    cap = at(opts, weights_per_gpu)
    findings = [*_weights_fit(cap, weights, at, opts),
                *(Finding("fail", r.code, r.message + _suggestion(r)) for r in (*cap.refusals, *cap.checks))]
    if cap.budget.source == "estimate":
        findings.append(Finding("info", "kv-budget-estimate",
                                "KV budget is an estimate (no pin): " + "; ".join(cap.budget.assumptions)))
    for note in cap.notes:
        findings.append(Finding("info", "engine-note", note))
    footprint = _vllm_footprint(cap, platform, weights_per_gpu)
    return CapacityResult(cap.summary(), tuple(findings), footprint, cap)


def _weights_fit(cap: Any, weights: WeightBytes | None, at: Any, opts: Any) -> list[Finding]:
    """CUDA, KV estimated: the weights per GPU must leave room for one max-length request's KV beside the
    runtime; when they do not, say by how much and the smallest tensor-parallel size whose plan starts."""
    if cap.platform != "cuda" or weights is None or cap.budget.source != "estimate":
        return []
    terms = dict(cap.budget.terms)
    runtime = terms["activation_peak"] + terms["non_torch"] + terms["cudagraphs"]
    one_request = cap.bytes_per_block * (cap.blocks_per_request + 1)  # + the null block
    room = terms["requested"] - runtime - one_request
    if weights.per_gpu_bytes <= room:
        return []
    tp = cap.tensor_parallel_size
    message = (
        f"{gib(weights.per_gpu_bytes)} of weights per GPU (TP={tp}) do not fit: "
        f"{gib(terms['requested'])} (gpu_memory_utilization x total) less {gib(runtime)} of runtime and "
        f"{gib(one_request)} of KV for one {cap.max_model_len:,}-token request leaves {gib(max(0, room))} for "
        f"weights, {gib(weights.per_gpu_bytes - room)} short"
    )
    for size in (2, 4, 8, 16, 32, 64):
        if size <= tp:
            continue
        per_gpu = weights.per_gpu_bytes * tp // size  # TP shards the weights (a few replicated tensors aside)
        try:
            wider = at(replace(opts, tensor_parallel_size=size), per_gpu)
        except InputError:
            continue  # heads or experts that this size does not divide
        if wider.fits:
            message += (f"; --tp {size} would put about {gib(per_gpu)} of weights on each GPU "
                        f"and start with a pool of {wider.kv_pool_tokens:,} tokens")
            break
    else:
        message += "; no tensor-parallel size up to 64 makes it start on this GPU"
    return [Finding("fail", "weights-do-not-fit", message)]


def _suggestion(refusal: Any) -> str:
    extra = []
    if getattr(refusal, "suggested_max_model_len", None):
        extra.append(f"max_model_len ≤ {refusal.suggested_max_model_len:,} would fit")
    if getattr(refusal, "suggested_max_num_seqs", None):
        extra.append(f"max_num_seqs ≤ {refusal.suggested_max_num_seqs} would fit")
    return f" ({'; '.join(extra)})" if extra else ""


def _vllm_footprint(cap: Any, platform: str, weights: int | None) -> int:
    """Memory the engine holds per GPU once started: what its budget rests on, plus the KV pool."""
    if platform == "cpu":
        return int((weights or 0) + cap.budget.bytes + CPU_RUNTIME_BYTES)
    if cap.budget.source == "estimate":
        return int(dict(cap.budget.terms)["requested"])  # the engine sizes itself to utilization x total
    # Pinned: weights + pin + the activation / non-torch / graph memory the estimate would also count.
    return int((weights or 0) + cap.budget.bytes + cap.runtime_overhead_bytes)


def _sglang(arch: ModelArchitecture, options: Any, s: ResolvedSettings, recipe: Recipe | None, *,
            gpu: GpuInfo | None, weights: WeightBytes | None, drafter: Drafter | None, env: Mapping[str, str],
            cpu: Any, version: str | None) -> CapacityResult:
    del env, cpu  # SGLang sizes from its own flags and the GPU; no CPU build is modelled
    from dspark.engines.sglang.capacity import compute_sglang_capacity  # noqa: PLC0415
    from dspark.engines.sglang.options import sglang_speculative_flags  # noqa: PLC0415
    from dspark.engines.sglang.versions import MODELLED_VERSIONS as SGLANG_VERSIONS  # noqa: PLC0415

    spec = recipe.speculative if recipe is not None else None
    overlay: dict[str, Any] = {
        "max_running_requests": s.max_num_seqs.value,
        "max_total_tokens": s.max_total_tokens.value,
        "context_length": s.max_model_len.value,
        "tp_size": s.tensor_parallel_size.value,
        "mem_fraction_static": s.mem_fraction_static.value,
        "chunked_prefill_size": s.max_num_batched_tokens.value,
        "kv_cache_dtype": None if s.kv_cache_dtype.value == "auto" else s.kv_cache_dtype.value,
    }
    if s.enable_prefix_caching.value is False:
        overlay["disable_radix_cache"] = True
    if spec is not None and getattr(options, "speculative_algorithm", None) is None:
        overlay["speculative_algorithm"] = {"mtp": "NEXTN"}.get(spec.method, spec.method.upper())
        proposed = s.num_speculative_tokens.value or spec.num_speculative_tokens
        overlay.update(sglang_speculative_flags(spec.method, proposed))
        if spec.draft_model:
            overlay["speculative_draft_model_path"] = spec.draft_model
    fields = {f.name for f in dataclasses.fields(options)}
    opts = replace(options, **{k: v for k, v in overlay.items() if v is not None and k in fields})
    weights_per_gpu = weights.per_gpu_bytes if weights else None
    cap = compute_sglang_capacity(
        arch, opts,
        gpu_capacity_bytes=gpu.total_bytes if gpu else None,
        free_before_load_bytes=gpu.free_bytes if gpu else None,
        weights_per_gpu_bytes=weights_per_gpu, drafter=drafter,
        compute_capability=gpu.compute_capability if gpu else None,
        engine_version=version or SGLANG_VERSIONS[-1],
    )
    findings = [Finding("fail", r.code, r.message) for r in getattr(cap, "refusals", ())]
    for note in getattr(cap, "notes", ()):
        findings.append(Finding("info", "engine-note", note))
    summary = cap.summary()
    footprint = getattr(cap, "footprint_bytes", None)
    if footprint is None and gpu is not None and getattr(cap, "mem_fraction_static", None) is not None:
        # SGLang holds mem_fraction_static of the free memory it saw at start (weights + pools), plus activations.
        footprint = int(gpu.free_bytes * cap.mem_fraction_static)
    if footprint is not None:
        findings.append(Finding("info", "footprint", f"engine footprint per GPU ≈ {gib(footprint)}"))
    return CapacityResult(summary, tuple(findings), footprint, cap)


# Each engine's capacity model, by its registry name (dspark.engines.ENGINE_NAMES).
_MODELS: dict[str, Callable[..., CapacityResult]] = {"vllm": _vllm, "sglang": _sglang}
