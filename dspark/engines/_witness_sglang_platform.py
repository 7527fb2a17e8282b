"""Run inside SGLang's interpreter: tell a release without ``override_platform`` that it runs on CUDA.

SGLang 0.5.19 on route every platform question through ``runtime_context.override_platform``. Older
releases ask ``sglang.srt.utils.common``'s probes (``is_cuda()``, ``is_sm100_supported()``...) and many
modules keep the answer in a module constant computed at import (``_is_cuda = is_cuda()``), which a CPU host
answers "not CUDA". The modules must import with the CPU answers (their CUDA branches import GPU kernels
this host lacks); afterwards this rebinds each probe the release has to one answering for the stubbed device,
and recomputes every module constant whose source is a bare call of a probe. What is rebound is found in the
release's own source, not in a list per version. Imports nothing from dspark; loaded by path.
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
