"""parse_config: a config.json mapping to a ModelArchitecture, dispatching on the family."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark.core.errors import ArchitectureError
from dspark.model.architecture.deepseek_v4 import parse_v4
from dspark.model.architecture.families import embeddings, parse_dense, parse_gdn, parse_mamba2, parse_mla
from dspark.model.architecture.fields import (
    FIX_HINT,
    GDN_FAMILIES,
    MAMBA2_FAMILIES,
    MLA_FAMILIES,
    ConfigFields,
    architecture_class,
    family_of,
    model_dtype,
    read_moe,
)
from dspark.model.architecture.layers import (
    AttentionLayer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    ParameterCount,
    RotaryTable,
)
from dspark.model.architecture.params import NoEstimate
from dspark.model.architecture.quantization import block_scale_bytes, read_quantization
from dspark.model.architecture.rope import rotary_tables


def parse_config(config: Mapping[str, Any], source: str = "") -> ModelArchitecture:
    """Normalise a config.json mapping into layers; raises ArchitectureError naming source, key and fix."""
    if not isinstance(config, Mapping):
        raise ArchitectureError(f"{source or '<inline config>'}: a model config must be a JSON object; {FIX_HINT}")
    f = ConfigFields(config, source)
    family = family_of(f)
    f.label = f"model_type '{family}'"
    notes: list[str] = []
    n = f.positive("num_hidden_layers")
    hidden = f.positive("hidden_size")
    heads = f.positive("num_attention_heads")
    vocab = f.positive("vocab_size")
    max_pos = f.positive("max_position_embeddings")
    dtype = model_dtype(f, notes)
    quantization, weight_format, expert_format = read_quantization(f, notes)
    moe = read_moe(f)
    if family in MLA_FAMILIES:
        parsed = parse_mla(f, family, n, moe)
    elif family == "deepseek_v4":
        parsed = parse_v4(f, n, moe)
    elif family in GDN_FAMILIES:
        parsed = parse_gdn(f, family, n, moe)
    elif family in MAMBA2_FAMILIES:
        parsed = parse_mamba2(f, family, n)
    else:
        parsed = parse_dense(f, family, n, moe)
    if any(isinstance(layer, LinearStateLayer) for layer in parsed.layers) and not any(
        isinstance(layer, AttentionLayer | MLALayer) for layer in parsed.layers
    ):
        # vLLM sizes a hybrid's KV pages from its attention layers (HybridAttentionMambaModelConfig
        # .verify_and_update_config pads the state page to an attention page) and SGLang's hybrid pool
        # sizes tokens per full-attention layer: neither has a page size for a model with none.
        f.fail(
            "every layer keeps linear state and none is full attention (check 'layer_types' / "
            "'full_attention_interval' against num_hidden_layers): the engines size a hybrid model's KV "
            "pages from its attention layers and have none to size here"
        )
    notes.extend(parsed.notes)

    embedding, lm_head, tied = embeddings(f, family)
    parameters: ParameterCount | None = None
    if parsed.per_layer is not None:
        try:
            per_layer, final, vision, mtp = parsed.per_layer()
        except NoEstimate as missing:
            notes.append(f"no parameter estimate: {missing.args[0]}")
        else:
            parameters = ParameterCount(
                embedding=embedding,
                lm_head=lm_head,
                layers=tuple(per_layer),
                final=final,
                vision=vision,
                mtp=mtp,
            )
            if f.mapping("vision_config") and not vision:
                notes.append("vision tower not counted in the parameter estimate")
    return ModelArchitecture(
        model_type=family,
        architecture=architecture_class(f),
        dtype=dtype,
        hidden_size=hidden,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        layers=tuple(parsed.layers),
        num_attention_heads=heads,
        moe=moe,
        mtp_layers=tuple(parsed.mtp_layers),
        parameter_count=None if parameters is None else parameters.total,
        quantization=quantization,
        source=source,
        notes=tuple(notes),
        parameters=parameters,
        weight_format=weight_format,
        block_scale_bytes_per_parameter=block_scale_bytes(f, weight_format),
        expert_weight_format=expert_format,
        tie_word_embeddings=tied,
        vision_tower=_vision_tower(f),
        wraps_text_config=bool(f.nested),
        rotary_tables=_ropes(f, family, parsed.layers),
        intermediate_size=_dense_width(f, "intermediate_size"),
        shared_expert_intermediate_size=_dense_width(f, "shared_expert_intermediate_size"),
    )


def _dense_width(f: ConfigFields, key: str) -> int | None:
    """An MLP width when it is one positive integer (some configs give a list per layer: not read)."""
    raw = f.raw(key)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None


def _ropes(f: ConfigFields, family: str, layers: list[Any]) -> tuple[RotaryTable, ...]:
    """The ropes of the attention layers: head_dim wide (MLA: its rope dim); none read for DeepSeek-V4 and Mamba2."""
    if family == "deepseek_v4" or family in MAMBA2_FAMILIES:
        return ()
    mla = next((layer for layer in layers if isinstance(layer, MLALayer)), None)
    if mla is not None:
        return rotary_tables(f, mla.qk_rope_head_dim, sliding_local_base=False)
    attention = next((layer for layer in layers if isinstance(layer, AttentionLayer)), None)
    if attention is None:
        return ()
    sliding = any(isinstance(layer, AttentionLayer) and layer.sliding_window for layer in layers)
    return rotary_tables(f, attention.head_dim, sliding_local_base=sliding)


def _vision_tower(f: ConfigFields) -> tuple[int, int] | None:
    """(layers, width) of vision_config, bounded like every other config integer; None without one."""
    vision = f.mapping("vision_config")
    if not vision:
        return None
    v = ConfigFields({"vision_config": vision}, f.source, nested="vision_config")  # errors name vision_config.KEY
    # Only num_hidden_layers: the Qwen-VL configs' `depth` is another attribute to the config classes SGLang
    # loads (configs/qwen3_vl.py), so their towers count as SGLang's default of 24 layers.
    return v.positive("num_hidden_layers", 24), v.positive("hidden_size", 1024)
