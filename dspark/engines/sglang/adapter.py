"""SGLang adapter: `python -m sglang.launch_server` argv, multi-node flags, parser check."""

from __future__ import annotations

from dspark.engines.argv import flag, strip_flags
from dspark.engines.serve_config import ServeConfig
from dspark.engines.sglang.options import sglang_speculative_flags
from dspark.runtime.launch import LaunchPlan

MANAGED_FLAGS: dict[str, int] = {
    "--model-path": 1,
    "--model": 1,
    "--max-running-requests": 1,
    "--max-total-tokens": 1,
    "--context-length": 1,
    "--kv-cache-dtype": 1,
    "--mem-fraction-static": 1,
    "--chunked-prefill-size": 1,
    "--cuda-graph-max-bs-decode": 1,
    "--speculative-num-steps": 1,
    "--speculative-eagle-topk": 1,
    "--tp-size": 1,
    "--tensor-parallel-size": 1,
    "--pp-size": 1,
    "--nnodes": 1,
    "--node-rank": 1,
    "--dist-init-addr": 1,
    "--speculative-algorithm": 1,
    "--speculative-num-draft-tokens": 1,
    "--speculative-draft-model-path": 1,
    "--disable-radix-cache": 0,
    "--served-model-name": 1,
    "--host": 1,
    "--port": 1,
}

# Set by dspark only from a recipe's `speculative:`; without one, the user's own flags configure speculative
# decoding (dspark's capacity and the witness read them), so they must reach the engine rather than be stripped.
SPECULATIVE_FLAGS = frozenset({"--speculative-algorithm", "--speculative-num-steps", "--speculative-eagle-topk",
                               "--speculative-num-draft-tokens", "--speculative-draft-model-path"})

MODULE = "sglang.launch_server"

# dspark's speculative method names -> SGLang's --speculative-algorithm values.
_ALGORITHMS = {"mtp": "NEXTN", "nextn": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "dflash": "DFLASH",
               "draft_model": "STANDALONE", "standalone": "STANDALONE", "ngram": "NGRAM"}


class SglangEngine:
    """Builds and checks SGLang launch plans."""

    name = "sglang"
    module = "sglang"

    def build_plan(self, config: ServeConfig, python: str | None) -> LaunchPlan:
        """`<python> -m sglang.launch_server --model-path MODEL <flags>` (python None: `python3`, for display)."""
        args = [python or "python3", "-m", MODULE, "--model-path", config.model]
        managed = MANAGED_FLAGS if config.speculative else {
            k: n for k, n in MANAGED_FLAGS.items() if k not in SPECULATIVE_FLAGS}
        args += self._flags(config) + list(strip_flags(config.extra_args, managed))
        return LaunchPlan(
            engine=self.name,
            argv=tuple(args),
            env_overlay=dict(config.env),
            node_rank=config.node_rank,
            description=f"SGLang launch_server {config.model} (node {config.node_rank} of {config.nnodes})",
        )

    def parser_argv(self, plan: LaunchPlan) -> list[str]:
        """What ServerArgs' parser sees: everything after the module name."""
        argv = list(plan.argv)
        return argv[argv.index(MODULE) + 1:]

    @staticmethod
    def _flags(c: ServeConfig) -> list[str]:
        out = ["--max-running-requests", str(c.max_num_seqs)]
        out += flag("--max-total-tokens", c.engine_values.get("max_total_tokens"))
        out += flag("--context-length", c.max_model_len)
        out += flag("--kv-cache-dtype", c.kv_cache_dtype)
        out += flag("--mem-fraction-static", c.engine_values.get("mem_fraction_static"))
        out += flag("--chunked-prefill-size", c.max_num_batched_tokens)
        out += flag("--cuda-graph-max-bs-decode", c.cudagraph_max_capture_size)  # 0.5.23 dropped --cuda-graph-max-bs
        if c.tensor_parallel_size != 1:
            out += ["--tp-size", str(c.tensor_parallel_size)]
        if c.pipeline_parallel_size != 1:
            out += ["--pp-size", str(c.pipeline_parallel_size)]
        if c.speculative:
            method = str(c.speculative.get("method", "")).lower()
            out += ["--speculative-algorithm", _ALGORITHMS.get(method, method.upper())]
            out += flag("--speculative-draft-model-path", c.speculative.get("model"))
            proposed = c.speculative.get("num_speculative_tokens")
            if proposed:
                for name, value in sglang_speculative_flags(method, int(proposed)).items():
                    out += ["--" + name.replace("_", "-"), str(value)]
        if c.enable_prefix_caching is False:
            out.append("--disable-radix-cache")
        if c.nnodes > 1:
            out += ["--nnodes", str(c.nnodes), "--node-rank", str(c.node_rank)]
            if c.master_addr:
                out += ["--dist-init-addr", f"{c.master_addr}:{c.master_port or 29500}"]
        out += flag("--served-model-name", c.served_model_name)
        out += flag("--host", c.host) + flag("--port", c.port)
        return out
