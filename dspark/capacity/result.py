"""The seam between planning and an engine's capacity model: what goes in, what comes out, typed (pure).

Each engine package implements the model (dspark/engines/<engine>/plan.py, registered on its EngineSpec);
planning builds the inputs from the resolved settings and reads the result through these types only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias

from dspark.capacity import CapacitySummary
from dspark.core.errors import InputError
from dspark.core.findings import Finding


class NotModelledError(InputError):
    """A model or setting whose accounting an engine package does not reproduce (it would guess, so it refuses).

    validate falls back to a recipe's observed pool when it has one; otherwise this is bad input (exit 2).
    """


@dataclass(frozen=True)
class SpeculativeInputs:
    """The recipe's speculative decoding, as the capacity models read it."""

    method: str
    num_speculative_tokens: int
    draft_model: str | None = None


# The values of the knobs only one engine reads (vLLM's utilisation and byte pin, SGLang's memory fraction and
# token pin), by knob name: each engine's EngineSpec.engine_knobs lists its own, and only its package reads them.
EngineValues: TypeAlias = Mapping[str, int | float | None]


@dataclass(frozen=True)
class CapacityInputs:
    """The resolved settings' values an engine's capacity model reads (where each came from stays in settings)."""

    platform: Literal["cpu", "cuda"]
    model: str | None
    max_num_seqs: int
    max_model_len: int | None
    kv_cache_dtype: str  # "auto": the engine's default
    kv_cache_memory_bytes: int | None  # dspark's byte pin: vLLM launches with it, SGLang buys tokens with it
    max_num_batched_tokens: int | None
    enable_prefix_caching: bool | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    num_speculative_tokens: int | None
    speculative: SpeculativeInputs | None = None  # the recipe's, when it sets one
    recipe_env: Mapping[str, str] = field(default_factory=dict)  # the recipe's environment for the engine
    engine_values: EngineValues = field(default_factory=dict)  # the engine's own knobs (EngineSpec.engine_knobs)


class CapacityDetail(Protocol):
    """An engine's own capacity figures, as engine-neutral code reads them (VllmCapacity, SglangCapacity)."""

    def typical_context_seats(self, pool_tokens: int, typical: int, reserve: int) -> int:
        """Largest seat count the engine runs at once with requests of `typical` tokens plus `reserve` cached tokens."""
        ...


@dataclass(frozen=True)
class CapacityResult:
    """An engine's figures, what it would refuse, and its memory footprint per GPU (None when unknown).

    detail: the engine's own figures (None when they are observed, not computed); engine packages read their
    own type back from it (the witness request), everything else only through CapacityDetail.
    """

    summary: CapacitySummary
    findings: tuple[Finding, ...]
    footprint_bytes: int | None
    detail: CapacityDetail | None
