"""The parser check: an argv judged by the installed engine's own argument parser, in its interpreter.

check_argv runs dspark_inside.<engine>.argv_check there (never starting the engine; dspark.engines.inside);
require_ok turns a rejection into an EngineArgError naming the flag and the version. The rest of what engines
share lives beside it: ServeConfig (serve_config.py), EngineSpec and its protocols (spec.py), the interpreter
and its version (interpreter.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dspark.core.errors import EngineArgError, EngineNotInstalledError
from dspark.core.redact import redact_argv, redact_text, secret_argv_values
from dspark.engines.inside import InsideFailure, run_inside
from dspark.engines.inside import Runner as InsideRunner
from dspark.engines.spec import Engine
from dspark.runtime.launch import LaunchPlan

if TYPE_CHECKING:
    from dspark_inside.shapes import ArgvCheckAnswer, ArgvCheckRequest


@dataclass(frozen=True)
class ArgvCheck:
    """The engine parser's verdict on an argv."""

    ok: bool
    engine_version: str | None
    parsed: Mapping[str, Any]  # values that differ from the parser's defaults
    error: str | None = None
    num_options: int | None = None
    witness: Mapping[str, Any] | None = None  # the engine planner's answer, when asked for in the same run


# vLLM 0.33 builds its serve parser from the platform (vllm/config/device.py): a host without a device it
# knows (no GPU, no CPU build) stops there, before any flag is read.
_NO_DEVICE = "Failed to infer device type"
_NO_DEVICE_HINT = ("vLLM found no device here to build its argument parser for: run `dspark start` where the GPUs "
                   "are, or set VLLM_TARGET_DEVICE (e.g. cpu) in the environment so its parser loads for a dry run")


def check_argv(
    engine: Engine, plan: LaunchPlan, python: str, runner: InsideRunner | None = None, timeout: float = 180.0,
    witness_request: Mapping[str, Any] | None = None,
) -> ArgvCheck:
    """Parse the plan's argv with the installed engine's own parser in its interpreter; never starts it.

    witness_request: also run the engine's own KV planner on it, in the same process (one engine import).
    """
    request: ArgvCheckRequest = {"argv": engine.parser_argv(plan)}
    if witness_request is not None:
        request["witness"] = dict(witness_request)  # type: ignore[typeddict-item]  # built by the engine's package
    try:
        result: ArgvCheckAnswer = run_inside(python, f"{engine.name}.argv_check", request, timeout, runner=runner)
    except InsideFailure as failure:
        if failure.why == "not_run":
            raise EngineNotInstalledError(f"cannot run the engine interpreter {python!r}: {failure.detail}") from None
        if failure.why == "timeout":
            raise EngineArgError(f"the {engine.name} argument check did not answer within {timeout:.0f} s") from None
        raise EngineNotInstalledError(
            f"the {engine.name} argument check in {python} gave no answer (exit {failure.returncode}): "
            f"{failure.last(3)}",
            hint=_NO_DEVICE_HINT if any(_NO_DEVICE in ln for ln in failure.tail[-3:]) else None,
        ) from None
    if result.get("import_error"):
        raise EngineNotInstalledError(
            f"{python} cannot import {engine.name}: {result.get('error')}",
            hint="set DSPARK_ENGINE_PYTHON (or --engine-python) to the interpreter that has the engine",
        )
    return ArgvCheck(
        ok=bool(result["ok"]),
        engine_version=result.get("version"),
        parsed=result.get("non_default", {}),
        error=result.get("error"),
        num_options=result.get("num_options"),
        witness=result.get("witness", {"ok": False, "error": "the planner gave no answer"})
        if witness_request is not None else None,
    )


def require_ok(engine: Engine, plan: LaunchPlan, check: ArgvCheck) -> None:
    """Raise EngineArgError, naming the flag and the engine version, when the engine's parser rejected the argv."""
    if check.ok:
        return
    argv = engine.parser_argv(plan)
    shown = " ".join(redact_argv(argv))
    # The parser echoes what it rejects (`unrecognized arguments: --apikey sk-...`): its words, secrets hidden.
    error = redact_text(check.error or "", secret_argv_values(argv))
    raise EngineArgError(
        f"the installed {engine.name} {check.engine_version or ''} rejects this argv: {error}\n  argv: {shown}",
        hint="remove or rename the flag (engines rename flags between versions; `--help` of the engine lists them)",
    )
