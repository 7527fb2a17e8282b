"""The click commands are the declarations (dspark.commands.options), and each declared group is its request.

Every parameter of every command is one declared Option (same name, flags, type, default, help), none is
undeclared, and each group's fields are exactly the fields of the request type the CLI builds from it (or
keyword arguments of the core function it calls), so an option cannot be dropped on its way to the core.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import click
import pytest

from dspark.advise.build import AdviseOptions
from dspark.bench.load import LoadOptions
from dspark.cli import cli
from dspark.commands import options as declared
from dspark.commands.advise import run_advise
from dspark.commands.bench import bench
from dspark.commands.observations import observations_clear, observations_list, observations_show
from dspark.commands.probe import probe
from dspark.commands.recipes import recipes_list, recipes_show
from dspark.commands.start import start_command
from dspark.commands.sweep import sweep_command
from dspark.commands.top import top
from dspark.commands.validate import run_validate
from dspark.config.knobs import KNOBS
from dspark.planning.start import StartRequest
from dspark.planning.validate import ValidateRequest


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from _leaves(command, (*path, name))
        else:
            yield (*path, name), command


CLICK = dict(_leaves(cli))


def test_every_command_is_declared_and_nothing_else() -> None:
    assert set(CLICK) == set(declared.COMMANDS)


@pytest.mark.parametrize("path", sorted(declared.COMMANDS), ids=" ".join)
def test_the_click_parameters_are_the_declarations(path: tuple[str, ...]) -> None:
    params = [p for p in CLICK[path].params if not (isinstance(p, click.Option) and p.is_eager)]
    options = declared.COMMANDS[path]
    ctx = click.Context(CLICK[path])
    assert [p.name for p in params] == [o.dest for o in options]
    for param, option in zip(params, options, strict=True):
        assert param.required == option.required, option.dest
        assert param.multiple == option.multiple, option.dest
        if option.argument:
            assert isinstance(param, click.Argument) and param.metavar == option.flags[0]
            continue
        assert isinstance(param, click.Option)
        assert (*param.opts, *param.secondary_opts) == tuple(f for flag in option.flags for f in flag.split("/"))
        assert param.is_flag == option.is_flag, option.dest
        assert param.help == (f"{option.help} [env: {option.env}]" if option.env else option.help)
        default = param.get_default(ctx)
        if option.default is not None:
            assert default == option.default, option.dest
        elif not param.is_flag:  # no default: what click gives an option declared without one
            assert default == click.Option(["--x"], multiple=option.multiple).get_default(ctx), option.dest
        if option.type is not None:
            assert type(param.type) is type(click.types.convert_type(option.type)), option.dest


@pytest.mark.parametrize("path", sorted(declared.COMMANDS), ids=" ".join)
def test_each_value_lands_in_one_place(path: tuple[str, ...]) -> None:
    options = declared.COMMANDS[path]
    places = [(o.to, o.target) for o in options]
    assert len(places) == len(set(places)), places
    params = {o.dest: f"value-of-{o.dest}" for o in options if o.convert is None}
    values = declared.split([o for o in options if o.convert is None], params)
    assert sorted(v for group in values.values() for v in group.values()) == sorted(params.values())


def _fields(kind: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def _keywords(func: Callable[..., Any], *passed: str) -> tuple[set[str], set[str]]:
    """(every keyword the core takes, those it requires), less the ones the CLI passes itself (`passed`)."""
    params = [p for p in inspect.signature(func).parameters.values()
              if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in passed and p.name != "out"]
    return {p.name for p in params}, {p.name for p in params if p.default is p.empty}


def _group(path: tuple[str, ...], *groups: str) -> set[str]:
    targets = [o.target for o in declared.COMMANDS[path] if o.to in groups]
    assert len(targets) == len(set(targets)), targets
    return set(targets)


PLANNED = [("validate",), ("start",), ("advise",), ("sweep",), ("render", "k8s")]


@pytest.mark.parametrize("path", PLANNED, ids=" ".join)
def test_plan_options_build_the_validate_request(path: tuple[str, ...]) -> None:
    assert _group(path, "knobs") == {k.name for k in KNOBS if k.flag is not None}
    # flags, engine_flags and env come from the knobs, the words after -- and os.environ.
    own = _fields(ValidateRequest) - {"flags", "engine_flags", "env"}
    given = _group(path, "validate")
    assert given <= own
    assert own - given <= {"engine_check"}  # only validate asks the witness
    assert ("engine_check" in given) == (path == ("validate",))


# (command, the groups that become one request type, that type's fields no option sets)
REQUESTS = [
    # prompt_offset: set by the rate sweep for its later points (fresh prompts), never by an option.
    (("bench",), ("workload", "load"), LoadOptions, {"prompt_offset"}),
    (("sweep",), ("workload", "load"), LoadOptions, {"prompt_offset"}),
    (("advise",), ("advise", "workload", "rule"), AdviseOptions, {"seed"}),
    (("start",), ("start",), StartRequest, {"validate", "engine_python"}),
]


@pytest.mark.parametrize(("path", "groups", "kind", "unset"), REQUESTS,
                         ids=[f"{' '.join(r[0])}:{r[2].__name__}" for r in REQUESTS])
def test_each_group_is_its_request_type(path: tuple[str, ...], groups: tuple[str, ...], kind: type[Any],
                                        unset: set[str]) -> None:
    assert _group(path, *groups) == _fields(kind) - unset


CALLS = [
    (("validate",), ("call",), run_validate, ("request",)),
    (("start",), ("call",), start_command, ("request",)),
    (("advise",), ("call",), run_advise, ("request", "opts")),
    (("bench",), ("call",), bench, ("load",)),
    (("sweep",), ("call", "rule"), sweep_command, ("request", "load")),
    (("probe",), ("call",), probe, ()),
    (("recipes", "list"), ("call",), recipes_list, ()),
    (("recipes", "show"), ("call", "args"), recipes_show, ()),
    (("top",), ("call", "args"), top, ("client_factory",)),
    (("observations", "list"), ("call",), observations_list, ("env",)),
    (("observations", "show"), ("call", "args"), observations_show, ("env",)),
    (("observations", "clear"), ("call", "args"), observations_clear, ("env",)),
]


@pytest.mark.parametrize(("path", "groups", "core", "passed"), CALLS,
                         ids=[f"{' '.join(c[0])}:{c[2].__name__}" for c in CALLS])
def test_the_call_group_is_the_cores_keywords(path: tuple[str, ...], groups: tuple[str, ...],
                                              core: Callable[..., Any], passed: tuple[str, ...]) -> None:
    takes, requires = _keywords(core, *passed)
    given = _group(path, *groups)
    assert requires <= given <= takes, (sorted(requires - given), sorted(given - takes))


def test_shared_options_are_one_declaration_with_each_commands_default() -> None:
    """--input-len, --requests, --prompts, --request-rate, --burstiness and the rule: declared once, kept apart."""
    by_command = {name: {o.dest: o for o in declared.COMMANDS[(name,)]} for name in ("advise", "bench", "sweep")}
    for dest in ("input_len", "requests", "prompts_file", "request_rate", "burstiness"):
        advise, bench_ = by_command["advise"][dest], by_command["bench"][dest]
        assert (advise.to, advise.target, type(advise.type)) == (bench_.to, bench_.target, type(bench_.type))
        assert by_command["sweep"][dest] == bench_
    assert (by_command["advise"]["input_len"].default, by_command["bench"]["input_len"].default) == (2048, 256)
    assert (by_command["advise"]["requests"].default, by_command["bench"]["requests"].default) == (None, 64)
    for dest in ("primary", "adopt_at", "max_regression"):
        assert by_command["advise"][dest] == by_command["sweep"][dest]
