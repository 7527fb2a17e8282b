"""Sizes and token counts: one documented convention (GB decimal, GiB binary, vLLM's k/K for single letters).

The single-letter forms are compared with vLLM's own human_readable_int in
tests/real_engines/test_argv_readers.py; here, the grammar's cases one by one.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dspark.core.units import (
    MAX_BYTES,
    MAX_TOKENS,
    SIZE_PATTERN,
    format_size,
    parse_count,
    parse_size,
    suffixed_int,
)

HELP = (
    "use bytes as an int, or a number with a unit: GB/MB/KB/TB decimal (28GB = 28e9), "
    "GiB/MiB/KiB/TiB binary (28GiB = 28*2^30), or vLLM's k/m/g/t decimal and K/M/G/T binary"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("28GB", 28_000_000_000),  # the deployment's "28 GB KV pin" (docs/deployment.md): decimal
        ("28 GB", 28_000_000_000),
        ("28gb", 28_000_000_000),
        ("28GiB", 30_064_771_072),
        ("28 GiB", 30_064_771_072),
        ("28gib", 30_064_771_072),
        ("28G", 30_064_771_072),  # vLLM: upper-case letter is binary
        ("28g", 28_000_000_000),  # vLLM: lower-case letter is decimal
        ("1.5g", 1_500_000_000),  # vLLM: decimals with a decimal letter
        ("1.005k", 1004),  # vLLM: int(float("1.005") * 1000), float rounding and all
        (" 28G ", 30_064_771_072),
        ("512MiB", 536_870_912),
        ("512MB", 512_000_000),
        ("1.5GiB", 1_610_612_736),
        ("0.5GB", 500_000_000),
        ("1TB", 10**12),
        ("1TiB", 2**40),
        ("4KiB", 4096),
        ("123", 123),
        ("123B", 123),
        (" 28GB ", 28_000_000_000),
        (28_000_000_000, 28_000_000_000),
        (0, 0),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("28QQ", f"unknown unit 'QQ'; {HELP}"),
        ("28 GiBs", f"unknown unit 'GiBs'; {HELP}"),
        ("GB", f"not a size; {HELP}"),
        ("", f"not a size; {HELP}"),
        ("-1GB", f"not a size; {HELP}"),
        ("1e9", f"not a size; {HELP}"),
        ("0.5", "a fraction of a byte; give whole bytes or a unit"),
        (-1, "a size cannot be negative"),
        # What vLLM's --kv-cache-memory-bytes refuses is refused here too (the letter forms are its grammar).
        ("1.5G", "decimals are not allowed with binary suffixes like G (vLLM refuses 1.5G); did you mean 1.5g?"),
        ("1.5K", "decimals are not allowed with binary suffixes like K (vLLM refuses 1.5K); did you mean 1.5k?"),
        ("28 G", "write a single-letter unit right after the digits, as vLLM reads it (28G, 1.5g); "
                 f"or {HELP}"),
        (".5g", "write a single-letter unit right after the digits, as vLLM reads it (28G, 1.5g); "
                f"or {HELP}"),
    ],
)
def test_parse_size_rejects_with_a_message_that_says_what_is_accepted(text: str | int, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        parse_size(text)


def test_parse_size_refuses_a_boolean() -> None:
    with pytest.raises(TypeError, match=r"^expected a size, got a boolean$"):
        parse_size(True)


@pytest.mark.parametrize(
    ("text", "ok"),
    [("28GB", True), ("28 GiB", True), ("28G", True), ("1.5gib", True), ("123", True), ("28QQ", False), ("x", False),
     ("1.5g", True), ("1.5G", False), ("28 G", False), (".5g", False), (".5GB", True), ("0.5", True), ("28 B", True)],
)
def test_schema_pattern_agrees_with_the_parser(text: str, ok: bool) -> None:
    assert (re.fullmatch(SIZE_PATTERN, text) is not None) is ok
    if text != "0.5":  # the pattern cannot say "a fraction of a byte"; the parser does
        try:
            parse_size(text)
        except ValueError:
            assert not ok
        else:
            assert ok


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8192", 8192), ("8k", 8000), ("8K", 8192), ("256K", 262_144), ("1.5k", 1500), ("1m", 10**6), (131072, 131072),
     (" 8K ", 8192), ("25.6k", 25_600)],
)
def test_parse_count(text: str | int, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lots", "not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary)"),
        ("8GB", "not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary)"),
        ("12.5", "not a whole number of tokens"),
        (".5k", "not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary)"),
        ("-8", "not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary)"),
        ("1.5K", "decimals are not allowed with binary suffixes like K (vLLM refuses 1.5K); did you mean 1.5k?"),
    ],
)
def test_parse_count_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        parse_count(text)


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (28_000_000_000, "28.00 GB (26.08 GiB)"),
        (30_064_771_072, "30.06 GB (28.00 GiB)"),
        (999, "999 B"),
        (1000, "1.00 KB (1000.00 B)"),
        (2**40, "1.10 TB (1.00 TiB)"),
    ],
)
def test_format_size_shows_both_conventions(num_bytes: int, expected: str) -> None:
    assert format_size(num_bytes) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1k", 1000), ("1K", 1024), ("25.6k", 25_600), ("2M", 2 * 2**20), ("3t", 3 * 10**12), ("-1", -1),
     ("1_000", 1000), (" 7 ", 7), ("0.3g", 300_000_000)],
)
def test_suffixed_int_is_vllms_human_readable_int(text: str, expected: int) -> None:
    # int() reads the plain forms, as vLLM's does ("-1", "1_000"); dspark's own flags check the sign themselves.
    assert suffixed_int(text) == expected


@pytest.mark.parametrize(("text", "message"), [("1.5M", "decimals are not allowed with binary suffixes like M"),
                                               ("1Mi", "is not an integer"), ("k", "is not an integer")])
def test_suffixed_int_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        suffixed_int(text)


# --- issue 26: every count and size is bounded --------------------------------------------------------------

@pytest.mark.parametrize("digits", [41, 400, 4301, 5000])
@pytest.mark.parametrize("parse", [parse_count, parse_size, suffixed_int])
def test_a_number_of_hundreds_of_digits_is_refused_in_words(parse: Any, digits: int) -> None:
    """Never Python's 'Exceeds the limit (4300 digits) for integer string conversion', never the digits echoed."""
    with pytest.raises(ValueError, match=rf"a number of {digits:,} digits; no count or size dspark reads") as info:
        parse("9" * digits)
    assert "9" * 41 not in str(info.value) and "set_int_max_str_digits" not in str(info.value)


def test_counts_and_sizes_stop_at_their_bounds() -> None:
    assert parse_count(str(MAX_TOKENS)) == MAX_TOKENS
    assert parse_size(f"{MAX_BYTES}") == MAX_BYTES
    for value in (str(MAX_TOKENS + 1), MAX_TOKENS + 1, "2000T"):
        with pytest.raises(ValueError, match=rf"more tokens than dspark plans with \(at most {MAX_TOKENS:,}\)"):
            parse_count(value)
    for size in (MAX_BYTES + 1, str(MAX_BYTES + 1), "2000000TiB"):
        with pytest.raises(ValueError, match="more bytes than dspark plans with"):
            parse_size(size)
