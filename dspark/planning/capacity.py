"""From resolved settings to one engine's capacity: the values its model reads, then the model its EngineSpec names.

Pure: the GPU figures, weights and environment come in as arguments. The engine's model also says how much
memory the engine will hold per GPU (its footprint), which the memory checks compare with free memory.
Capacity has three rooms: dspark.capacity (the engine-neutral results and seat arithmetic every engine
shares), dspark/engines/<engine>/capacity.py (each engine's own accounting) and this module (the call between).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from dspark.capacity.result import CapacityInputs, CapacityResult, SpeculativeInputs
from dspark.config.settings import ResolvedSettings
from dspark.hardware import GpuInfo
from dspark.model.architecture import Drafter, ModelArchitecture
from dspark.model.weights import WeightBytes

if TYPE_CHECKING:
    from dspark.config.recipes import Recipe
    from dspark.engines.spec import AnyEngineSpec

__all__ = ["CapacityResult", "capacity_inputs", "compute_capacity"]


def capacity_inputs(engine: AnyEngineSpec, s: ResolvedSettings, recipe: Recipe | None) -> CapacityInputs:
    """The values an engine's capacity model reads: the resolved settings, the recipe's drafter and environment.

    The engine's own knobs travel by name (engine_values), but for the byte pin, which every engine reads.
    """
    spec = recipe.speculative if recipe is not None else None
    shared = {f.name for f in fields(CapacityInputs)}
    return CapacityInputs(
        platform="cpu" if s.platform.value == "cpu" else "cuda",
        model=s.model.value,
        max_num_seqs=s.max_num_seqs.value,
        max_model_len=s.max_model_len.value,
        kv_cache_dtype=s.kv_cache_dtype.value,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes.value,
        max_num_batched_tokens=s.max_num_batched_tokens.value,
        enable_prefix_caching=s.enable_prefix_caching.value,
        tensor_parallel_size=s.tensor_parallel_size.value,
        pipeline_parallel_size=s.pipeline_parallel_size.value,
        num_speculative_tokens=s.num_speculative_tokens.value,
        speculative=(SpeculativeInputs(spec.method, spec.num_speculative_tokens, spec.draft_model)
                     if spec is not None else None),
        recipe_env=dict(recipe.env) if recipe is not None else {},
        engine_values={k: s.setting(k).value for k in engine.engine_knobs if k not in shared},
    )


def compute_capacity(
    engine: AnyEngineSpec,
    arch: ModelArchitecture,
    options: Any,
    settings: ResolvedSettings,
    recipe: Recipe | None,
    *,
    gpu: GpuInfo | None,
    weights: WeightBytes | None,
    drafter: Drafter | None,
    env: Mapping[str, str],
    cpu_flags: tuple[str, ...] | None = None,
    cpu_arch: str | None = None,
    engine_version: str | None = None,
) -> CapacityResult:
    """The engine's accounting with the resolved settings laid over the pasted engine flags.

    cpu_flags / cpu_arch: the host CPU, for CPU engines (vLLM picks kernels and state dtypes by them).
    """
    return engine.capacity(
        arch, options, capacity_inputs(engine, settings, recipe), gpu=gpu, weights=weights, drafter=drafter, env=env,
        cpu_flags=cpu_flags, cpu_arch=cpu_arch, version=engine_version,
    )
