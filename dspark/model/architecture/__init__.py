"""A model's layers, normalised from config.json: what each layer keeps per token or per sequence.

Pure: takes already-parsed JSON (dicts); reading files is dspark.model.modeldir's job.
Engine accounting (dspark.capacity.*) only looks at these types, never at raw config keys.

Entry points: ``parse_config(config, source)`` for a target model, ``parse_drafter(config, method)``
for a speculative drafter. Both fail closed with ArchitectureError (naming the file, the key and the
fix) rather than guess a layer shape.

Giving an architecture by hand. A recipe may carry an inline config.json mapping (``model.config``,
or ``model.config_overrides`` merged over a directory's config.json); it goes straight to
parse_config, so it needs only the keys below (nested ``text_config`` works too). Keys every
family needs: ``model_type``, ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
``vocab_size``, ``max_position_embeddings``. Optional everywhere: ``num_key_value_heads``
(default: num_attention_heads), ``head_dim`` (default: hidden_size // num_attention_heads),
``torch_dtype`` or ``dtype`` (default bfloat16), ``quantization_config.quant_method``,
``intermediate_size`` (only the parameter estimate needs it). Then, per family:

- dense GQA/MHA (llama, mistral, qwen2, qwen3, gemma2/3, ...): nothing more. Sliding windows:
  ``sliding_window`` with ``layer_types`` (``"sliding_attention"`` / ``"full_attention"`` per layer);
  qwen2/qwen3 also ``use_sliding_window`` + ``max_window_layers``; gemma2/gemma3 alternate by
  default; any other family with ``sliding_window`` alone slides on every layer (Mistral).
- MoE (qwen3_moe, qwen2_moe, mixtral, ...): ``num_experts`` (or ``n_routed_experts`` /
  ``num_local_experts``), ``num_experts_per_tok``, ``moe_intermediate_size``.
- MLA (deepseek_v2, deepseek_v3): ``kv_lora_rank``, ``qk_rope_head_dim``; DeepSeek-V3.2
  (deepseek_v32) adds ``index_head_dim``.
- DeepSeek-V4 (deepseek_v4): ``head_dim``, ``qk_rope_head_dim``, ``sliding_window``,
  ``compress_ratios`` (one per layer, 0 = window only), ``index_head_dim``.
- Gated-DeltaNet hybrids (qwen3_next, qwen3_5, qwen3_5_moe): ``layer_types``
  (``"linear_attention"`` / ``"full_attention"``) or ``full_attention_interval``, and
  ``linear_num_key_heads``, ``linear_num_value_heads``, ``linear_key_head_dim``,
  ``linear_value_head_dim``, ``linear_conv_kernel_dim``; optional ``mamba_ssm_dtype``.
- Mamba2 hybrids: nemotron_h (``hybrid_override_pattern`` or ``layers_block_type``, ``n_groups``,
  ``ssm_state_size``, ``mamba_num_heads``, ``mamba_head_dim``, ``conv_kernel``) and
  granitemoehybrid (``layer_types``, ``mamba_n_groups``, ``mamba_d_state``, ``mamba_n_heads``,
  ``mamba_d_head``, ``mamba_d_conv``).
- MTP modules: ``num_nextn_predict_layers`` or ``mtp_num_hidden_layers`` (Qwen3-Next: 1 when unset).

Minimal example: ``{"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
"max_position_embeddings": 8192}``.
"""

from __future__ import annotations

from dspark.model.architecture.drafters import DRAFTER_METHODS, parse_drafter
from dspark.model.architecture.layers import (
    DTYPE_BYTES,
    AttentionLayer,
    Drafter,
    Layer,
    LayerParams,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    MoE,
    ParameterCount,
    dtype_bytes,
)
from dspark.model.architecture.parse import parse_config

__all__ = [
    "DRAFTER_METHODS",
    "DTYPE_BYTES",
    "AttentionLayer",
    "Drafter",
    "Layer",
    "LayerParams",
    "LinearStateLayer",
    "MLALayer",
    "MoE",
    "ModelArchitecture",
    "ParameterCount",
    "dtype_bytes",
    "parse_config",
    "parse_drafter",
]
