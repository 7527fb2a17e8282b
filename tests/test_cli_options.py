"""Every option of every command reaches the core: generated from the click command objects.

Each command's core function is replaced by a recorder. An option counts as reaching the core when the
recorded call changes when the option is given; where the option can carry a value of its own (numbers, text,
files), that value must appear in the call, and with every option given at once every one of those values
must still appear (two options that share a destination lose one of them). An option the CLI refuses for a
command (advise --max-num-seqs) must say so, exit 2, naming the option.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

from dspark import cli

# The core function behind each command path (the CLI imports it inside the command, from these modules).
CORES: dict[tuple[str, ...], tuple[str, str]] = {
    ("probe",): ("dspark.commands.probe", "probe"),
    ("recipes", "list"): ("dspark.commands.recipes", "recipes_list"),
    ("recipes", "show"): ("dspark.commands.recipes", "recipes_show"),
    ("recipes", "schema"): ("dspark.commands.recipes", "recipes_schema"),
    ("validate",): ("dspark.commands.validate", "run_validate"),
    ("start",): ("dspark.commands.start", "start_command"),
    ("render", "k8s"): ("dspark.commands.render", "run_render_k8s"),
    ("advise",): ("dspark.commands.advise", "run_advise"),
    ("bench",): ("dspark.commands.bench", "bench"),
    ("sweep",): ("dspark.commands.sweep", "sweep_command"),
    ("top",): ("dspark.commands.top", "top"),
    ("profile",): ("dspark.commands.profile", "profile"),
}
_serial = itertools.count(7001)


def _commands(group: click.Group = cli.cli, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                         click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the lazy group loads each command's module here
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = dict(_commands())


@dataclass(frozen=True)
class Given:
    """How to give one parameter on the command line, and the mark its value leaves in the core's call."""

    argv: tuple[str, ...]
    mark: str | None  # None: the value is not distinctive (a flag, a choice); the call must only change


def _given(param: click.Parameter, tmp: Path) -> Given:
    """A valid, distinctive value for `param` (a file for paths that must exist)."""
    if isinstance(param, click.Argument):
        value = f"arg{next(_serial)}"
        return Given((value,), value)
    assert isinstance(param, click.Option)
    name = param.opts[0]
    if param.is_flag:  # --x/--no-x: give the side that is not the default
        return Given((param.secondary_opts[0] if param.secondary_opts and param.default else name,), None)
    kind = param.type
    if isinstance(kind, click.Choice):
        return Given((name, str(next(c for c in kind.choices if c != param.default))), None)
    if isinstance(kind, click.Path):
        path = tmp / f"file{next(_serial)}.jsonl"
        path.write_text('{"prompt": [1, 2, 3]}\n')
        value = str(path)
    elif isinstance(kind, click.types.FloatParamType):
        value = f"0.{next(_serial)}1"  # no trailing zero: the mark is the float's repr
    else:
        value = str(next(_serial))  # whole numbers pass every text, count and token option
    return Given((name, value), value)


def _base(path: tuple[str, ...], command: click.Command, skip: str | None = None) -> list[str]:
    """The command with its required parameters (other than `skip`) at fixed values."""
    argv = [*path]
    for param in command.params:
        if not param.required or param.name == skip:
            continue
        value = {"seats": "8", "url": "http://127.0.0.1:1"}.get(str(param.name), "fixed")
        argv += [value] if isinstance(param, click.Argument) else [param.opts[0], value]
    return argv


def _params(command: click.Command) -> list[click.Parameter]:
    return [p for p in command.params if not (isinstance(p, click.Option) and p.is_eager)]


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append(repr((args, sorted(kwargs.items()))))
        return 0


@pytest.fixture
def record(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    import importlib  # noqa: PLC0415

    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    recorder = _Recorder()
    for module, attr in CORES.values():
        monkeypatch.setattr(importlib.import_module(module), attr, recorder)
    return recorder


def _call(record: _Recorder, capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str | None, str]:
    before = len(record.calls)
    code = cli.main(argv)
    _, err = capsys.readouterr()
    return code, record.calls[before] if len(record.calls) > before else None, err


def test_every_command_has_a_core() -> None:
    assert set(COMMANDS) == set(CORES)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_no_two_parameters_share_a_destination(path: tuple[str, ...]) -> None:
    names = [p.name for p in COMMANDS[path].params]
    assert sorted(names) == sorted(set(names)), f"dspark {' '.join(path)}: {names}"


CASES = [(path, p.name) for path, command in sorted(COMMANDS.items()) for p in _params(command)]


@pytest.mark.parametrize(("path", "param"), CASES, ids=[f"{' '.join(p)}:{n}" for p, n in CASES])
def test_each_option_reaches_the_core(path: tuple[str, ...], param: str, record: _Recorder,
                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    command = COMMANDS[path]
    target = next(p for p in command.params if p.name == param)
    given = _given(target, tmp_path)
    base = _base(path, command, skip=param)
    if target.required:  # the baseline holds another value of it
        base_code, base_call, _ = _call(record, capsys, [*_base(path, command)])
    else:
        base_code, base_call, _ = _call(record, capsys, base)
    assert base_code == 0 and base_call is not None, f"baseline dspark {' '.join(base)}"
    code, call, err = _call(record, capsys, [*base, *given.argv])
    shown = f"dspark {' '.join([*base, *given.argv])}"
    if call is None:  # refused before the core: must be a usage error that names the option
        assert code == 2, shown
        assert isinstance(target, click.Option) and target.opts[0] in err, f"{shown}: {err}"
        return
    assert code == 0, shown
    assert call != base_call, f"{shown}: the core got the same call as without {given.argv[0]}"
    if given.mark is not None:
        assert given.mark in call, f"{shown}: {given.mark} is not in the core's call {call[:3000]}"


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_all_options_at_once_each_reach_the_core(path: tuple[str, ...], record: _Recorder,
                                                 capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    command = COMMANDS[path]
    argv, marks = [*path], []
    for param in _params(command):
        given = _given(param, tmp_path)
        probe_code, probe_call, _ = _call(record, capsys, [*_base(path, command, skip=param.name), *given.argv])
        if probe_call is None:  # an option this command refuses (checked above): left out here
            assert probe_code == 2
            continue
        argv += given.argv
        if given.mark is not None:
            marks.append((param.name, given.mark))
    code, call, err = _call(record, capsys, argv)
    assert code == 0 and call is not None, f"dspark {' '.join(argv)}: {err}"
    lost = [name for name, mark in marks if mark not in call]
    assert lost == [], f"dspark {' '.join(argv)}: the core never saw {lost}"
