"""Which engines dspark can replay a workload through, without a model: their scheduler's request builder.

Each engine that can is a module dspark.engines.<engine>.replay_input with REPLAY_TOOL (the dspark_inside tool
run in the engine's interpreter), replay_engine_part(...) and simulator_name(version).
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from dspark.engines import ENGINE_NAMES


def scheduler_replay(engine: str) -> ModuleType | None:
    """The engine's replay module, or None where dspark cannot drive its scheduler without a model."""
    if engine not in ENGINE_NAMES:
        return None
    try:
        return import_module(f"dspark.engines.{engine}.replay_input")
    except ModuleNotFoundError:
        return None
