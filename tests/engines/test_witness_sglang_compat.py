"""The SGLang witness's release-adaptive decisions (dspark_inside.sglang.compat), without SGLang.

Each decision is fed stand-in modules and classes shaped like the releases' own (what 0.5.10-0.5.15,
0.5.16-0.5.18 and 0.5.19 on have), so these run where no SGLang is installed.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from dspark_inside.sglang import compat


def test_a_release_with_override_platform_keeps_its_own() -> None:
    modern = types.SimpleNamespace(override_platform=lambda **_k: None)
    assert not compat.needs_legacy_platform(modern)
    assert compat.needs_legacy_platform(types.SimpleNamespace(get_parallel=lambda: None))
    assert compat.needs_legacy_platform(None)  # 0.5.10-0.5.14: no runtime_context at all


def test_probe_constants_are_the_bare_module_level_calls() -> None:
    source = "\n".join([
        "from sglang.srt.utils import is_cuda, is_hip, get_device_sm",
        "_is_cuda = is_cuda()",
        "_is_hip = utils.is_hip()",
        "_sm = get_device_sm()",
        "_with_args = is_cuda(0)",
        "_other = torch.cuda.is_available()",
        "def f():",
        "    _inner = is_cuda()",
    ])
    found = compat.probe_constants(source, compat.PROBE_FACTS)
    assert found == {"_is_cuda": "is_cuda", "_is_hip": "is_hip", "_sm": "get_device_sm"}
    assert compat.probe_constants("x = 1\n", compat.PROBE_FACTS) == {}


@pytest.mark.parametrize(("capability", "sm90", "sm120", "sm121", "blackwell"), [
    ((9, 0), True, False, False, False), ((12, 1), False, True, True, True), ((10, 0), False, False, False, True)])
def test_cuda_facts_follow_the_capability(capability: tuple[int, int], sm90: bool, sm120: bool, sm121: bool,
                                          blackwell: bool) -> None:
    facts = compat.cuda_facts(*capability)
    assert facts["is_cuda"] and not facts["is_hip"] and not facts["is_cpu"]
    assert (facts["is_sm90"], facts["is_sm120"], facts["is_sm121"], facts["is_blackwell"]) == (
        sm90, sm120, sm121, blackwell)
    assert facts["device_capability"] == capability
    assert set(compat.PROBE_FACTS.values()) <= set(facts)


def _fake_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """sglang.srt.utils.common with CPU-answering probes, and a layer module holding probe constants."""
    common = types.ModuleType("sglang.srt.utils.common")

    def is_cuda() -> bool:
        return False

    def is_hip() -> bool:
        return False

    common.is_cuda, common.is_hip = is_cuda, is_hip  # type: ignore[attr-defined]
    layer_file = tmp_path / "layer.py"
    layer_file.write_text("from sglang.srt.utils.common import is_cuda, is_hip\n_is_cuda = is_cuda()\n"
                          "_is_hip = is_hip()\n_unrelated = 3\n")
    layer = types.ModuleType("sglang.srt.layers.fake")
    layer.__file__ = str(layer_file)
    layer.is_cuda, layer.is_hip, layer._is_cuda, layer._is_hip, layer._unrelated = (  # type: ignore[attr-defined]
        is_cuda, is_hip, False, False, 3)
    utils = types.ModuleType("sglang.srt.utils")
    utils.common = common  # type: ignore[attr-defined]
    for name, module in {"sglang": types.ModuleType("sglang"), "sglang.srt": types.ModuleType("sglang.srt"),
                         "sglang.srt.utils": utils, "sglang.srt.utils.common": common,
                         "sglang.srt.layers.fake": layer}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(compat, "_ORIGINALS", {})
    monkeypatch.setattr(compat, "_CONSTANTS", {})
    return common, layer


def test_install_rebinds_probes_and_recomputes_probe_constants(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    common, layer = _fake_release(tmp_path, monkeypatch)
    touched = compat.install(lambda: compat.cuda_facts(12, 1))
    assert common.is_cuda() is True and layer.is_cuda() is True  # the imported name too
    assert layer._is_cuda is True and layer._is_hip is False
    assert layer._unrelated == 3
    assert "sglang.srt.layers.fake._is_cuda" in touched


def test_install_again_follows_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    common, layer = _fake_release(tmp_path, monkeypatch)
    facts = {"hip": False}
    compat.install(lambda: {**compat.cuda_facts(9, 0), "is_hip": facts["hip"]})
    facts["hip"] = True
    compat.install(lambda: {**compat.cuda_facts(9, 0), "is_hip": facts["hip"]})
    assert layer._is_hip is True and common.is_hip() is True


def test_sizing_path_is_found_by_what_model_runner_has() -> None:
    class Configurator:
        def init_kv_cache_configurator(self) -> None: ...

        def _resolve_memory_pool_config(self) -> None: ...

    class Mixin:
        def _resolve_memory_pool_config(self) -> None: ...

    assert compat.sizing_path(Configurator) == "configurator"
    assert compat.sizing_path(Mixin) == "mixin"
    with pytest.raises(NotImplementedError, match=r"init_kv_cache_configurator.*_resolve_memory_pool_config"):
        compat.sizing_path(type("Bare", (), {}))


def test_parallel_values_are_rank_zero_of_tp_by_pp() -> None:
    fields = ("world_size", "tp_size", "tp_rank", "attn_tp_size", "pp_size", "moe_ep_size", "attn_dp_rank",
              "dcp_enabled", "world_group", "tp_group")
    world = object()
    got = compat.parallel_values(fields, tp=2, pp=3, world_group=world)
    assert got == {"world_size": 6, "tp_size": 2, "tp_rank": 0, "attn_tp_size": 2, "pp_size": 3,
                   "moe_ep_size": 1, "attn_dp_rank": 0, "dcp_enabled": False, "world_group": world}


def test_stub_groups_fills_unset_groups_and_refreshes_its_own() -> None:
    real = object()
    state = types.ModuleType("parallel_state")
    state.__annotations__ = {"_TP": "Optional[GroupCoordinator]", "_ATTN_TP": "Optional[GroupCoordinator]",
                             "_PP": "Optional[GroupCoordinator]", "_MOE_EP": "Optional[GroupCoordinator]",
                             "_TIMEOUT": "Optional[timedelta]"}
    for name, value in {"_TP": None, "_ATTN_TP": None, "_PP": real, "_MOE_EP": None, "_TIMEOUT": None}.items():
        setattr(state, name, value)
    set_first = compat.stub_groups(state, tp=2, pp=1)
    assert set(set_first) >= {"_TP", "_ATTN_TP", "_MOE_EP"}
    assert state._ATTN_TP.world_size == 2 and state._MOE_EP.world_size == 1
    assert state._PP is real and state._TIMEOUT is None
    compat.stub_groups(state, tp=4, pp=1)  # a later case with another TP: the stand-ins follow it
    assert state._TP.world_size == 4


def test_import_with_stand_ins_only_for_the_named_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_kernels.py").write_text("from dspark_fake_kernel.io import transfer\nVALUE = 7\n")
    (tmp_path / "needs_other.py").write_text("import dspark_fake_missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("needs_kernels", "needs_other", "dspark_fake_kernel", "dspark_fake_kernel.io"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    stood = compat.import_with_stand_ins("needs_kernels", ["dspark_fake_kernel"])
    assert stood == ["dspark_fake_kernel", "dspark_fake_kernel.io"]
    assert sys.modules["needs_kernels"].VALUE == 7
    with pytest.raises(ModuleNotFoundError, match="dspark_fake_missing"):
        compat.import_with_stand_ins("needs_other", ["dspark_fake_kernel"])
    for name in ("needs_kernels", "dspark_fake_kernel", "dspark_fake_kernel.io"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_mixin_runner_fields_span_every_layer_of_an_unpipelined_model() -> None:
    mc = types.SimpleNamespace(num_hidden_layers=48, num_attention_layers=12)
    sa = types.SimpleNamespace(mem_fraction_static=0.85, dp_size=4, enable_dp_attention=False)
    got = compat.mixin_runner_fields(mc, sa)
    assert (got["start_layer"], got["end_layer"], got["num_effective_layers"]) == (0, 48, 48)
    assert got["mem_fraction_static"] == 0.85 and got["dp_size"] == 1
    with_dp = compat.mixin_runner_fields(mc, types.SimpleNamespace(**{**vars(sa), "enable_dp_attention": True}))
    assert with_dp["dp_size"] == 4


def test_sentinel_caches_are_the_attributes_init_starts_unset() -> None:
    source = "\n".join([
        "    def __init__(self, a):",
        "        self._linear_attn_registry_cache: Any = _UNSET",
        "        self._plain = _UNSET",
        "        self._set = None",
        "        self._not_alone = _UNSET or 3",
    ])
    assert compat.sentinel_caches(source) == ["_linear_attn_registry_cache", "_plain"]
