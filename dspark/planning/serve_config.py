"""The launch values a validated plan resolves to (ServeConfig): settings, recipe and the pinned pool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dspark.capacity import CapacitySummary
from dspark.config.settings import ResolvedSettings
from dspark.engines.serve_config import ServeConfig

if TYPE_CHECKING:  # the recipe models (pydantic) load only when a recipe is used
    from dspark.config.recipes import Recipe
    from dspark.engines.spec import AnyEngineSpec


def serve_config(
    engine: AnyEngineSpec,
    settings: ResolvedSettings,
    recipe: Recipe | None,
    engine_flags: tuple[str, ...],
    cap: CapacitySummary,
    *,
    drafter_model: str | None,
) -> ServeConfig:
    """The resolved values the launch uses; the KV pool is pinned to the validated figure."""
    s = settings
    speculative: dict[str, Any] | None = None
    if recipe is not None and recipe.speculative is not None:
        speculative = {
            "method": recipe.speculative.method,
            "num_speculative_tokens": s.num_speculative_tokens.value or recipe.speculative.num_speculative_tokens,
        }
        if drafter_model:
            speculative["model"] = drafter_model
    engine_values = {knob: s.setting(knob).value for knob in engine.engine_knobs}
    if engine.pool_pin == "tokens" and engine_values[engine.pool_pin_knob] is None and cap.kv_pool_tokens > 0:
        # SGLang takes min(profiled, --max-total-tokens): pinning the validated pool never grows it, and a
        # start on busier memory cannot silently shrink it below what was validated without saying so.
        engine_values[engine.pool_pin_knob] = cap.kv_pool_tokens
    env = dict(recipe.env) if recipe else {}
    return ServeConfig(
        engine=engine.name,
        model=s.model.value or "",
        max_num_seqs=s.max_num_seqs.value,
        platform="cpu" if s.platform.value == "cpu" else "cuda",
        served_model_name=s.served_model_name.value,
        max_model_len=s.max_model_len.value,
        kv_cache_dtype=None if s.kv_cache_dtype.value == "auto" else s.kv_cache_dtype.value,
        max_num_batched_tokens=s.max_num_batched_tokens.value,
        cudagraph_max_capture_size=cap.cudagraph_max_capture_size if cap.cudagraph_max_capture_size > 0 else None,
        speculative=speculative,
        enable_prefix_caching=s.enable_prefix_caching.value,
        tensor_parallel_size=s.tensor_parallel_size.value,
        pipeline_parallel_size=s.pipeline_parallel_size.value,
        nnodes=s.nnodes.value,
        node_rank=s.node_rank.value,
        master_addr=s.master_addr.value,
        master_port=s.master_port.value,
        host=s.host.value,
        port=s.port.value,
        extra_args=tuple(recipe.engine_args if recipe else ()) + engine_flags,
        env=env,
        distributed_runtime=s.distributed_runtime.value,
        engine_values=engine_values,
    )
