"""SGLang's registry entry (dspark.engines.EngineSpec)."""

from __future__ import annotations

from dspark.engines.base import EngineSpec
from dspark.engines.sglang.adapter import SglangEngine
from dspark.engines.sglang.options import KV_CACHE_DTYPES, parse_sglang_flags
from dspark.engines.sglang.versions import MODELLED_VERSIONS

SPEC = EngineSpec(
    name="sglang",
    module="sglang",
    distributions=("sglang",),
    adapter=SglangEngine,
    parse_flags=parse_sglang_flags,
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
    pool_pin="tokens",
    modelled_versions=MODELLED_VERSIONS,
    default_port=30000,
    # scheduler's start-up log: "max_total_num_tokens=N, chunked_prefill_size=..., max_running_requests=..."
    kv_log_pattern=r"max_total_num_tokens=(\d+)",
    # 0.5.10-0.5.13 have one decode graph size, --cuda-graph-max-bs (ServerArgs.add_cli_args of those releases).
    former_flags={"--cuda-graph-max-bs-decode": "--cuda-graph-max-bs"},
    unread_knobs={"gpu_memory_utilization": "mem_fraction_static"},
    # kv_cache_memory_bytes is read: SGLang pins its pool in tokens, so a byte pin becomes the tokens it buys
    # (capacity.kv_pin_tokens), launched as --max-total-tokens.
    platforms=("cuda",),  # dspark models no SGLang CPU build
    knob_values={"kv_cache_dtype": KV_CACHE_DTYPES},  # its parser's choices (0.5.23)
)
