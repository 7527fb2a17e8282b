"""The commands that plan a deployment first: validate, start, advise, sweep (options: dspark.commands.options)."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import click

from dspark.cli import gc_paused, run_core
from dspark.commands import options as declared

if TYPE_CHECKING:  # planning loads when a command runs, not with the command table
    from dspark.planning.validate import ValidateRequest


def validate_request(ctx: click.Context, values: dict[str, dict[str, Any]]) -> ValidateRequest:
    """planning.validate.ValidateRequest from the plan options' values: the knobs given, the rest by field."""
    from dspark.planning.validate import ValidateRequest  # noqa: PLC0415 - keep CLI start-up light

    engine_flags = tuple((ctx.find_root().obj or {}).get("engine_flags", ()))
    flags = {k: v for k, v in values["knobs"].items() if v is not None}
    return ValidateRequest(flags=flags, engine_flags=engine_flags, env=dict(os.environ), **values["validate"])


def _refuse_seats(values: dict[str, dict[str, Any]], why: str) -> None:
    if values["knobs"].get("max_num_seqs") is not None:
        raise click.UsageError(f"{why}: use --seats, not --max-num-seqs")


@click.command(epilog="RECIPE: a shipped recipe name or a file [env: DSPARK_RECIPE]. Engine flags go after --: "
               "dspark validate --model DIR -- --max-model-len 4096")
@declared.apply(declared.VALIDATE)
@click.pass_context
def validate(ctx: click.Context, /, **params: Any) -> None:
    """Predict the engine's KV pool, full contexts, graph capture size and safe seats, and judge the fit.

    With no RECIPE and no --model, validates the default recipe against this machine's GPUs (or, with none,
    the built-in 2x GB10 profile). Exit 0 fits, 1 does not fit, 2 bad input, 3 internal error.
    """
    with gc_paused():
        from dspark.commands.validate import run_validate  # noqa: PLC0415 - keep CLI start-up light

        def validate_core() -> int:
            values = declared.split(declared.VALIDATE, params)
            return run_validate(validate_request(ctx, values), **values["call"])

        run_core(ctx, validate_core, json_errors=params["as_json"])


@click.command(epilog="RECIPE: a shipped recipe name or a file [env: DSPARK_RECIPE]. Engine flags go after --, "
               "e.g.: dspark start --max-num-seqs 12 -- --enforce-eager")
@declared.apply(declared.START)
@click.pass_context
def start(ctx: click.Context, /, **params: Any) -> None:
    """Validate, check the argv with the installed engine's own parser, print the plan, then exec the engine."""
    # --watch stays to supervise the engine for hours: the collector stays on for it.
    pause: AbstractContextManager[None] = nullcontext() if params["watch"] else gc_paused()
    with pause:
        from dspark.commands.start import start_command  # noqa: PLC0415 - keep CLI start-up light
        from dspark.planning.start import StartRequest  # noqa: PLC0415

        def start_core() -> int:
            values = declared.split(declared.START, params)
            request = StartRequest(validate=validate_request(ctx, values),
                                   engine_python=values["validate"]["engine_python"], **values["start"])
            return start_command(request, **values["call"])

        run_core(ctx, start_core, json_errors=params["as_json"])


@click.command(epilog="Example: dspark advise flash-next-vllm --seats 6,8,16 --clients 32 --input-len 2048 "
               "--output-len 512 --calibrate sweep-results/sweep.json")
@declared.apply(declared.ADVISE)
@click.pass_context
def advise(ctx: click.Context, /, **params: Any) -> None:
    """Predict aggregate and per-stream decode, TTFT and KV use at each seat count; recommend one by the sweep's rule.

    Exit 0 with a recommendation, 1 when no seat count can be recommended, 2 for bad input.
    """
    from dspark.advise.build import AdviseOptions  # noqa: PLC0415 - keep CLI start-up light
    from dspark.commands.advise import run_advise  # noqa: PLC0415

    values = declared.split(declared.ADVISE, params)
    opts = AdviseOptions(**values["advise"], **values["workload"], **values["rule"])
    _refuse_seats(values, "advise predicts the seats itself")
    run_core(ctx, lambda: run_advise(validate_request(ctx, values), opts, **values["call"]),
             json_errors=params["as_json"])


@click.command(epilog="Example: dspark sweep RECIPE --seats 8,16 --reps 3 --primary wall_time --adopt-at 10% "
               "--max-regression 10% --warm-rerun")
@declared.apply(declared.SWEEP)
@click.pass_context
def sweep(ctx: click.Context, /, **params: Any) -> None:
    """Start the engine at each seat count, verify its launch, bench it, stop it; decide by a rule fixed first.

    Exit 0 when every setting ran clean (launch as planned, 0 errors, 0 preemptions), 1 otherwise.
    """
    from dspark.bench.load import LoadOptions  # noqa: PLC0415 - keep CLI start-up light
    from dspark.commands.sweep import sweep_command  # noqa: PLC0415
    from dspark.planning.start import StartRequest  # noqa: PLC0415

    values = declared.split(declared.SWEEP, params)
    _refuse_seats(values, "sweep sets the seats itself")

    def sweep_core() -> int:
        load = LoadOptions(**values["workload"], **values["load"])
        request = StartRequest(validate=validate_request(ctx, values),
                               engine_python=values["validate"]["engine_python"])
        return sweep_command(request, load=load, **values["rule"], **values["call"])

    run_core(ctx, sweep_core, json_errors=params["as_json"])
