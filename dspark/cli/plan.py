"""validate, and the request every command that plans a deployment first builds (start, advise, sweep, render):
validate_request. Each of those commands has its own module, loaded only when it runs (options:
dspark.commands.options)."""

from __future__ import annotations

import os
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


def refuse_seats(values: dict[str, dict[str, Any]], why: str) -> None:
    """A usage error when --max-num-seqs is given to a command that sets the seats itself."""
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
