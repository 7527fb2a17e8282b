"""`dspark bench` (options: dspark.commands.options.BENCH)."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.commands import options as declared


@click.command()
@declared.apply(declared.BENCH)
@click.pass_context
def bench(ctx: click.Context, /, **params: Any) -> None:
    """Stream requests at a running server: decode tok/s, TTFT, queueing, and the engine's /metrics.

    Exit 0 when every request succeeded, 1 when any failed (the results still print), 2 for bad input.
    """
    from dspark.bench.load import LoadOptions  # noqa: PLC0415 - keep CLI start-up light
    from dspark.commands.bench import bench as bench_core  # noqa: PLC0415

    values = declared.split(declared.BENCH, params)
    run_core(ctx, lambda: bench_core(LoadOptions(**values["workload"], **values["load"]), **values["call"]),
             json_errors=params["as_json"])
