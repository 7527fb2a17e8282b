"""SGLang's planning hooks (its EngineSpec's): the capacity model on resolved settings, the witness request, the
KV-usage counting, and what its flags say about data parallelism.

Pure. The sizing modules load when a hook is first called, so that the registry stays cheap to import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark.capacity.result import CapacityDetail, CapacityInputs, CapacityResult
from dspark.core.findings import Finding, gib
from dspark.engines.spec import PlannerInput

if TYPE_CHECKING:
    from dspark.capacity import CapacitySummary
    from dspark.capacity.usage import KVCounting
    from dspark.engines.sglang.options import SglangOptions
    from dspark.hardware import GpuInfo
    from dspark.model.architecture import Drafter, ModelArchitecture
    from dspark.model.weights import WeightBytes


def sglang_options(options: SglangOptions, s: CapacityInputs) -> SglangOptions:
    """The SGLang options the launch will pass: resolved settings win over the pasted flags."""
    from dspark.engines.sglang.options import sglang_speculative_flags  # noqa: PLC0415

    spec = s.speculative
    overlay: dict[str, Any] = {
        "max_running_requests": s.max_num_seqs,
        "max_total_tokens": s.engine_values.get("max_total_tokens"),
        "context_length": s.max_model_len,
        "tp_size": s.tensor_parallel_size,
        "mem_fraction_static": s.engine_values.get("mem_fraction_static"),
        "chunked_prefill_size": s.max_num_batched_tokens,
        "kv_cache_dtype": None if s.kv_cache_dtype == "auto" else s.kv_cache_dtype,
    }
    if s.enable_prefix_caching is False:
        overlay["disable_radix_cache"] = True
    if spec is not None and options.speculative_algorithm is None:
        overlay["speculative_algorithm"] = {"mtp": "NEXTN"}.get(spec.method, spec.method.upper())
        proposed = s.num_speculative_tokens or spec.num_speculative_tokens
        overlay.update(sglang_speculative_flags(spec.method, proposed))
        if spec.draft_model:
            overlay["speculative_draft_model_path"] = spec.draft_model
    fields = {f.name for f in dataclasses.fields(options)}
    return replace(options, **{k: v for k, v in overlay.items() if v is not None and k in fields})


def capacity(arch: ModelArchitecture, options: SglangOptions, s: CapacityInputs, *, gpu: GpuInfo | None,
             weights: WeightBytes | None, drafter: Drafter | None, env: Mapping[str, str],
             cpu_flags: tuple[str, ...] | None = None, cpu_arch: str | None = None,
             version: str | None = None) -> CapacityResult:
    """SGLang's sizing with the resolved settings laid over the pasted engine flags."""
    del env, cpu_flags, cpu_arch  # SGLang sizes from its own flags and the GPU; no CPU build is modelled
    from dspark.engines.sglang.capacity import compute_sglang_capacity  # noqa: PLC0415
    from dspark.engines.sglang.versions import MODELLED_VERSIONS  # noqa: PLC0415

    opts = sglang_options(options, s)
    weights_per_gpu = weights.per_gpu_bytes if weights else None
    cap = compute_sglang_capacity(
        arch, opts,
        gpu_capacity_bytes=gpu.total_bytes if gpu else None,
        free_before_load_bytes=gpu.free_bytes if gpu else None,
        weights_per_gpu_bytes=weights_per_gpu, drafter=drafter,
        compute_capability=gpu.compute_capability if gpu else None,
        engine_version=version or MODELLED_VERSIONS[-1],
        kv_cache_memory_bytes=s.kv_cache_memory_bytes,  # SGLang's own pin: the tokens that budget buys
    )
    from dspark.engines.parallelism import parallel_finding  # noqa: PLC0415
    from dspark.engines.sglang.parallel import tp_problems  # noqa: PLC0415

    dp, dp_attention = data_parallel(opts)
    attn_tp = max(1, int(opts.tp_size or 1) // dp) if dp_attention else int(opts.tp_size or 1)
    refused_tp = parallel_finding("SGLang", attn_tp, lambda size: tp_problems(arch, size))
    findings = [*([refused_tp] if refused_tp else []), *(Finding("fail", r.code, r.message) for r in cap.refusals)]
    for note in cap.notes:
        findings.append(Finding("info", "engine-note", note))
    summary = cap.summary()
    footprint = cap.footprint_bytes
    if footprint is None and gpu is not None:
        # SGLang holds mem_fraction_static of the free memory it saw at start (weights + pools), plus activations.
        footprint = int(gpu.free_bytes * cap.mem_fraction_static)
    if footprint is not None:
        findings.append(Finding("info", "footprint", f"engine footprint per GPU ≈ {gib(footprint)}"))
    return CapacityResult(summary, tuple(findings), footprint, cap)


def witness_request(detail: CapacityDetail, argv: Sequence[str], user_pinned: bool) -> PlannerInput:
    """SGLang's sizing is handed its launch flags (the parser's part of the plan) and the memory readings; it
    reads the model directory, which must exist here."""
    from dspark.engines.sglang.options import parse_sglang_flags  # noqa: PLC0415
    from dspark.engines.sglang.sizing_types import SglangCapacity  # noqa: PLC0415
    from dspark.engines.sglang.witness_input import WitnessNotPossibleError, sglang_witness_request  # noqa: PLC0415

    flags = list(argv)
    model = parse_sglang_flags(flags).model_path
    if model is None or not (Path(model) / "config.json").is_file():
        return PlannerInput(None, f"SGLang's sizing reads config.json from the model directory, and {model!r} is "
                                  "not a local directory with one (a recipe's inline config, or a hub name not "
                                  "downloaded): point --model at a local copy")
    if not isinstance(detail, SglangCapacity):
        return PlannerInput(None, "dspark computed no SGLang sizing for the witness to check")
    try:
        return PlannerInput(sglang_witness_request(detail, flags, user_pinned=user_pinned))
    except WitnessNotPossibleError as exc:
        return PlannerInput(None, f"SGLang's sizing cannot be run: {exc}")


def kv_counting(capacity: CapacitySummary) -> KVCounting | None:
    """SGLang's token_usage counting from the capacity's page size and Mamba pool."""
    from dspark.engines.sglang.kv_usage import sglang_counting  # noqa: PLC0415

    return sglang_counting(capacity.details, capacity.kv_pool_tokens)


def data_parallel(options: SglangOptions) -> tuple[int, bool]:
    """(DP size, DP attention): --dp-size adds replicas of TP × PP GPUs each, unless --enable-dp-attention runs
    the DP ranks inside the TP group (no extra GPUs)."""
    return int(options.dp_size or 1), "--enable-dp-attention" in options.unknown


def drafter_flags(options: SglangOptions) -> tuple[str | None, str | None]:
    """(speculative method, draft model): --speculative-algorithm and --speculative-draft-model-path."""
    return options.speculative_algorithm, options.speculative_draft_model_path


