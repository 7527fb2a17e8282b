"""Run inside SGLang's interpreter: tell a release without ``override_platform`` that it runs on CUDA.

SGLang 0.5.19 on route every platform question through ``runtime_context.override_platform``. Older
releases ask ``sglang.srt.utils.common``'s probes (``is_cuda()``, ``is_sm100_supported()``...) and many
modules keep the answer in a module constant computed at import (``_is_cuda = is_cuda()``), which a CPU host
answers "not CUDA". The modules must import with the CPU answers (their CUDA branches import GPU kernels
this host lacks); afterwards this rebinds each probe the release has to one answering for the stubbed device,
and recomputes every module constant whose source is a bare call of a probe. What is rebound is found in the
release's own source, not in a list per version.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# Probe function in utils.common -> the fact it answers (the names 0.5.19's _PLATFORM_PROBES maps, and the
# older aliases and helpers those releases also call).
PROBE_FACTS: dict[str, str] = {
    "is_cuda": "is_cuda", "is_cuda_alike": "is_cuda", "is_hip": "is_hip", "is_npu": "is_npu", "is_xpu": "is_xpu",
    "is_musa": "is_musa", "is_mps": "is_mps", "is_hpu": "is_hpu", "is_cpu": "is_cpu",
    "is_sm90_supported": "is_sm90", "is_sm100_supported": "is_sm100",
    "is_sm100_or_sm110_supported": "is_sm100_or_sm110", "is_sm120_supported": "is_sm120", "is_sm121": "is_sm121",
    "is_blackwell": "is_blackwell", "is_blackwell_supported": "is_blackwell",
    "is_hopper_with_cuda_12_3": "is_hopper_with_cuda_12_3", "is_ampere_with_cuda_12_3": "is_ampere_with_cuda_12_3",
    "is_sm80_supported": "is_sm80", "cpu_has_amx_support": "has_amx", "is_flashinfer_available": "has_flashinfer",
    "get_device_sm": "device_sm", "get_device_capability": "device_capability",
}


def cuda_facts(major: int, minor: int) -> dict[str, Any]:
    """Every fact a CUDA device of this compute capability answers (no AMX, no FlashInfer: not installed)."""
    return {
        "is_cuda": True, "is_hip": False, "is_npu": False, "is_xpu": False, "is_musa": False, "is_mps": False,
        "is_hpu": False, "is_cpu": False, "is_sm80": major == 8, "is_ampere_with_cuda_12_3": major == 8,
        "is_sm90": major == 9, "is_sm100": major == 10, "is_sm100_or_sm110": major in (10, 11),
        "is_sm110": major == 11, "is_sm120": major == 12, "is_sm121": (major, minor) == (12, 1),
        "is_blackwell": major >= 10, "is_hopper_with_cuda_12_3": major == 9, "has_amx": False,
        "has_flashinfer": False, "device_sm": major * 10 + minor, "device_capability": (major, minor),
    }


def needs_legacy_platform(runtime_context: object | None) -> bool:
    """True when the release has no ``override_platform``: its probes and module constants must be rebound."""
    return not callable(getattr(runtime_context, "override_platform", None))


def probe_constants(source: str, probes: Iterable[str]) -> dict[str, str]:
    """Module-level ``NAME = probe()`` assignments in this source: constant name -> probe name."""
    wanted = set(probes)
    if not any(p + "()" in source for p in wanted):
        return {}
    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and not node.value.args):
            continue
        func = node.value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in wanted:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = name
    return found


def _answer(fact: str, facts: Callable[[], dict[str, Any]]) -> Callable[..., Any]:
    def probe(*_a: Any, **_k: Any) -> Any:
        return facts()[fact]

    probe.__name__ = f"dspark_{fact}"
    return probe


_ORIGINALS: dict[str, Any] = {}
_CONSTANTS: dict[str, dict[str, str]] = {}


def install(facts: Callable[[], dict[str, Any]]) -> list[str]:
    """Rebind the release's probes and probe constants in every loaded sglang module; the names rebound."""
    from sglang.srt.utils import common  # noqa: PLC0415

    if not _ORIGINALS:
        _ORIGINALS.update({p: getattr(common, p) for p in PROBE_FACTS if callable(getattr(common, p, None))})
    new = {p: _answer(PROBE_FACTS[p], facts) for p in _ORIGINALS}
    originals = {id(f): p for p, f in _ORIGINALS.items()}
    current = facts()
    touched: list[str] = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang") or module is None:
            continue
        space = vars(module)
        for attr, value in list(space.items()):
            probe = originals.get(id(value))
            if probe is not None:
                space[attr] = new[probe]
        if name not in _CONSTANTS:
            _CONSTANTS[name] = _constants_of(module)
        for const, probe in _CONSTANTS[name].items():
            if const in space and probe in new:
                space[const] = current[PROBE_FACTS[probe]]
                touched.append(f"{name}.{const}")
    for value in vars(common).values():  # cached answers derived from the old probes (get_device_name...)
        if isinstance(value, functools._lru_cache_wrapper):
            value.cache_clear()
    return touched


def _constants_of(module: Any) -> dict[str, str]:
    path = getattr(module, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return {}
    try:
        return probe_constants(Path(path).read_text(encoding="utf-8"), _ORIGINALS)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}


def parallel_values(fields: Iterable[str], tp: int, pp: int, world_group: Any) -> dict[str, Any]:
    """One rank (rank 0) of TP x PP with no data, expert, context or decode-context parallelism, for the
    parallel fields a release's ``ParallelContext`` lets be forced (0.5.16-0.5.18: ``_PARALLEL_FIELDS``)."""
    sizes = {"world_size": tp * pp, "tp_size": tp, "attn_tp_size": tp, "pp_size": pp, "moe_tp_size": tp}
    out: dict[str, Any] = {}
    for field in fields:
        if field.endswith("_size"):
            out[field] = sizes.get(field, 1)
        elif field.endswith("_rank"):
            out[field] = 0
        elif field == "dcp_enabled":
            out[field] = False
        elif field == "world_group":
            out[field] = world_group
    return out


def sizing_path(model_runner: type) -> str:
    """Where the release sizes its pools: "configurator" (KVCacheConfigurator, 0.5.16 on) or "mixin" (the
    runner's own _resolve_memory_pool_config, 0.5.10-0.5.15); raises naming the missing functions otherwise."""
    if callable(getattr(model_runner, "init_kv_cache_configurator", None)):
        return "configurator"
    if callable(getattr(model_runner, "_resolve_memory_pool_config", None)):
        return "mixin"
    raise NotImplementedError(
        "this SGLang release's ModelRunner has neither init_kv_cache_configurator (KVCacheConfigurator) nor "
        "_resolve_memory_pool_config (model_runner_kv_cache_mixin): the witness has no sizing function to run")


def mixin_runner_fields(model_config: Any, server_args: Any) -> dict[str, Any]:
    """What ModelRunner.__init__ and load_model set that the mixin's sizing reads (0.5.10-0.5.15), for the main
    worker of an unpipelined model: load_model's layer range is all of max(num_hidden_layers,
    num_attention_layers) when the model has no start_layer/end_layer of its own."""
    layers = max(model_config.num_hidden_layers, getattr(model_config, "num_attention_layers", 0))
    dp_attention = bool(getattr(server_args, "enable_dp_attention", False))
    return {
        "mem_fraction_static": server_args.mem_fraction_static,
        "dp_size": server_args.dp_size if dp_attention else 1,
        "start_layer": 0, "end_layer": layers, "num_effective_layers": layers,
        "moe_ep_rank": 0, "moe_ep_size": 1, "moe_dp_rank": 0, "moe_dp_size": 1,
        "attn_cp_rank": 0, "attn_cp_size": 1,
    }


class _Anything(type):
    """A class whose every attribute is another such class: a stand-in for a kernel never called."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


def stand_in(name: str) -> None:
    """Put a module (and its missing parents) in sys.modules whose every attribute is a stand-in."""
    import types  # noqa: PLC0415

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Anything(attr, (), {})

    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        dotted = ".".join(parts[:i])
        if dotted not in sys.modules:
            module = types.ModuleType(dotted)
            module.__path__ = []
            module.__getattr__ = getattr_  # type: ignore[method-assign]
            sys.modules[dotted] = module
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], module)


def import_with_stand_ins(module: str, packages: Iterable[str]) -> list[str]:
    """Import a module, standing in for missing modules of these packages only; the modules stood in for."""
    import importlib  # noqa: PLC0415

    allowed, stood = set(packages), list[str]()
    while True:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if missing.split(".")[0] not in allowed or missing in stood:
                raise
            stand_in(missing)
            stood.append(missing)
        else:
            return stood


def group_width(name: str, tp: int, pp: int) -> int:
    """Ranks in one of parallel_state's process groups (``_TP``, ``_ATTN_TP``, ``_PP``, ``_WORLD``...) for
    rank 0 of TP x PP with no data, expert or context parallelism."""
    return {"_WORLD": tp * pp, "_TP": tp, "_ATTN_TP": tp, "_MOE_TP": tp, "_PP": pp}.get(name, 1)


def stub_groups(parallel_state: Any, tp: int, pp: int) -> list[str]:
    """Stand-in process groups for every ``GroupCoordinator`` global of parallel_state unset or stood in by an
    earlier case (found by its annotation), and rank 0 / width 1 for dp_attention's unset ``_*_SIZE`` /
    ``_*_RANK``; the names set."""
    import types  # noqa: PLC0415

    done = []
    annotations = vars(parallel_state).get("__annotations__", {})
    for name, note in annotations.items():
        current = getattr(parallel_state, name, 0)
        if "GroupCoordinator" in str(note) and (current is None or getattr(current, "dspark_stand_in", False)):
            width = group_width(name, tp, pp)
            setattr(parallel_state, name, types.SimpleNamespace(
                world_size=width, rank_in_group=0, rank=0, local_rank=0, ranks=list(range(width)),
                first_rank=0, last_rank=width - 1, is_first_rank=True, is_last_rank=True,
                cpu_group=None, device_group=None, dspark_stand_in=True))
            done.append(name)
    dp_attention = sys.modules.get("sglang.srt.layers.dp_attention")
    for name in vars(dp_attention).get("__annotations__", {}) if dp_attention is not None else ():
        if getattr(dp_attention, name, 0) is None and name.endswith(("_SIZE", "_RANK")):
            setattr(dp_attention, name, 1 if name.endswith("_SIZE") else 0)
            done.append(name)
    return done


def sentinel_caches(init_source: str, sentinel: str = "_UNSET") -> list[str]:
    """Attributes ``ModelRunner.__init__`` starts at a module sentinel (``self._x: Any = _UNSET``, a lazy cache
    its properties fill on first read: 0.5.13-0.5.15's ``_linear_attn_registry_cache``); a runner built without
    ``__init__`` needs them too."""
    import re  # noqa: PLC0415

    return re.findall(rf"^\s*self\.(\w+)(?:\s*:[^=\n]+)?\s*=\s*{re.escape(sentinel)}\s*$", init_source, re.MULTILINE)
