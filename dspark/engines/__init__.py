"""Engine registry: one EngineSpec per engine package; every other package reads engines through it.

ENGINE_NAMES is the one list of engines (the first is the default). The specs load lazily
(dspark.engines.<name>.spec) so that importing this package never imports an engine's capacity model or
adapter: the pure arithmetic can import its engine's flag reader without a cycle, and the configuration
layer can read the names cheaply.
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

from dspark.core.errors import InputError

if TYPE_CHECKING:
    from dspark.core.knob import Knob
    from dspark.engines.spec import AnyEngineSpec, Engine

# One line per engine: its package is dspark.engines.<name> (and its interpreter's tools dspark_inside.<name>);
# the first is the default. Adding an engine adds its line here and touches nothing else outside its packages.
ENGINE_NAMES = (
    "vllm",
    "sglang",
)
DEFAULT_ENGINE = ENGINE_NAMES[0]  # when neither a flag, the environment nor a recipe names one


def engine_spec(name: str) -> AnyEngineSpec:
    """The EngineSpec of `name`; unknown names are an input error listing the known ones."""
    if name not in ENGINE_NAMES:
        raise InputError(f"unknown engine {name!r}", hint=f"use one of: {', '.join(sorted(ENGINE_NAMES))}")
    spec: AnyEngineSpec = import_module(f"dspark.engines.{name}.spec").SPEC
    return spec


def pool_pins() -> tuple[tuple[str, str], ...]:
    """(knob, unit) of each engine's KV-pool pin, in ENGINE_NAMES order: its package's POOL_PIN (no spec loads)."""
    return tuple(import_module(f"dspark.engines.{name}").POOL_PIN for name in ENGINE_NAMES)


def engine_knobs_module(name: str) -> ModuleType:
    """dspark.engines.<name>.knobs: the engine's own knobs (KNOBS), its TITLE and DERIVED_FLAGS; loads no planner."""
    if name not in ENGINE_NAMES:
        raise InputError(f"unknown engine {name!r}", hint=f"use one of: {', '.join(sorted(ENGINE_NAMES))}")
    return import_module(f"dspark.engines.{name}.knobs")


def engine_knob_declarations() -> tuple[Knob, ...]:
    """Every engine's own knobs as declared, in ENGINE_NAMES order (dspark.engines.<name>.knobs; EngineSpec.knobs).

    Read from each engine's light knobs module, not its spec, so that the settings table loads no planner.
    """
    knobs: list[Knob] = []
    for name in ENGINE_NAMES:
        knobs += engine_knobs_module(name).KNOBS
    return tuple(knobs)


def foreign_knobs(name: str) -> tuple[tuple[str, str], ...]:
    """(knob, the knob to use instead) for each engine's own knob that `name` does not read: its spec's
    foreign_knobs, then every other engine's knob it neither declares nor reads as a shared capacity input
    (a CapacityInputs field: the byte pin), pointed at its own knob in the same slot (else its pool pin).

    So that a knob a new engine adds is refused, not ignored, by every engine already here, with no edit to them.
    """
    from dataclasses import fields  # noqa: PLC0415 - the registry stays cheap to import

    from dspark.capacity.result import CapacityInputs  # noqa: PLC0415

    spec = engine_spec(name)
    out = list(spec.foreign_knobs)
    skip = {knob for knob, _ in out} | set(spec.engine_knobs) | {f.name for f in fields(CapacityInputs)}
    own = {knob.slot: knob.name for knob in engine_knobs_module(name).KNOBS}
    out += [(knob.name, own.get(knob.slot, spec.pool_pin_knob)) for knob in engine_knob_declarations()
            if knob.name not in skip]
    return tuple(out)


def get_engine(name: str) -> Engine:
    """The adapter for `name` (launch plan and parser check); unknown names are an input error."""
    return engine_spec(name).adapter()


__all__ = [
    "DEFAULT_ENGINE", "ENGINE_NAMES", "engine_knob_declarations", "engine_knobs_module", "engine_spec", "foreign_knobs",
    "get_engine", "pool_pins",
]
