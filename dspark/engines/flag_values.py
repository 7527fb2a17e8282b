"""Value converters shared by the engines' flag readers: a bad value names the flag and what was given.

Where the engine itself rejects the value, the message repeats the engine's own words (argparse's
"invalid choice" and "ignored explicit argument", pydantic's "Input should be greater than 0").
Flag reading has four rooms: dspark.engines.argv (the argparse machinery every reader runs on),
dspark/engines/<engine>/options.py (each engine's reader), dspark.engines.flag_values (the value converters
they share) and dspark.engines.pasted_flags (what the pasted flags set: knob values, unplaced flags, DP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dspark.core.errors import SettingsError


def int_value(value: str, flag: str) -> int:
    """A plain integer, or SettingsError naming the flag."""
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"{flag} {value}: not an integer") from None


def positive_int(value: str, flag: str, owner: str, *, problem: str = "Input should be greater than 0") -> int:
    """An integer > 0; `problem` is the engine's words (pydantic's for a `Field(gt=0)` of config class `owner`)."""
    number = int_value(value, flag)
    if number <= 0:
        raise SettingsError(f"{flag} {value}: {problem} ({owner})")
    return number


def float_value(value: str, flag: str) -> float:
    """A finite number, or SettingsError naming the flag."""
    try:
        number = float(value)
    except ValueError:
        raise SettingsError(f"{flag} {value}: not a number") from None
    if not math.isfinite(number):
        raise SettingsError(f"{flag} {value}: not a finite number")
    return number


def choice(value: str, flag: str, choices: Sequence[str]) -> str:
    """One of an argparse `choices` list, refused in argparse's own words."""
    if value not in choices:
        listed = ", ".join(repr(c) for c in sorted(choices))
        raise SettingsError(f"argument {flag}: invalid choice: {value!r} (choose from {listed})")
    return value


def json_count(raw: object, where: str, owner: str) -> int:
    """A count inside a JSON flag value (num_speculative_tokens): a whole, finite number > 0."""
    if isinstance(raw, bool) or not isinstance(raw, int | float) or (
        isinstance(raw, float) and not (math.isfinite(raw) and raw.is_integer())
    ):
        raise SettingsError(f"{where}: Input should be a valid integer, got {raw!r} ({owner})")
    if raw <= 0:
        raise SettingsError(f"{where}: Input should be greater than 0, got {raw!r} ({owner})")
    return int(raw)
