"""Start the real vLLM engine for each case, in this one process, and let it print its KV line.

Run by the engine's own interpreter (.engines/vllm/bin/python), never imported by dspark.
Usage: oracle_runner.py CASES.json, a list of {"id": str, "argv": [vllm serve argv], "env": {name: value|null}}.

Each case goes through `vllm serve`'s own argument parser (make_arg_parser) and engine-config path
(EngineArgs.from_cli_args + LLMEngine.from_engine_args with the OPENAI_API_SERVER usage context, so
the serve defaults apply); VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps engine core and worker in this
process, which saves one vLLM import per process (two per case) against `python -m ...api_server`.
Output: "ORACLE-BEGIN <id>", then vLLM's own log lines, then "ORACLE-END <id> <json>" or
"ORACLE-FAILED <id> <json>". After a failure the process exits 3 (vLLM's state may be torn), and the
harness starts a fresh runner for the remaining cases.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

import vllm.logger as vllm_logger
from vllm.distributed.parallel_state import (
    destroy_distributed_environment,
    destroy_model_parallel,
)
from vllm.engine.arg_utils import EngineArgs

try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:  # vLLM 0.28.0 and before keep it with the OpenAI server (benchmarks/version_matrix runs them)
    from vllm.entrypoints.openai.cli_args import make_arg_parser
from vllm.usage.usage_lib import UsageContext
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.engine.llm_engine import LLMEngine


def run_case(parser: FlexibleArgumentParser, case: dict[str, object]) -> dict[str, object]:
    """Build one engine from a serve argv, return the figures it stored, shut it down."""
    env = case.get("env") or {}
    assert isinstance(env, dict)
    saved = {k: os.environ.get(k) for k in env}
    for key, value in env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = str(value)
    # info_once is an lru_cache: a second case with the same figures would print nothing.
    vllm_logger._print_info_once.cache_clear()
    try:
        argv = case["argv"]
        assert isinstance(argv, list)
        args = parser.parse_args([str(a) for a in argv])
        engine = LLMEngine.from_engine_args(
            EngineArgs.from_cli_args(args), usage_context=UsageContext.OPENAI_API_SERVER
        )
        vc = engine.vllm_config
        result = {
            "kv_cache_size_tokens": vc.cache_config.kv_cache_size_tokens,
            "max_concurrency": vc.cache_config.kv_cache_max_concurrency,
            "num_gpu_blocks": vc.cache_config.num_gpu_blocks,
            "block_size": vc.cache_config.block_size,
            "mamba_cache_mode": vc.cache_config.mamba_cache_mode,
            "enable_prefix_caching": vc.cache_config.enable_prefix_caching,
            "max_model_len": vc.model_config.max_model_len,
            "max_num_seqs": vc.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
        }
        engine.engine_core.shutdown()
        del engine
        return result
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        gc.collect()
        destroy_model_parallel()
        destroy_distributed_environment()


def main(path: str) -> int:
    """Run every case of the JSON file in order; stop at the first failure."""
    with open(path) as fh:
        cases = json.load(fh)
    parser = make_arg_parser(FlexibleArgumentParser())
    for case in cases:
        cid = case["id"]
        print(f"ORACLE-BEGIN {cid}", flush=True)
        start = time.monotonic()
        try:
            result = run_case(parser, case)
        except (Exception, SystemExit) as exc:  # the engine's refusal is itself an oracle answer
            info = {"type": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - start}
            print(f"ORACLE-FAILED {cid} {json.dumps(info)}", flush=True)
            return 3
        result["seconds"] = time.monotonic() - start
        print(f"ORACLE-END {cid} {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
