"""Engine registry: each adapter turns a ServeConfig into a LaunchPlan and checks it with the engine's parser."""

from __future__ import annotations

from dspark.engines.base import Engine
from dspark.engines.sglang import SglangEngine
from dspark.engines.vllm import VllmEngine
from dspark.errors import InputError

ENGINES: dict[str, type[VllmEngine] | type[SglangEngine]] = {"vllm": VllmEngine, "sglang": SglangEngine}


def get_engine(name: str) -> Engine:
    """The adapter for `name`; unknown names are an input error listing the known ones."""
    try:
        return ENGINES[name]()
    except KeyError:
        raise InputError(f"unknown engine {name!r}", hint=f"use one of: {', '.join(sorted(ENGINES))}") from None
