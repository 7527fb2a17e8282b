"""SGLang's checks of the tensor-parallel size against the model, as 0.5 makes them when it builds the model. Pure.

SGLang's attention layers assert them (sglang/srt/models/qwen3.py Qwen3Attention, llama.py, qwen2.py; the same in
every GQA model): `assert self.total_num_heads % attn_tp_size == 0`, then for the KV heads
`assert self.total_num_kv_heads % attn_tp_size == 0` when there are at least as many as ranks, else
`assert attn_tp_size % self.total_num_kv_heads == 0` (replicated). With DP attention attn_tp_size is TP / DP.
The assertions carry no message: the process dies with a bare AssertionError.
"""

from __future__ import annotations

from dspark.model.architecture import AttentionLayer, ModelArchitecture


def tp_problems(arch: ModelArchitecture, tp: int) -> list[str]:
    """What SGLang asserts when it refuses attention TP size `tp` for `arch`; [] when it does not."""
    problems = []
    heads = arch.num_attention_heads
    if heads and heads % tp:
        problems.append(f"AssertionError: total_num_heads {heads} % attn_tp_size {tp} != 0 (SGLang's attention layer)")
    kv_heads = sorted({layer.num_kv_heads for layer in arch.layers if isinstance(layer, AttentionLayer)})
    for kv in kv_heads:
        if kv and ((kv % tp) if kv >= tp else (tp % kv)):
            expression = f"total_num_kv_heads {kv} % attn_tp_size {tp}" if kv >= tp else \
                f"attn_tp_size {tp} % total_num_kv_heads {kv}"
            problems.append(f"AssertionError: {expression} != 0 (SGLang's attention layer, KV heads "
                            f"{'split' if kv >= tp else 'replicated'})")
            break
    return problems
