"""`dspark probe` (options: dspark.commands.options.PROBE)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.commands import options as declared


@click.command()
@declared.apply(declared.PROBE)
@click.pass_context
def probe(ctx: click.Context, /, **params: Any) -> None:
    """Show the GPUs and memory dspark plans against."""
    from dspark.commands.probe import probe as probe_core  # noqa: PLC0415 - keep CLI start-up light

    values = declared.split(declared.PROBE, params)
    run_core(ctx, probe_core, **values["call"], json_errors=params["as_json"])
