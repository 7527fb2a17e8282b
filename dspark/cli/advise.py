"""`dspark advise`: predicted decode, TTFT and KV use at each seat count, and the seat count its rule recommends."""

from __future__ import annotations

from typing import Any

import click

from dspark.cli import run_core
from dspark.cli.plan import refuse_seats, validate_request
from dspark.commands import options as declared


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
    refuse_seats(values, "advise predicts the seats itself")
    run_core(ctx, lambda: run_advise(validate_request(ctx, values), opts, **values["call"]),
             json_errors=params["as_json"])
