"""`dspark recipes` and its subcommands (options: dspark.commands.options.RECIPES_*)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.commands import options as declared


@click.group(invoke_without_command=True)
@click.pass_context
def recipes(ctx: click.Context) -> None:
    """List the shipped recipes, show one, or print the recipe JSON Schema (default: list)."""
    if ctx.invoked_subcommand is None:
        from dspark.commands.recipes import recipes_list  # noqa: PLC0415 - keep CLI start-up light

        run_core(ctx, recipes_list)


@recipes.command("list")
@declared.apply(declared.RECIPES_LIST)
@click.pass_context
def recipes_list_cmd(ctx: click.Context, /, **params: Any) -> None:
    """List the shipped recipes (the default one is marked *)."""
    from dspark.commands.recipes import recipes_list  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, recipes_list, **declared.split(declared.RECIPES_LIST, params)["call"], json_errors=params["as_json"])


@recipes.command("show")
@declared.apply(declared.RECIPES_SHOW)
@click.pass_context
def recipes_show_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Validate a recipe and print it: a shipped recipe by name, or a file."""
    from dspark.commands.recipes import recipes_show  # noqa: PLC0415 - keep CLI start-up light

    values = declared.split(declared.RECIPES_SHOW, params)
    run_core(ctx, recipes_show, *values["args"].values(), **values["call"], json_errors=params["as_json"])


@recipes.command("schema")
@click.pass_context
def recipes_schema_cmd(ctx: click.Context) -> None:
    """Print the recipe JSON Schema, for editors (# yaml-language-server: $schema=FILE)."""
    from dspark.commands.recipes import recipes_schema  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, recipes_schema)
