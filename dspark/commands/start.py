"""The start command: plan the launch (dspark.planning.start), show it (table or one JSON object), then exec.

The report is validate's (dspark.commands.validate renders it); below it, the argv about to run, secrets
redacted, and the values the engine's own parser read from it (its EngineSpec.shown_args).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from dspark.commands.validate import explain_on_stderr, make_console, print_notices, render_report
from dspark.runtime.launch import LaunchPlan, exec_plan

if TYPE_CHECKING:  # rich loads only for the table, not for --json
    from rich.console import Console

    from dspark.planning.start import StartRequest, StartResult


def start_command(
    request: StartRequest,
    *,
    as_json: bool,
    explain: bool,
    watch: bool = False,
    execute: Callable[[LaunchPlan], object] = exec_plan,
    out: IO[str] | None = None,
) -> int:
    """dspark.planning.start.run_start, showing the plan (table or one JSON object) before the engine starts."""
    from dspark.planning.start import run_start  # noqa: PLC0415 - validate alone does not need the launch path

    stream = out or sys.stdout

    def show(result: StartResult) -> None:
        print_notices(result.report)
        if as_json:
            stream.write(json.dumps(result.to_json(), default=str) + "\n")
            explain_on_stderr(result.report, explain)
        else:
            console = make_console(stream)
            render_report(result.report, console, explain=explain, extra=result.findings)
            render_plan(result, console)
        stream.flush()
        for refusal in result.would_refuse:  # a dry run: the plan above is printed all the same
            reason = refusal.message.removeprefix("refusing to start: ")
            print(f"a real start would refuse: {reason}" + (f"\n  hint: {refusal.hint}" if refusal.hint else ""),
                  file=sys.stderr)

    return run_start(request, show, watch=watch, execute=execute)


def render_plan(result: StartResult, console: Console) -> None:
    """The command about to run, secrets redacted, and what the engine's parser made of it."""
    check = result.check
    if check.engine_version is None:
        console.print(f"engine parser: not run ({result.plan.engine} is not installed here)")
    else:
        console.print(
            f"engine parser ({check.engine_version}) accepted the argv: "
            f"{', '.join(f'{k}={v}' for k, v in _shown(check.parsed, result.report.spec.shown_args).items())}"
        )
    console.print(f"exec: {result.plan.shell_line()}", markup=False, highlight=False)


def _shown(parsed: Mapping[str, Any], shown_args: Sequence[str]) -> dict[str, Any]:
    """The parsed values `start` shows: the engine's EngineSpec.shown_args, in its order, where the parser set them."""
    return {k: parsed[k] for k in shown_args if k in parsed}
