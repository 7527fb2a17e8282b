"""start: validate, refuse what does not fit, build the argv, have the engine's own parser accept it, exec."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dspark.core.errors import (
    DsparkError,
    EngineArgError,
    EngineNotInstalledError,
    ExitCode,
    RefusedError,
    SettingsError,
)
from dspark.core.findings import Finding, verdict_of
from dspark.engines.base import ArgvCheck, check_argv, require_ok
from dspark.engines.interpreter import find_engine_python
from dspark.engines.witness import judge, with_engine_figures, witness_finding
from dspark.planning.boot_records import BootRecorder
from dspark.planning.validate import ValidateRequest, ValidationReport, request_settings, validate
from dspark.runtime.launch import LaunchPlan, exec_plan

ArgvChecker = Callable[..., ArgvCheck]  # check_argv's signature: (engine, plan, python, witness_request=...)


@dataclass(frozen=True)
class StartRequest:
    """validate's inputs plus what only a launch needs."""

    validate: ValidateRequest
    force: bool = False  # start even when the verdict fails
    engine_python: str | None = None
    dry_run: bool = False  # only print the plan: no engine or live hardware needed


@dataclass(frozen=True)
class StartResult:
    """A checked plan: the report it rests on, the argv, and the engine parser's verdict on it."""

    report: ValidationReport  # on the engine planner's figures where it disagreed with dspark's
    plan: LaunchPlan
    check: ArgvCheck
    findings: tuple[Finding, ...] = ()  # what planning the launch added (argv-not-checked, ...)
    # A dry run: what a real start would refuse, in the order it would check (the first one's exit code wins).
    would_refuse: tuple[DsparkError, ...] = ()
    # A dry run: what a real start on this machine would also refuse for what a dry run does without (no live GPU
    # read here, no engine installed here). Said, not counted in the dry run's exit code: a plan is printed where
    # the GPUs are not, and the exit code says whether that plan would start where they are.
    refused_here: tuple[DsparkError, ...] = ()

    @property
    def exit_code(self) -> int:
        """0, or the exit code a real start would end with (its first refusal's)."""
        return int(self.would_refuse[0].exit_code) if self.would_refuse else 0

    @property
    def all_findings(self) -> tuple[Finding, ...]:
        """validate's findings, then the launch's."""
        return (*self.report.findings, *self.findings)

    def to_json(self) -> dict[str, Any]:
        """validate's JSON with the real argv and the engine's parse of it."""
        out = self.report.to_json()
        out["findings"] = [f.to_json() for f in self.all_findings]
        out["verdict"] = verdict_of(self.all_findings)
        out["argv"] = self.plan.to_json()["argv"]
        out["env"] = self.plan.to_json()["env"]
        out["engine_check"] = {
            "ok": self.check.ok,
            "engine_version": self.check.engine_version,
            "parsed": dict(self.check.parsed),
        }
        out["would_refuse"] = [_refusal_json(e) for e in self.would_refuse]
        out["would_refuse_here"] = [_refusal_json(e) for e in self.refused_here]
        return out


def _refusal_json(error: DsparkError) -> dict[str, Any]:
    return {"code": error.code, "message": error.message, "hint": error.hint, "exit_code": int(error.exit_code)}


def plan_start(
    request: StartRequest, *, checker: ArgvChecker = check_argv, env: Mapping[str, str] | None = None
) -> StartResult:
    """Everything before exec; RefusedError for a failing verdict (unless forced), EngineArgError for a bad argv.

    A dry run raises none of the refusals a real start would: it plans anyway and lists them (would_refuse),
    having run every check that needs neither the engine nor a live GPU (and the engine's, when it is here).
    """
    settings = request_settings(request.validate)
    if settings.distributed_runtime.value == "ray":
        # Every node of the Ray cluster is probed where it is, and the tightest sizes the plan.
        from dspark.planning.ray_plan import on_ray_cluster  # noqa: PLC0415 - only a Ray launch needs it

        report = on_ray_cluster(request.validate, settings, dry_run=request.dry_run)
    else:
        report = validate(request.validate)
    refusals = _refusals(report, request)
    if refusals and not request.dry_run:
        raise refusals[0]
    findings: list[Finding] = []
    here: list[DsparkError] = []
    if request.dry_run:
        findings += _dry_run_hardware(report)
        here += _real_hardware_refusal(report)
    engine = report.spec.adapter()
    env_map = request.validate.env if env is None else env
    try:
        python = find_engine_python(engine, request.engine_python, env_map)
    except EngineNotInstalledError as exc:
        if not request.dry_run:
            raise
        # A plan printed on a laptop: the argv is shown as built, and said to be unchecked.
        plan = engine.build_plan(report.serve, None)
        unchecked = Finding("warn", "argv-not-checked",
                            f"{exc.message}: the argv below was not checked by the engine's own parser "
                            "(a real `dspark start` checks it, and needs the engine)")
        return StartResult(report=report, plan=plan, check=ArgvCheck(ok=False, engine_version=None, parsed={}),
                           findings=(*findings, unchecked), would_refuse=tuple(refusals),
                           refused_here=(*here, exc))
    try:
        report, plan, check = _checked_plan(engine, report, python, request, checker)
    except (EngineArgError, RefusedError) as exc:  # what the engine's own parser and planner refuse
        if not request.dry_run:
            raise
        plan = engine.build_plan(report.serve, python)
        return StartResult(report=report, plan=plan, check=ArgvCheck(ok=False, engine_version=None, parsed={}),
                           findings=tuple(findings), would_refuse=(*refusals, exc), refused_here=tuple(here))
    return StartResult(report=report, plan=plan, check=check, findings=tuple(findings), would_refuse=tuple(refusals),
                       refused_here=tuple(here))


def _refusals(report: ValidationReport, request: StartRequest) -> list[DsparkError]:
    """What a real start refuses before it looks for the engine, in the order it checks."""
    out: list[DsparkError] = []
    if report.verdict == "fail" and not request.force:
        reasons = "; ".join(f.message for f in report.findings if f.level == "fail")
        out.append(RefusedError(f"refusing to start: {reasons}", hint="fix the plan, or pass --force to start anyway"))
    missing = report.settings.missing_for_launch()
    if missing:
        out.append(SettingsError("; ".join(missing)))
    if not request.dry_run:
        out += _real_hardware_refusal(report)
    return out


def _checked_plan(engine: Any, report: ValidationReport, python: str, request: StartRequest,
                  checker: ArgvChecker) -> tuple[ValidationReport, LaunchPlan, ArgvCheck]:
    """The plan checked by the engine's own parser (and planner), under older flag names where a release needs."""
    plan = engine.build_plan(report.serve, python)
    # The engine's own planner runs in the same process as its parser: the engine is imported once.
    check = checker(engine, plan, python, witness_request=report.witness_request)
    former = _former_names(plan.argv, check, report.spec.former_flags)
    if former:  # an older release knows a flag dspark sets by its former name: its parser is asked again
        plan = replace(plan, argv=_renamed(plan.argv, former))
        witness_request = report.witness_request
        if witness_request is not None and "argv" in witness_request:  # SGLang's sizing parses the flags too
            witness_request = {**witness_request, "argv": list(_renamed(witness_request["argv"], former))}
        check = checker(engine, plan, python, witness_request=witness_request)
    require_ok(engine, plan, check)
    validated = report.serve
    report = _with_witness(report, check, force=request.force)
    if report.serve != validated:
        # Launching on the engine planner's figure changed a pin (SGLang's --max-total-tokens): the argv that
        # execs is a new one, so the engine's parser reads that one too (its witness answer is kept).
        plan = engine.build_plan(report.serve, python)
        plan = replace(plan, argv=_renamed(plan.argv, former))
        check = replace(checker(engine, plan, python), witness=check.witness)
        require_ok(engine, plan, check)
    _confirm_pinned(report, check)
    _confirm_read_back(report, engine.parser_argv(plan), check)
    return report, plan, check


def run_start(
    request: StartRequest,
    show: Callable[[StartResult], None],
    *,
    watch: bool = False,
    execute: Callable[[LaunchPlan], object] = exec_plan,
) -> int:
    """Plan the launch and `show` it; then exec the engine, or supervise it as a child with `watch`.

    With request.dry_run nothing starts: the exit code is the one a real start would end with (0, or its first
    refusal's; `show` says what it would refuse). Exec does not return; `execute` is the seam tests replace.
    """
    result = plan_start(request)
    show(result)
    if request.dry_run:
        return result.exit_code
    if watch:
        from dspark.runtime.supervise import watch_plan  # noqa: PLC0415 - the supervisor loads only for --watch

        return watch_plan(result.plan, expected_pool_tokens=result.report.capacity.kv_pool_tokens,
                          log_format=result.report.spec.log_format,
                          on_boot=boot_recorder(result, request.validate.env))
    execute(result.plan)
    return int(ExitCode.OK)  # only reached when a test injects an execute that returns


def boot_recorder(result: StartResult, env: Mapping[str, str]) -> BootRecorder | None:
    """What records a started engine's boot under the plan's key (dspark.planning.boot_records); None: no key."""
    report = result.report
    if report.boot_key is None:
        return None
    version = result.check.engine_version or str(report.engine_version.requested)
    return BootRecorder(report.boot_key, engine=report.spec.name, engine_version=version, env=env)


def _former_names(argv: Sequence[str], check: ArgvCheck, former: Mapping[str, str]) -> dict[str, str]:
    """The flags of argv the parser called unrecognized that older releases know by another name (new -> old)."""
    marker = "unrecognized arguments:"  # argparse's own words for flags it does not have
    if check.ok or not check.error or marker not in check.error:
        return {}
    unknown = set(check.error.partition(marker)[2].split())
    return {new: old for new, old in former.items() if new in unknown and new in argv}


def _renamed(argv: Sequence[str], names: Mapping[str, str]) -> tuple[str, ...]:
    """argv with each flag in names given its other name."""
    return tuple(names.get(arg, arg) for arg in argv)


def _real_hardware_refusal(report: ValidationReport) -> list[DsparkError]:
    """A launch is planned against live GPUs (or this host for the CPU build) or hardware named on purpose."""
    chosen = report.settings.hardware
    if report.hardware.source == "profile" and chosen.layer not in ("flag", "env"):
        return [RefusedError(
            f"refusing to start: no live GPU was read here, and the plan is against a built-in profile "
            f"({report.hardware.description}); its figures describe another machine",
            hint="start on the machine with the GPUs, or name the hardware on purpose with --hardware "
            "PROFILE|FILE (or DSPARK_HARDWARE); `dspark start --dry-run` prints the plan anyway",
        )]
    return []


def _dry_run_hardware(report: ValidationReport) -> list[Finding]:
    """A dry run may plan without a live GPU: it says which hardware it planned against instead."""
    if report.hardware.source in ("nvml", "unified"):
        return []
    named = report.settings.hardware.layer in ("flag", "env")
    return [Finding("info", "dry-run-hardware",
                    f"dry run without live GPUs, planned against: {report.hardware.description}"
                    + ("" if named else "; a real start needs live GPUs here, or hardware named with --hardware"))]


def engine_serve(report: ValidationReport) -> Any:
    """The launch values for the report's capacity: a token pin (SGLang) follows the figure launched on."""
    pin = report.spec.pool_pin_knob
    if report.spec.pool_pin != "tokens" or report.settings.setting(pin).value is not None:
        return report.serve
    return replace(report.serve, engine_values={**report.serve.engine_values, pin: report.capacity.kv_pool_tokens})


def _with_witness(report: ValidationReport, check: ArgvCheck, *, force: bool) -> ValidationReport:
    """Judge the model by the engine's planner; launch on the engine's figure; refuse when nothing vouches.

    An unmodelled installed version launches only on the witness's figure, or with --force.
    """
    version = report.engine_version
    witness = judge(check.witness, report.capacity) if check.witness is not None else None
    vouched = version.exact or (witness is not None and witness.error is None)
    if not vouched and not force:
        why = witness.error if witness is not None and witness.error else (
            report.witness_unavailable or "no planner the witness can run")
        raise RefusedError(
            f"refusing to start: {report.serve.engine} {version.requested} is not modelled (figures are "
            f"{version.modelled}'s) and the engine's own planner could not vouch for the pool: {why}",
            hint=f"install a modelled version ({', '.join(report.spec.modelled_versions)}), "
            "or pass --force to start on the nearest modelled version's figures",
        )
    if witness is None:
        if not report.witness_unavailable:
            return report
        # Said, not skipped silently: the launch rests on dspark's figures alone (issue 26, item 22).
        skipped = Finding("info", "witness-skipped", f"{report.serve.engine}'s own planner did not check the pool "
                          f"at start: {report.witness_unavailable}; the launch rests on dspark's figures")
        return replace(report, findings=(*report.findings, skipped))
    findings = [*report.findings, witness_finding(witness, report.capacity)]
    capacity = report.capacity
    if not witness.agrees and witness.error is None:
        capacity = with_engine_figures(capacity, witness)
        findings.append(Finding("warn", "launch-on-engine-figure",
                                f"launching on the engine planner's figure: {witness.kv_pool_tokens:,} tokens, "
                                f"{witness.max_concurrency:.2f}x"))
    out = replace(report, capacity=capacity, findings=tuple(findings), witness=witness)
    return replace(out, serve=engine_serve(out))


def _confirm_pinned(report: ValidationReport, check: ArgvCheck) -> None:
    """The engine's parse must hold the validated seats, pool pin and window."""
    serve = report.serve
    planned = {"max_num_seqs": serve.max_num_seqs, "max_model_len": serve.max_model_len, **serve.engine_values}
    # Checked after parsing so a silently ignored or renamed flag cannot launch something other than validated.
    for ours, theirs in report.spec.pinned.items():
        want = planned.get(ours)
        if want is not None and check.parsed.get(theirs) != want:
            raise EngineArgError(
                f"the engine's parser read {theirs}={check.parsed.get(theirs)!r} but dspark validated {want!r}",
                hint="an engine flag in extra_args or the recipe's engine_args overrides it; remove the duplicate",
            )


def _shown(value: object) -> str:
    return "not set (the engine's default)" if value is None else repr(value)


def _confirm_read_back(report: ValidationReport, argv: Sequence[str], check: ArgvCheck) -> None:
    """Every capacity-relevant value the engine's parser read must be the one dspark planned with.

    dspark's reader reads the launch argv by full flag names only (the pasted flags were spelled out when they
    were planned); a flag the engine's parser reads that dspark's did not (an abbreviation in a recipe's
    engine_args, an alias dspark does not know) would launch other seats, memory, window or parallelism than
    validated: refused, naming the flag and both values.
    """
    spec = report.spec
    mismatches = spec.read_back(spec.parse_flags(tuple(argv)), check.parsed)
    if mismatches:
        said = "; ".join(f"{flag}: dspark planned {_shown(ours)}, the engine's parser read {_shown(theirs)}"
                         for flag, ours, theirs in mismatches)
        raise EngineArgError(
            f"the {spec.name} {check.engine_version or ''} parser reads this argv otherwise than dspark planned it: "
            f"{said}",
            hint="spell the engine flag out in full (in the recipe's engine_args too), or give the value with "
            "dspark's own flag, so that the plan and the launch agree",
        )
