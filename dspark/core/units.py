"""Byte sizes and token counts as users write them ("28GB", "28 GiB", "28G", "256K"), parsed once into ints.

Byte sizes (`parse_size`), one convention, stated once:

- "GB", "MB", "KB", "TB" (any case) are decimal: 28GB = 28 * 10**9 bytes: the deployment's "28 GB KV pin"
  (docs/deployment.md).
- "GiB", "MiB", "KiB", "TiB" (any case) are binary: 28GiB = 28 * 2**30 bytes.
- A single-letter suffix is read by `suffixed_int`, the grammar of vLLM's own `--kv-cache-memory-bytes`
  parser (vllm/utils/argparse_utils.py human_readable_int), so a value copied from a vLLM command line means
  the same number of bytes here, and what vLLM refuses is refused here: lower case k/m/g/t is decimal
  (28g = 28 * 10**9, fractions allowed: 1.5g), upper case K/M/G/T is binary and whole (28G = 28 * 2**30;
  1.5G is refused, as vLLM refuses it), the letter right after the digits.
- "B" or no suffix is bytes; a plain int (YAML or Python) is bytes.

Fractions are allowed with the two- and three-letter units ("1.5GiB", ".5GB"); the result is rounded down
to whole bytes. Token counts (`parse_count`) are `suffixed_int` on digits: vLLM's suffixes for token flags
(`--max-num-batched-tokens 8k` = 8,000, `8K` = 8,192), no byte units. Engine flags after `--` are read by
each engine's own grammar (dspark/engines/<engine>/options.py; SGLang's differs: 1M = 10**6, 1Mi = 2**20);
docs/units.md says which is which.
"""

from __future__ import annotations

import re
from decimal import Decimal

# Bounds on every count and size dspark reads: far above any real one (a 1Ti-token context, an EiB of memory),
# far below what float arithmetic on them would overflow. A number with more digits than MAX_DIGITS is refused
# before it is converted (Python refuses past 4,300 digits, with words about sys.set_int_max_str_digits).
MAX_TOKENS = 1 << 40
MAX_BYTES = 1 << 60
MAX_DIGITS = 40

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_LETTERS = frozenset("kmgtKMGT")

_NUMBER = r"(?P<number>\d+(?:\.\d+)?|\.\d+)"
_SIZE_RE = re.compile(rf"{_NUMBER}\s*(?P<unit>[A-Za-z]*)")
# vLLM's human_readable_int: re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value.strip())
_SUFFIXED_RE = r"(\d+(?:\.\d+)?)([kKmMgGtT])"

SIZE_UNITS_HELP = (
    "bytes as an int, or a number with a unit: GB/MB/KB/TB decimal (28GB = 28e9), "
    "GiB/MiB/KiB/TiB binary (28GiB = 28*2^30), or vLLM's k/m/g/t decimal and K/M/G/T binary"
)
# The same grammar as a JSON-schema pattern (recipes' editor hints): letter right after the digits, K/M/G/T whole.
SIZE_PATTERN = (r"^\s*(\d+(\.\d+)?[kmgt]|\d+[KMGT]|(\d+(\.\d+)?|\.\d+)\s*([kKmMgGtT][iI]?[bB]|[bB])?)\s*$")


def suffixed_int(value: str) -> int:
    """A number with one k/m/g/t (decimal) or K/M/G/T (binary, whole) suffix, or a plain int; else ValueError.

    vLLM's human_readable_int (vllm/utils/argparse_utils.py), float arithmetic included: int(float(n) * mult)
    for decimal letters (so "1.005k" is 1,004, as vLLM reads it), int(n) * mult for binary ones.
    """
    text = value.strip()
    _check_digits(text)
    match = re.fullmatch(_SUFFIXED_RE, text)
    if match is None:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{value!r} is not an integer (suffixes: k/m/g/t decimal, K/M/G/T binary)") from None
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(f"decimals are not allowed with binary suffixes like {suffix} (vLLM refuses {value.strip()}); "
                         f"did you mean {number}{suffix.lower()}?")
    return int(number) * _BINARY[suffix.lower()]


def _check_digits(text: str) -> None:
    """ValueError for a number written with more digits than any count or size has (never echoing them)."""
    digits = sum(c.isdigit() for c in text)
    if digits > MAX_DIGITS:
        raise ValueError(f"a number of {digits:,} digits; no count or size dspark reads has more than {MAX_DIGITS}")


def _bounded(value: int, limit: int, what: str) -> int:
    if value > limit:
        raise ValueError(f"more {what} than dspark plans with (at most {limit:,})")
    return value


def _multiplier(unit: str) -> int | None:
    """Bytes per unit for a two- or three-letter size suffix (or none, or B); None when we do not accept it."""
    low = unit.lower()
    if low in ("", "b"):
        return 1
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
        return _bounded(value, MAX_BYTES, "bytes")
    text = value.strip()
    _check_digits(text)
    return _bounded(_parse_size_text(text), MAX_BYTES, "bytes")


def _parse_size_text(text: str) -> int:
    match = _SIZE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a size; use {SIZE_UNITS_HELP}")
    if len(match["unit"]) == 1 and match["unit"] in _LETTERS:
        return _letter_size(text)
    mult = _multiplier(match["unit"])
    if mult is None:
        raise ValueError(f"unknown unit {match['unit']!r}; use {SIZE_UNITS_HELP}")
    if mult == 1 and "." in match["number"]:
        raise ValueError("a fraction of a byte; give whole bytes or a unit")
    return int(Decimal(match["number"]) * mult)


def _letter_size(text: str) -> int:
    """A size with a single-letter suffix: exactly as vLLM reads it (suffixed_int), digits right before it."""
    if re.fullmatch(_SUFFIXED_RE, text) is None:
        raise ValueError(f"write a single-letter unit right after the digits, as vLLM reads it (28G, 1.5g); "
                         f"or use {SIZE_UNITS_HELP}")
    return suffixed_int(text)


def parse_count(value: str | int) -> int:
    """A token count: an int, or vLLM's suffixes (8k = 8,000, 8K = 8,192; suffixed_int); ValueError otherwise."""
    if isinstance(value, bool):
        raise TypeError("expected a whole number, got a boolean")
    if isinstance(value, int):
        return _bounded(value, MAX_TOKENS, "tokens")
    text = value.strip()
    _check_digits(text)
    if re.fullmatch(r"\d+", text):
        return _bounded(int(text), MAX_TOKENS, "tokens")
    if re.fullmatch(_SUFFIXED_RE, text) is None:
        if re.fullmatch(r"\d*\.\d+", text):
            raise ValueError("not a whole number of tokens")
        raise ValueError("not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary)")
    return _bounded(suffixed_int(text), MAX_TOKENS, "tokens")


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
