"""`dspark sweep`: run the sweep (dspark.bench.sweep) with a progress bar; its table, JSON, PNG and decision."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from dspark.advise.build import sweep_prediction
from dspark.bench.decision import DecisionRule, make_rule, parse_seats
from dspark.bench.load import LoadOptions, bench_spec
from dspark.bench.outputs import check_out_dir, exclusive, write_set
from dspark.bench.peers import PeerSetup, SshOptions, check_env, check_host, check_ssh_option
from dspark.bench.plot import sweep_png
from dspark.bench.report import sweep_text, to_json
from dspark.bench.sweep import PlanBuilder, SweepResult, plan_launches, run_sweep, start_plan_builder
from dspark.bench.url import finite_positive
from dspark.commands.bench import RichProgress
from dspark.core.errors import ExitCode, InputError
from dspark.core.extras import require_extra
from dspark.planning.start import StartRequest

OUTPUTS = {"json": "sweep.json", "table": "sweep.md", "plot": "sweep.png"}
LOCK = ".dspark-sweep.lock"  # held in --out-dir for the whole sweep: a second sweep there is refused


def write_outputs(result: SweepResult, out_dir: Path) -> dict[str, Path]:
    """sweep.json, sweep.md (the table and decision) and sweep.png in out_dir, written as one set: all three
    rendered and staged before any replaces the previous run's."""
    paths = {key: out_dir / name for key, name in OUTPUTS.items()}
    write_set({paths["json"]: to_json(result), paths["table"]: sweep_text(result),
               paths["plot"]: sweep_png(result) if result.settings else b""})
    return paths


def sweep(
    seats: Sequence[int],
    load: LoadOptions,
    rule: DecisionRule,
    build: PlanBuilder,
    *,
    out_dir: Path,
    as_json: bool = False,
    progress: bool = True,
    health_timeout_s: float = 600.0,
    stop_timeout_s: float = 30.0,
    out: IO[str] | None = None,
    prediction: dict[str, Any] | None = None,
) -> int:
    """Run the sweep and write its outputs; exit 0 when every setting was clean, 1 otherwise (results kept).

    `prediction` (dspark advise's JSON for these seats and this load, made before the runs) is kept beside
    the measurements in sweep.json and the table.
    """
    require_extra("plot", "dspark sweep (it draws sweep.png)")  # before any engine starts
    finite_positive("--health-timeout", health_timeout_s)
    finite_positive("--stop-timeout", stop_timeout_s)
    check_out_dir(out_dir, (*OUTPUTS.values(), *(f"engine-{n}-seats.log" for n in seats)))
    spec = bench_spec(load, "http://127.0.0.1")  # each setting's own URL replaces this
    err = Console(file=sys.stderr, highlight=False)
    with exclusive(out_dir / LOCK, f"--out-dir {out_dir}"):
        plans = plan_launches(seats, build)
        observer = RichProgress(err) if progress else None
        try:
            result = run_sweep(
                seats, plans.__getitem__, spec, rule, log_dir=out_dir, health_timeout_s=health_timeout_s,
                stop_timeout_s=stop_timeout_s, observer=observer,
                say=lambda m: err.print(f"dspark: {m}", markup=False),
            )
        finally:
            if observer is not None:
                observer.close()
        result = dataclasses.replace(result, prediction=prediction)
        paths = write_outputs(result, out_dir)
    stream = out or sys.stdout
    if as_json:
        stream.write(to_json(result))
    else:
        stream.write(sweep_text(result))
        stream.write(f"wrote {paths['json']}, {paths['table']}, {paths['plot']}\n")
    if result.partial and result.interrupted:
        return int(ExitCode.INTERRUPTED)
    return int(ExitCode.OK if result.clean else ExitCode.REFUSED)


def sweep_command(
    request: StartRequest,
    *,
    seats: str,
    load: LoadOptions,
    primary: str,
    adopt_at: str,
    max_regression: str,
    secondaries: str | None,
    out_dir: Path,
    as_json: bool = False,
    progress: bool = True,
    health_timeout_s: float = 900.0,
    stop_timeout_s: float = 30.0,
    explain: bool = False,
    peers: Sequence[str] = (),
    peer_ssh_config: Path | None = None,
    peer_ssh_options: Sequence[str] = (),
    peer_dspark: str = "dspark",
    peer_env: Sequence[str] = (),
) -> int:
    """`dspark sweep` from its command-line spellings: seats '8,16', the rule's metric names and percentages.

    explain: print each setting's source (the baseline's plan) on stderr before any engine starts.
    peers: one host per rank >= 1 of a native multi-node plan, whose `dspark start --node-rank R` the sweep runs
    over ssh (with peer_ssh_config / peer_ssh_options, peer_dspark as the command, peer_env set for it).
    """
    seat_list = parse_seats(seats)
    setup = PeerSetup(
        hosts=tuple(check_host(h) for h in peers),
        ssh=SshOptions(config=peer_ssh_config, options=tuple(check_ssh_option(o) for o in peer_ssh_options)),
        dspark=peer_dspark, env=tuple(check_env(e) for e in peer_env),
    ) if peers else None
    if setup is None and (peer_ssh_config or peer_ssh_options or peer_env or peer_dspark != "dspark"):
        raise InputError("--peer-ssh-config, --peer-ssh-option, --peer-env and --peer-dspark apply to the peers: "
                         "no --peer given", hint="give --peer HOST per rank >= 1 of a multi-node plan, or drop them")
    rule = make_rule(primary, adopt_at, max_regression, secondaries)
    if explain:
        from dspark.commands.advise import explain_settings  # noqa: PLC0415

        sys.stderr.write(explain_settings(request.validate, seats))
    return sweep(seat_list, load, rule, start_plan_builder(request, setup), out_dir=out_dir, as_json=as_json,
                 progress=progress, health_timeout_s=health_timeout_s, stop_timeout_s=stop_timeout_s,
                 prediction=sweep_prediction(request.validate, seats, load, primary, adopt_at, max_regression,
                                             secondaries))
