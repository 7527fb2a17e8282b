"""One parser per layer family: dense/sliding GQA, Gated-DeltaNet hybrids, MLA, Mamba2 hybrids."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dspark.model.architecture.fields import (
    FULL_KINDS,
    SLIDING,
    TIED_BY_DEFAULT,
    ConfigFields,
    attention_shape,
    layer_types,
    sliding_windows,
    state_dtype,
    window_of,
)
from dspark.model.architecture.layers import AttentionLayer, Layer, LayerParams, LinearStateLayer, MLALayer, MoE
from dspark.model.architecture.params import (
    dense_params,
    hybrid_gdn_params,
    mla_params,
    nemotron_h_params,
    qwen_vision_params,
)


@dataclass
class ParsedLayers:
    layers: list[Layer]
    mtp_layers: list[Layer] = field(default_factory=list)
    per_layer: Callable[[], tuple[list[LayerParams], int, int, int]] | None = None  # layers, final, vision, mtp
    notes: list[str] = field(default_factory=list)


def mtp_count(f: ConfigFields, family: str) -> int:
    """MTP modules the checkpoint ships."""
    if family in {"qwen3_5", "qwen3_5_moe"}:
        return f.integer("mtp_num_hidden_layers", 0)
    if family == "qwen3_next":
        return f.integer("num_nextn_predict_layers", 1)  # the config omits it; vLLM defaults to 1
    return f.integer("num_nextn_predict_layers", 0)


def embeddings(f: ConfigFields, family: str) -> tuple[int, int, bool]:
    """(embedding, lm_head, tied) parameters."""
    vocab, hidden = f.positive("vocab_size"), f.positive("hidden_size")
    tied = f.flag("tie_word_embeddings", family in TIED_BY_DEFAULT)
    return vocab * hidden, 0 if tied else vocab * hidden, tied


def parse_dense(f: ConfigFields, family: str, n: int, moe: MoE | None) -> ParsedLayers:
    _, kv_heads, head_dim = attention_shape(f)
    kinds = layer_types(f, n, {SLIDING, *FULL_KINDS})
    windows = sliding_windows(f, family, n, kinds)
    layers: list[Layer] = [AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=w) for w in windows]
    parsed = ParsedLayers(layers=layers)
    mtp = mtp_count(f, family)
    if mtp:
        # GLM/MiMo-style MTP blocks are one full-attention decoder layer each.
        parsed.mtp_layers = [AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim)] * mtp
    hidden = f.positive("hidden_size")

    def count() -> tuple[list[LayerParams], int, int, int]:
        per_layer = dense_params(f, family, n, moe)
        return per_layer, hidden, 0, mtp * per_layer[-1].total

    parsed.per_layer = count
    if mtp:
        parsed.notes.append("MTP parameters estimated as one decoder layer per module")
    return parsed


def parse_gdn(f: ConfigFields, family: str, n: int, moe: MoE | None) -> ParsedLayers:
    _, kv_heads, head_dim = attention_shape(f)
    kinds = layer_types(f, n, {"linear_attention", *FULL_KINDS})
    if kinds is None:
        if not f.has("full_attention_interval"):
            f.fail("needs 'layer_types' or 'full_attention_interval' to place its full-attention layers")
        interval = f.positive("full_attention_interval")
        kinds = tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n))
    state = LinearStateLayer(
        family="gated_delta_net",
        conv_kernel=f.positive("linear_conv_kernel_dim"),
        num_k_heads=f.positive("linear_num_key_heads"),
        num_v_heads=f.positive("linear_num_value_heads"),
        head_k_dim=f.positive("linear_key_head_dim"),
        head_v_dim=f.positive("linear_value_head_dim"),
        ssm_dtype=state_dtype(f, "mamba_ssm_dtype"),
    )
    attention = AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim)
    layers: list[Layer] = [state if kind == "linear_attention" else attention for kind in kinds]
    mtp = mtp_count(f, family)
    parsed = ParsedLayers(layers=layers, mtp_layers=[attention] * mtp)
    if family == "qwen3_next" and not f.has("num_nextn_predict_layers"):
        parsed.notes.append("Qwen3-Next ships 1 MTP layer its config does not list; vLLM defaults it to 1")
    hidden = f.positive("hidden_size")

    def count() -> tuple[list[LayerParams], int, int, int]:
        per_layer = hybrid_gdn_params(f, family, kinds, moe)
        full = next(p for p, kind in zip(per_layer, kinds, strict=True) if kind != "linear_attention")
        # Qwen3-Next / Qwen3.5 MTP: full-attention layers + fc(2h -> h) + three norms; embeddings shared.
        mtp_params = mtp * full.total + 2 * hidden * hidden + 3 * hidden if mtp else 0
        vision = qwen_vision_params(f) if family in {"qwen3_5", "qwen3_5_moe"} else 0
        return per_layer, hidden, vision, mtp_params

    parsed.per_layer = count
    return parsed


def parse_mla(f: ConfigFields, family: str, n: int, moe: MoE | None) -> ParsedLayers:
    index_dim = f.positive("index_head_dim") if family == "deepseek_v32" else None
    mla = MLALayer(
        kv_lora_rank=f.positive("kv_lora_rank"),
        qk_rope_head_dim=f.positive("qk_rope_head_dim"),
        index_head_dim=index_dim,
    )
    mtp = mtp_count(f, family)
    parsed = ParsedLayers(layers=[mla] * n, mtp_layers=[mla] * mtp)
    hidden = f.positive("hidden_size")

    def count() -> tuple[list[LayerParams], int, int, int]:
        per_layer, mtp_layer = mla_params(f, family, n, moe)
        # DeepSeek MTP: a decoder layer + eh_proj(2h -> h) + enorm, hnorm, shared_head.norm. The
        # checkpoint also stores copies of embed_tokens and the head there; vLLM shares the target's.
        return per_layer, hidden, 0, mtp * (mtp_layer.total + 2 * hidden * hidden + 3 * hidden)

    parsed.per_layer = count
    return parsed

def _mamba_kinds(f: ConfigFields, n: int, family: str) -> tuple[str, ...]:
    """Each layer's kind in a Mamba2 hybrid: "mamba", "attention", or a cache-less "mlp"/"moe"."""
    if family == "nemotron_h":
        pattern = f.text("hybrid_override_pattern")
        if pattern is not None:
            names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
            unknown = sorted(set(pattern) - set(names))
            if unknown:
                f.fail(f"'hybrid_override_pattern' has layer symbols dspark does not size: {unknown}")
            kinds = tuple(names[c] for c in pattern)
        else:
            kinds = f.str_list("layers_block_type") or f.missing("hybrid_override_pattern")
    else:
        kinds = f.str_list("layer_types") or f.missing("layer_types")
    if len(kinds) != n:
        f.fail(f"the layer pattern lists {len(kinds)} layers but num_hidden_layers is {n}")
    unknown = sorted(set(kinds) - {"mamba", "attention", "mlp", "moe"})
    if unknown:
        f.fail(f"layer kinds dspark does not size: {', '.join(unknown)}")
    return kinds


def parse_mamba2(f: ConfigFields, family: str, n: int) -> ParsedLayers:
    kinds = _mamba_kinds(f, n, family)
    _, kv_heads, head_dim = attention_shape(f)
    if family == "nemotron_h":
        groups, state, heads = f.positive("n_groups"), f.positive("ssm_state_size"), f.positive("mamba_num_heads")
        head_v, kernel = f.positive("mamba_head_dim"), f.positive("conv_kernel")
        ssm_dtype = state_dtype(f, "mamba_ssm_cache_dtype")
    else:
        groups, state, heads = f.positive("mamba_n_groups"), f.positive("mamba_d_state"), f.positive("mamba_n_heads")
        raw_head = f.raw("mamba_d_head")
        if raw_head in (None, "auto"):
            head_v = f.positive("mamba_expand", 2) * f.positive("hidden_size") // heads
        else:
            head_v = f.positive("mamba_d_head")
        kernel, ssm_dtype = f.positive("mamba_d_conv"), None
    mamba = LinearStateLayer(
        family="mamba2",
        conv_kernel=kernel,
        num_k_heads=groups,
        num_v_heads=heads,
        head_k_dim=state,
        head_v_dim=head_v,
        ssm_dtype=ssm_dtype,
    )
    attention = AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=window_of(f))
    layers: list[Layer] = [mamba if k == "mamba" else attention for k in kinds if k in {"mamba", "attention"}]
    parsed = ParsedLayers(layers=layers)
    dropped = sum(k in {"mlp", "moe"} for k in kinds)
    if dropped:
        parsed.notes.append(f"{dropped} MLP/MoE-only layers keep no cache and are not listed in layers")
    if family == "nemotron_h":
        parsed.per_layer = lambda: (nemotron_h_params(f, kinds), f.positive("hidden_size"), 0, 0)  # + norm_f
    else:
        parsed.notes.append("Mamba2 hybrid: no parameter estimate from the config (weights come from safetensors)")
    return parsed
