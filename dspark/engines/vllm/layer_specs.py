"""vLLM KV-cache specs per layer kind (attention, sliding window, MLA, indexer, linear state) and hybrid alignment."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal, NamedTuple

from dspark.engines.vllm.groups import promote_sliding
from dspark.engines.vllm.kv_types import (
    EAGLE_METHODS,
    FP8_DS_MLA_BYTES_PER_TOKEN,
    LayerSpec,
    VllmNotModelledError,
    cdiv,
    divide_exact,
)
from dspark.engines.vllm.options import VllmOptions
from dspark.engines.vllm.resolve import Resolved
from dspark.model.architecture import (
    AttentionLayer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    dtype_bytes,
)

# ---------------------------------------------------------------------------------------------
# 2-3. Layer specs, and the hybrid block-size alignment
# ---------------------------------------------------------------------------------------------


def _attention_per_token(layer: AttentionLayer, tp: int, kv_bytes: int) -> int:
    """AttentionSpec.page_size_bytes per token: max(1, kv_heads // TP) x (head + head_v) x dtype bytes."""
    heads = max(1, layer.num_kv_heads // tp)  # ModelConfig.get_num_kv_heads: replicated when TP > heads
    return heads * (layer.head_dim + layer.v_dim) * kv_bytes


def _mla_per_token(layer: MLALayer, r: Resolved) -> int:
    """MLAAttentionSpec: one latent (kv_lora_rank + rope) per token, num_kv_heads 1, not divided by TP."""
    if r.kv_cache_dtype == "fp8_ds_mla":
        return FP8_DS_MLA_BYTES_PER_TOKEN
    return layer.latent_dim * r.kv_bytes


def _indexer_per_token(index_head_dim: int) -> int:
    """DeepseekV32IndexerCache: uint8 keys of index_head_dim plus a fp32 scale per 128 (deepseek_v2.py)."""
    return index_head_dim + index_head_dim // 128 * 4


class _MambaState(NamedTuple):
    """The linear-attention state page: shapes x dtypes (mamba_utils.MambaStateShapeCalculator)."""

    conv_dtype: str
    ssm_dtype: str
    page_bytes: int
    prefill_checkpoint_blocks: int  # MambaMixer2.get_kv_cache_spec: 1 (used in "align" mode)
    shapes: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # (conv, ssm) per GPU
    mamba_type: str = "gdn_attention"


def _mamba_state(layer: LinearStateLayer, r: Resolved) -> _MambaState:
    """gated_delta_net_state_shape / mamba2_state_shape with the (conv, ssm) dtypes of _mamba_state_dtype."""
    conv_dtype = r.model_dtype if r.mamba_cache_dtype == "auto" else r.mamba_cache_dtype
    ssm_dtype = conv_dtype if r.mamba_ssm_cache_dtype == "auto" else r.mamba_ssm_cache_dtype
    tp = r.tp
    state_len = layer.conv_kernel - 1 + r.num_spec
    if layer.family == "gated_delta_net":
        conv_shape = (divide_exact(layer.conv_dim, tp, "GDN conv channels"), state_len)
        ssm_shape = (divide_exact(layer.num_v_heads, tp, "GDN value heads"), layer.head_v_dim, layer.head_k_dim)
        mamba_type = "gdn_attention"
        # 0.33 GatedDeltaNetAttention.get_kv_cache_spec: FlashInfer's checkpoint export keeps one more block.
        checkpoint = 1 if r.gdn_checkpoint_grid else 0
    else:
        # mamba2_state_shape: n_groups is extended so every head shard keeps its group.
        groups = layer.num_k_heads
        if groups % tp:
            groups += tp - groups
        conv_channels = layer.num_v_heads * layer.head_v_dim + 2 * groups * layer.head_k_dim
        conv_shape = (divide_exact(conv_channels, tp, "Mamba2 conv channels"), state_len)
        ssm_shape = (divide_exact(layer.num_v_heads, tp, "Mamba2 heads"), layer.head_v_dim, layer.head_k_dim)
        checkpoint = 1
        mamba_type = "mamba2"
    page = math.prod(conv_shape) * dtype_bytes(conv_dtype) + math.prod(ssm_shape) * dtype_bytes(ssm_dtype)
    return _MambaState(conv_dtype, ssm_dtype, page, checkpoint, (conv_shape, ssm_shape), mamba_type)


class Hybrid(NamedTuple):
    """What Platform._align_hybrid_block_size and MambaModelConfig decided."""

    block_size: int
    mode: Literal["none", "align"]
    mamba_block_size: int
    state: _MambaState
    padded_page: int | None
    note: str


def align_hybrid(arch: ModelArchitecture, r: Resolved) -> Hybrid:
    """Enlarge the attention block until one attention page >= one state page, then pad the state page."""
    linear = next(la for la in arch.layers if isinstance(la, LinearStateLayer))
    state = _mamba_state(linear, r)
    first_attn = next((la for la in arch.layers if not isinstance(la, LinearStateLayer)), None)
    if isinstance(first_attn, MLALayer):
        attn_1tok = _mla_per_token(first_attn, r)
    elif isinstance(first_attn, AttentionLayer):
        attn_1tok = _attention_per_token(first_attn, r.tp, r.kv_bytes)
    else:
        raise VllmNotModelledError("a hybrid model without attention layers is not modelled")
    kernel_alignment = max(r.min_kernel_block, r.block_size)
    if arch.uses_mla:
        kernel_alignment = max(kernel_alignment, 128)  # TRTLLM/FlashInfer MLA decode alignment
    if r.prefix_caching and r.gdn_checkpoint_grid:
        # 0.33 Platform._align_hybrid_block_size: "Internal prefill checkpoints land on block boundaries."
        kernel_alignment = math.lcm(kernel_alignment, r.gdn_checkpoint_grid)
    attn_block = kernel_alignment * cdiv(state.page_bytes, kernel_alignment * attn_1tok)
    attn_block = r.min_kernel_block * cdiv(attn_block, r.min_kernel_block)
    block = max(r.block_size, attn_block)
    # MambaModelConfig.verify_and_update_config: prefix caching -> "align", else "none" (mamba block =
    # max_model_len); 0.32.0 has no "all" mode (CacheConfig.MambaCacheMode = Literal["align", "none"]).
    mode: Literal["none", "align"] = "align" if r.prefix_caching else "none"
    mamba_block = block if mode == "align" else r.max_model_len
    attn_page = block * attn_1tok
    padded = attn_page if attn_page != state.page_bytes else None
    note = ""
    if padded is not None:
        pct = 100 * (attn_page - state.page_bytes) / state.page_bytes
        note = f"Padding mamba page size by {pct:.2f}%"
    return Hybrid(block, mode, mamba_block, state, padded, note)


def _largest_kernel_block_within(base: int, per_token: int, budget: int) -> int:
    """attention.py _largest_kernel_block_within for a MultipleOf(base) backend: the sliding block size."""
    max_block = budget // per_token
    candidate = max(base, max_block // base * base)
    return candidate if candidate * per_token <= budget else base


def _attention_spec(name: str, layer: AttentionLayer, r: Resolved, block: int) -> LayerSpec:
    """Attention.get_kv_cache_spec: FullAttentionSpec, or SlidingWindowSpec with its own block size."""
    per_token = _attention_per_token(layer, r.tp, r.kv_bytes)
    shape = (max(1, layer.num_kv_heads // r.tp), layer.head_dim, layer.v_dim)
    kwargs = (("num_kv_heads", shape[0]), ("head_size", layer.head_dim), ("head_size_v", layer.v_dim),
              ("dtype", _kv_element(r)), ("cache_dtype_str", r.kv_cache_dtype))
    if layer.sliding_window is None:
        page = block * per_token
        return LayerSpec(
            name=name,
            kind="full",
            block_size=block,
            page_bytes=page,
            unpadded_page_bytes=page,
            per_token_bytes=per_token,
            identity=("full", block, *shape),
            engine_kwargs=kwargs,
        )
    sw_block = _largest_kernel_block_within(r.min_kernel_block, per_token, per_token * block)
    page = sw_block * per_token
    return LayerSpec(
        name=name,
        kind="sliding",
        block_size=sw_block,
        page_bytes=page,
        unpadded_page_bytes=page,
        per_token_bytes=per_token,
        sliding_window=layer.sliding_window,
        identity=("sliding", sw_block, layer.sliding_window, *shape),
        engine_kwargs=(*kwargs, ("sliding_window", layer.sliding_window)),
    )


def _mla_specs(name: str, layer: MLALayer, r: Resolved, block: int) -> list[LayerSpec]:
    """MLAAttention.get_kv_cache_spec, plus DeepSeek-V3.2's indexer key cache (an MLAAttentionSpec too)."""
    per_token = _mla_per_token(layer, r)
    page = block * per_token
    specs = [
        LayerSpec(
            name=name,
            kind="mla",
            block_size=block,
            page_bytes=page,
            unpadded_page_bytes=page,
            per_token_bytes=per_token,
            identity=("mla", block, per_token),
            engine_kwargs=(("num_kv_heads", 1), ("head_size", layer.latent_dim), ("dtype", _kv_element(r)),
                           ("cache_dtype_str", r.kv_cache_dtype)),
        )
    ]
    if layer.index_head_dim is not None:
        idx = _indexer_per_token(layer.index_head_dim)
        specs.append(
            LayerSpec(
                name=name + ".indexer",
                kind="indexer",
                block_size=block,
                page_bytes=block * idx,
                unpadded_page_bytes=block * idx,
                per_token_bytes=idx,
                identity=("indexer", block, idx),
            )
        )
    return specs


def _mamba_spec(name: str, hybrid: Hybrid, num_spec: int) -> LayerSpec:
    """MambaBase.get_kv_cache_spec: the padded state page; blocks per request by mamba_cache_mode."""
    state = hybrid.state
    page = hybrid.padded_page or state.page_bytes
    # MambaSpec.max_memory_usage_bytes: "align" 2 + spec (+1 prefill checkpoint for Mamba2), else 1 + spec.
    blocks = 2 + num_spec + state.prefill_checkpoint_blocks if hybrid.mode == "align" else 1 + num_spec
    return LayerSpec(
        name=name,
        kind="mamba",
        block_size=hybrid.mamba_block_size,
        page_bytes=page,
        unpadded_page_bytes=state.page_bytes,
        mamba_blocks_per_request=blocks,
        identity=("mamba", page, state.page_bytes, blocks),
        engine_kwargs=(
            ("shapes", state.shapes), ("dtypes", (state.conv_dtype, state.ssm_dtype)),
            ("page_size_padded", hybrid.padded_page), ("mamba_type", state.mamba_type),
            ("mamba_cache_mode", hybrid.mode), ("num_speculative_blocks", num_spec),
            ("num_prefill_checkpoint_blocks", state.prefill_checkpoint_blocks),
        ),
    )


def _kv_element(r: Resolved) -> str:
    """The KV cache's element dtype name as the engine's STR_DTYPE_TO_TORCH_DTYPE reads it (auto: the model's)."""
    if r.kv_cache_dtype == "auto":
        return r.model_dtype
    return {"fp8": "fp8_e4m3", "fp8_inc": "fp8_e4m3", "fp8_ds_mla": "fp8_e4m3"}.get(r.kv_cache_dtype, r.kv_cache_dtype)


def _layer_specs(arch: ModelArchitecture, r: Resolved, hybrid: Hybrid | None, block: int) -> list[LayerSpec]:
    """One LayerSpec per layer, main model then drafter, in vLLM's registration order."""
    specs: list[LayerSpec] = []
    layers = [(f"layers.{i}", la) for i, la in enumerate(arch.layers)]
    layers += [(f"drafter.{i}", la) for i, la in enumerate(r.drafter_layers)]
    for name, layer in layers:
        if isinstance(layer, AttentionLayer):
            specs.append(_attention_spec(name, layer, r, block))
        elif isinstance(layer, MLALayer):
            specs.extend(_mla_specs(name, layer, r, block))
        elif hybrid is not None:
            specs.append(_mamba_spec(name, hybrid, r.num_spec))
        else:
            raise VllmNotModelledError("a drafter with linear-state layers on a non-hybrid target")
    return specs


def engine_layer_specs(arch: ModelArchitecture, r: Resolved, hybrid: Hybrid | None, block: int) -> list[LayerSpec]:
    """The specs the model's layers hand the engine's planner, before it retains or promotes anything."""
    specs = _layer_specs(arch, r, hybrid, block)
    if not specs:
        raise VllmNotModelledError("an attention-free model (no KV cache) is not modelled")
    return specs


def prefill_lookahead_tokens(arch: ModelArchitecture, r: Resolved) -> int:
    """VllmConfig.num_prefill_lookahead_tokens: EAGLE-family drafters read 1 token ahead, multi-module MTP N."""
    if r.spec_method not in EAGLE_METHODS:
        return 0
    multi_mtp = r.spec_method == "mtp" and min(len(arch.mtp_layers) or 1, r.num_spec) > 1
    return r.num_spec if multi_mtp else 1


def final_specs(
    arch: ModelArchitecture, r: Resolved, options: VllmOptions, hybrid: Hybrid | None, block: int
) -> list[LayerSpec]:
    """Layer specs as get_kv_cache_configs groups them: SWA retention for multi-token drafters, promotion."""
    specs = engine_layer_specs(arch, r, hybrid, block)
    # get_kv_cache_configs: sliding layers retain num_prefill_lookahead_tokens - 1 extra tokens.
    extra = max(0, prefill_lookahead_tokens(arch, r) - 1)
    specs = [replace(s, extra_retained_tokens=extra) if s.kind == "sliding" else s for s in specs]
    if options.disable_hybrid_kv_cache_manager:
        specs = promote_sliding(specs, block)
    return specs
