"""The parser check: an argv judged by the installed engine's own argument parser, in its interpreter.

check_argv runs dspark/engines/_argv_check.py there (never starting the engine) and reads its marker line;
require_ok turns a rejection into an EngineArgError naming the flag and the version. The rest of what engines
share lives beside it: ServeConfig (serve_config.py), EngineSpec and its protocols (spec.py), the interpreter
and its version (interpreter.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.core.errors import EngineArgError, EngineNotInstalledError
from dspark.core.redact import redact_argv
from dspark.engines.interpreter import Runner, run_captured
from dspark.engines.spec import Engine
from dspark.runtime.launch import LaunchPlan

ARGV_CHECK_SCRIPT = Path(__file__).with_name("_argv_check.py")
_MARKER = "DSPARK_ARGV_CHECK "
_WITNESS_MARKER = "DSPARK_WITNESS "


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
    engine: Engine, plan: LaunchPlan, python: str, runner: Runner = run_captured, timeout: float = 180.0,
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
