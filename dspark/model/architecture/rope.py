"""The rotary-embedding tables a config implies: one per distinct rope of its attention layers.

Engines precompute each rope's cos/sin table at model load and keep it on the device beside the weights, so it
counts in what "loading the model" takes. What a table holds (its rope type, positions, rotary width, scaling
factor) is read here from the config; how many rows an engine builds from it is the engine's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark.model.architecture.fields import ConfigFields
from dspark.model.architecture.layers import RotaryTable

_MAX_FACTOR = 1024.0  # a scaling factor above this is a typo, not a context extension


def _factor(f: ConfigFields, params: Mapping[str, Any]) -> float:
    value = params.get("factor", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= _MAX_FACTOR:
        f.fail(f"rope scaling 'factor' must be a number in (0, {_MAX_FACTOR:g}], got {value!r}")
    return float(value)


def _original(f: ConfigFields, params: Mapping[str, Any]) -> int | None:
    value = params.get("original_max_position_embeddings")
    if value is None:
        return None
    return ConfigFields({"original_max_position_embeddings": value}, f.source).positive(
        "original_max_position_embeddings")


def _theta(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 10000.0


def _table(f: ConfigFields, params: Mapping[str, Any], max_pos: int, width: int) -> RotaryTable:
    kind = str(params.get("rope_type") or params.get("type") or "default")
    if kind == "default" and "mrope_section" in params:
        kind = "mrope"  # get_rope: a "default" rope with mrope_section is a multimodal rope
    if kind in ("longrope", "su"):
        # Phi-3/Phi-4 configs keep original_max_position_embeddings beside rope_scaling; transformers' Phi3Config
        # moves it into rope_parameters, where get_rope reads it ("su" is the older spelling of longrope).
        kind = "longrope"
        if "original_max_position_embeddings" not in params and f.has("original_max_position_embeddings"):
            params = {**params, "original_max_position_embeddings": f.raw("original_max_position_embeddings")}
    partial = params.get("partial_rotary_factor")
    dim = width
    if isinstance(partial, int | float) and not isinstance(partial, bool) and 0 < partial <= 1:
        dim = int(width * partial)
    return RotaryTable(kind, max_pos, dim, _theta(params.get("rope_theta")), _factor(f, params),
                       _original(f, params))


def rotary_tables(f: ConfigFields, head_width: int, *, sliding_local_base: bool) -> tuple[RotaryTable, ...]:
    """The distinct ropes of a config's attention layers (a Gemma-3-style local rope for sliding layers too)."""
    max_pos = f.positive("max_position_embeddings")
    partial = f.raw("partial_rotary_factor")
    base: dict[str, Any] = {"rope_theta": f.raw("rope_theta")}
    if isinstance(partial, int | float) and not isinstance(partial, bool):
        base["partial_rotary_factor"] = partial
    params = f.mapping("rope_parameters") or f.mapping("rope_scaling")
    per_layer = {k: v for k, v in params.items() if isinstance(v, Mapping)}
    if per_layer:  # transformers v5: one rope per layer type ({"full_attention": {...}, "sliding_attention": ...})
        return tuple(dict.fromkeys(_table(f, {**base, **p}, max_pos, head_width) for p in per_layer.values()))
    tables = [_table(f, {**base, **params}, max_pos, head_width)]
    if sliding_local_base and f.has("rope_local_base_freq"):
        # Gemma 3 (transformers v4): sliding layers use a plain rope with the local base (a separate table).
        tables.append(RotaryTable("default", max_pos, tables[0].rotary_dim, _theta(f.raw("rope_local_base_freq"))))
    return tuple(dict.fromkeys(tables))
