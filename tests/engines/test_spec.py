"""The engine seam: EngineSpec's fields are typed (no Any), capabilities are declared, pins named by each engine."""

from __future__ import annotations

import dataclasses
import importlib.util
import re

import pytest

from dspark.engines import ENGINE_NAMES, engine_spec, pool_pins
from dspark.engines.replay import scheduler_replay
from dspark.engines.spec import EngineSpec


def test_no_field_of_the_engine_spec_is_typed_any() -> None:
    typed = {f.name: str(f.type) for f in dataclasses.fields(EngineSpec)}
    assert len(typed) > 30  # the annotations are read (text, under `from __future__ import annotations`)
    loose = {name: t for name, t in typed.items() if re.search(r"\bAny\b", t)}
    assert loose == {}
    # The hooks that read parsed flags all take the spec's own options type.
    for name in ("data_parallel", "drafter_flags", "loads_vision_tower"):
        assert typed[name].startswith("Callable[[OptionsT]"), (name, typed[name])
    assert typed["parse_flags"].endswith("OptionsT]") and typed["capacity"] == "CapacityModel[OptionsT]"


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_replay_is_the_declared_capability(name: str) -> None:
    spec = engine_spec(name)
    assert scheduler_replay(name) is spec.replay
    assert spec.replay is not None and importlib.util.find_spec(f"dspark_inside.{spec.replay.REPLAY_TOOL}") is not None
    assert spec.replay.simulator_name("1.2.3").startswith(f"{name} 1.2.3")


def test_an_unknown_engine_has_no_replay() -> None:
    assert scheduler_replay("no-such-engine") is None


@pytest.mark.parametrize(("name", "pin"), list(zip(ENGINE_NAMES, pool_pins(), strict=True)))
def test_each_engines_pool_pin_is_its_own(name: str, pin: tuple[str, str]) -> None:
    knob, unit = pin
    spec = engine_spec(name)
    assert unit == spec.pool_pin
    assert knob in spec.pinned  # the knob its launch pins, re-read from its parser after parsing
    assert spec.pool_pin_knob == knob and knob in spec.engine_knobs
    assert len({k for k, _ in pool_pins()}) == len(ENGINE_NAMES)  # one spelling per engine


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_start_shows_the_engines_own_shown_args_in_order(name: str) -> None:
    from dspark.commands.start import _shown  # noqa: PLC0415

    spec = engine_spec(name)
    every = {arg: i for i, arg in enumerate(a for n in ENGINE_NAMES for a in engine_spec(n).shown_args)}
    parsed = {**dict.fromkeys(reversed(list(every)), 1), "unrelated": 2}
    assert list(_shown(parsed, spec.shown_args)) == list(spec.shown_args)
    assert list(_shown({}, spec.shown_args)) == []
