"""DeepSeek-V4: compressed attention layers (ratios 4/128, sliding window, indexer) and their parameters."""

from __future__ import annotations

from collections.abc import Sequence

from dspark.model.architecture.families import ParsedLayers, mtp_count
from dspark.model.architecture.fields import ConfigFields, attention_shape, window_of
from dspark.model.architecture.layers import LayerParams, MLALayer, MoE
from dspark.model.architecture.params import NoEstimate, deepseek_moe_block, need


def _v4_params(f: ConfigFields, ratios: Sequence[int], moe: MoE) -> tuple[list[LayerParams], int, int]:
    """Per-layer parameters of DeepSeek-V4, its final mHC head, and one MTP module (transformers' shapes)."""
    hidden = f.positive("hidden_size")
    heads, _, head_dim = attention_shape(f)
    q_rank = need(f, "q_lora_rank")
    o_groups, o_rank = need(f, "o_groups"), need(f, "o_lora_rank")
    ih, ihd = need(f, "index_n_heads"), f.positive("index_head_dim")
    hc = f.positive("hc_mult", 4)
    n_hash = f.integer("num_hash_layers", 3)
    # Replicated in vLLM: q down-projection, the single-head KV projection, compressors, indexers, mHC.
    attn_rep = hidden * q_rank + q_rank + hidden * head_dim + head_dim
    attn = attn_rep + q_rank * heads * head_dim + heads  # + q_b_proj, attention sinks
    attn += o_groups * o_rank * (heads * head_dim // o_groups) + hidden * o_groups * o_rank  # grouped output
    mhc = 2 * ((2 + hc) * hc * hc * hidden + (2 + hc) * hc + 3)  # attention and FFN hyper-connections
    norms = 2 * hidden

    def compressor(ratio: int) -> int:
        if ratio <= 0:
            return 0
        coff = 2 if ratio == 4 else 1  # ratio-4 compressors overlap windows: twice the width
        total = ratio * coff * head_dim + 2 * hidden * coff * head_dim + head_dim
        if ratio == 4:  # the lightning indexer rides on the ratio-4 layers
            total += ratio * 2 * ihd + 2 * hidden * 2 * ihd + ihd + q_rank * ih * ihd + hidden * ih
        return total

    def layer(i: int, ratio: int) -> LayerParams:
        block = deepseek_moe_block(f, moe, bias=i >= n_hash)
        extra = compressor(ratio)
        return LayerParams(
            total=attn + extra + block.total + norms + mhc,
            routed_experts=block.routed_experts,
            replicated=attn_rep + extra + block.replicated + norms + mhc,
        )

    n = len(ratios)
    layers = [layer(i, r) for i, r in enumerate(ratios)]
    head = hc * hc * hidden + hc + 1
    all_ratios = _v4_ratios(f, n)
    mtp_ratio = all_ratios[n] if len(all_ratios) > n else 0
    mtp = layer(n, mtp_ratio).total + 2 * hidden * hidden + 3 * hidden + head
    return layers, head, mtp


def _v4_ratios(f: ConfigFields, n: int) -> tuple[int, ...]:
    """compress_ratios, one per layer (plus trailing MTP entries), with 1 read as 0: window only.

    vLLM's DeepSeek-V4 attention keeps only the sliding window when compress_ratio <= 1, and its
    compressor knows ratios 4 and 128 alone; anything else is refused rather than guessed.
    """
    ratios = f.int_list("compress_ratios")
    if ratios is None:
        f.missing("compress_ratios")
    if len(ratios) < n:
        f.fail(f"'compress_ratios' lists {len(ratios)} layers but num_hidden_layers is {n}")
    bad = sorted(set(ratios) - {0, 1, 4, 128})
    if bad:
        f.fail(f"'compress_ratios' has ratios dspark does not size: {bad} (DeepSeek-V4 uses 0, 1, 4, 128)")
    return tuple(0 if r <= 1 else r for r in ratios)


def parse_v4(f: ConfigFields, n: int, moe: MoE | None) -> ParsedLayers:
    ratios = _v4_ratios(f, n)
    window = window_of(f)
    if window is None:
        f.missing("sliding_window")
    _, _, head_dim = attention_shape(f)
    rope = f.positive("qk_rope_head_dim")
    index_dim = f.positive("index_head_dim")

    def layer(ratio: int) -> MLALayer:
        # One 512-wide KV head (448 NoPE + 64 RoPE) per row; ratio-4 layers add the indexer's keys.
        return MLALayer(
            kv_lora_rank=head_dim - rope,
            qk_rope_head_dim=rope,
            index_head_dim=index_dim if ratio == 4 else None,
            compress_ratio=ratio,
            sliding_window=window,
        )

    mtp = mtp_count(f, "deepseek_v4")
    mtp_ratios = [ratios[n + i] if n + i < len(ratios) else 0 for i in range(mtp)]
    parsed = ParsedLayers(layers=[layer(r) for r in ratios[:n]], mtp_layers=[layer(r) for r in mtp_ratios])
    parsed.notes.append(
        "DeepSeek-V4 layers: every layer keeps a raw sliding window; compress_ratio 4/128 layers add "
        "one compressed row per 4/128 tokens (ratio 4 also an indexer key); 0 = window only"
    )
    if mtp and len(ratios) < n + mtp:
        parsed.notes.append("compress_ratios has no MTP entry: MTP layer assumed window-only (ratio 0)")

    def count() -> tuple[list[LayerParams], int, int, int]:
        if moe is None:
            raise NoEstimate(f"the config has no '{f.where('n_routed_experts')}'")
        per_layer, head, mtp_one = _v4_params(f, ratios[:n], moe)
        return per_layer, f.positive("hidden_size") + head, 0, mtp * mtp_one

    parsed.per_layer = count
    return parsed
