"""Byte sizes and token counts as users write them ("28GB", "28 GiB", "28G", "256K"), parsed once into ints.

Byte sizes (`parse_size`), one convention, stated once:

- "GB", "MB", "KB", "TB" (any case) are decimal: 28GB = 28 * 10**9 bytes: the deployment's "28 GB KV pin"
  (docs/deployment.md).
- "GiB", "MiB", "KiB", "TiB" (any case) are binary: 28GiB = 28 * 2**30 bytes.
- A single-letter suffix follows vLLM's own `--kv-cache-memory-bytes` parser (`human_readable_int`), so a
  value copied from a vLLM command line means the same number of bytes here: lower case k/m/g/t is
  decimal (28g = 28 * 10**9), upper case K/M/G/T is binary (28G = 28 * 2**30).
- "B" or no suffix is bytes; a plain int (YAML or Python) is bytes.

Fractions are allowed with any suffix ("1.5GiB"); the result is rounded down to whole bytes.
Token counts (`parse_count`) take the same single-letter suffixes vLLM takes for token flags
(`--max-num-batched-tokens 8k` = 8,000, `8K` = 8,192) but no byte units.
"""

from __future__ import annotations

import re
from decimal import Decimal

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}

_NUMBER = r"(?P<number>\d+(?:\.\d+)?|\.\d+)"
_SIZE_RE = re.compile(rf"{_NUMBER}\s*(?P<unit>[A-Za-z]*)")
_COUNT_RE = re.compile(rf"{_NUMBER}(?P<unit>[kKmMgGtT]?)")

SIZE_UNITS_HELP = (
    "bytes as an int, or a number with a unit: GB/MB/KB/TB decimal (28GB = 28e9), "
    "GiB/MiB/KiB/TiB binary (28GiB = 28*2^30), or vLLM's k/m/g/t decimal and K/M/G/T binary"
)
SIZE_PATTERN = r"^\s*(\d+(\.\d+)?|\.\d+)\s*([kKmMgGtT]|[kKmMgGtT][iI]?[bB]|[bB])?\s*$"


def _multiplier(unit: str) -> int | None:
    """Bytes per unit for a size suffix, or None when the suffix is not one we accept."""
    low = unit.lower()
    if low in ("", "b"):
        return 1
    if len(unit) == 1:
        # vLLM's convention: the letter's case picks decimal (k) or binary (K).
        return _DECIMAL.get(unit, _BINARY.get(low))
    if len(low) == 2 and low[1] == "b":
        return _DECIMAL.get(low[0])
    if len(low) == 3 and low[1:] == "ib":
        return _BINARY.get(low[0])
    return None


def parse_size(value: str | int) -> int:
    """Bytes for "28GB" / "28 GiB" / "28G" / 28000000000; ValueError (without the value) saying what is accepted."""
    if isinstance(value, bool):
        raise TypeError("expected a size, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    text = value.strip()
    match = _SIZE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a size; use {SIZE_UNITS_HELP}")
    mult = _multiplier(match["unit"])
    if mult is None:
        raise ValueError(f"unknown unit {match['unit']!r}; use {SIZE_UNITS_HELP}")
    if mult == 1 and "." in match["number"]:
        raise ValueError("a fraction of a byte; give whole bytes or a unit")
    return int(Decimal(match["number"]) * mult)


def parse_count(value: str | int) -> int:
    """A token count: an int, or vLLM's suffixes (8k = 8,000, 8K = 8,192); raise ValueError otherwise."""
    if isinstance(value, bool):
        raise TypeError("expected a whole number, got a boolean")
    if isinstance(value, int):
        return value
    text = value.strip()
    match = _COUNT_RE.fullmatch(text)
    if match is None:
        raise ValueError("not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary)")
    unit = match["unit"]
    if not unit:
        if "." in match["number"]:
            raise ValueError("not a whole number of tokens")
        return int(match["number"])
    mult = _DECIMAL[unit] if unit in _DECIMAL else _BINARY[unit.lower()]
    return int(Decimal(match["number"]) * mult)


def format_size(num_bytes: int) -> str:
    """A byte count for people: both conventions, so "28 GB" and "26.08 GiB" are never confused."""
    if num_bytes < 1000:
        return f"{num_bytes} B"
    dec_unit, dec = next(u for u in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)) if num_bytes >= u[1])
    bin_unit, binary = next(
        (u for u in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if num_bytes >= u[1]),
        ("B", 1),
    )
    return f"{num_bytes / dec:.2f} {dec_unit} ({num_bytes / binary:.2f} {bin_unit})"
