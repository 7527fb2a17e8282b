"""Value converters shared by the engines' flag readers: a bad value names the flag and what was given."""

from __future__ import annotations

from dspark.errors import SettingsError


def int_value(value: str, flag: str) -> int:
    """A plain integer, or SettingsError naming the flag."""
    try:
        return int(value)
    except ValueError:
        raise SettingsError(f"{flag} {value}: not an integer") from None


def float_value(value: str, flag: str) -> float:
    """A number, or SettingsError naming the flag."""
    try:
        return float(value)
    except ValueError:
        raise SettingsError(f"{flag} {value}: not a number") from None
