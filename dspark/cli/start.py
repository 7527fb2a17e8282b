"""`dspark start`: validate, check the argv with the installed engine's parser, print the plan, exec the engine."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import click

from dspark.cli import gc_paused, run_core
from dspark.cli.plan import validate_request
from dspark.commands import options as declared


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
