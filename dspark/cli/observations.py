"""`dspark observations` and its subcommands (options: dspark.commands.options.OBSERVATIONS_*)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.commands import options as declared


@click.group(invoke_without_command=True)
@click.pass_context
def observations(ctx: click.Context) -> None:
    """The engine boots `start --watch` and `sweep` recorded, which `validate` uses (default: list)."""
    if ctx.invoked_subcommand is None:
        from dspark.commands.observations import observations_list  # noqa: PLC0415 - keep CLI start-up light

        run_core(ctx, observations_list)


@observations.command("list")
@declared.apply(declared.OBSERVATIONS_LIST)
@click.pass_context
def observations_list_cmd(ctx: click.Context, /, **params: Any) -> None:
    """List the recorded boots, newest first."""
    from dspark.commands.observations import observations_list  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, observations_list, **declared.split(declared.OBSERVATIONS_LIST, params)["call"],
             json_errors=params["as_json"])


@observations.command("show")
@declared.apply(declared.OBSERVATIONS_SHOW)
@click.pass_context
def observations_show_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Print one recorded boot: the engine's pool and memory figures, and what its key is made of."""
    from dspark.commands.observations import observations_show  # noqa: PLC0415 - keep CLI start-up light

    values = declared.split(declared.OBSERVATIONS_SHOW, params)
    run_core(ctx, observations_show, *values["args"].values(), **values["call"], json_errors=params["as_json"])


@observations.command("clear")
@declared.apply(declared.OBSERVATIONS_CLEAR)
@click.pass_context
def observations_clear_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Remove one recorded boot (KEY), or all of them."""
    from dspark.commands.observations import observations_clear  # noqa: PLC0415 - keep CLI start-up light

    values = declared.split(declared.OBSERVATIONS_CLEAR, params)
    run_core(ctx, observations_clear, *values["args"].values(), **values["call"], json_errors=params["as_json"])
