"""Engine flags a recipe models as its own keys, and flags that belong to one run: where each belongs instead."""

from __future__ import annotations

# Engine flags (underscored, no dashes) that a recipe models as fields: passing them in engine_args too
# would give one setting two sources, and the precedence chain could not see the second one.
FLAG_FIELDS: dict[str, str] = {
    "max_num_seqs": "batching.max_num_seqs",
    "max_running_requests": "batching.max_num_seqs",
    "max_num_batched_tokens": "batching.max_num_batched_tokens",
    "chunked_prefill_size": "batching.max_num_batched_tokens",
    "max_model_len": "context.max_model_len",
    "context_length": "context.max_model_len",
    "tensor_parallel_size": "parallel.tensor",
    "tp": "parallel.tensor",
    "tp_size": "parallel.tensor",
    "pipeline_parallel_size": "parallel.pipeline",
    "pp": "parallel.pipeline",
    "pp_size": "parallel.pipeline",
    "nnodes": "parallel.nodes",
    "master_addr": "parallel.master_addr",
    "master_port": "parallel.master_port",
    "dist_init_addr": "parallel.master_addr",
    "distributed_executor_backend": "parallel.runtime",
    "kv_cache_dtype": "kv_cache.dtype",
    "kv_cache_memory_bytes": "kv_cache.memory",
    "kv_cache_memory": "kv_cache.memory",
    "max_total_tokens": "kv_cache.tokens",
    "gpu_memory_utilization": "kv_cache.gpu_memory_utilization",
    "mem_fraction_static": "kv_cache.mem_fraction_static",
    "speculative_config": "speculative",
    "sc": "speculative",
    "spec_method": "speculative.method",
    "spec_model": "speculative.draft_model",
    "spec_tokens": "speculative.num_speculative_tokens",
    "speculative_algorithm": "speculative.method",
    "speculative_num_draft_tokens": "speculative.num_speculative_tokens",
    "speculative_draft_model_path": "speculative.draft_model",
    "speculative_draft_model": "speculative.draft_model",
    "num_speculative_tokens": "speculative.num_speculative_tokens",
    "served_model_name": "model.served_name",
    "model": "model.path",
    "model_path": "model.path",
    "revision": "model.revision",
    "enable_prefix_caching": "prefix_caching",
    "disable_radix_cache": "prefix_caching",
}
# Flags that belong to one machine or one run, not to a recipe.
RUN_FLAGS: dict[str, str] = {
    "node_rank": "--node-rank / DSPARK_NODE_RANK",
    "port": "--port / DSPARK_PORT",
    "host": "--host / DSPARK_HOST",
}
