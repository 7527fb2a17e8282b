"""Parameter estimate: shapes as the checkpoints store them (checked against transformers' models)."""

from __future__ import annotations

from collections.abc import Sequence

from dspark.model.architecture.fields import QK_NORM, ConfigFields, attention_shape
from dspark.model.architecture.layers import LayerParams, MoE


class NoEstimate(Exception):
    """A field only the parameter estimate needs is absent: the estimate is skipped, not the parse."""


def need(f: ConfigFields, key: str) -> int:
    """An integer only the parameter estimate needs."""
    value = f.opt_int(key)
    if value is None:
        raise NoEstimate(f"the config has no '{f.where(key)}'")
    if value <= 0:
        f.fail(f"'{f.where(key)}' must be a positive integer, got {value}")
    return value


def mlp(hidden: int, inter: int, bias: bool = False) -> int:
    """A gated (SwiGLU-style) MLP: gate, up and down projections."""
    return 3 * hidden * inter + (2 * inter + hidden if bias else 0)


def gqa_params(f: ConfigFields, family: str, gated: bool = False) -> tuple[int, int, int]:
    """(total, replicated, kv_proj) of one softmax-attention block."""
    hidden = f.positive("hidden_size")
    heads, kv_heads, head_dim = attention_shape(f)
    q_out = heads * head_dim * (2 if gated else 1)  # gated attention emits a sigmoid gate beside q
    kv = 2 * hidden * kv_heads * head_dim
    total = hidden * q_out + kv + heads * head_dim * hidden
    all_bias = f.flag("attention_bias", False)
    if family in {"qwen2", "qwen2_moe"}:
        total += q_out + 2 * kv_heads * head_dim  # Qwen2 has q/k/v biases, no o_proj bias
    elif all_bias:
        total += q_out + 2 * kv_heads * head_dim + hidden
    replicated = 2 * head_dim if family in QK_NORM else 0
    return total + replicated, replicated, kv


def _qwen_moe_block(f: ConfigFields, moe: MoE) -> LayerParams:
    """Qwen2-MoE / Qwen3-MoE / Qwen3-Next / Qwen3.5-MoE sparse block: experts, router, shared expert + its gate."""
    hidden = f.positive("hidden_size")
    inter = moe.moe_intermediate_size or need(f, "moe_intermediate_size")
    experts = moe.num_experts * 3 * hidden * inter
    router = moe.num_experts * hidden
    shared_inter = f.opt_int("shared_expert_intermediate_size") or 0
    shared = mlp(hidden, shared_inter) + hidden if shared_inter else 0  # + sigmoid shared_expert_gate
    replicated = router + (hidden if shared_inter else 0)
    return LayerParams(total=experts + router + shared, routed_experts=experts, replicated=replicated)


def _is_qwen_moe_layer(f: ConfigFields, i: int) -> bool:
    """Qwen MoE layer schedule: mlp_only_layers stay dense; decoder_sparse_step spaces the sparse ones."""
    only = f.int_list("mlp_only_layers") or ()
    step = f.positive("decoder_sparse_step", 1)
    return i not in only and (i + 1) % step == 0


def dense_params(f: ConfigFields, family: str, n: int, moe: MoE | None) -> list[LayerParams]:
    """Per-layer parameters of a llama-style decoder (dense or MoE)."""
    hidden = f.positive("hidden_size")
    attn, attn_rep, kv = gqa_params(f, family)
    norms = (4 if family in {"gemma2", "gemma3"} else 2) * hidden
    out = []
    for i in range(n):
        if moe is not None and family == "mixtral":
            block = LayerParams(
                total=moe.num_experts * 3 * hidden * need(f, "intermediate_size") + moe.num_experts * hidden,
                routed_experts=moe.num_experts * 3 * hidden * need(f, "intermediate_size"),
                replicated=moe.num_experts * hidden,
            )
        elif moe is not None and family in {"qwen2_moe", "qwen3_moe"} and _is_qwen_moe_layer(f, i):
            block = _qwen_moe_block(f, moe)
        elif moe is not None and family not in {"qwen2_moe", "qwen3_moe"}:
            raise NoEstimate(f"dspark does not know the MoE layout of {family}")
        else:
            block = LayerParams(total=mlp(hidden, need(f, "intermediate_size"), f.flag("mlp_bias", False)))
        out.append(
            LayerParams(
                total=attn + block.total + norms,
                routed_experts=block.routed_experts,
                replicated=attn_rep + block.replicated + norms,
                kv_proj=kv,
            )
        )
    return out


def _gdn_params(f: ConfigFields) -> tuple[int, int]:
    """(total, replicated) of one Gated-DeltaNet mixer (Qwen3-Next in_proj_qkvz/ba = Qwen3.5 qkv/z/b/a)."""
    hidden = f.positive("hidden_size")
    nk, nv = f.positive("linear_num_key_heads"), f.positive("linear_num_value_heads")
    dk, dv = f.positive("linear_key_head_dim"), f.positive("linear_value_head_dim")
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    projections = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * nv + value_dim * hidden
    small = conv_dim * f.positive("linear_conv_kernel_dim") + 2 * nv + dv  # conv1d, dt_bias + A_log, norm
    return projections + small, dv


def hybrid_gdn_params(f: ConfigFields, family: str, kinds: Sequence[str], moe: MoE | None) -> list[LayerParams]:
    """Per-layer parameters of Qwen3-Next / Qwen3.5: gated full attention or Gated DeltaNet, then MLP or MoE."""
    hidden = f.positive("hidden_size")
    attn, attn_rep, kv = gqa_params(f, family, gated=f.flag("attn_output_gate", True))
    gdn, gdn_rep = _gdn_params(f)
    out = []
    for i, kind in enumerate(kinds):
        if moe is not None and _is_qwen_moe_layer(f, i):
            block = _qwen_moe_block(f, moe)
        else:
            block = LayerParams(total=mlp(hidden, need(f, "intermediate_size")))
        mixer, mixer_rep, mixer_kv = (gdn, gdn_rep, 0) if kind == "linear_attention" else (attn, attn_rep, kv)
        out.append(
            LayerParams(
                total=mixer + block.total + 2 * hidden,
                routed_experts=block.routed_experts,
                replicated=mixer_rep + block.replicated + 2 * hidden,
                kv_proj=mixer_kv,
            )
        )
    return out


def qwen_vision_params(f: ConfigFields) -> int:
    """The Qwen3.5 / Qwen3-VL vision tower: patch embed, position embed, ViT blocks, patch merger(s)."""
    v = f.mapping("vision_config")
    if not v:
        return 0
    vf = ConfigFields(v, f.source)
    h, inter, depth = vf.positive("hidden_size"), vf.positive("intermediate_size"), vf.positive("depth")
    patch = vf.positive("in_channels", 3) * vf.positive("temporal_patch_size", 2) * vf.positive("patch_size") ** 2
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)
    merged = h * vf.positive("spatial_merge_size", 2) ** 2
    out_h = vf.positive("out_hidden_size")
    merger = 2 * h + merged * merged + merged + out_h * merged + out_h
    deepstack = len(vf.int_list("deepstack_visual_indexes") or ())
    deepstack_merger = 2 * merged + merged * merged + merged + out_h * merged + out_h
    positions = vf.integer("num_position_embeddings", 0) * h
    return patch * h + h + positions + depth * block + merger + deepstack * deepstack_merger


def _mla_attention_params(f: ConfigFields, family: str) -> tuple[int, int]:
    """(total, replicated) of one DeepSeek MLA block (with the V3.2 indexer)."""
    hidden = f.positive("hidden_size")
    heads = f.positive("num_attention_heads")
    kv_rank, rope = f.positive("kv_lora_rank"), f.positive("qk_rope_head_dim")
    nope, v_dim = need(f, "qk_nope_head_dim"), need(f, "v_head_dim")
    q_rank = f.opt_int("q_lora_rank")
    q_head = heads * (nope + rope)
    if q_rank:
        q_down = hidden * q_rank + q_rank  # q_a_proj + q_a_layernorm: replicated in vLLM
        q_total, replicated = q_down + q_rank * q_head, q_down
    else:
        q_total, replicated = hidden * q_head, 0
    kv_down = hidden * (kv_rank + rope) + kv_rank  # kv_a_proj_with_mqa + kv_a_layernorm: replicated
    total = q_total + kv_down + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    replicated += kv_down
    if family == "deepseek_v32":
        ih, ihd = need(f, "index_n_heads"), f.positive("index_head_dim")
        indexer = (q_rank or hidden) * ih * ihd + hidden * ihd + 2 * ihd + hidden * ih
        total += indexer
        replicated += indexer  # vLLM builds the indexer from ReplicatedLinear
    return total, replicated


def deepseek_moe_block(f: ConfigFields, moe: MoE, bias: bool) -> LayerParams:
    """DeepSeek routed experts + shared experts + router (+ the noaux_tc score-correction bias)."""
    hidden = f.positive("hidden_size")
    inter = moe.moe_intermediate_size or need(f, "moe_intermediate_size")
    experts = moe.num_experts * 3 * hidden * inter
    router = moe.num_experts * hidden + (moe.num_experts if bias else 0)
    shared = 3 * hidden * inter * moe.num_shared_experts
    return LayerParams(total=experts + router + shared, routed_experts=experts, replicated=router)


def mla_params(f: ConfigFields, family: str, n: int, moe: MoE | None) -> tuple[list[LayerParams], LayerParams]:
    """Per-layer parameters of DeepSeek-V2/V3/V3.2, and one MoE layer (the MTP block's body)."""
    hidden = f.positive("hidden_size")
    attn, attn_rep = _mla_attention_params(f, family)
    first_dense = f.integer("first_k_dense_replace", 0)
    freq = f.positive("moe_layer_freq", 1)
    bias = f.text("topk_method") == "noaux_tc"
    dense = LayerParams(total=mlp(hidden, need(f, "intermediate_size")))
    sparse = deepseek_moe_block(f, moe, bias) if moe is not None else dense

    def layer(block: LayerParams) -> LayerParams:
        return LayerParams(
            total=attn + block.total + 2 * hidden,
            routed_experts=block.routed_experts,
            replicated=attn_rep + block.replicated + 2 * hidden,
        )

    out = [layer(sparse if moe is not None and i >= first_dense and i % freq == 0 else dense) for i in range(n)]
    return out, layer(sparse)


def nemotron_h_params(f: ConfigFields, kinds: Sequence[str]) -> list[LayerParams]:
    """Nemotron-H (vLLM nemotron_h.py, MambaMixer2): one LayerParams per cache-keeping layer, each MLP-only
    layer folded into the cache-keeping layer before it (the estimate's layers follow the cached ones).

    Mamba2 mixer (mamba_mixer2.py): in_proj hidden -> 2 x I + 2 x G x S + H (I = heads x head dim, G groups,
    S state), conv1d (I + 2 G S) x kernel (+ bias), A, D, dt_bias (H each), the gated norm (I), out_proj
    I -> hidden; attention qkv + o without bias; MLP up + down (relu2, no gate); one RMSNorm per layer.
    """
    if "moe" in kinds:
        raise NoEstimate("dspark does not count Nemotron-H MoE layers' parameters")
    hidden = f.positive("hidden_size")
    heads, head_dim = f.positive("mamba_num_heads"), f.positive("mamba_head_dim")
    groups_state = f.positive("n_groups") * f.positive("ssm_state_size")
    inner = heads * head_dim
    conv_dim = inner + 2 * groups_state
    bias = f.flag("use_bias", False)
    mamba = (hidden * (2 * inner + 2 * groups_state + heads) + (2 * inner + 2 * groups_state + heads if bias else 0)
             + conv_dim * f.positive("conv_kernel") + (conv_dim if f.flag("use_conv_bias", True) else 0)
             + 3 * heads + inner + inner * hidden + (hidden if bias else 0))
    attn, _, kv = gqa_params(f, "nemotron_h")
    inter = need(f, "intermediate_size")
    mlp_block = 2 * hidden * inter + (inter + hidden if f.flag("mlp_bias", False) else 0) + hidden
    out: list[LayerParams] = []
    leading = 0  # MLP layers before the first cache-keeping one go to it
    for kind in kinds:
        if kind == "mlp" and not out:
            leading += 1
        elif kind == "mlp":
            last = out[-1]
            out[-1] = LayerParams(total=last.total + mlp_block, replicated=last.replicated + hidden,
                                  kv_proj=last.kv_proj)
        else:
            mixer, mixer_kv = (mamba, 0) if kind == "mamba" else (attn, kv)
            extra = leading * mlp_block if not out else 0
            out.append(LayerParams(total=mixer + hidden + extra, replicated=hidden * (1 + (leading if not out
                                   else 0)), kv_proj=mixer_kv))
    return out
