"""The vLLM replay tool's release-adaptive parts (dspark_inside.vllm.replay_scheduler), without vLLM.

Each is fed stand-ins shaped as the releases have them: the platform 0.25/0.26 resolve at `import vllm` (the
host's, UnspecifiedPlatform without a GPU) against 0.32/0.33's CPU platform from VLLM_TARGET_DEVICE; ModelConfig's
model_arch_config (0.25 on: its getters read it); EngineCore's wake-up on the first request.
"""

from __future__ import annotations

import importlib
import math
import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest


def _tool() -> types.ModuleType:
    return importlib.import_module("dspark_inside.vllm.replay_scheduler")


class _Platform:
    def __init__(self, device_type: str) -> None:
        self.device_type = device_type


class _Cpu(_Platform):
    def __init__(self) -> None:
        super().__init__("cpu")


@pytest.fixture
def fake_cpu_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm.platforms.cpu with its CpuPlatform, as every release has it."""
    monkeypatch.setitem(sys.modules, "vllm.platforms.cpu", SimpleNamespace(CpuPlatform=_Cpu))


@pytest.mark.usefixtures("fake_cpu_module")
@pytest.mark.parametrize("host", ["", "cuda"])  # UnspecifiedPlatform (no GPU) and a GPU host's CudaPlatform
def test_a_release_that_took_the_hosts_platform_gets_the_cpu_one_everywhere_it_was_bound(host: str) -> None:
    old = _Platform(host)
    platforms = SimpleNamespace(_current_platform=old)
    platforms.current_platform = old  # what the lazy __getattr__ answers from _current_platform
    bound = SimpleNamespace(current_platform=old)  # `from vllm.platforms import current_platform` at import
    other = SimpleNamespace(current_platform=_Platform("cuda"))  # a different object: not the one resolved
    unrelated = SimpleNamespace()
    how = _tool().cpu_platform(platforms, {"a": bound, "b": other, "c": unrelated, "p": platforms})
    assert how == "cpu (in place of _Platform)"
    assert isinstance(platforms._current_platform, _Cpu)
    assert bound.current_platform is platforms._current_platform
    assert other.current_platform.device_type == "cuda" and not hasattr(unrelated, "current_platform")
    assert platforms.current_platform is old  # the module's own attribute is its lazy __getattr__, not set


def test_a_release_that_honours_vllm_target_device_keeps_its_platform() -> None:
    cpu = _Platform("cpu")
    platforms = SimpleNamespace(current_platform=cpu, _current_platform=cpu)
    bound = SimpleNamespace(current_platform=cpu)
    assert _tool().cpu_platform(platforms, {"a": bound}) == "cpu"
    assert platforms._current_platform is cpu and bound.current_platform is cpu


class _ModelConfig:
    """0.25 on: model_arch_config is set by __post_init__ (which the replay's bare instance skips)."""

    calls = 0
    model_arch_config: Any  # declared, not set: what the bare instance lacks until arch_config

    def get_model_arch_config(self) -> Any:
        type(self).calls += 1
        return SimpleNamespace(num_experts=0, architectures=[])

    def get_num_experts(self) -> int:
        return int(self.model_arch_config.num_experts)


def test_the_bare_model_config_gets_the_arch_config_its_getters_read() -> None:
    model = object.__new__(_ModelConfig)
    with pytest.raises(AttributeError, match="model_arch_config"):
        model.get_num_experts()  # what 0.25's scheduler hit on the GPU host (VllmConfig.use_v2_model_runner)
    _tool().arch_config(model)
    assert model.get_num_experts() == 0 and _ModelConfig.calls == 1
    kept = model.model_arch_config
    _tool().arch_config(model)  # already set (a release whose bare instance has one): left as it is
    assert model.model_arch_config is kept and _ModelConfig.calls == 1


def test_a_release_without_an_arch_config_is_left_alone() -> None:
    model = SimpleNamespace(hf_config=None)
    _tool().arch_config(model)
    assert not hasattr(model, "model_arch_config")


class _Sched:
    """The scheduler's add_request, recording what each step would see."""

    def __init__(self) -> None:
        self.added: list[str] = []

    def add_request(self, request: str) -> None:
        self.added.append(request)


def _pass(arrivals: dict[str, Any], n: int) -> Any:
    tool = _tool()
    replay = SimpleNamespace(req={"requests": [{}] * n, "step_cost": {}, "arrivals": arrivals}, engine={})
    p = tool._Pass(replay, _Sched(), None, "c")

    def request(i: int) -> str:  # _Pass._request's bookkeeping, without vLLM's Request
        p.arrival[i] = p.arrivals.due_at[i]
        return f"c{i}"

    p._request = request
    return p


@pytest.mark.parametrize("n", [1, 2, 16])
def test_an_idle_engine_steps_with_the_first_request_of_an_instant_alone(n: int) -> None:
    p = _pass({"times": [0.0] * n}, n)
    p._arrive(idle=True)
    assert p.sched.added == ["c0"]
    assert p.arrival[0] == 0.0 and all(math.isnan(a) for a in p.arrival[1:])
    p.now = 0.25
    p._arrive(idle=False)  # the others reached the engine while its first step ran: all in the next
    assert p.sched.added == [f"c{i}" for i in range(n)]
    assert p.arrival == [0.0] * n  # sent at 0, whenever the engine took them: TTFT counts the wait


def test_a_busy_engine_takes_every_request_due_and_none_early() -> None:
    p = _pass({"times": [0.0, 0.0, 0.5, 1.0]}, 4)
    p._arrive(idle=False)
    assert p.sched.added == ["c0", "c1"]
    p.now = 0.75
    p._arrive(idle=True)
    assert p.sched.added == ["c0", "c1", "c2"]
    assert p.arrival[:3] == [0.0, 0.0, 0.5] and math.isnan(p.arrival[3])


def test_queued_arrivals_are_all_in_the_first_step() -> None:
    p = _pass({"times": [0.0] * 5, "queued": True}, 5)
    p._arrive(idle=True)
    assert p.sched.added == [f"c{i}" for i in range(5)]


def test_closed_loop_clients_starting_together_wake_the_engine_with_the_first() -> None:
    p = _pass({"clients": 3}, 6)
    p._arrive(idle=True)
    p._arrive(idle=False)
    assert p.sched.added == ["c0", "c1", "c2"]
    p.now = 2.0
    p.arrivals.finished(1.5)  # a client's request ended at 1.5: it sent its next then
    p._arrive(idle=False)
    assert p.sched.added[-1] == "c3" and p.arrival[3] == 1.5
