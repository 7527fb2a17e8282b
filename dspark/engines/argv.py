"""The one reader of engine argv: argparse, as both engines parse, plus the pre-passes they run first (pure).

Each engine's flag reader (dspark/engines/<name>/options.py) declares the flags it interprets on an
`ArgvParser`, the way the engine declares them (the same option strings, nargs, BooleanOptionalAction or
store_true, type and choices), and reads an argv with `read_argv`. What argparse itself does not do is done
here, before it, as the engines do it:

- vLLM's FlexibleArgumentParser.parse_args (vllm/utils/argparse_utils.py) reads `--a_b` as `--a-b` (up to the
  first dot) and folds dotted pieces (`--json-flag.key value`, `-cc.key=value`, `--json-flag.list+ a,b`) into
  one JSON value appended after the rest, so it replaces an earlier `--json-flag '{...}'` (argparse: the
  last occurrence wins). SGLang's parser is a plain argparse.ArgumentParser and does neither.
- Flags the reader does not declare are set aside with the value that follows them, in `unknown`: the
  engine's own parser judges them at `dspark start` (dspark_inside.<engine>.argv_check). Both engines' parsers
  also take unambiguous abbreviations of their 430-560 flags; a reader that knows a few dozen of them cannot
  tell an abbreviation from an ambiguous prefix, so it never abbreviates (allow_abbrev=False): the pasted argv
  reaches it with every abbreviation already spelled out against the engine's whole table of flags
  (dspark.engines.parser_flags, dspark.engines.pasted_flags.read_engine_flags).

Also here: removing flags from an argv (`strip_options`) and reading a planned argv's options by dest name
(`option_values`), with the same notion of an option and its name, and building one (`flag`, `strip_flags`).
Flag reading has five rooms: dspark.engines.argv (the argparse machinery every reader runs on),
dspark/engines/<engine>/options.py (each engine's reader), dspark.engines.flag_values (the value converters
they share), dspark.engines.parser_flags (each release's whole table of flags: abbreviations, flags it
lacks) and dspark.engines.pasted_flags (what the pasted flags set: knob values, unplaced flags, DP).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

from dspark.core.errors import SettingsError

# argparse's _negative_number_matcher: with no option that looks like a negative number (neither engine
# declares one), "-1" and "-.5" are values, not options.
_NEGATIVE_NUMBER = r"^-\d+$|^-\d*\.\d+$"


# Reads one flag's value: (the value, the flag as the engine names it) -> what the engine would hold, or a
# SettingsError naming the flag.
Reader = Callable[[str, str], Any]
# A flag that takes one value, as the engine declares it: (option strings, dest, reader, choices).
ValueFlag = tuple[tuple[str, ...], str, Reader, Sequence[str] | None]


def as_given(value: str, _flag: str) -> str:
    """The value as written: a flag whose value the engine keeps as text."""
    return value


def typed(reader: Reader, flag: str) -> Callable[[str], Any]:
    """An argparse `type`: the reader with the flag's name for its messages (SettingsError passes argparse by)."""
    return lambda value: reader(value, flag)


class ArgvParser(argparse.ArgumentParser):
    """argparse that raises SettingsError in argparse's own words instead of exiting, and never abbreviates."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False)

    def add_value_flags(self, flags: Sequence[ValueFlag]) -> None:
        """Declare one-value flags: each reader is the argparse `type`, named after the flag's first string."""
        for options, dest, reader, choices in flags:
            self.add_argument(*options, dest=dest, type=typed(reader, options[0]), choices=choices)

    def error(self, message: str) -> NoReturn:
        """argparse's message ("argument --dtype: invalid choice: ...") as a settings error."""
        raise SettingsError(message)

    def option_strings(self) -> frozenset[str]:
        """Every option string this parser declares."""
        return frozenset(self._option_string_actions)


class Grammar(NamedTuple):
    """What an engine's parser does before argparse sees the argv."""

    underscores: bool = False  # `--a_b` reads as `--a-b` (vLLM)
    dotted: bool = False  # `--flag.key value` pieces fold into a JSON value of --flag (vLLM)
    # Reads a dotted piece's value that is not JSON (vLLM: human_readable_int, else the string itself).
    dotted_number: Callable[[str], int] | None = None
    optimization_level: bool = False  # `-O3` / `-O 3` read as --optimization-level (vLLM)


class ReadArgv(NamedTuple):
    """An argv as a reader saw it: the parsed flags, bare arguments in order, and what it set aside."""

    namespace: argparse.Namespace
    positionals: tuple[str, ...]
    unknown: tuple[str, ...]


def is_option(arg: str) -> bool:
    """Whether argparse reads `arg` as an option string (not a value such as "-1" or "-")."""
    return arg.startswith("-") and arg != "-" and not re.match(_NEGATIVE_NUMBER, arg)


def option_name(arg: str, *, underscores: bool = False) -> str:
    """The option an argument names, before any `=`; with underscores, `--a_b.c_d` -> `--a-b.c_d` (vLLM's rule)."""
    name = arg.partition("=")[0]
    if underscores and name.startswith("--"):
        head, dot, rest = name[2:].partition(".")
        name = "--" + head.replace("_", "-") + dot + rest
    return name


def _normalised(arg: str, underscores: bool) -> str:
    """The argument with its option name normalised (`--a_b=c_d` -> `--a-b=c_d`); values are left alone."""
    return option_name(arg, underscores=underscores) + arg[len(arg.partition("=")[0]):] if is_option(arg) else arg


def _merge(original: dict[str, Any], update: Mapping[str, Any]) -> None:
    """vLLM's recursive_dict_update: nested dicts merge, lists extend, anything else replaces."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(original.get(key), dict):
            _merge(original[key], value)
        elif isinstance(value, list) and isinstance(original.get(key), list):
            original[key] += value
        else:
            original[key] = value


def _dotted_value(text: str, number: Callable[[str], int] | None) -> Any:
    """A dotted piece's value: JSON, else a human-readable integer, else the string (vLLM's order)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if number is not None:
        try:
            return number(text)
        except ValueError:
            pass
    return text


def fold_dotted(argv: Sequence[str], grammar: Grammar) -> list[str]:
    """vLLM's dotted pre-pass: `--x.a 1 --x.b.c=2` -> `--x '{"a": 1, "b": {"c": 2}}'`, appended at the end."""
    out: list[str] = []
    folded: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        name = option_name(arg, underscores=grammar.underscores)
        if not (is_option(arg) and "." in name):
            out.append(_normalised(arg, grammar.underscores))
            continue
        if "=" in arg:
            value = arg.partition("=")[2]
        elif i < len(argv):
            value, i = argv[i], i + 1
        else:
            raise SettingsError(f"{name} needs a value")
        key, *path = name.split(".")
        if path[-1].endswith("+"):  # `--x.list+ a,b` appends the items
            path[-1] = path[-1][:-1]
            parsed: Any = value.split(",")
        else:
            parsed = _dotted_value(value, grammar.dotted_number)
        for part in reversed(path):
            parsed = {part: parsed}
        _merge(folded.setdefault(key, {}), parsed)
    for key, conf in folded.items():
        out += [key, json.dumps(conf)]
    return out


def set_aside_unknown(argv: Sequence[str], known: Container[str]) -> tuple[list[str], list[str]]:
    """(argv for argparse, unknown): an undeclared option goes to unknown with the bare value after it.

    A single-letter option with its value attached (`-qfp8`) is argparse's `-q fp8` and stays.
    """
    kept: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":  # argparse: everything after it is positional; no engine flag is read there
            unknown += argv[i - 1:]
            break
        name = arg.partition("=")[0]
        if not is_option(arg) or name in known or (not arg.startswith("--") and arg[:2] in known):
            kept.append(arg)
            continue
        unknown.append(arg)
        if "=" not in arg and i < len(argv) and not is_option(argv[i]):
            unknown.append(argv[i])
            i += 1
    return kept, unknown


PLAIN = Grammar()  # argparse alone, no pre-pass (SGLang's parser)


def read_argv(parser: ArgvParser, argv: Sequence[str], grammar: Grammar = PLAIN) -> ReadArgv:
    """Parse argv the way the engine's parser does, for the flags `parser` declares; the rest set aside."""
    args = fold_dotted(argv, grammar) if grammar.dotted else [_normalised(a, grammar.underscores) for a in argv]
    kept, unknown = set_aside_unknown(args, parser.option_strings())
    namespace, positionals = parser.parse_known_args(kept)
    return ReadArgv(namespace, tuple(positionals), tuple(unknown))


def strip_options(argv: Sequence[str], managed: Mapping[str, int]) -> tuple[str, ...]:
    """The argv without the managed flags (`--f v`, `--f=v`, `--f_v`, bare booleans and their `--no-` forms).

    managed: long flag -> how many values it takes (0 for a boolean).
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        name = option_name(arg, underscores=True)
        if name.startswith("--no-") and f"--{name[5:]}" in managed:
            continue
        if name in managed:
            if "=" not in arg:
                i += managed[name]
            continue
        out.append(arg)
    return tuple(out)


def option_values(argv: Sequence[str]) -> dict[str, str | bool]:
    """The long options of a planned argv by dest name, from its first `--` flag on; the last occurrence wins.

    `--flag value` and `--flag=value` give the string; a bare `--flag` gives True and `--no-flag` False
    (BooleanOptionalAction's dest is the flag without `no-`).
    """
    out: dict[str, str | bool] = {}
    i = next((k for k, a in enumerate(argv) if a.startswith("--")), len(argv))
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            out[key] = value
        elif i < len(argv) and not argv[i].startswith("--"):
            out[key] = argv[i]
            i += 1
        elif key.startswith("no_"):
            out[key[3:]] = False
        else:
            out[key] = True
    return out


# Flags the adapters set themselves, with how many values each takes; the user's copies are removed.
def strip_flags(argv: Sequence[str], managed: Mapping[str, int]) -> tuple[str, ...]:
    """The argv without the managed flags (`--f v`, `--f=v`, bare booleans and their `--no-` forms)."""
    return strip_options(argv, managed)


def flag(name: str, value: object) -> list[str]:
    """`[name, str(value)]`, or nothing when value is None."""
    return [] if value is None else [name, str(value)]
