"""SGLang's registry entry (dspark.engines.spec.EngineSpec)."""

from __future__ import annotations

from dspark.engines import pasted_flags
from dspark.engines.sglang import POOL_PIN, logs, plan, replay_input
from dspark.engines.sglang.adapter import SglangEngine
from dspark.engines.sglang.knobs import KNOBS
from dspark.engines.sglang.options import (
    KV_CACHE_DTYPES,
    SglangOptions,
    known_flags,
    parse_sglang_flags,
    read_back,
)
from dspark.engines.sglang.sizing_types import SglangCapacity
from dspark.engines.sglang.versions import MODELLED_VERSIONS
from dspark.engines.spec import EngineSpec

SPEC: EngineSpec[SglangOptions, SglangCapacity] = EngineSpec(
    name="sglang",
    knobs=KNOBS,
    module="sglang",
    distributions=("sglang",),
    adapter=SglangEngine,
    parse_flags=parse_sglang_flags,
    known_flags=known_flags,
    read_back=read_back,
    flag_knobs={
        "max_running_requests": "max_num_seqs",
        "context_length": "max_model_len",
        "kv_cache_dtype": "kv_cache_dtype",
        "max_total_tokens": "max_total_tokens",
        "mem_fraction_static": "mem_fraction_static",
        "tp_size": "tensor_parallel_size",
        "pp_size": "pipeline_parallel_size",
        "chunked_prefill_size": "max_num_batched_tokens",
        # Launch-only: read so that the launch passes the user's value (its own flag is set from the knob).
        "served_model_name": "served_model_name",
        "host": "host",
        "port": "port",
    },
    pinned={
        "max_num_seqs": "max_running_requests",
        "max_total_tokens": "max_total_tokens",
        "max_model_len": "context_length",
    },
    pool_pin=POOL_PIN[1],
    engine_knobs=tuple(k.name for k in KNOBS),  # its pool pin (POOL_PIN) first
    modelled_versions=MODELLED_VERSIONS,
    default_port=30000,
    # pool_configurator._resolve_max_running_requests_per_worker estimates at least 2,048.
    default_max_num_seqs=2048,
    kv_log_pattern=logs.KV_POOL_PATTERN,
    engine_args_log=logs.engine_args,
    memory_log=logs.memory_terms,
    memory_flags=pasted_flags.memory_flags,
    capacity=plan.capacity,
    witness_request=plan.witness_request,
    kv_counting=plan.kv_counting,
    data_parallel=plan.data_parallel,
    drafter_flags=plan.drafter_flags,
    foreign_knobs=(("gpu_memory_utilization", "mem_fraction_static"),),
    metric_names={
        "prefix_queries": "sglang:prompt_tokens_total",
        "prefix_hits": "sglang:cached_tokens_total",
        "preemptions": "sglang:num_retracted_requests_total",
        "prompt_tokens": "sglang:prompt_tokens_total",
        "generation_tokens": "sglang:generation_tokens_total",
        "kv_usage": "sglang:token_usage",
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "queue_time": "sglang:queue_time_seconds",
        "ttft": "sglang:time_to_first_token_seconds",  # histograms `dspark top` reads its percentiles from
        "itl": "sglang:inter_token_latency_seconds",
    },
    shown_args=("max_running_requests", "max_total_tokens", "context_length", "tp_size", "node_rank"),
    # SGLang's way of turning prefix caching off.
    negated_flag_knobs={"disable_radix_cache": "enable_prefix_caching"},
    # 0.5.10-0.5.13 have one decode graph size, --cuda-graph-max-bs (ServerArgs.add_cli_args of those releases).
    former_flags={"--cuda-graph-max-bs-decode": "--cuda-graph-max-bs"},
    health_path="/health",  # sglang/srt/entrypoints/http_server.py
    # SGLang's container instructions give 32 GB of /dev/shm to an 8-GPU server (--shm-size 32g): 4 GiB a GPU.
    shm_bytes_per_gpu=4 << 30,
    ray=None,  # SGLang spans nodes with its own runtime only
    replay=replay_input,  # a workload replayed through its scheduler (advise --workload)
    multi_node_flags="--nnodes, --node-rank, --dist-init-addr",
    # kv_cache_memory_bytes is read: SGLang pins its pool in tokens, so a byte pin becomes the tokens it buys
    # (capacity.kv_pin_tokens), launched as --max-total-tokens.
    platforms=("cuda",),  # dspark models no SGLang CPU build
    knob_values={"kv_cache_dtype": KV_CACHE_DTYPES},  # its parser's choices (0.5.23)
)
