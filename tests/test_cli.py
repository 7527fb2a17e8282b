"""The CLI boundary: one JSON object on --json failures, --debug anywhere, 130 on Ctrl-C, env vars in --help."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dspark import cli
from dspark.config.knobs import KNOBS
from dspark.core.errors import ExitCode


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    yield


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "code", "error_code"),
    [
        (["validate", "--json", "--hardware", "nope"], 2, "input_error"),
        (["validate", "--json", "--max-num-seqs", "0"], 2, "settings_error"),
        (["validate", "--json", "--no-such-flag"], 2, "usage_error"),
        (["validate", "--json", "--typical-context", "abc"], 2, "usage_error"),  # built inside the boundary
        (["validate", "--json", "--", "--block-size", "0"], 2, "settings_error"),
        (["recipes", "show", "no-such-recipe", "--json"], 2, "recipe_error"),
    ],
)
def test_json_failures_print_one_error_object(capsys: pytest.CaptureFixture[str], argv: list[str], code: int,
                                              error_code: str) -> None:
    got, out, err = _run(capsys, *argv)
    assert got == code
    document = json.loads(out)
    assert document["exit_code"] == code
    assert document["error"]["code"] == error_code
    assert document["error"]["message"] and document["error"]["message"] in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--debug", "validate", "--max-num-seqs", "0"],
                                  ["validate", "--max-num-seqs", "0", "--debug"]])
def test_debug_works_before_and_after_the_subcommand(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert "Traceback" in err


def test_without_debug_there_is_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "validate", "--max-num-seqs", "0")
    assert code == 2
    assert "Traceback" not in err
    assert "--max-num-seqs '0': out of range" in err


def test_ctrl_c_is_130_and_named(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dspark.commands import validate as validate_command  # noqa: PLC0415

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_command, "run_validate", interrupted)
    code, out, err = _run(capsys, "validate", "--json")
    assert code == ExitCode.INTERRUPTED
    assert int(ExitCode.INTERRUPTED) == 130
    assert json.loads(out)["error"]["code"] == "interrupted"
    assert "interrupted" in err


def test_env_vars_are_listed_beside_their_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "validate", "--help")
    assert code == 0
    text = " ".join(out.split())  # click wraps the help text
    flagged = [k for k in KNOBS if k.flag is not None]
    assert len(flagged) >= 14
    for knob in flagged:
        assert f"{knob.flag} " in text and f"[env: {knob.env}]" in text, (knob.name, knob.env)
    assert "[env: DSPARK_RECIPE]" in text
    assert "[env: DSPARK_ENGINE]" in text


@pytest.mark.parametrize(
    ("env", "argv", "named"),
    [
        ({"DSPARK_HARDWARE": "abc"}, ["validate"], "DSPARK_HARDWARE='abc' is neither a built-in profile"),
        ({"DSPARK_ENGINE": "abc"}, ["validate"], "DSPARK_ENGINE='abc': not an engine dspark knows"),
        ({"DSPARK_ENGINE": " "}, ["validate"], "DSPARK_ENGINE=' ': empty"),
        ({"DSPARK_RECIPE": ""}, ["validate"], "DSPARK_RECIPE='': empty"),
        ({}, ["validate", ""], "RECIPE '': empty"),
        ({}, ["validate", "--platform", "cpu", "--hardware", "zz"], "--hardware 'zz' does not apply with platform cpu"),
        ({"DSPARK_HARDWARE": "zz"}, ["validate", "--platform", "cpu"], "DSPARK_HARDWARE='zz' does not apply"),
    ],
)
def test_messages_name_the_input(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 env: dict[str, str], argv: list[str], named: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert named in err


def test_explain_under_json_goes_to_stderr_beside_the_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "validate", "--hardware", "gb10x2", "--max-num-seqs", "5", "--json", "--explain")
    assert code == 0
    assert json.loads(out)["settings"]["max_num_seqs"] == {"value": 5, "source": "flag"}
    rows = {line.split()[0]: line.split()[-1] for line in err.splitlines() if line and not line.startswith("note")}
    assert rows["max_num_seqs"] == "flag"
    assert rows["kv_cache_memory_bytes"].startswith("recipe:")


@pytest.mark.parametrize("as_json", [False, True])
def test_advise_explain_prints_each_source(capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    code, out, err = _run(capsys, "advise", "--hardware", "gb10x2", "--seats", "4,8", "--explain",
                          *(["--json"] if as_json else []))
    assert code in (0, 1)
    shown = err if as_json else out
    assert "settings at 4 seats:" in shown
    assert any(line.split()[:2] == ["max_num_seqs", "4"] for line in shown.splitlines())
    if as_json:
        assert isinstance(json.loads(out), dict)


def test_sweep_model_dir_is_the_model_swept(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    # Issue 16 item 1: --served-model shared --model's destination and the load options took it, so
    # `sweep --model DIR` swept the default recipe (DSPARK_MODEL=DIR worked).
    from dspark.commands import sweep as sweep_module  # noqa: PLC0415

    got: dict[str, Any] = {}

    def record(request: Any, **kwargs: Any) -> int:
        got.update(request=request, **kwargs)
        return 0

    monkeypatch.setattr(sweep_module, "sweep_command", record)
    code, _, err = _run(capsys, "sweep", "--model", str(tmp_path), "--seats", "8")
    assert code == 0, err
    assert got["request"].validate.flags.get("model") == str(tmp_path)
    assert got["load"].model is None  # the served name to request: not given, so read from /v1/models


def test_sweep_explain_prints_each_source_before_any_engine_starts(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 16 item 4: sweep --explain was accepted and discarded.
    from dspark.commands import sweep as sweep_module  # noqa: PLC0415

    runs: list[object] = []

    def no_engine(*args: Any, **kwargs: Any) -> int:  # the sweep itself starts engines: not here
        runs.append(args)
        return 0

    monkeypatch.setattr(sweep_module, "sweep", no_engine)
    code, _, err = _run(capsys, "sweep", "--hardware", "gb10x2", "--seats", "4,8", "--explain")
    assert (code, len(runs)) == (0, 1), err
    assert "settings at 4 seats:" in err
    assert any(line.split()[:2] == ["max_num_seqs", "4"] for line in err.splitlines())


def test_the_environment_a_flag_overrides_is_named_on_stderr_and_in_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_NUM_SEQS", "8")
    code, out, err = _run(capsys, "validate", "--hardware", "gb10x2", "--max-num-seqs", "12", "--json")
    assert code in (0, 1)
    assert "MAX_NUM_SEQS=8 from the environment overridden by --max-num-seqs 12" in err
    assert json.loads(out)["settings"]["max_num_seqs"]["overridden"] == [{"source": "env:MAX_NUM_SEQS", "value": "8"}]


@pytest.mark.parametrize("as_json", [False, True])
def test_dry_run_prints_the_plan_then_what_a_real_start_would_refuse(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """The 2-node default recipe without --master-addr: a real start exits 2 on it, and so does the dry run."""
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", "/nonexistent/python")
    code, out, err = _run(capsys, "start", "--dry-run", "--hardware", "gb10x2", *(["--json"] if as_json else []))
    assert code == 2
    assert "a real start would refuse: a launch across 2 nodes needs the address of node 0" in err
    if as_json:
        document = json.loads(out)
        assert "--node-rank" in document["argv"]
        assert document["would_refuse"][0]["exit_code"] == 2
    else:
        assert "exec: vllm serve" in out
    monkeypatch.setenv("DSPARK_MASTER_ADDR", "10.0.0.1")
    assert _run(capsys, "start", "--dry-run", "--hardware", "gb10x2")[0] == 0


MODEL_32B = str(Path(__file__).resolve().parent / "fixtures" / "model-qwen3-32b")


UNSET_SEATS = [
    ["validate", "--hardware", "gb10x2"],  # the default recipe: the safe count is 6, the built-in fallback's value
    ["validate", "--model", MODEL_32B, "--engine", "sglang", "--hardware", "h200"],  # also 6
    ["validate", "--model", MODEL_32B, "--engine", "vllm", "--hardware", "h200", "--kv-cache-memory", "20GiB"],
]


@pytest.mark.parametrize("argv", UNSET_SEATS)
def test_explain_says_the_seat_fallback_once(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = _run(capsys, *argv, "--explain")
    assert code in (0, 1)
    assert (out + err).count("MAX_NUM_SEQS not set, using default:") == 1


@pytest.mark.parametrize("argv", UNSET_SEATS)
def test_a_computed_seat_count_is_labelled_one_way(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, _ = _run(capsys, *argv, "--explain")
    assert code in (0, 1)
    seats_row = next(line for line in out.splitlines() if line.startswith("seats (max_num_seqs)"))
    explain_row = next(line for line in out.splitlines() if line.startswith("max_num_seqs "))
    assert seats_row.rstrip().endswith("(computed)") and explain_row.rstrip().endswith("computed")


@pytest.mark.parametrize(("argv", "paused"), [(["validate", "--json", "--hardware", "h200"], True),
                                              (["start", "--dry-run", "--json", "--hardware", "h200"], True),
                                              (["start", "--dry-run", "--watch", "--json", "--hardware", "h200"],
                                               False)])
def test_a_planning_command_pauses_the_collector_and_gives_it_back(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], paused: bool
) -> None:
    import gc  # noqa: PLC0415

    from dspark.planning import validate as planning  # noqa: PLC0415

    seen: list[bool] = []

    def resolve(*_args: object) -> None:
        seen.append(gc.isenabled())
        raise RuntimeError("planned no further")

    monkeypatch.setattr(planning, "_resolve", resolve)
    assert gc.isenabled()
    cli.main(argv)
    capsys.readouterr()
    assert gc.isenabled()  # as it was, also when the command failed
    gc.disable()
    try:
        cli.main(argv)
        assert not gc.isenabled()  # a caller's choice is left alone
    finally:
        gc.enable()
    capsys.readouterr()
    assert seen[0] is not paused


def test_the_dspark_command_loads_with_the_collector_paused_then_gives_it_back() -> None:
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    script = ("import gc, sys\nsys.argv = ['dspark', '--version']\nimport dspark.__main__ as entry\n"
              "code = entry.run()\nprint(code, gc.isenabled(), gc.get_freeze_count() > 1000)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-3:] == ["0", "True", "True"]  # ran, collector on, what loading made frozen


def test_what_a_command_made_is_frozen_when_it_returns_so_the_collections_at_exit_walk_nothing() -> None:
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    script = ("import gc, sys\nsys.argv = ['dspark', 'validate', '--hardware', 'h200', '--json']\n"
              "import dspark.__main__ as entry\ncode = entry.run()\n"
              "print(code, len(gc.get_objects(0)) + len(gc.get_objects(1)) + len(gc.get_objects(2)), "
              "gc.get_freeze_count())")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == 0, proc.stderr
    code, tracked, frozen = proc.stdout.split()[-3:]
    assert code in ("0", "1") and int(tracked) < 100 and int(frozen) > 10_000  # the plan's objects are frozen


def test_max_model_len_help_says_which_suffix_is_decimal_and_it_is_what_the_flag_reads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """issue 26 item 24: the help said "also 32k, 256K" without saying that 32k is 32,000 and 256K is 262,144."""
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = _run(capsys, "validate", "--help")
    assert code == 0 and "32k = 32,000, 256K = 262,144" in " ".join(out.split())
    for given, tokens in (("32k", 32_000), ("256K", 262_144)):
        code, out, _ = _run(capsys, "validate", "--hardware", "h200", "--json", "--max-model-len", given)
        assert code in (0, 1) and json.loads(out)["settings"]["max_model_len"]["value"] == tokens


_LOADED = """
import contextlib, io, json, sys
from dspark.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(m for m in sys.modules if m.startswith("dspark.cli."))}))
"""


@pytest.mark.parametrize(("argv", "loaded"), [
    (["bench", "--help"], ["dspark.cli.bench"]),
    (["probe", "--help"], ["dspark.cli.probe"]),
    (["recipes", "list", "--json"], ["dspark.cli.recipes"]),
    (["render", "--help"], ["dspark.cli.plan", "dspark.cli.render"]),  # render builds validate's request
    (["sweep", "--help"], ["dspark.cli.plan", "dspark.cli.sweep"]),  # sweep builds validate's request
    (["validate", "--help"], ["dspark.cli.plan"]),  # not start, advise or sweep
    (["nosuch"], []),
    (["--version"], []),
])
def test_a_command_module_loads_only_when_that_command_runs(argv: list[str], loaded: list[str]) -> None:
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _LOADED, *argv], cwd=root, capture_output=True, text=True,
                          check=False, timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {"code": 2 if argv == ["nosuch"] else 0, "modules": loaded}, proc.stderr[-2000:]


def test_the_group_lists_every_command_without_loading_it_and_refuses_what_is_not_one() -> None:
    import click  # noqa: PLC0415

    group = cli.cli
    assert isinstance(group, cli.LazyGroup)
    ctx = click.Context(group)
    assert group.list_commands(ctx) == sorted(cli.COMMAND_MODULES)
    assert group.get_command(ctx, "no-such-command") is None
    for name in cli.COMMAND_MODULES:
        command = group.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name in (name, name.replace("_", "-")), name
