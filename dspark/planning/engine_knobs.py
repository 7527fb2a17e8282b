"""The knob x engine audit beyond foreign knobs: the platform an engine has a build for, and the values its parser
takes for a knob both engines read under different choices (kv_cache_dtype).

Pure. A knob the engine has no use for at all is refused while the settings resolve (EngineSpec.foreign_knobs,
dspark.config.settings); this module adds what needs the platform and the engine's own value lists. Each error
is a SettingsError (exit 2) naming the knob, where it came from, the engine, and what to use instead.
"""

from __future__ import annotations

from dspark.config.settings import ResolvedSettings, how_to_set, where
from dspark.core.errors import SettingsError
from dspark.engines import ENGINE_NAMES, engine_spec

_SET = ("flag", "env", "recipe")  # layers a user wrote; default and computed values are dspark's own


def check_engine_knobs(settings: ResolvedSettings) -> None:
    """SettingsError when the platform has no build of the engine, or a value is one the engine does not take."""
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
