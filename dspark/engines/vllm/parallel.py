"""vLLM's checks of the tensor-parallel size against the model, as 0.32 makes them when the engine starts. Pure.

- vllm/config/model.py ModelConfig.verify_with_parallel_config: the attention heads must divide by TP
  ("Total number of attention heads (32) must be divisible by tensor parallel size (3).").
- vllm/model_executor/layers/linear.py QKVParallelLinear: KV heads are split when TP is below them
  (divide(total_num_kv_heads, tp_size)) and replicated when TP is at or above them (divide(tp_size,
  total_num_kv_heads)); divide asserts ("8 is not divisible by 6", vllm/distributed/utils.py ensure_divisibility).
  MLA layers have one latent for every head: no KV-head check.
- Not checks: the vocabulary is padded to a multiple of 64 x TP (VocabParallelEmbedding), and the fused MoE layer
  splits the experts' intermediate size without a divisibility assertion.
"""

from __future__ import annotations

from dspark.model.architecture import AttentionLayer, ModelArchitecture


def tp_problems(arch: ModelArchitecture, tp: int) -> list[str]:
    """What vLLM says when it refuses TP size `tp` for `arch` at start; [] when it does not."""
    problems = []
    heads = arch.num_attention_heads
    if heads and heads % tp:
        problems.append(f'"Total number of attention heads ({heads}) must be divisible by tensor parallel size '
                        f'({tp})." (vLLM ModelConfig.verify_with_parallel_config)')
    kv_heads = sorted({layer.num_kv_heads for layer in arch.layers if isinstance(layer, AttentionLayer)})
    for kv in kv_heads:
        numerator, denominator = (tp, kv) if tp >= kv else (kv, tp)
        if kv and numerator % denominator:
            problems.append(f'"{numerator} is not divisible by {denominator}" (vLLM QKVParallelLinear: {kv} KV heads '
                            f"are {'replicated' if tp >= kv else 'split'} across {tp} ranks)")
            break
    return problems
