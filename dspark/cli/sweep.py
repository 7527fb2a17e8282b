"""`dspark sweep`: start, verify, bench and stop the engine at each seat count; decide by a rule fixed first."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.cli.plan import refuse_seats, validate_request
from dspark.commands import options as declared


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
    refuse_seats(values, "sweep sets the seats itself")

    def sweep_core() -> int:
        load = LoadOptions(**values["workload"], **values["load"])
        request = StartRequest(validate=validate_request(ctx, values),
                               engine_python=values["validate"]["engine_python"])
        return sweep_command(request, load=load, **values["rule"], **values["call"])

    run_core(ctx, sweep_core, json_errors=params["as_json"])
