"""What a knob is: one setting's declaration (variable, flag and its help, recipe key, converter, default), and the
converters its raw values pass through.

Pure. The table of every knob is dspark.config.knobs; an engine declares its own knobs in its package
(dspark.engines.<name>.knobs) with these same types, so that a new engine's knob touches only its package.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from dspark.core.suggest import closest
from dspark.core.units import parse_count, parse_size


class Invalid(Exception):
    """A raw value a knob rejects; the resolver adds where it came from and what is valid."""

    def __init__(self, reason: str, suggestion: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.suggestion = suggestion


Convert = Callable[[object], Any]


class Knob(NamedTuple):
    """One setting: flag > `env` > the recipe's `recipe_path` > `default`, each raw value through `convert`.

    A NamedTuple, not a frozen dataclass: as immutable, and its class is about five times cheaper to create, which
    every command pays at start-up.
    """

    name: str
    env: str
    flag: str | None  # dspark's own command-line flag; None: set through the engine's flags after --, env, recipe
    recipe_path: str | None
    convert: Convert
    expected: str  # what is valid, in words, for messages
    default: object = None
    computed: bool = False  # when nothing sets it, a later layer derives it
    # Variables an orchestrator sets in every pod, read below `env` (which wins; a disagreement is noted).
    aliases: tuple[str, ...] = ()
    # How `flag` shows in --help: its text (the variable is added beside it), placeholder, and place among the
    # plan options (lower first); `choices`: values click itself refuses others of (else the resolver judges).
    help: str = ""
    metavar: str | None = None
    rank: int = 0
    choices: tuple[str, ...] = ()
    # An engine's own knob: where in the table it sits (a slot dspark.config.knobs names, e.g. "kv_pin").
    slot: str | None = None


def whole(lo: int, hi: int | None = None) -> Convert:
    def convert(raw: object) -> int:
        if isinstance(raw, bool):
            raise Invalid("not a whole number")
        if isinstance(raw, int):
            value = raw
        elif isinstance(raw, str) and re.fullmatch(r"\s*[+-]?\d+\s*", raw):
            if len(raw.strip()) > 20:  # beyond any bound here, and past 4,300 digits int() itself refuses
                raise Invalid("out of range")
            value = int(raw)
        else:
            raise Invalid("not a whole number")
        if value < lo or (hi is not None and value > hi):
            raise Invalid("out of range")
        return value

    return convert


def tokens(raw: object) -> int:
    try:
        value = parse_count(raw) if isinstance(raw, str | int) else None
    except (ValueError, TypeError) as exc:
        raise Invalid(str(exc)) from None
    if value is None:
        raise Invalid("not a whole number of tokens")
    if value < 1:
        raise Invalid("out of range")
    return value


def size(raw: object) -> int:
    try:
        value = parse_size(raw) if isinstance(raw, str | int) else None
    except (ValueError, TypeError) as exc:
        # The parser's message ends with the accepted units, which `expected` already lists.
        raise Invalid(str(exc).split("; use ", 1)[0]) from None
    if value is None:
        raise Invalid("not a size")
    if value < 1:
        raise Invalid("out of range")
    return value


def fraction(*, upper_inclusive: bool) -> Convert:
    def convert(raw: object) -> float:
        if isinstance(raw, bool):
            raise Invalid("not a number")
        if isinstance(raw, str):
            if not re.fullmatch(r"\s*(\d+(\.\d*)?|\.\d+)\s*", raw):
                raise Invalid("not a number")
            raw = float(raw)
        if not isinstance(raw, int | float):
            raise Invalid("not a number")
        value = float(raw)
        if not (0 < value < 1 or (upper_inclusive and value == 1)):
            raise Invalid("out of range")
        return value

    return convert


def choice(*options: str) -> Convert:
    def convert(raw: object) -> str:
        value = str(raw).strip().lower() if isinstance(raw, str) else None
        if value not in options:
            raise Invalid("not one of the choices", closest(str(raw), options))
        return value

    return convert


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def boolean(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    word = raw.strip().lower() if isinstance(raw, str) else ""
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise Invalid("not a yes/no value")


def text(raw: object) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise Invalid("not a non-empty string")
    return raw.strip()
