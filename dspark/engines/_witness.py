"""Run inside the ENGINE's interpreter: the installed engine's own KV planner on dspark's inputs (the witness).

Interface (imported by _argv_check.py, which runs it in the same process as the argv check; runnable alone as
`<engine python> _witness.py < request.json`, printing one line `DSPARK_WITNESS {json}`; a JSON list of
requests gets a list of answers, from one engine import):

    witness(request: dict) -> dict

request, for "engine": "vllm": the planner request documented in vllm/inside/kv_plan.py (built by
    dspark.engines.vllm.witness_input from dspark's own resolution), whose planning this file shares with the
    scheduler replay (vllm/inside/replay_scheduler.py).
answer: {"ok", "engine_version", "kv_pool_tokens", "max_concurrency", "max_model_len", "num_blocks",
    "blocks_per_request", "kv_line", "error", "functions": the engine functions it called, "seconds"}.

The capacity figures come from get_kv_cache_capacity where it exists, else
get_max_concurrency_for_kv_cache_config x max_model_len. The layers' specs themselves are dspark's resolution
(block size, hybrid alignment, state shapes): the witness judges the planning arithmetic from specs and a
budget to pool and concurrency, not the platform's block-size choice.

A release without those pieces (a planner that takes other arguments, a spec class the request needs) is
answered plainly as outside what the witness reads, naming what it lacks. vLLM 0.28.0 through 0.33.0 are
read (docs/version-matrix.md).

request, for "engine": "sglang" (dspark.engines.sglang.witness_input): argv (launch_server flags, --model-path
    a directory with config.json), gpu_mib, integrated, free_before, free_after (bytes, dspark's readings),
    capability; answered by _witness_sglang.py (SGLang's own memory-pool resolution, in-process, no GPU):
    max_concurrency is the pool over the context length, as dspark reports it for SGLang.
Imports nothing from dspark: it runs where dspark may not be installed.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

# Run by path, this file's folder would lead sys.path, and dspark/engines/vllm/ would shadow the real engine.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

MARKER = "DSPARK_WITNESS "


def _kv_plan() -> Any:
    """vllm/inside/kv_plan.py beside this file (the planning shared with the scheduler replay), loaded by path."""
    import importlib.util  # noqa: PLC0415

    name = "_dspark_vllm_kv_plan"
    if name in sys.modules:
        return sys.modules[name]
    path = _HERE / "vllm" / "inside" / "kv_plan.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _vllm(req: dict[str, Any]) -> dict[str, Any]:
    kv_plan = _kv_plan()
    planned = kv_plan.plan(req)  # a release it cannot read is said so, before anything else is asked of it
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    called = list(planned.functions)
    config, kv_config = planned.config, planned.kv_config
    max_model_len = config.model_config.max_model_len  # auto-fit writes the fitted length back
    if hasattr(utils, "get_kv_cache_capacity"):
        pool, concurrency = utils.get_kv_cache_capacity(config, kv_config)
        called.append("kv_cache_utils.get_kv_cache_capacity")
    else:
        concurrency = utils.get_max_concurrency_for_kv_cache_config(config, kv_config)
        pool = int(concurrency * max_model_len)
        called.append("kv_cache_utils.get_max_concurrency_for_kv_cache_config")
    per_request = sum(
        -(-g.kv_cache_spec.max_memory_usage_bytes(config) // g.kv_cache_spec.page_size_bytes)
        for g in kv_config.kv_cache_groups
    )
    line = (
        f"KV cache size: {pool:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{concurrency:.2f}x"
    )  # kv_cache_utils.update_kv_cache_capacity's format, without the device name
    return {
        "ok": True, "kv_pool_tokens": int(pool), "max_concurrency": float(concurrency),
        "max_model_len": int(max_model_len), "num_blocks": int(kv_config.num_blocks),
        "blocks_per_request": per_request, "kv_line": line, "functions": called,
    }


def _vllm_answer(request: dict[str, Any]) -> dict[str, Any]:
    figures = _vllm(request)  # first: a release it cannot read is said so, before anything else is asked of it
    return {"engine_version": _kv_plan().engine_version(), **figures}


def _sglang_answer(request: dict[str, Any]) -> dict[str, Any]:
    """SGLang's own sizing: _witness_sglang.py beside this file, loaded by path (this folder is off sys.path)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("_dspark_witness_sglang", _HERE / "_witness_sglang.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_HERE / '_witness_sglang.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    answer: dict[str, Any] = module.witness(request)
    return answer


# The engines the witness can plan for.
_PLANNERS = {"vllm": _vllm_answer, "sglang": _sglang_answer}


def witness(request: dict[str, Any]) -> dict[str, Any]:
    """The engine's own figures for the request; errors (an engine refusal included) come back as text."""
    start = time.monotonic()
    answer: dict[str, Any] = {"ok": False, "engine": request.get("engine")}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # engines log on import; stdout carries our line
            planner = _PLANNERS.get(request.get("engine", ""))
            if planner is None:
                answer["error"] = f"no witness for engine {request.get('engine')!r} yet"
            else:
                answer.update(planner(request))
    except Exception as exc:  # noqa: BLE001 - the engine's refusal or a missing function is the answer
        answer["error"] = f"{type(exc).__name__}: {exc}"
    answer["seconds"] = round(time.monotonic() - start, 3)
    return answer


def main() -> int:
    request = json.loads(sys.stdin.read())
    # A list of requests is answered with a list, in one process (one engine import): tests, benchmarks.
    result = [witness(r) for r in request] if isinstance(request, list) else witness(request)
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
