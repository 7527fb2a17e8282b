"""validate: recipe + flags + environment + model + hardware -> capacity, findings and a launch plan.

Data flows one way: settings (each with its source) and the model's architecture and the
hardware snapshot feed the engine's capacity arithmetic; the verdict and the launch plan follow from those.
This module reads files and hardware only through the edge modules it calls (modeldir, hardware.select).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from dspark import __version__
from dspark.capacity import CapacitySummary
from dspark.capacity.result import CapacityDetail, CapacityInputs, CapacityResult, NotModelledError
from dspark.capacity.seats import default_seats
from dspark.capacity.typical import typical_context_seats
from dspark.config.knobs import reads_as
from dspark.config.settings import ResolvedSettings, Setting, resolve_settings, select_recipe
from dspark.core.errors import EngineNotInstalledError, InputError, RecipeError, RefusedError, SettingsError
from dspark.core.findings import Finding, verdict_of
from dspark.core.suggest import closest
from dspark.engines import DEFAULT_ENGINE, ENGINE_NAMES, engine_spec
from dspark.engines.interpreter import find_engine_python
from dspark.engines.parser_flags import engine_argv
from dspark.engines.pasted_flags import (
    PastedFlags,
    data_parallel_of,
    flag_values_from_engine_flags,
    merge_flags,
    read_engine_flags,
)
from dspark.engines.release_matrix import matrix_note
from dspark.engines.serve_config import ServeConfig
from dspark.engines.spec import AnyEngineSpec, PlannerInput
from dspark.engines.version import ENV_VAR as ENGINE_VERSION_ENV
from dspark.engines.version import EngineVersion, normalize, resolve_engine_version
from dspark.hardware import GpuInfo, HardwareSnapshot
from dspark.hardware.profiles import DEFAULT_PROFILE
from dspark.hardware.select import resolve_cpu_host, resolve_hardware
from dspark.hardware.snapshot import load_snapshot, snapshot_to_dict
from dspark.model.architecture import Drafter, ModelArchitecture
from dspark.model.weights import WeightBytes
from dspark.planning.boot_records import LABEL as OBSERVED_LABEL
from dspark.planning.boot_records import BootKey, apply_record, lookup, plan_key
from dspark.planning.capacity import capacity_inputs, compute_capacity
from dspark.planning.findings import (
    data_parallel_findings,
    drop_contradictions,
    gpus_per_node,
    memory_findings,
    seat_findings,
    weights_findings,
)
from dspark.planning.model_inputs import draft_ref, drafter_of, model_architecture, weights_of
from dspark.planning.observations import PlanIdentity, matching_observations, observation_findings, with_observed_pool
from dspark.planning.serve_config import serve_config
from dspark.runtime.launch import LaunchPlan

if TYPE_CHECKING:  # the recipe models (pydantic) load only when a recipe is used
    from dspark.config.recipes import Recipe
    from dspark.engines.witness import Witness  # the engine check's: loaded only under --engine-check
    from dspark.runtime.boot_store import BootRecord  # read only where the store holds records

HardwareResolver = Callable[[str | None, str, str], HardwareSnapshot]


def _resolve_hw(spec: str | None, default_profile: str, origin: str) -> HardwareSnapshot:
    return resolve_hardware(spec, default_profile=default_profile, origin=origin)


@dataclass(frozen=True)
class ValidateRequest:
    """What the user asked for: dspark's own flags (by knob name), engine flags after `--`, and the environment."""

    flags: Mapping[str, object | None] = field(default_factory=dict)
    recipe: str | None = None
    engine_flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    peer_hardware: tuple[str, ...] = ()  # saved probes (`dspark probe --json`) of the other nodes
    typical_context: int | None = None  # tokens a request typically holds, for the typical-context seat policy
    prefix_cache_reserve: int = 0  # tokens kept for cached prefixes under that policy
    engine_version: str | None = None  # --engine-version: plan for this version instead of the installed one
    engine_python: str | None = None  # --engine-python: the engine's interpreter (else DSPARK_ENGINE_PYTHON, ...)
    engine_check: bool = False  # --engine-check: also run the installed engine's own planner (the witness)


@dataclass(frozen=True)
class ValidationReport:
    """Everything validate decided; `to_json()` is what `--json` prints."""

    recipe: Recipe | None
    settings: ResolvedSettings
    architecture: ModelArchitecture
    weights: WeightBytes | None
    drafter: Drafter | None
    hardware: HardwareSnapshot
    capacity: CapacitySummary
    findings: tuple[Finding, ...]
    serve: ServeConfig
    plan: LaunchPlan
    engine_version: EngineVersion
    spec: AnyEngineSpec  # the engine planned for, resolved once from the request (not in the JSON: `engine` names it)
    witness: Witness | None = None  # the installed engine's own planner on the same inputs, when asked
    witness_request: Mapping[str, Any] | None = None  # what that planner is given (None: nothing it can take)
    witness_unavailable: str = ""  # why there is no request, when there is none
    footprint_bytes: int | None = None  # what the engine holds per GPU (weights, KV, runtime), for per-node checks
    boot_key: BootKey | None = None  # the key this plan's boots are recorded under (start --watch, sweep)
    boot_record: BootRecord | None = None  # the recorded boot the figures rest on, where one matched

    @property
    def verdict(self) -> str:
        """ok / warn / fail."""
        return verdict_of(self.findings)

    def to_json(self) -> dict[str, Any]:
        """One JSON object: capacity, settings (with sources), verdict, findings, argv, and what they rest on."""
        cap = dataclasses.asdict(self.capacity)
        cap["witness"] = self.witness.to_json() if self.witness is not None else None
        if self.boot_record is not None:  # only then: a plan without a record prints what it always did
            rec = self.boot_record
            cap["budget_source"] = "observed"
            cap["observed_boot"] = {
                "label": OBSERVED_LABEL, "key": rec.key, "recorded_at": rec.recorded_at, "boots": rec.boots,
                "engine_version": rec.engine_version, "pool_tokens": rec.pool_tokens,
                "max_model_len": rec.max_model_len, "max_concurrency": rec.max_concurrency,
                "previous_pool_tokens": rec.previous_pool_tokens, "terms": dict(rec.terms),
            }
        return {
            "dspark_version": __version__,
            "recipe": self.recipe.name if self.recipe else None,
            "engine": self.serve.engine,
            "engine_version": self.engine_version.to_json(),
            "model": {
                "source": self.architecture.source,
                "model_type": self.architecture.model_type,
                "architecture": self.architecture.architecture,
                "layers": self.architecture.num_layers,
                "hybrid": self.architecture.is_hybrid,
                "mla": self.architecture.uses_mla,
                "weights_per_gpu_bytes": self.weights.per_gpu_bytes if self.weights else None,
                "weights_exact": self.weights.exact if self.weights else None,
                "drafter": self.drafter.method if self.drafter else None,
            },
            "hardware": snapshot_to_dict(self.hardware),
            "capacity": cap,
            "settings": self.settings.to_json(),
            "verdict": self.verdict,
            "findings": [f.to_json() for f in self.findings],
            "argv": self.plan.to_json()["argv"],
            "env": self.plan.to_json()["env"],
            "notices": list(self.settings.notices()),
        }


def _load_recipe(request: ValidateRequest) -> tuple[Recipe | None, Setting[str | None]]:
    model_given = request.flags.get("model") is not None or bool(request.env.get("DSPARK_MODEL", "").strip())
    choice = select_recipe(request.recipe, request.env, model_given=model_given)
    if not choice.value:
        return None, choice
    from dspark.config.recipes import find_recipe  # noqa: PLC0415

    return find_recipe(choice.value), choice


def _engine_name(request: ValidateRequest, recipe: Recipe | None) -> str:
    flag = request.flags.get("engine")
    if isinstance(flag, str) and flag:
        return flag
    raw = request.env.get("DSPARK_ENGINE")
    if raw is not None:
        value = raw.strip().lower()
        if value not in ENGINE_NAMES:
            close = closest(value, ENGINE_NAMES)
            raise SettingsError(
                f"DSPARK_ENGINE={raw!r}: " + ("empty" if not value else "not an engine dspark knows")
                + f"; expected one of {', '.join(ENGINE_NAMES)}" + (f"; did you mean {close!r}?" if close else ""),
                hint=f"unset DSPARK_ENGINE to use the recipe's engine (or {DEFAULT_ENGINE})",
            )
        return value
    return recipe.engine if recipe else DEFAULT_ENGINE


def _hardware(settings: ResolvedSettings, recipe: Recipe | None, resolver: HardwareResolver) -> HardwareSnapshot:
    """This machine's GPUs; a recipe's `hardware` is only the profile to use when there are none here."""
    chosen = settings.hardware
    origin = chosen.source.split(":", 1)[1] if chosen.layer == "env" else "--hardware"
    spec = chosen.value if chosen.layer in ("flag", "env") else None
    if settings.platform.value == "cpu":
        # The CPU build keeps its KV cache in the host's memory: this host, or one saved with probe --platform cpu.
        return resolve_cpu_host(spec, origin=origin)
    default_profile = (recipe.hardware if recipe and recipe.hardware else None) or DEFAULT_PROFILE
    hardware = resolver(spec, default_profile, origin)
    if hardware.platform == "cpu":
        # A host saved by `probe --platform cpu` has no GPU: its memory is the CPU build's, not a CUDA device's.
        raise InputError(
            f"{origin} {spec}: a CPU host's snapshot (saved with `dspark probe --platform cpu`), not GPUs, and the "
            "plan is for CUDA GPUs",
            hint="plan for the engine's CPU build with --platform cpu, or save the GPU machine with "
            "`dspark probe --json` on it and give that file",
        )
    return hardware


WEIGHTS_UNKNOWN = Finding(
    "warn",
    "weights-unknown",
    "no safetensors here and no parameter estimate: weights are not counted in the memory check; give "
    "model.weights_bytes in the recipe or a directory with weights",
)


def _version_findings(spec: AnyEngineSpec, version: EngineVersion) -> list[Finding]:
    """An unmodelled engine version is said, with the version whose figures stand in for it."""
    if version.exact:
        return []
    engine_name = spec.name
    return [Finding(
        "warn", "engine-version-not-modelled",
        f"{engine_name} {version.requested} ({version.source}) is not modelled: the figures are "
        f"{engine_name} {version.modelled}'s, the nearest modelled version "
        f"(modelled: {', '.join(spec.modelled_versions)}); "
        f"{matrix_note(engine_name, str(version.requested))}",
    )]


def _generic_weights_findings(found: list[Finding], weights: WeightBytes | None, hardware: HardwareSnapshot,
                              settings: ResolvedSettings, arch: ModelArchitecture) -> list[Finding]:
    """Weights that overflow a GPU, judged generically only where the engine model has not (its check is finer)."""
    if any(f.code == "weights-do-not-fit" for f in found):
        return []
    return weights_findings(weights.total_bytes if weights else None, weights.per_gpu_bytes if weights else None,
                            hardware, settings, arch.num_attention_heads)


class _Resolved(NamedTuple):
    """A request resolved: its recipe, engine, version, pasted flags (as the engine's parser reads them) and
    settings, with what resolving them said."""

    recipe: Recipe | None
    spec: AnyEngineSpec
    version: EngineVersion
    pasted: PastedFlags
    settings: ResolvedSettings
    findings: tuple[Finding, ...]


def _resolve(request: ValidateRequest) -> _Resolved:
    """The recipe, engine, its version, the pasted engine flags and the settings of a request.

    The engine is resolved here once, at the edge (unknown names fail here, naming the known ones), and its
    EngineSpec handed down from here on. The pasted flags are read as that version's parser reads them
    (abbreviations spelled out, flags it does not have refused), so that planning uses the engine's values.
    """
    recipe, _ = _load_recipe(request)
    spec = engine_spec(_engine_name(request, recipe))
    version, said = _engine_version(spec, request)
    pasted = read_engine_flags(spec, request.engine_flags, version.requested)
    flags = merge_flags(request.flags, flag_values_from_engine_flags(spec, pasted.options), same=reads_as)
    settings = resolve_settings(
        {k: v for k, v in flags.items() if k != "recipe"} | {"recipe": request.recipe}, request.env, recipe
    )
    said += _recipe_engine_args(recipe, spec, pasted)
    return _Resolved(recipe, spec, version, pasted, settings, (*said, *pasted.findings))


def _recipe_engine_args(recipe: Recipe | None, spec: AnyEngineSpec, pasted: PastedFlags) -> list[Finding]:
    """A recipe's engine_args as the engine's parser reads them: a flag it does not have, or an ambiguous prefix,
    is refused (the engine refuses the argv at start); an abbreviation is said, for dspark does not plan with
    engine_args, and `dspark start` refuses it where the engine's reading of it changes a capacity value."""
    table = pasted.table
    if recipe is None or not recipe.engine_args or table is None or not table.exact:
        return []
    read = engine_argv(recipe.engine_args, table, spec.flag_grammar)
    if read.unknown or read.ambiguous:
        wrong = [f"{flag}: {table.label} has no such flag" for flag in dict.fromkeys(read.unknown)]
        wrong += [f"{given} could match {', '.join(found)}" for given, found in read.ambiguous]
        raise RecipeError(f"{recipe.source}: engine_args: {'; '.join(wrong)}",
                          hint="spell each engine flag out as the engine names it (`--help` of the engine lists them)")
    return [Finding("warn", "engine-args-abbreviated",
                    f"{recipe.source}: engine_args: {given} is {full} to {table.label}; spell it out (dspark plans "
                    "with the recipe's fields, not its engine_args, and `dspark start` refuses an abbreviation that "
                    "changes a capacity value)") for given, full in read.abbreviated]


def _peer_snapshot(path: str) -> HardwareSnapshot:
    """One --peer-hardware file; an empty name is refused as empty (Path('') would read as the directory '.')."""
    if not path.strip():
        raise InputError(f"--peer-hardware {path!r}: empty; expected a file saved by `dspark probe --json` on the "
                         "other node", hint="give the file's path, or leave --peer-hardware out")
    return load_snapshot(Path(path))


def request_settings(request: ValidateRequest) -> ResolvedSettings:
    """The settings validate plans with, before any model, hardware or capacity is read."""
    return _resolve(request).settings


def _fit_findings(result: CapacityResult, summary: CapacitySummary, request: ValidateRequest,
                  hardware: HardwareSnapshot, settings: ResolvedSettings, recipe: Recipe | None,
                  identity: PlanIdentity, arch: ModelArchitecture, weights: WeightBytes | None,
                  parallel: tuple[int, bool, int], so_far: list[Finding]) -> list[Finding]:
    """What the footprint, the data-parallel layout, the recipe's observations, the seats and the weights say."""
    data_parallel, dp_attention, replicas = parallel
    peers = tuple(_peer_snapshot(p) for p in request.peer_hardware)
    findings = memory_findings(result.footprint_bytes, hardware, settings, peers, data_parallel=replicas)
    findings += data_parallel_findings(data_parallel, dp_attention, summary.max_num_seqs)
    findings += observation_findings(result.summary, recipe, settings, identity)
    findings += seat_findings(summary, settings, arch)
    findings += _generic_weights_findings([*so_far, *findings], weights, hardware, settings, arch)
    if weights is None:
        findings.append(WEIGHTS_UNKNOWN)
    return findings


def validate(request: ValidateRequest, *, hardware_resolver: HardwareResolver | None = None) -> ValidationReport:
    """Plan a launch and judge it; raises InputError / SettingsError for bad input, never launches anything."""
    resolved = _resolve(request)
    recipe, spec, settings, version = resolved.recipe, resolved.spec, resolved.settings, resolved.version
    options = resolved.pasted.options
    arch, headers = model_architecture(settings, recipe)
    drafter = drafter_of(spec, settings, recipe, options, arch)
    weights = weights_of(arch, headers, drafter, settings, recipe, vision=spec.loads_vision_tower(options))
    hardware = _hardware(settings, recipe, hardware_resolver or _resolve_hw)
    data_parallel, dp_attention = data_parallel_of(spec, options)
    replicas = 1 if dp_attention else data_parallel  # DP attention runs inside the TP group's GPUs
    gpu = _first_gpu(hardware, settings, replicas)
    identity = PlanIdentity(engine_version=version.requested, gpu_name=gpu.name if gpu is not None else None,
                            recipe_settings=resolve_settings({}, {}, recipe) if recipe is not None else None)

    boot: list[tuple[BootKey | None, BootRecord | None, list[Finding]]] = [(None, None, [])]
    keyed = _BootContext(spec, recipe, options, _launched_options(spec, recipe, request, options), arch, weights,
                         drafter, hardware, gpu, version, request.env)

    def capacity_at(resolved: ResolvedSettings) -> tuple[CapacityResult, CapacitySummary]:
        try:
            found = compute_capacity(
                spec, arch, options, resolved, recipe, gpu=gpu, weights=weights, drafter=drafter,
                env=request.env, cpu_flags=hardware.cpu_flags if resolved.platform.value == "cpu" else None,
                cpu_arch=hardware.cpu_arch, engine_version=version.modelled,
            )
        except NotModelledError as exc:
            found = _observed_capacity(spec, exc, recipe, resolved, arch, gpu, version.modelled, identity)
        else:
            found, boot[0] = keyed.on_record(found, resolved)
        # The engine's own log for this very plan stands beside the prediction; the safe default follows the lower.
        return found, with_observed_pool(found.summary, recipe, resolved, identity)

    result, summary = capacity_at(settings)
    if settings.max_num_seqs.layer == "default":
        # Nothing set the seats: use the computed safe count, as the deployment's scripts fell back to the 6
        # its pin held. On hybrid SGLang models the pool depends on the seats, so settle it in a few rounds.
        # The count is always marked computed, also when it equals the built-in 6: one label for one thing.
        for _ in range(3):
            if boot[0][1] is not None:
                break  # a boot recorded at these seats: its pool is this plan's, the seats stay the ones it ran
            target = default_seats(summary.safe_max_num_seqs, spec.default_max_num_seqs)
            if target == settings.max_num_seqs.value and settings.max_num_seqs.layer == "computed":
                break
            settings = settings.with_computed(max_num_seqs=target)
            result, summary = capacity_at(settings)
    if request.typical_context is not None:
        summary = replace(summary, typical_context=request.typical_context,
                          prefix_cache_reserve=request.prefix_cache_reserve,
                          typical_context_seats=typical_context_seats(
                              result.detail, summary.kv_pool_tokens, request.typical_context,
                              request.prefix_cache_reserve))
    if summary.avg_context_at_max_num_seqs > summary.max_model_len:
        # No request is longer than the window: past it the bound only says every seat holds a full window.
        summary = replace(summary, avg_context_at_max_num_seqs=summary.max_model_len)
    findings = [*result.findings, *boot[0][2]]  # the prediction's, and an unreadable record's warning
    findings += resolved.findings
    findings += _version_findings(spec, version)
    findings += _fit_findings(result, summary, request, hardware, settings, recipe, identity, arch, weights,
                              (data_parallel, dp_attention, replicas), findings)
    serve = serve_config(spec, settings, recipe, resolved.pasted.argv, summary,
                         drafter_model=draft_ref(spec, options, recipe))
    plan, planner = _plan_and_witness_request(spec, serve, result.detail, settings)
    witness = None
    if request.engine_check:
        from dspark.engines.witness import witness_finding  # noqa: PLC0415 - only the engine check

        witness = _check_with_engine(spec, request, planner, summary)
        findings.append(witness_finding(witness, summary))
    return ValidationReport(
        recipe=recipe,
        settings=settings,
        architecture=arch,
        weights=weights,
        drafter=drafter,
        hardware=hardware,
        capacity=summary,
        findings=tuple(drop_contradictions(findings)),
        serve=serve,
        plan=plan,
        engine_version=version,
        spec=spec,
        witness=witness,
        witness_request=planner.request,
        witness_unavailable=planner.unavailable,
        footprint_bytes=result.footprint_bytes,
        boot_key=boot[0][0],
        boot_record=boot[0][1],
    )


class _BootContext(NamedTuple):
    """What a plan's recorded boot is looked up and replayed with (dspark.planning.boot_records)."""

    spec: AnyEngineSpec
    recipe: Recipe | None
    options: Any  # the pasted flags capacity reads
    launched: Any  # every engine flag the launch passes, for the key's memory flags
    arch: ModelArchitecture
    weights: WeightBytes | None
    drafter: Drafter | None
    hardware: HardwareSnapshot
    gpu: GpuInfo | None
    version: EngineVersion
    env: Mapping[str, str]

    def at_inputs(self, inputs: CapacityInputs, resolved: ResolvedSettings) -> CapacityResult:
        return self.spec.capacity(
            self.arch, self.options, inputs, gpu=self.gpu, weights=self.weights, drafter=self.drafter, env=self.env,
            cpu_flags=self.hardware.cpu_flags if resolved.platform.value == "cpu" else None,
            cpu_arch=self.hardware.cpu_arch, version=self.version.modelled,
        )

    def on_record(self, found: CapacityResult, resolved: ResolvedSettings,
                  ) -> tuple[CapacityResult, tuple[BootKey | None, BootRecord | None, list[Finding]]]:
        """The figures on the boot recorded for this very plan (start --watch, sweep), where the budget is an
        estimate and the store has one; the key either way."""
        spec = self.spec
        inputs = capacity_inputs(spec, resolved, self.recipe)
        key = plan_key(spec, self.launched, inputs, found, arch=self.arch, weights=self.weights,
                       hardware=self.hardware, gpu=self.gpu, engine_version=str(self.version.requested))
        record, problems = lookup(key, self.env) if found.summary.kv_budget_source == "estimate" else (None, [])
        if record is None:
            return found, (key, None, problems)

        def at_pin(value: int) -> CapacityResult:
            if spec.pool_pin == "bytes":
                return self.at_inputs(replace(inputs, kv_cache_memory_bytes=value), resolved)
            pinned = {**inputs.engine_values, spec.pool_pin_knob: value}
            return self.at_inputs(replace(inputs, engine_values=pinned), resolved)

        return apply_record(record, found, at_pin, spec.pool_pin, key), (key, record, problems)


def _launched_options(spec: AnyEngineSpec, recipe: Recipe | None, request: ValidateRequest, options: Any) -> Any:
    """The engine flags the launch passes (the recipe's engine_args, then those after `--`), as its reader sees
    them: what a recorded boot's key takes its memory flags from."""
    pasted = tuple(recipe.engine_args) if recipe is not None else ()
    if not pasted:
        return options
    try:
        return spec.parse_flags((*pasted, *request.engine_flags))
    except InputError:
        return options


def _plan_and_witness_request(
    spec: AnyEngineSpec, serve: ServeConfig, detail: CapacityDetail | None, settings: ResolvedSettings
) -> tuple[LaunchPlan, PlannerInput]:
    """The launch plan (display form), and what the engine's own planner would be handed for the witness."""
    adapter = spec.adapter()
    plan = adapter.build_plan(serve, None)
    planner = spec.planner_input(detail, adapter.parser_argv(plan),
                                 user_pinned=any(pin.value is not None and pin.layer in ("flag", "env", "recipe")
                                                 for pin in settings.pool_pin_settings))
    return plan, planner


def _check_with_engine(
    spec: AnyEngineSpec, request: ValidateRequest, planner: PlannerInput, summary: CapacitySummary
) -> Witness:
    """validate --engine-check: the installed engine's planner on dspark's budget (needs the engine)."""
    from dspark.engines.witness import Witness, judge, run_witness  # noqa: PLC0415 - only the engine check

    if planner.request is None:
        return Witness(None, None, None, agrees=False, budget_source=summary.kv_budget_source,
                       error=planner.unavailable)
    from dspark.engines.interpreter import installed_version  # noqa: PLC0415

    python = find_engine_python(spec.adapter(), request.engine_python, request.env)
    if installed_version(spec, python) is None:
        # One rule for "no engine there", whether dspark looked for it or was pointed at an interpreter: exit 2.
        raise EngineNotInstalledError(
            f"--engine-check: {spec.name} is not installed in {python}",
            hint="point --engine-python / DSPARK_ENGINE_PYTHON at the python of the engine's virtualenv, "
            "or leave out --engine-check",
        )
    return judge(run_witness(python, planner.request), summary)


def _engine_version(spec: AnyEngineSpec, request: ValidateRequest) -> tuple[EngineVersion, list[Finding]]:
    """The version to plan for; the installed one is read from the engine's interpreter's metadata (cheap).

    An interpreter named on purpose (--engine-python, DSPARK_ENGINE_PYTHON) that cannot be run is said: the plan
    then stands on the default version, and `dspark start` would refuse it.
    """
    from dspark.engines.interpreter import installed_version  # noqa: PLC0415

    flag, env_value = request.engine_version, request.env.get(ENGINE_VERSION_ENV, "").strip()
    installed = None
    said: list[Finding] = []
    named = request.engine_python if request.engine_python is not None else request.env.get("DSPARK_ENGINE_PYTHON")
    python = None
    if named is not None or not (flag or env_value):  # an explicit version needs no look at the installed engine
        try:
            python = find_engine_python(spec.adapter(), request.engine_python, request.env)
        except EngineNotInstalledError as exc:
            if named is not None:
                where = "--engine-python" if request.engine_python is not None else "DSPARK_ENGINE_PYTHON"
                said.append(Finding(
                    "warn", "engine-python-not-found",
                    f"{where}: {exc.message}; the plan does not use it (no installed version was read), and "
                    f"`dspark start` would refuse it ({exc.hint or 'name the python of the engine'})"))
    if python and not (flag or env_value):
        raw = installed_version(spec, python)
        installed = normalize(raw) if raw else None
    version = resolve_engine_version(spec.name, spec.modelled_versions, flag=flag, env=request.env,
                                     installed=installed)
    return version, said


def _observed_capacity(
    spec: AnyEngineSpec, exc: NotModelledError, recipe: Recipe | None, settings: ResolvedSettings,
    arch: ModelArchitecture, gpu: GpuInfo | None, engine_version: str, identity: PlanIdentity,
) -> CapacityResult:
    """When dspark cannot reproduce the engine's KV accounting, a recipe's observed pool stands in, labelled so."""
    window = settings.max_model_len.value
    seats = settings.max_num_seqs.value
    observed = matching_observations(recipe, settings, "kv_pool_tokens", seats, identity) if window else []
    if not observed or window is None or spec.observed_capacity is None:
        raise exc
    obs = observed[0]
    reason = exc.message
    summary = spec.observed_capacity(capacity_inputs(spec, settings, recipe), arch, gpu, pool=int(obs.value),
                                     window=window, source=obs.source, reason=reason, engine_version=engine_version)
    finding = Finding("warn", "engine-not-modelled",
                      f"{reason}; the pool and contexts below are the recipe's observation ({obs.source}), "
                      "not a prediction, and the memory check is skipped")
    return CapacityResult(summary, (finding,), None, None)


def _first_gpu(hardware: HardwareSnapshot, settings: ResolvedSettings, data_parallel: int = 1) -> GpuInfo | None:
    if not hardware.gpus:
        return None
    need = gpus_per_node(settings, data_parallel)
    if len(hardware.gpus) < need and settings.platform.value != "cpu":
        dp = f" × DP {data_parallel}" if data_parallel > 1 else ""
        # Valid input that this hardware cannot hold: a refusal (exit 1), as any other plan that does not fit.
        raise RefusedError(
            f"the plan needs {need} GPU(s) per node (TP {settings.tensor_parallel_size.value} × PP "
            f"{settings.pipeline_parallel_size.value}{dp} over {settings.nnodes.value} node(s)) but "
            f"{hardware.description} has {len(hardware.gpus)}",
            hint="lower --tp (or the data-parallel size), spread over more nodes, or plan against other hardware "
            "(--hardware PROFILE:N names N GPUs per node)",
        )
    # The engines size every rank by the smallest free memory among them.
    return min(hardware.gpus[:need], key=lambda g: g.free_bytes)
