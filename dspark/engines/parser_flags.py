"""Every option string an engine's serve parser registers, per release, and what that parser makes of an argv.

dspark's flag readers (dspark/engines/<engine>/options.py) declare the few dozen flags that change capacity;
the engines' parsers know 430-560 each and take any unambiguous prefix of one (argparse's allow_abbrev, on in
vLLM's FlexibleArgumentParser and SGLang's plain ArgumentParser alike). Reading `--max-num-se 64` needs all of
them: it is --max-num-seqs only because no other flag starts so. The tables under dspark/data/engine_flags/ are
the parsers' own `_option_string_actions` (hidden strings included: vLLM 0.33 registers --no-enable-x without
showing it), written by scripts/engine_flag_table.py in each engine's interpreter and checked against it by
tests/real_engines/test_parser_flag_tables.py.

`engine_argv` rewrites an argv the way the engine's parser reads it, as Python 3.11's argparse does
(_parse_optional, _get_option_tuples), after the engine's pre-pass (dspark.engines.argv.Grammar):
- a flag the parser has is kept; `--flag=value` is split at the first `=`;
- a long `--prefix` (or `--prefix=value`) that starts exactly one option string is that option, spelled out;
  several are argparse's "ambiguous option: --x could match --x-a, --x-b", an error here too;
- a single-dash `-xy...` is `-x` with `y...` attached when `-x` is an option, or the one option starting with
  it (several: ambiguous, as above);
- anything else is a flag the engine does not have (`unknown_flags`): its parser would refuse it.
Everything after a bare `--` is positional, as in argparse.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from dspark.core.errors import SettingsError
from dspark.engines.argv import Grammar, is_option, option_name

TABLES = Path(__file__).parents[1] / "data" / "engine_flags"

# How many values an option takes: 0, 1, or argparse's nargs ("?", "*", "+", or a count).
Values = int | str


@dataclass(frozen=True)
class FlagTable:
    """One release's serve parser: every option string it registers and how many values each takes."""

    engine: str
    version: str  # the release the table was read from
    options: Mapping[str, Values] = field(repr=False)
    exact: bool = True  # False: a neighbouring release's table stands in for the one asked about

    @property
    def label(self) -> str:
        """`vllm 0.32.0's parser`, or `vllm 0.32.0's parser (standing in for 0.25.0)`."""
        return f"{self.engine} {self.version}'s parser"

    def resolve(self, arg: str) -> tuple[str, tuple[str, ...]]:
        """(arg as the parser reads it, the options it could be): one option is a match, several are ambiguous,
        none a flag this parser does not have (argparse 3.11's _parse_optional and _get_option_tuples)."""
        name, eq, value = arg.partition("=")
        if arg in self.options:
            return arg, (arg,)
        if eq and name in self.options:
            return arg, (name,)
        if arg.startswith("--"):
            found = tuple(o for o in self.options if o.startswith(name))
            return (found[0] + eq + value if len(found) == 1 else arg), found
        # Single dash: `-qfp8` is `-q` with `fp8` attached; `-t` is the one option starting with it.
        found = tuple(o for o in self.options if o == arg[:2] or o.startswith(arg))
        return (found[0] if len(found) == 1 and found[0] != arg[:2] else arg), found


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


@functools.cache
def _tables(engine: str) -> dict[str, Mapping[str, Values]]:
    out: dict[str, Mapping[str, Values]] = {}
    for path in sorted(TABLES.glob(f"{engine}-*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        out[str(data["version"])] = dict(data["options"])
    return out


def flag_table(engine: str, version: str | None) -> FlagTable | None:
    """The table of `engine` at `version`; another release's where dspark has none for it (exact=False): the
    newest at or below it, else the oldest. None when dspark has no table for the engine at all."""
    tables = _tables(engine)
    if not tables:
        return None
    ordered = sorted(tables, key=_version_key)
    if version is None:
        chosen = ordered[-1]
    elif version in tables:
        chosen = version
    else:
        below = [v for v in ordered if _version_key(v) <= _version_key(version)]
        chosen = below[-1] if below else ordered[0]
    return FlagTable(engine, chosen, tables[chosen], exact=version is None or chosen == version)


class EngineArgv(NamedTuple):
    """An argv as the engine's parser reads it: flags spelled out, and the flags it does not have."""

    argv: tuple[str, ...]
    unknown: tuple[str, ...] = ()  # flags the parser has no option for (it refuses them)
    ambiguous: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (the prefix given, the options it could be)
    abbreviated: tuple[tuple[str, str], ...] = ()  # (as given, the option it is)


def engine_argv(argv: Sequence[str], table: FlagTable, grammar: Grammar) -> EngineArgv:
    """argv with each flag as `table`'s parser resolves it (module docstring); nothing here raises.

    The pre-pass of `grammar` runs on names first, as the engine's does: underscores (`--a_b` is `--a-b`), dotted
    pieces (`--compilation.mode 3` resolves its head, `--compilation`, and takes its value with it) and vLLM's
    `-O3` / `-O 3` (--optimization-level).
    """
    out: list[str] = []
    unknown: list[str] = []
    ambiguous: list[tuple[str, tuple[str, ...]]] = []
    abbreviated: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            out += argv[i - 1:]
            break
        if not is_option(arg) or (grammar.optimization_level and arg.startswith("-O") and arg[1:2] != "-"):
            out.append(arg)  # a value; or vLLM's -O<n> / -O <n>, its pre-pass's --optimization-level
            continue
        name = option_name(arg, underscores=grammar.underscores)
        rest = arg[len(arg.partition("=")[0]):]
        dotted = grammar.dotted and "." in name
        head, _, tail = name.partition(".") if dotted else (name, "", "")
        read, found = table.resolve(head if dotted else name + rest)
        if len(found) > 1:
            ambiguous.append((head, found))
        elif not found and " " not in arg:  # argparse: an unknown "option" with a space in it is a value
            unknown.append(head)
        elif found and read.partition("=")[0] != head:
            abbreviated.append((head, found[0]))
        out.append((read + "." + tail + rest) if dotted and len(found) == 1 else read if len(found) == 1 else arg)
        if dotted and "=" not in arg and i < len(argv):  # the dotted piece's value goes with it (vLLM's pre-pass)
            out.append(argv[i])
            i += 1
    return EngineArgv(tuple(out), tuple(unknown), tuple(ambiguous), tuple(abbreviated))


def require_unambiguous(read: EngineArgv, table: FlagTable) -> None:
    """An ambiguous prefix is refused, as the engine's parser refuses it, naming the candidates."""
    if not read.ambiguous:
        return
    given, candidates = read.ambiguous[0]
    raise SettingsError(
        f"ambiguous option: {given} could match {', '.join(candidates)} ({table.label})",
        hint=f"spell the flag out: one of {', '.join(candidates)}",
    )


