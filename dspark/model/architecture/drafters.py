"""Speculative drafters whose layers keep KV of their own: MTP, EAGLE / EAGLE-3, DFlash, a draft model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark.core.errors import ArchitectureError
from dspark.model.architecture.fields import (
    ALIASES,
    DENSE_FAMILIES,
    FIX_HINT,
    FULL_KINDS,
    SLIDING,
    ConfigFields,
    architecture_class,
    attention_shape,
    layer_types,
    model_dtype,
    sliding_windows,
    window_of,
)
from dspark.model.architecture.layers import AttentionLayer, Drafter, Layer, ModelArchitecture
from dspark.model.architecture.params import gqa_params, mlp
from dspark.model.architecture.parse import parse_config

DRAFTER_METHODS = ("mtp", "eagle3", "eagle", "dflash", "draft_model")


def _dflash_layers(f: ConfigFields, n: int, kv_heads: int, head_dim: int) -> list[Layer]:
    """DFlash draft layers as vLLM's qwen3_dflash resolves them (_resolve_layer_attention)."""
    dflash = f.mapping("dflash_config")
    kinds = layer_types(f, n, {SLIDING, *FULL_KINDS})
    use_swa = bool(dflash.get("use_swa", False))
    any_sliding = kinds is not None and SLIDING in kinds
    window = ConfigFields(dflash, f.source).opt_int("swa_window_size") or window_of(f)
    layers: list[Layer] = []
    for i in range(n):
        sliding = use_swa if kinds is None or (use_swa and not any_sliding) else kinds[i] == SLIDING
        if sliding and window is None:
            f.missing("sliding_window")
        layers.append(
            AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=window if sliding else None)
        )
    return layers


def parse_drafter(
    config: Mapping[str, Any] | None,
    method: str,
    source: str = "",
    *,
    target: ModelArchitecture | None = None,
) -> Drafter:
    """Normalise a drafter's config.json (MTP: the target's own modules) into the layers that keep KV."""
    if method not in DRAFTER_METHODS:
        raise ArchitectureError(
            f"{source or '<speculative config>'}: speculative method '{method}' is not one of "
            f"{', '.join(DRAFTER_METHODS)}; use a method dspark sizes"
        )
    if method == "mtp":
        arch = target if target is not None else parse_config(config or {}, source)
        if not arch.mtp_layers:
            raise ArchitectureError(
                f"{arch.source or source or '<inline config>'}: model_type '{arch.model_type}' has no MTP "
                "modules (num_nextn_predict_layers / mtp_num_hidden_layers is 0 or absent); "
                f"{FIX_HINT}, or use another speculative method"
            )
        mtp_params = arch.parameters.mtp if arch.parameters is not None else None
        return Drafter(
            method="mtp",
            layers=arch.mtp_layers,
            parameter_count=mtp_params,
            source=arch.source or source,
            dtype=arch.dtype,
        )
    if config is None:
        raise ArchitectureError(
            f"{source or '<speculative config>'}: method '{method}' needs the drafter's config.json"
        )
    if method == "draft_model":
        arch = parse_config(config, source)
        return Drafter(
            method=method,
            layers=arch.layers,
            parameter_count=arch.parameter_count,
            source=source,
            dtype=arch.dtype,
            notes=arch.notes,
        )
    # speculators-format checkpoints nest the transformer under transformer_layer_config.
    nested = "transformer_layer_config" if "transformer_layer_config" in config else "text_config"
    f = ConfigFields(config, source, nested=nested)
    f.label = f"{method} drafter"
    notes: list[str] = []
    dtype = model_dtype(f, notes)
    if method == "dflash":
        return _dflash_drafter(f, source, dtype, notes)
    return _eagle_drafter(f, method, source, dtype, notes)


def _dflash_drafter(f: ConfigFields, source: str, dtype: str, notes: list[str]) -> Drafter:
    """A DFlash drafter: Qwen3-style layers (sliding per vLLM's rules) fed by fused target hidden states."""
    n = f.positive("num_hidden_layers")
    hidden = f.positive("hidden_size")
    _, kv_heads, head_dim = attention_shape(f)
    family = ALIASES.get(str(f.raw("model_type") or "qwen3"), str(f.raw("model_type") or "qwen3"))
    attn, _, _ = gqa_params(f, family)
    inter = f.opt_int("intermediate_size")
    df = ConfigFields(f.mapping("dflash_config"), f"{f.source} dflash_config")
    block = df.opt_int("block_size") or f.opt_int("block_size")
    targets = df.int_list("target_layer_ids") or f.int_list("eagle_aux_hidden_state_layer_ids") or ()
    layers = _dflash_layers(f, n, kv_heads, head_dim)
    params = None
    if inter is not None:
        fc_in = (f.opt_int("target_hidden_size") or hidden) * (len(targets) or n)
        params = n * (attn + mlp(hidden, inter) + 2 * hidden) + fc_in * hidden + 2 * hidden
        notes.append("DFlash parameters: draft layers + fc + norms; embedding and LM head are the target's")
    if "DFlash2" in architecture_class(f):
        notes.append("DFlash2 extras (convolutions, candidate selector) not in the parameter estimate")
    return Drafter(
        method="dflash",
        layers=tuple(layers),
        parameter_count=params,
        source=source,
        dtype=dtype,
        block_size=block,
        target_layer_ids=targets,
        notes=tuple(notes),
    )


def _eagle_drafter(f: ConfigFields, method: str, source: str, dtype: str, notes: list[str]) -> Drafter:
    """An EAGLE / EAGLE-3 drafter: Llama- or Qwen3-style decoder layers; vLLM gives each its own KV."""
    n = f.positive("num_hidden_layers")
    hidden = f.positive("hidden_size")
    heads, kv_heads, head_dim = attention_shape(f)
    family = ALIASES.get(str(f.raw("model_type") or "llama"), str(f.raw("model_type") or "llama"))
    attn, _, kv = gqa_params(f, family)
    inter = f.opt_int("intermediate_size")
    kinds = layer_types(f, n, {SLIDING, *FULL_KINDS})
    windows = sliding_windows(f, family if family in DENSE_FAMILIES else "llama", n, kinds)
    layers = [AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=w) for w in windows]
    targets = f.int_list("eagle_aux_hidden_state_layer_ids") or ()
    params = None
    if inter is not None:
        q_o = attn - kv
        if method == "eagle3":
            # Layer 0 reads [embedding, hidden] (2h) into q/k/v; fc fuses 3 target hidden states.
            first = q_o + hidden * heads * head_dim + 2 * kv + mlp(hidden, inter) + 3 * hidden
            rest = (n - 1) * (attn + mlp(hidden, inter) + 2 * hidden)
            fc = (f.opt_int("target_hidden_size") or hidden) * (len(targets) or 3) * hidden
            vocab = f.opt_int("draft_vocab_size") or f.positive("vocab_size")
            params = first + rest + fc + hidden + vocab * hidden
        else:
            params = n * (attn + mlp(hidden, inter) + 2 * hidden) + 2 * hidden * hidden
        notes.append("drafter parameters exclude the input embedding, which vLLM shares with the target")
    return Drafter(
        method=method,
        layers=tuple(layers),
        parameter_count=params,
        source=source,
        dtype=dtype,
        target_layer_ids=targets,
        notes=tuple(notes),
    )
