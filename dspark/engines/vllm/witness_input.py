"""What dspark hands vLLM's own planner for the witness (dspark_inside.vllm.witness): pure, from a VllmCapacity."""

from __future__ import annotations

from dspark.engines.vllm.groups import pp_stage_of
from dspark.engines.vllm.kv_types import LayerSpec, VllmCapacity

_SPEC_CLASS = {"full": "FullAttentionSpec", "sliding": "SlidingWindowSpec", "mla": "MLAAttentionSpec",
               "mamba": "MambaSpec"}


class WitnessNotPossibleError(ValueError):
    """A layer kind the witness cannot hand the engine's planner (its spec class needs more than dspark has)."""


def _layer(spec: LayerSpec) -> dict[str, object]:
    if spec.kind not in _SPEC_CLASS:
        raise WitnessNotPossibleError(f"layer {spec.name}: {spec.kind} specs are not witnessed")
    kwargs = dict(spec.engine_kwargs)
    return {"name": spec.name, "class": _SPEC_CLASS[spec.kind], "block_size": spec.block_size, "kwargs": kwargs}


def vllm_witness_request(cap: VllmCapacity) -> dict[str, object]:
    """The request for the engine's planner: the layers' specs per pipeline stage, the budget and the settings."""
    stages: list[list[dict[str, object]]] = [[] for _ in range(cap.pipeline_parallel_size)]
    for spec in cap.engine_layers:
        stages[pp_stage_of(spec.name, cap.model_layers, cap.pipeline_parallel_size)].append(_layer(spec))
    return {
        "engine": "vllm",
        "max_model_len": cap.engine_max_model_len,
        "auto_fit": cap.auto_fit,
        "budget_bytes": cap.budget.bytes,
        "num_gpu_blocks_override": cap.num_gpu_blocks_override,
        "num_prefill_lookahead_tokens": cap.prefill_lookahead_tokens,
        "max_in_flight_tokens": cap.max_in_flight_tokens,
        "max_num_batched_tokens": cap.max_num_batched_tokens,
        "max_num_seqs": cap.max_num_seqs,
        "disable_hybrid_kv_cache_manager": cap.disable_hybrid_kv_cache_manager,
        "enable_prefix_caching": cap.enable_prefix_caching,
        "mamba_cache_mode": cap.mamba_cache_mode or "none",
        "tp": cap.tensor_parallel_size,
        "pp": cap.pipeline_parallel_size,
        "kv_cache_layout": "NHD",
        "workers": stages,
    }
