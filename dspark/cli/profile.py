"""`dspark profile` (options: dspark.commands.options.PROFILE)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.commands import options as declared


@click.command()
@declared.apply(declared.PROFILE)
@click.pass_context
def profile(ctx: click.Context, /, **params: Any) -> None:
    """Measure a live engine's step costs (decode batches 1-64, two prompt lengths; about a minute) from its own
    /metrics, for `dspark advise --calibrate`."""
    from dspark.commands.profile import profile as profile_core  # noqa: PLC0415 - keep CLI start-up light

    values = declared.split(declared.PROFILE, params)
    run_core(ctx, profile_core, *values["args"].values(), **values["call"], json_errors=params["as_json"])
