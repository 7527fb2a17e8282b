"""The settings table: engine knobs come from each engine's package into their slots; ResolvedSettings matches it."""

from __future__ import annotations

import dataclasses
import random
import types
import typing

import pytest

from dspark.config import knobs
from dspark.config.knobs import BY_NAME, KNOB_NAMES, KNOBS, SLOTS, Knob, slot_knobs
from dspark.config.settings import ResolvedSettings
from dspark.core.knob import text
from dspark.engines import ENGINE_NAMES, engine_knob_declarations, engine_knobs_module, engine_spec, pool_pins


def test_each_engines_spec_carries_the_knobs_its_package_declares() -> None:
    for name in ENGINE_NAMES:
        spec = engine_spec(name)
        assert spec.knobs == engine_knobs_module(name).KNOBS
        assert spec.engine_knobs == tuple(k.name for k in spec.knobs)
        assert (spec.knobs[0].name, spec.pool_pin) in pool_pins()  # its pool pin leads
    assert set(engine_knob_declarations()) <= set(KNOBS)


def test_the_engines_own_knobs_are_those_the_issue_names() -> None:
    own = {name: {k.name for k in engine_knobs_module(name).KNOBS} for name in ENGINE_NAMES}
    assert own == {"vllm": {"kv_cache_memory_bytes", "gpu_memory_utilization"},
                   "sglang": {"max_total_tokens", "mem_fraction_static"}}


def test_slots_keep_the_table_in_its_order() -> None:
    """The order --explain and --json print: each slot holds the engines' knobs, in engine order."""
    names = list(KNOB_NAMES)
    start = names.index("kv_cache_dtype") + 1
    assert names[start:start + 4] == ["kv_cache_memory_bytes", "max_total_tokens", "gpu_memory_utilization",
                                      "mem_fraction_static"]
    assert len(names) == len(set(names)) == 24


def _knob(name: str, slot: str | None = None) -> Knob:
    return Knob(name, f"DSPARK_{name.upper()}", None, None, text, "text", slot=slot)


def test_assemble_places_engine_knobs_by_slot_and_refuses_a_stray() -> None:
    rng = random.Random(24)  # noqa: S311 - reproducible test input, no secret
    engines = tuple(_knob(f"e{i}", rng.choice(SLOTS)) for i in range(12))
    table = (_knob("a"), SLOTS[0], _knob("b"), SLOTS[1], _knob("c"))
    out = [k.name for k in knobs._assemble(table, engines)]
    assert out == ["a", *(k.name for k in engines if k.slot == SLOTS[0]), "b",
                   *(k.name for k in engines if k.slot == SLOTS[1]), "c"]
    with pytest.raises(AssertionError, match="e_stray"):
        knobs._assemble(table, (*engines, _knob("e_stray", "no_such_slot")))
    with pytest.raises(AssertionError, match="e_none"):
        knobs._assemble(table, (_knob("e_none"),))


def test_every_flag_has_its_help_and_a_distinct_place() -> None:
    flagged = [k for k in KNOBS if k.flag is not None]
    assert all(k.help and k.rank > 0 for k in flagged), [k.name for k in flagged if not (k.help and k.rank)]
    assert len({k.rank for k in flagged}) == len(flagged)
    assert all(not k.help and not k.metavar for k in KNOBS if k.flag is None)


def _nullable(hint: object) -> tuple[set[object], bool]:
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return {a for a in args if a is not type(None)}, type(None) in args


def test_resolved_settings_is_the_table_typed() -> None:
    """One field per knob in table order, each Setting[what its converter returns], | None when it has no default."""
    names = [f.name for f in dataclasses.fields(ResolvedSettings) if f.name not in ("notes", "engine_settings")]
    assert names == ["recipe", *KNOB_NAMES]
    hints = typing.get_type_hints(ResolvedSettings)
    for knob in KNOBS:
        (value,) = typing.get_args(hints[knob.name])
        returns = typing.get_type_hints(knob.convert)["return"]
        assert _nullable(value) == ({returns}, knob.default is None), knob.name


def test_the_slots_name_each_engines_own_knobs_in_engine_order() -> None:
    """Generic code (planning's pins and shares) names the engines' pool knobs only through the table's slots."""
    assert slot_knobs("kv_pin") == tuple(knob for knob, _ in pool_pins())  # each engine's POOL_PIN, in order
    shares = slot_knobs("kv_share")
    assert shares == tuple(k.name for name in ENGINE_NAMES for k in engine_knobs_module(name).KNOBS
                           if k.slot == "kv_share")
    assert len(shares) == len(ENGINE_NAMES) and all(BY_NAME[k].slot == "kv_share" for k in shares)
    assert slot_knobs("no-such-slot") == ()
