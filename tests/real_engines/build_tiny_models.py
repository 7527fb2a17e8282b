"""Build tiny random-weight models with the engine venv's transformers (run by .engines/vllm/bin/python).

Usage: build_tiny_models.py OUT_DIR [NAME ...]; writes OUT_DIR/NAME/{config.json, model.safetensors}.
Each model is a few layers wide enough for vLLM's CPU kernels (head sizes 32/64, block multiples of 32).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers as tf
from safetensors.torch import load_file, save_file


def dense_qwen3() -> tf.PretrainedConfig:
    """Qwen3, 4 layers, GQA 4 query / 2 KV heads, head_dim 32 != hidden/heads (16)."""
    return tf.Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        dtype="bfloat16",
    )


def hybrid_qwen3_next() -> tf.PretrainedConfig:
    """Qwen3-Next: 4 layers (3 Gated DeltaNet + 1 full attention), 4 experts top-2, one MTP layer."""
    return tf.Qwen3NextConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_conv_kernel_dim=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        full_attention_interval=4,
        num_nextn_predict_layers=1,
        max_position_embeddings=8192,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )


def mla_deepseek_v3() -> tf.PretrainedConfig:
    """DeepSeek-V3 MLA: 2 layers (1 dense + 1 MoE), kv_lora_rank 64 + rope 32, noaux_tc router."""
    return tf.DeepseekV3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=None,
        kv_lora_rank=64,
        qk_rope_head_dim=32,
        qk_nope_head_dim=32,
        v_head_dim=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        topk_method="noaux_tc",
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        dtype="bfloat16",
        rope_scaling=None,
    )


def sliding_mistral() -> tf.PretrainedConfig:
    """Mistral with a 96-token sliding window on 3 of 4 layers (layer_types), GQA 4/2 x 32."""
    cfg = tf.MistralConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        sliding_window=96,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    cfg.layer_types = ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]
    return cfg


BUILDERS = {
    "dense-qwen3": dense_qwen3,
    "hybrid-qwen3-next": hybrid_qwen3_next,
    "mla-deepseek-v3": mla_deepseek_v3,
    "sliding-mistral": sliding_mistral,
}


def _copy_prefix(tensors: dict[str, torch.Tensor], src: str, dst: str) -> dict[str, torch.Tensor]:
    """Copies of every tensor named src* renamed to dst*."""
    return {dst + k[len(src) :]: v.clone() for k, v in tensors.items() if k.startswith(src)}


def _add_mtp_weights(name: str, config: tf.PretrainedConfig, target: Path) -> None:
    """Add the next-token-prediction module vLLM's MTP drafters load (HF models drop it on save)."""
    path = target / "model.safetensors"
    tensors = dict(load_file(path))
    hidden = config.hidden_size
    last = config.num_hidden_layers - 1

    def norm() -> torch.Tensor:
        return torch.ones(hidden, dtype=torch.bfloat16)

    if name == "hybrid-qwen3-next":
        # qwen3_next_mtp.py: mtp.fc, mtp.pre_fc_norm_{hidden,embedding}, mtp.norm, mtp.layers.0 (full attention).
        extra = _copy_prefix(tensors, f"model.layers.{last}.", "mtp.layers.0.")
        extra["mtp.fc.weight"] = torch.randn(hidden, 2 * hidden, dtype=torch.bfloat16) * 0.02
        for key in ("mtp.pre_fc_norm_hidden.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.norm.weight"):
            extra[key] = norm()
    elif name == "mla-deepseek-v3":
        # deepseek_mtp.py: model.layers.{num_hidden_layers}.{enorm,hnorm,eh_proj,shared_head} + a decoder layer.
        mtp = f"model.layers.{config.num_hidden_layers}."
        extra = _copy_prefix(tensors, f"model.layers.{last}.", mtp)
        extra[mtp + "eh_proj.weight"] = torch.randn(hidden, 2 * hidden, dtype=torch.bfloat16) * 0.02
        extra[mtp + "enorm.weight"] = norm()
        extra[mtp + "hnorm.weight"] = norm()
        extra[mtp + "shared_head.norm.weight"] = norm()
        extra[mtp + "shared_head.head.weight"] = tensors["lm_head.weight"].clone()
    else:
        return
    tensors.update(extra)
    save_file(tensors, path, metadata={"format": "pt"})


def build(out: Path, name: str) -> None:
    """Save NAME's config and random bf16 weights under out/NAME (skipped when already complete)."""
    target = out / name
    done = target / ".complete"
    if done.exists():
        return
    torch.manual_seed(0)
    config = BUILDERS[name]()
    model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    _add_mtp_weights(name, config, target)
    done.write_text("ok\n")


def main(argv: list[str]) -> int:
    """Entry point: OUT_DIR then model names (all when none)."""
    out = Path(argv[0])
    for name in argv[1:] or list(BUILDERS):
        build(out, name)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
