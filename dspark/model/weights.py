"""Weight bytes, total and per GPU: exact from safetensors headers, else the config's parameter estimate.

Pure: dspark.model.modeldir reads the headers into WeightsInfo; this module only does arithmetic on them.
The split across GPUs follows vLLM: tensor parallelism (TP) shards weight matrices, pipeline
parallelism (PP) gives each stage its own layers (vllm/distributed/utils.py get_pp_indices).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dspark.core.errors import InputError
from dspark.model.architecture import AttentionLayer, Drafter, ModelArchitecture, dtype_bytes

# Bytes per parameter of each stored weight format (docs/hardware.md).
BYTES_PER_PARAMETER: dict[str, float] = {
    "float32": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,  # e4m3; block scales add < 0.1 %
    "int8": 1.0,
    "nvfp4": 0.5625,  # E2M1 + one FP8 scale per 16 values
    "mxfp4": 0.53125,  # E2M1 + one E8M0 scale per 32 values
    "int4": 0.5 + 2.5 / 128,  # AWQ/GPTQ: 4-bit values + fp16 scale and 4-bit zero per group of 128
}

# safetensors dtype codes the engines load into the model dtype (unquantised weights).
_FLOAT_CODES = {"F64", "F32", "F16", "BF16"}
# Tensor-name patterns, kept as text: re compiles each (once) when a checkpoint's headers are read, which a
# plan from an inline config never does.
_LAYER = r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\."
_MTP = r"(?:^|\.)mtp(?:\.|_)"
_VISION = (
    r"(?:^|\.)(?:visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|mm_projector)\."
)
_EMBEDDING = r"(?:^|\.)(?:embed_tokens|wte|word_embeddings|embed)\.weight$"
_LM_HEAD = r"(?:^|\.)(?:lm_head|head|output)\.weight$"
# Quantisation scales keep their stored dtype; the engine does not cast them to the model dtype.
_SCALE = r"(?:scale(?:_inv|_2)?|zero_point|zeros|scales)$"
# Held whole by every TP rank in vLLM: MoE routers, shared-expert gates, MLA / DeepSeek-V4
# down-projections (ReplicatedLinear), V3.2/V4 indexers and compressors, mHC mixing weights.
_REPLICATED = (
    r"(?:\.(?:gate|router)\.(?:weight|bias)$|shared_expert_gate|e_score_correction_bias|\.q_a_proj\.|"
    r"\.kv_a_proj_with_mqa\.|\.wq_a\.|\.wkv\.|\.indexer\.|\.compressor\.|(?:^|\.)hc_|_hc\.)"
)
_KV_PROJ = r"\.(?:k_proj|v_proj)\."

_SPLIT_NOTE = (
    "TP shards every weight matrix evenly (MoE experts included; expert parallelism moves the same bytes "
    "between the same ranks); norms, routers and MLA/indexer down-projections are replicated on every rank; "
    "K/V projections are replicated per KV head when TP exceeds the KV heads"
)
_STAGE_NOTE = (
    "PP places layers as vLLM's get_pp_indices does; embedding and vision tower on the first stage, "
    "LM head, final norm and MTP modules on the last; per_gpu_bytes is the fullest stage's GPU"
)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as a safetensors header describes it."""

    name: str
    dtype: str  # safetensors dtype code: "BF16", "F8_E4M3", "U8", ...
    shape: tuple[int, ...]
    nbytes: int
    file: str = ""

    @property
    def numel(self) -> int:
        """Elements in the tensor (packed formats count storage elements)."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class WeightsInfo:
    """Every tensor of a checkpoint, read from its safetensors headers (no tensor data)."""

    tensors: tuple[TensorInfo, ...]
    files: tuple[str, ...]
    source: str = ""

    @property
    def total_bytes(self) -> int:
        """Bytes of tensor data as stored on disk."""
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class WeightBytes:
    """Weight memory of a model as the engine holds it: total and on the fullest GPU."""

    total_bytes: int  # all ranks together, as loaded
    per_gpu_bytes: int  # the GPU of the fullest pipeline stage
    exact: bool  # True: from safetensors header byte sizes; False: parameter estimate
    source: str  # what the figure rests on
    notes: tuple[str, ...]  # assumptions, each in one sentence
    tp: int = 1
    pp: int = 1
    per_stage_bytes: tuple[int, ...] = ()  # one GPU of each PP stage


def pp_partition(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage, as vLLM's get_pp_indices splits them (remainder on the middle stages)."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return tuple(sizes)


def _stage_of(num_layers: int, pp: int) -> list[int]:
    """The pipeline stage of each layer index."""
    stages: list[int] = []
    for stage, size in enumerate(pp_partition(num_layers, pp)):
        stages.extend([stage] * size)
    return stages


def _check_parallel(tp: int, pp: int, num_layers: int) -> None:
    if tp < 1 or pp < 1:
        raise InputError(f"tensor- and pipeline-parallel sizes must be at least 1, got TP={tp}, PP={pp}")
    if pp > num_layers:
        raise InputError(f"pipeline-parallel size {pp} exceeds the model's {num_layers} layers")


def _kv_share(arch: ModelArchitecture, tp: int) -> float:
    """Fraction of the K/V projections one TP rank holds: KV heads are replicated once TP exceeds them."""
    heads = [layer.num_kv_heads for layer in arch.layers if isinstance(layer, AttentionLayer)]
    if not heads:
        return 1.0 / tp
    kv = max(heads)
    return max(1, kv // tp) / kv


def weight_bytes(
    arch: ModelArchitecture,
    weights: WeightsInfo | None = None,
    *,
    tp: int = 1,
    pp: int = 1,
    include_mtp: bool = False,
    include_vision: bool = True,
) -> WeightBytes | None:
    """Weights total and per GPU under TP x PP; exact from headers, else estimated; None when neither exists.

    include_vision=False leaves out a multimodal model's vision tower (an engine serving it text-only)."""
    _check_parallel(tp, pp, arch.num_layers)
    if weights is not None and weights.tensors:
        return _from_headers(arch, weights, tp, pp, include_mtp, include_vision)
    if arch.parameters is not None:
        return _from_estimate(arch, tp, pp, include_mtp, include_vision)
    return None


def weights_from_checkpoint_total(
    arch: ModelArchitecture, total_bytes: int, *, tp: int = 1, pp: int = 1, include_mtp: bool = False, source: str = ""
) -> WeightBytes | None:
    """A checkpoint's stored total (model.safetensors.index.json total_size: every tensor, MTP modules
    included) split across GPUs as the parameter estimate splits it: each format's share (FP4 experts,
    FP8 elsewhere, ...) scaled so that all of it, MTP included, adds up to the stored total; the MTP
    modules' share is left out unless MTP drafts. None without a parameter estimate to split by."""
    _check_parallel(tp, pp, arch.num_layers)
    if arch.parameters is None:
        return None
    stored = _from_estimate(arch, tp, pp, include_mtp=True)
    used = stored if include_mtp else _from_estimate(arch, tp, pp, include_mtp=False)
    factor = total_bytes / stored.total_bytes
    per_stage = tuple(math.ceil(b * factor) for b in used.per_stage_bytes)
    left_out = stored.total_bytes - used.total_bytes
    notes = (
        f"checkpoint total {total_bytes:,} B split as the parameter estimate splits it (x{factor:.4f} of the "
        "estimate's bytes)",
        *used.notes[1:],
        *(
            [f"MTP modules' share ({math.ceil(left_out * factor):,} B) not loaded: the engine loads them only "
             "for speculative method mtp"]
            if left_out else []
        ),
    )
    return WeightBytes(
        total_bytes=math.ceil(used.total_bytes * factor),
        per_gpu_bytes=max(per_stage),
        exact=False,
        source=source or "checkpoint total",
        notes=notes,
        tp=tp,
        pp=pp,
        per_stage_bytes=per_stage,
    )


def _place(name: str, num_layers: int) -> tuple[str, int | None]:
    """Where a tensor lives: ("layer", i), ("embedding" | "vision", None) on the first stage,
    ("lm_head" | "final" | "mtp", None) on the last, or ("mtp_copy", None) when vLLM never loads it."""
    if re.search(_VISION, name):
        return "vision", None
    layer = re.search(_LAYER, name)
    index = int(layer.group(1)) if layer else None
    if re.search(_MTP, name) or (index is not None and index >= num_layers):
        # DeepSeek MTP modules store copies of embed/head; vLLM shares the target's instead.
        copy = bool(re.search(_EMBEDDING, name)) or "shared_head.head" in name
        return ("mtp_copy" if copy else "mtp"), None
    if index is not None:
        return "layer", index
    if re.search(_EMBEDDING, name):
        return "embedding", None
    return ("lm_head" if re.search(_LM_HEAD, name) else "final"), None


def _per_gpu(t: TensorInfo, size: int, kind: str, tp: int, kv_share: float) -> float:
    """Bytes of one tensor on one TP rank."""
    if len(t.shape) <= 1 or re.search(_REPLICATED, t.name):
        return float(size)
    if kind == "layer" and re.search(_KV_PROJ, t.name):
        return size * kv_share
    return size / tp


def _from_headers(arch: ModelArchitecture, weights: WeightsInfo, tp: int, pp: int, include_mtp: bool,
                  include_vision: bool = True) -> WeightBytes:
    stage_of = _stage_of(arch.num_layers, pp)
    stages = [0.0] * pp
    kv_share = _kv_share(arch, tp)
    model_bytes = dtype_bytes(arch.dtype)
    total, embedding_per_gpu = 0, 0.0
    counts = {"cast": 0, "mtp": 0, "mtp_copy": 0, "lm_head": 0, "vision": 0}
    for t in weights.tensors:
        kind, index = _place(t.name, arch.num_layers)
        if kind in counts:
            counts[kind] += 1
        if kind == "mtp_copy" or (kind == "mtp" and not include_mtp) or (kind == "vision" and not include_vision):
            continue
        size = t.nbytes
        if t.dtype in _FLOAT_CODES and not re.search(_SCALE, t.name) and t.numel * model_bytes != size:
            size = t.numel * model_bytes
            counts["cast"] += 1
        total += size
        per_gpu = _per_gpu(t, size, kind, tp, kv_share)
        if kind == "embedding":
            embedding_per_gpu += per_gpu
        stage = stage_of[index] if index is not None else 0 if kind in {"embedding", "vision"} else pp - 1
        stages[stage] += per_gpu
    notes = [_SPLIT_NOTE]
    if pp > 1:
        notes.append(_STAGE_NOTE)
        if not counts["lm_head"] and arch.tie_word_embeddings:
            stages[-1] += embedding_per_gpu  # the last stage builds its own LM head from the tied embedding
            notes.append("tied embeddings: the last PP stage holds its own copy as the LM head")
    if counts["cast"]:
        notes.append(f"{counts['cast']} floating-point tensors counted at {arch.dtype}, as the engine loads them")
    if counts["mtp_copy"]:
        notes.append(f"{counts['mtp_copy']} MTP copies of the embedding/LM head not counted: vLLM shares the target's")
    if counts["mtp"] and not include_mtp:
        notes.append(f"{counts['mtp']} MTP tensors not counted: the engine loads them only for speculative method mtp")
    if counts["vision"] and not include_vision:
        notes.append(f"{counts['vision']} vision-tower tensors not counted: the engine serves the model text-only")
    if include_mtp and not counts["mtp"]:
        notes.append("include_mtp asked for, but the checkpoint has no MTP tensors")
    per_stage = tuple(math.ceil(s) for s in stages)
    return WeightBytes(
        total_bytes=total,
        per_gpu_bytes=max(per_stage),
        exact=True,
        source=f"safetensors headers ({len(weights.files)} files, {len(weights.tensors)} tensors)",
        notes=tuple(notes),
        tp=tp,
        pp=pp,
        per_stage_bytes=per_stage,
    )


def format_bytes_per_parameter(weight_format: str | None, dtype: str) -> float:
    """Bytes per parameter of a stored weight format (None: unquantised, the model dtype)."""
    if weight_format is None:
        return float(dtype_bytes(dtype))
    if weight_format not in BYTES_PER_PARAMETER:
        raise InputError(
            f"weight format '{weight_format}' has no known size; known: {', '.join(sorted(BYTES_PER_PARAMETER))}"
        )
    return BYTES_PER_PARAMETER[weight_format]


def _from_estimate(arch: ModelArchitecture, tp: int, pp: int, include_mtp: bool,
                   include_vision: bool = True) -> WeightBytes:
    params = arch.parameters
    assert params is not None  # noqa: S101 - checked by the caller
    plain = float(dtype_bytes(arch.dtype))
    quant = format_bytes_per_parameter(arch.weight_format, arch.dtype) + arch.block_scale_bytes_per_parameter
    expert = format_bytes_per_parameter(arch.expert_weight_format or arch.weight_format, arch.dtype)
    if arch.expert_weight_format in (None, "fp8") and arch.weight_format == "fp8":
        expert += arch.block_scale_bytes_per_parameter  # FP8 experts keep the same block scales
    kv_share = _kv_share(arch, tp)
    stage_of = _stage_of(arch.num_layers, pp)
    stages = [0.0] * pp
    total = 0.0
    for index, layer in enumerate(params.layers):
        rest = layer.total - layer.routed_experts - layer.replicated - layer.kv_proj
        total += layer.routed_experts * expert + layer.replicated * plain + (rest + layer.kv_proj) * quant
        sharded = (layer.routed_experts * expert + rest * quant) / tp
        stages[stage_of[index]] += sharded + layer.kv_proj * quant * kv_share + layer.replicated * plain
    first = (params.embedding + (params.vision if include_vision else 0)) * plain
    last = params.lm_head * plain / tp + params.final * plain
    if include_mtp:
        last += params.mtp * quant / tp
        total += params.mtp * quant
    total += first + params.lm_head * plain + params.final * plain
    stages[0] += first / tp
    stages[-1] += last
    notes = [
        f"estimated from the config's {params.total:,} parameters"
        + (f" (+{params.mtp:,} MTP)" if include_mtp and params.mtp else ""),
        f"bytes per parameter: {arch.weight_format or arch.dtype} {quant:g}"
        + (f", routed experts {arch.expert_weight_format} {expert:g}" if arch.expert_weight_format else "")
        + f"; embeddings, LM head, norms and routers at {arch.dtype} {plain:g}",
        _SPLIT_NOTE,
    ]
    if pp > 1:
        notes.append(_STAGE_NOTE)
        if arch.tie_word_embeddings:
            stages[-1] += params.embedding * plain / tp
            notes.append("tied embeddings: the last PP stage holds its own copy as the LM head")
    if include_mtp and not params.mtp:
        notes.append("include_mtp asked for, but the config lists no MTP modules")
    per_stage = tuple(math.ceil(s) for s in stages)
    return WeightBytes(
        total_bytes=math.ceil(total),
        per_gpu_bytes=max(per_stage),
        exact=False,
        source=f"parameter estimate from {arch.source or 'the config'}",
        notes=tuple(notes),
        tp=tp,
        pp=pp,
        per_stage_bytes=per_stage,
    )


def drafter_weight_bytes(drafter: Drafter, weights: WeightsInfo | None = None, *, tp: int = 1) -> WeightBytes | None:
    """A separate drafter's weights (EAGLE, DFlash, draft model), split by the target's TP; None when unknown."""
    if tp < 1:
        raise InputError(f"tensor-parallel size must be at least 1, got TP={tp}")
    if weights is not None and weights.tensors:
        total, exact = weights.total_bytes, True
        source = f"safetensors headers ({len(weights.files)} files, {len(weights.tensors)} tensors)"
    elif drafter.parameter_count is not None:
        total = drafter.parameter_count * dtype_bytes(drafter.dtype or "bfloat16")
        exact, source = False, f"parameter estimate from {drafter.source or 'the drafter config'}"
    else:
        return None
    per_gpu = math.ceil(total / tp)
    return WeightBytes(
        total_bytes=total,
        per_gpu_bytes=per_gpu,
        exact=exact,
        source=source,
        notes=("drafter weights assumed sharded evenly across the target's TP ranks (its norms are negligible)",),
        tp=tp,
        per_stage_bytes=(per_gpu,),
    )
