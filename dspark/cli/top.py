"""`dspark top` (options: dspark.commands.options.TOP)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.commands import options as declared


@click.command()
@declared.apply(declared.TOP)
@click.pass_context
def top(ctx: click.Context, /, **params: Any) -> None:
    """Watch a running engine: seats used, queue, KV use, prefix hits, tokens/s, preemptions, TTFT and ITL."""
    from dspark.commands.top import top as top_core  # noqa: PLC0415 - keep CLI start-up light

    values = declared.split(declared.TOP, params)
    run_core(ctx, top_core, *values["args"].values(), **values["call"], json_errors=params["as_json"])
