"""start: validate, refuse what does not fit, build the argv, have the engine's own parser accept it, exec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dspark.engines import engine_spec, get_engine
from dspark.engines.base import ArgvCheck, Engine, check_argv, find_engine_python, require_ok
from dspark.errors import EngineArgError, RefusedError, SettingsError
from dspark.launch import LaunchPlan
from dspark.validate import ValidateRequest, ValidationReport, validate

ArgvChecker = Callable[[Engine, LaunchPlan, str], ArgvCheck]


@dataclass(frozen=True)
class StartRequest:
    """validate's inputs plus what only a launch needs."""

    validate: ValidateRequest
    force: bool = False  # start even when the verdict fails
    engine_python: str | None = None


@dataclass(frozen=True)
class StartResult:
    """A checked plan: the report it rests on, the argv, and the engine parser's verdict on it."""

    report: ValidationReport
    plan: LaunchPlan
    check: ArgvCheck

    def to_json(self) -> dict[str, Any]:
        """validate's JSON with the real argv and the engine's parse of it."""
        out = self.report.to_json()
        out["argv"] = self.plan.to_json()["argv"]
        out["env"] = self.plan.to_json()["env"]
        out["engine_check"] = {
            "ok": self.check.ok,
            "engine_version": self.check.engine_version,
            "parsed": dict(self.check.parsed),
        }
        return out


def plan_start(
    request: StartRequest, *, checker: ArgvChecker = check_argv, env: Mapping[str, str] | None = None
) -> StartResult:
    """Everything before exec; RefusedError for a failing verdict (unless forced), EngineArgError for a bad argv."""
    report = validate(request.validate)
    if report.verdict == "fail" and not request.force:
        reasons = "; ".join(f.message for f in report.findings if f.level == "fail")
        raise RefusedError(f"refusing to start: {reasons}", hint="fix the plan, or pass --force to start anyway")
    missing = report.settings.missing_for_launch()
    if missing:
        raise SettingsError("; ".join(missing))
    runtime = report.settings.distributed_runtime
    if report.serve.nnodes > 1 and runtime.value == "ray":
        # Refused rather than ignored: a Ray launch needs a Ray cluster up first, which dspark does not start.
        raise SettingsError(
            f"distributed_runtime 'ray' ({runtime.source}) is not launched by dspark start: it starts each node "
            "on the engine's native multi-node runtime (vLLM --nnodes/--node-rank, SGLang --dist-init-addr)",
            hint="set parallel.runtime: native (or DSPARK_DISTRIBUTED_RUNTIME=native), or bring up Ray yourself "
            "and start the engine with --distributed-executor-backend ray",
        )
    engine = get_engine(report.serve.engine)
    python = find_engine_python(engine, request.engine_python, request.validate.env if env is None else env)
    plan = engine.build_plan(report.serve, python)
    check = checker(engine, plan, python)
    require_ok(engine, plan, check)
    _confirm_pinned(report, check)
    return StartResult(report=report, plan=plan, check=check)


def _confirm_pinned(report: ValidationReport, check: ArgvCheck) -> None:
    """The engine's parse must hold the validated seats, pool pin and window."""
    serve = report.serve
    planned = {
        "max_num_seqs": serve.max_num_seqs,
        "kv_cache_memory_bytes": serve.kv_cache_memory_bytes,
        "max_total_tokens": serve.max_total_tokens,
        "max_model_len": serve.max_model_len,
    }
    # Checked after parsing so a silently ignored or renamed flag cannot launch something other than validated.
    for ours, theirs in engine_spec(serve.engine).pinned.items():
        want = planned[ours]
        if want is not None and check.parsed.get(theirs) != want:
            raise EngineArgError(
                f"the engine's parser read {theirs}={check.parsed.get(theirs)!r} but dspark validated {want!r}",
                hint="an engine flag in extra_args or the recipe's engine_args overrides it; remove the duplicate",
            )
