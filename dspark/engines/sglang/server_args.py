"""SGLang server arguments as its resolution pipeline settles them (page size, speculative sizes, limits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dspark.engines.sglang.options import SglangOptions
from dspark.engines.sglang.server_defaults import (
    decode_graph_batch_sizes,
    default_mem_fraction_static,
    gpu_memory_defaults,
    kv_storage,
    prefill_graph_batch_sizes,
    prefill_graph_reserve_mib,
    speculative_params,
    vlm_mem_fraction,
)
from dspark.engines.sglang.sizing_types import (
    DEFAULT_MAX_PREFILL_TOKENS,
    DRAFT_PATH_FROM_TARGET_ARCHS,
    EAGLE_FAMILY,
    MLA_PREFILL_GRAPH_MAX_TOKENS,
    MULTIMODAL_OFF_BY_DEFAULT,
    PP_PREFILL_GRAPH_MAX_TOKENS,
    PREFILL_GRAPH_OFF_ARCHS,
    QWEN3_5_HYBRID_ARCHS,
    SGLANG_MULTIMODAL_ARCHS,
    SPEC_DEFAULT_MAX_RUNNING_REQUESTS,
    VLM_CACHE_SIZE_MB,
    PrefillGraph,
    SglangRefusal,
)
from dspark.model.architecture import (
    Drafter,
    MLALayer,
    ModelArchitecture,
    dtype_bytes,
)


def _sm100_default_backend(arch: ModelArchitecture, o: SglangOptions) -> str:
    """The attention backend SGLang picks on SM100 when none is given (page-size relevant ones only)."""
    first = next((layer for layer in arch.layers if isinstance(layer, MLALayer)), None)
    if first is not None:
        # model_overrides/deepseek_v2.py: DeepSeek V3/R1 (not DSA) take trtllm_mla; other MLA take flashinfer.
        return "trtllm_mla" if arch.architecture == "DeepseekV3ForCausalLM" else "flashinfer"
    # get_default_attn_backend, MHA on SM100 (is_no_spec_infer_or_topk_one reads the raw flags).
    topk = o.speculative_eagle_topk
    no_spec_or_topk_one = topk is None or (topk == 1 and o.page_size in (None, 1))
    algorithm = (o.speculative_algorithm or "").upper()
    trtllm = no_spec_or_topk_one and (not algorithm or topk is not None or algorithm == "DFLASH")
    if arch.architecture in QWEN3_5_HYBRID_ARCHS:
        # Triton unless trtllm_mha can serve: it cannot with the radix cache, no extra buffer and no speculation.
        extra_buffer = not o.disable_radix_cache and o.mamba_radix_cache_strategy in (
            "extra_buffer",
            "extra_buffer_lazy",
        )
        plain_radix = not extra_buffer and not o.disable_radix_cache and not algorithm
        return "trtllm_mha" if trtllm and not plain_radix else "triton"
    return "trtllm_mha" if trtllm else "flashinfer"


def resolve_page_size(arch: ModelArchitecture, o: SglangOptions, capability: tuple[int, int] | None) -> int:
    """--page-size after SGLang's defaults and backend constraints (overrides._mla_backend_page_constraints)."""
    mla = next((layer for layer in arch.layers if isinstance(layer, MLALayer)), None)
    if mla is not None and mla.index_head_dim is not None:
        return 64  # model_overrides/deepseek_v2.py: DeepSeek DSA on CUDA, 64 * index_kpool (kpool 1)
    page = o.page_size or 1
    backend = o.attention_backend
    sm100 = capability is not None and capability[0] == 10
    if backend is None and sm100:
        backend = _sm100_default_backend(arch, o)
        if arch.architecture in QWEN3_5_HYBRID_ARCHS:
            return 64 if backend == "trtllm_mha" else 1  # the override sets page_size itself
    if backend == "flashmla":
        return 64
    if backend in ("trtllm_mla", "cutedsl_mla") and page not in (32, 64):
        return 64
    if backend == "trtllm_mha" and page not in (16, 32, 64, 128):
        return 64
    return page


@dataclass(frozen=True)
class ResolvedArgs:
    """The server arguments after SGLang's resolution pipeline, as far as sizing reads them."""

    tp: int
    pp: int
    context_len: int
    gpu_mib: float | None
    chunked: int
    fraction: float
    fraction_source: Literal["flag", "default"]
    reserved: float | None
    graphs_on: bool
    prefill_graph: PrefillGraph
    decode_max_bs: int
    decode_bs: tuple[int, ...]
    algorithm: str | None
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    requested_mrr: int | None
    page_size: int
    kv_dtype: str
    kv_elem: int
    kv_explicit: bool
    draft_layers: int | None
    sm100: bool  # compute capability 10.x: DSA's default prefill/decode backends are trtllm
    mm_reservation_gib: float = 0.0  # kv_cache_configurator.mm_runtime_reservation_gb, out of the KV budget


def _resolve_speculative(
    arch: ModelArchitecture, o: SglangOptions, drafter: Drafter | None, run: SizingRun
) -> tuple[str | None, int | None, int | None, int | None, int | None]:
    """(algorithm, steps, topk, draft tokens, max_running_requests): speculative_hook.handle_speculative_decoding."""
    algorithm = o.speculative_algorithm.upper() if o.speculative_algorithm else None
    if algorithm == "NEXTN":
        algorithm = "EAGLE"  # _resolve_speculative_algorithm_alias
    steps, topk, draft = o.speculative_num_steps, o.speculative_eagle_topk, o.speculative_num_draft_tokens
    mrr = o.max_running_requests
    if algorithm is None:
        return None, None, None, None, mrr
    if mrr is None:
        mrr = SPEC_DEFAULT_MAX_RUNNING_REQUESTS
    if algorithm in EAGLE_FAMILY:
        if steps is not None and topk is None:
            run.fatal(
                "sglang-speculative-args",
                "TypeError: '>' not supported between instances of 'NoneType' and 'int' (_handle_eagle_family: "
                "--speculative-num-steps without --speculative-eagle-topk)",
            )
            return algorithm, steps, topk, draft, mrr
        if steps is None:
            if topk is not None or draft is not None:
                run.fatal(
                    "sglang-speculative-args",
                    "AssertionError: (_handle_eagle_family) --speculative-eagle-topk and "
                    "--speculative-num-draft-tokens must stay unset when --speculative-num-steps is unset",
                )
            steps, topk, draft = speculative_params(algorithm, arch.architecture)
        if topk == 1:
            draft = steps + 1  # "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1"
    elif algorithm == "DFLASH":
        if o.speculative_draft_model_path is None:
            run.fatal(
                "sglang-speculative-args",
                "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
            )
        steps, topk = 1, 1  # _handle_dflash forces both to 1
        if draft is None:  # the draft config's block_size, else 16
            draft = drafter.block_size if drafter is not None and drafter.block_size else 16
    else:
        run.notes.append(f"speculative algorithm {algorithm}: its state and KV terms are not modelled")
    return algorithm, steps, topk, draft, mrr


def resolve_prefill_graph(
    arch: ModelArchitecture, o: SglangOptions, *, chunked: int, pp: int, capability: tuple[int, int] | None
) -> PrefillGraph:
    """SGLang's prefill CUDA graph for these settings on a CUDA host (a shipped recipe's: breakable, 58 sizes).

    cuda_graph_hook.parse_cuda_graph_config: cuda_graph_config.default_prefill_backend is "breakable" on CUDA;
    --disable-cuda-graph, then --disable-prefill-cuda-graph, then --cuda-graph-backend-prefill set it (and lock
    it). apply_cuda_graph_compatibility, unlocked only: off with pipeline parallelism, and a breakable graph off
    for the architectures disable_breakable_cudagraph_if_incompatible names (PREFILL_GRAPH_OFF_ARCHS). Then
    memory_hook's sizes: --cuda-graph-bs-prefill, else up to --cuda-graph-max-bs-prefill, else the chunked
    prefill size (MLA: at most 8,192), capped by --max-total-tokens and, for a "llama-2" model path, 4,096.
    After the fraction is set, disable_prefill_cuda_graph_for_deepseek_trtllm_mla turns an unlocked graph off
    for DeepSeek-V3 on trtllm_mla; its reserve stays in the fraction.
    """
    backend, locked = "breakable", False
    if o.disable_cuda_graph_all:
        backend, locked = "disabled", True
    if o.disable_prefill_cuda_graph:
        backend, locked = "disabled", True
    if o.cuda_graph_backend_prefill is not None:
        backend, locked = o.cuda_graph_backend_prefill, True
    if not locked and (pp > 1 or arch.architecture in PREFILL_GRAPH_OFF_ARCHS):
        backend = "disabled"
    sizes = o.cuda_graph_bs_prefill
    if sizes is None:
        max_bs = o.cuda_graph_max_bs_prefill
        if max_bs is None:
            max_bs = min(MLA_PREFILL_GRAPH_MAX_TOKENS, chunked) if arch.uses_mla else chunked
            if pp > 1 and backend == "breakable":  # only reachable with the backend given explicitly
                max_bs = min(max_bs, PP_PREFILL_GRAPH_MAX_TOKENS)
            if o.max_total_tokens is not None:
                max_bs = min(max_bs, o.max_total_tokens)
            if "llama-2" in (o.model_path or "").lower():
                max_bs = min(max_bs, 4096)
        sizes = prefill_graph_batch_sizes(max_bs)
    final = backend
    if not locked and backend != "disabled" and arch.architecture == "DeepseekV3ForCausalLM":
        sm100 = capability is not None and capability[0] == 10
        attention = o.attention_backend or (_sm100_default_backend(arch, o) if sm100 else None)
        if attention == "trtllm_mla":
            final = "disabled"
    reserve = prefill_graph_reserve_mib(backend, sizes, mla=arch.uses_mla)
    return PrefillGraph(sizing_backend=backend, backend=final, capture_sizes=sizes, reserve_mib=reserve)


def model_is_multimodal(arch: ModelArchitecture, o: SglangOptions) -> bool:
    """model_config.is_multimodal: a multimodal architecture or text_config wrapper, not --language-model-only."""
    if o.language_model_only or arch.architecture in MULTIMODAL_OFF_BY_DEFAULT:
        return False
    return arch.architecture in SGLANG_MULTIMODAL_ARCHS or arch.wraps_text_config


def serves_multimodal(arch: ModelArchitecture, o: SglangOptions) -> bool:
    """handle_gpu_memory_settings' is_vlm: model_config.is_multimodal and not --language-only."""
    return model_is_multimodal(arch, o) and not o.language_only


def mm_reservation_gib(arch: ModelArchitecture, o: SglangOptions) -> float:
    """mm_runtime_reservation_gb: SGLANG_VLM_CACHE_SIZE_MB (100) for a multimodal model, plus
    SGLANG_MM_FEATURE_CACHE_MB (1,024) with CUDA feature transport; both at SGLang's defaults."""
    if not model_is_multimodal(arch, o):
        return 0.0
    feature = 1024 if o.mm_feature_transport in ("cuda_ipc", "cuda_vmm") else 0
    return (VLM_CACHE_SIZE_MB + feature) / 1024


def resolve_args(
    arch: ModelArchitecture,
    o: SglangOptions,
    gpu_mib: float | None,
    drafter: Drafter | None,
    run: SizingRun,
    capability: tuple[int, int] | None,
) -> ResolvedArgs:
    """ServerArgs resolution as far as sizing reads it (memory_hook, speculative_hook, model_config)."""
    tp, pp = o.tp_size or 1, o.pp_size or 1
    derived = arch.max_position_embeddings
    context_len = o.context_length if o.context_length is not None else derived
    if o.context_length is not None and o.context_length > derived:
        run.fatal(
            "sglang-context-length",
            f"Warning: User-specified context_length ({o.context_length}) is greater than the derived "
            f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the "
            "derived context_length may differ from max_position_embeddings in the model's config. To allow "
            "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        )
    chunk_default, max_bs_default = gpu_memory_defaults(gpu_mib, tp)
    chunked = o.chunked_prefill_size if o.chunked_prefill_size is not None else chunk_default
    if o.cuda_graph_bs is not None:
        decode_bs: tuple[int, ...] = tuple(o.cuda_graph_bs)
        decode_max_bs = max(decode_bs)
    else:
        decode_max_bs = o.cuda_graph_max_bs if o.cuda_graph_max_bs is not None else max_bs_default
        if o.cuda_graph_max_bs is None and o.max_running_requests is not None:
            decode_max_bs = min(decode_max_bs, o.max_running_requests)
        decode_bs = decode_graph_batch_sizes(
            decode_max_bs,
            speculative=o.speculative_algorithm is not None,
            no_padding=bool(o.disable_cuda_graph_padding),
        )
    graphs_on = not o.disable_cuda_graph
    prefill_graph = resolve_prefill_graph(arch, o, chunked=chunked, pp=pp, capability=capability)
    fraction_source: Literal["flag", "default"] = "flag"
    reserved: float | None = None
    if o.mem_fraction_static is not None:
        fraction = o.mem_fraction_static
    else:
        fraction_source = "default"
        fraction, reserved = default_mem_fraction_static(
            gpu_mib,
            chunked_prefill_size=chunked,
            max_prefill_tokens=o.max_prefill_tokens or DEFAULT_MAX_PREFILL_TOKENS,
            tp_size=tp,
            pp_size=pp,
            decode_graph_max_bs=decode_max_bs if graphs_on else None,
            prefill_graph_reserve_mib=prefill_graph.reserve_mib,
        )
        if gpu_mib is None:
            run.assumptions.append("GPU capacity unknown: SGLang's fallback mem_fraction_static 0.95")
        if serves_multimodal(arch, o):
            fraction = vlm_mem_fraction(fraction, arch.vision_tower)
            if arch.vision_tower is not None:
                run.notes.append(f"multimodal {arch.architecture}: SGLang lowers the default mem_fraction_static to "
                                 f"{fraction:.4f} for the vision tower ({arch.vision_tower[0]} layers × "
                                 f"{arch.vision_tower[1]}; memory_hook.adjust_mem_fraction_for_vlm); "
                                 "--language-only serves text alone and keeps the fraction; 100 MiB of the KV budget "
                                 "stays kept for the multimodal embedding cache (mm_runtime_reservation_gb)")
    algorithm, steps, topk, draft, mrr = _resolve_speculative(arch, o, drafter, run)
    try:
        kv_dtype, kv_elem = kv_storage(o.kv_cache_dtype, arch, capability)
    except ValueError as exc:
        run.notes.append(f"{exc}; counted at the model dtype")
        kv_dtype, kv_elem = arch.dtype, dtype_bytes(arch.dtype)
    return ResolvedArgs(
        tp=tp,
        pp=pp,
        context_len=context_len,
        gpu_mib=gpu_mib,
        chunked=chunked,
        fraction=fraction,
        fraction_source=fraction_source,
        reserved=reserved,
        graphs_on=graphs_on,
        prefill_graph=prefill_graph,
        decode_max_bs=decode_max_bs,
        decode_bs=decode_bs,
        algorithm=algorithm,
        steps=steps,
        topk=topk,
        draft_tokens=draft,
        requested_mrr=mrr,
        page_size=resolve_page_size(arch, o, capability),
        kv_dtype=kv_dtype,
        kv_elem=kv_elem,
        kv_explicit=o.kv_cache_dtype not in (None, "auto"),
        draft_layers=draft_kv_layers(arch, o, algorithm, drafter, run),
        sm100=capability is not None and capability[0] == 10,
        mm_reservation_gib=mm_reservation_gib(arch, o),
    )


@dataclass
class SizingRun:
    """Accumulates what the computation finds; frozen into SglangCapacity at the end."""

    refusals: list[SglangRefusal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    stopped: bool = False  # SGLang raised: nothing after this point is sized

    def fatal(self, code: str, message: str) -> None:
        """Record an error SGLang raises; sizing stops there."""
        self.refusals.append(SglangRefusal(code, message))
        self.stopped = True


def _path_less_mtp_layers(arch: ModelArchitecture, run: SizingRun) -> int | None:
    """A path-less MTP draft is sized off the target config's num_nextn_predict_layers (None when absent)."""
    declared = not any("config does not list" in note for note in arch.notes)
    if arch.mtp_layers and declared:
        return len(arch.mtp_layers)
    if arch.mtp_layers:
        run.notes.append(
            "the target config does not list num_nextn_predict_layers: SGLang does not grow the KV cell for the "
            "MTP layer (the draft worker's one-layer KV pool then sits outside the profiled budget)"
        )
    return None


def draft_kv_layers(
    arch: ModelArchitecture, o: SglangOptions, algorithm: str | None, drafter: Drafter | None, run: SizingRun
) -> int | None:
    """spec_aux_hidden_state: the draft layers the target's KV cell is scaled by (EAGLE family, DFLASH)."""
    if algorithm == "DFLASH":
        return len(drafter.layers) if drafter is not None else None
    if algorithm not in EAGLE_FAMILY:
        return None
    from_target = arch.architecture in DRAFT_PATH_FROM_TARGET_ARCHS
    if o.speculative_draft_model_path is None and not from_target:
        return _path_less_mtp_layers(arch, run)
    if o.speculative_draft_model_path is None or drafter is None:
        if arch.mtp_layers:
            return len(arch.mtp_layers)  # the target checkpoint read as its MTP draft
        run.notes.append("drafter layers unknown: the KV cell is not scaled for the draft model")
        return None
    return len(drafter.layers)
