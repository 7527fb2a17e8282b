"""The knob x engine audit: a setting the chosen engine does not read is an error, never a silent no-op.

Pure. Each engine's EngineSpec says which dspark knobs it has no use for (and which knob does that job for it),
which it reads in other units (SGLang's token pin for a byte pin), and which --platform values it has a build
for; this module turns a resolved setting that hits one of those into a SettingsError (exit 2) naming the
knob, where it came from, the engine, and what to use instead.
"""

from __future__ import annotations

from dspark.config.knobs import BY_NAME
from dspark.config.settings import ResolvedSettings, where
from dspark.core.errors import SettingsError
from dspark.engines import ENGINE_NAMES, engine_spec

_SET = ("flag", "env", "recipe")  # layers a user wrote; default and computed values are dspark's own


def how_to_set(knob: str, engine: str) -> str:
    """Every way a user sets `knob` for `engine`: dspark's flag, the engine's own flag after --, env, recipe key."""
    k = BY_NAME[knob]
    ways = [k.flag] if k.flag else []
    ways += [f"{engine}'s {flag} after --" for flag in engine_flags_for(knob, engine)]
    ways.append(k.env)
    if k.recipe_path:
        ways.append(f"{k.recipe_path} in the recipe")
    return ", ".join(ways)


def engine_flags_for(knob: str, engine: str) -> tuple[str, ...]:
    """The engine's own flags (given after --) that set `knob`, as its parser spells them."""
    spec = engine_spec(engine)
    return tuple(f"--{attr.replace('_', '-')}" for attr, name in spec.flag_knobs.items() if name == knob)


def check_engine_knobs(settings: ResolvedSettings) -> None:
    """SettingsError when a knob the user set is one the engine does not read, or the platform has no build."""
    engine = settings.engine.value
    spec = engine_spec(engine)
    platform = settings.platform
    if platform.value is not None and platform.value not in spec.platforms:
        others = [name for name in ENGINE_NAMES if platform.value in engine_spec(name).platforms]
        raise SettingsError(
            f"platform {platform.value} from {where(platform)} does not apply to {engine}: dspark plans {engine} "
            f"only for {', '.join(spec.platforms)}",
            hint=f"use --platform {spec.platforms[0]} with {engine}"
            + (f", or --engine {others[0]} for its {platform.value} build" if others else ""),
        )
    values = settings.settings()
    for knob, accepted in spec.knob_values.items():
        setting = values[knob]
        if setting.layer in _SET and setting.value not in accepted:
            raise SettingsError(
                f"{knob} {setting.value!r} from {where(setting)} is not a value {engine} takes",
                hint=f"{engine} takes {', '.join(accepted)} ({how_to_set(knob, engine)})",
            )
    for knob, instead in spec.unread_knobs.items():
        setting = values[knob]
        if setting.value is not None and setting.layer in _SET:
            raise SettingsError(
                f"{knob} from {where(setting)} does not apply to {engine}: {engine} has no such setting",
                hint=f"use {instead} for {engine} ({how_to_set(instead, engine)})",
            )
