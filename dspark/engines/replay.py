"""Which engines dspark can replay a workload through, without a model: their declared EngineSpec.replay.

Each engine that can declares its replay module (dspark.engines.<engine>.replay_input, a SchedulerReplay:
REPLAY_TOOL, the dspark_inside tool run in the engine's interpreter, replay_engine_part(...), simulator_name(version)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dspark.engines import ENGINE_NAMES, engine_spec

if TYPE_CHECKING:
    from dspark.engines.spec import SchedulerReplay


def scheduler_replay(engine: str) -> SchedulerReplay | None:
    """The engine's replay module, or None where dspark cannot drive its scheduler without a model."""
    return engine_spec(engine).replay if engine in ENGINE_NAMES else None
