"""The one argv reader (dspark.engines.argv): argparse plus the engines' pre-passes, and the argv surgery on top.

The readers built on it are compared with the real engine parsers in tests/real_engines/test_argv_readers.py.
"""

from __future__ import annotations

import argparse
import json

import pytest

from dspark.core.errors import SettingsError
from dspark.core.units import suffixed_int
from dspark.engines.argv import (
    ArgvParser,
    Grammar,
    fold_dotted,
    is_option,
    option_name,
    option_values,
    read_argv,
    set_aside_unknown,
    strip_options,
)

VLLM_LIKE = Grammar(underscores=True, dotted=True, dotted_number=suffixed_int)


@pytest.mark.parametrize(
    ("arg", "expected"),
    [("--x", True), ("-tp", True), ("--x=1", True), ("-1", False), ("-.5", False), ("-1.5", False), ("-", False),
     ("x", False), ("-1x", True)],
)
def test_is_option_follows_argparse(arg: str, expected: bool) -> None:
    assert is_option(arg) is expected


@pytest.mark.parametrize(
    ("arg", "underscores", "expected"),
    [("--max_num_seqs=4", True, "--max-num-seqs"), ("--max_num_seqs", False, "--max_num_seqs"),
     ("--speculative_config.num_speculative_tokens", True, "--speculative-config.num_speculative_tokens"),
     ("-cc.max_size", True, "-cc.max_size"), ("--a_b=c_d", True, "--a-b")],
)
def test_option_name(arg: str, underscores: bool, expected: str) -> None:
    assert option_name(arg, underscores=underscores) == expected


def test_fold_dotted_merges_pieces_into_one_json_value_at_the_end() -> None:
    argv = ["/m", "-cc.mode", "full", "--max_num_seqs=4", "-cc.sizes+", "1,2", "-cc.sizes+=8", "-cc.cap", "1k",
            "--x.a.b=true", "--x.a.c", '{"d": 1}']
    out = fold_dotted(argv, VLLM_LIKE)
    assert out[:2] == ["/m", "--max-num-seqs=4"]
    assert out[2] == "-cc"
    assert json.loads(out[3]) == {"mode": "full", "sizes": ["1", "2", "8"], "cap": 1000}
    assert out[4] == "--x"
    assert json.loads(out[5]) == {"a": {"b": True, "c": {"d": 1}}}


def test_fold_dotted_leaves_dots_in_values_alone() -> None:
    assert fold_dotted(["--served-model-name=a.b", "--model", "x.y"], VLLM_LIKE) == [
        "--served-model-name=a.b", "--model", "x.y"]


def test_fold_dotted_needs_a_value() -> None:
    with pytest.raises(SettingsError, match=r"^-cc\.mode needs a value$"):
        fold_dotted(["-cc.mode"], VLLM_LIKE)


def test_set_aside_unknown_keeps_an_unknown_flag_with_its_value() -> None:
    known = {"--max-num-seqs", "-q", "--enforce-eager"}
    kept, unknown = set_aside_unknown(
        ["/m", "--host", "0.0.0.0", "--max-num-seqs", "4", "--trust-remote-code", "--enforce-eager", "--port=1",
         "-qfp8", "-O3", "--x", "-1", "--", "--max-num-seqs", "9"], known)
    assert kept == ["/m", "--max-num-seqs", "4", "--enforce-eager", "-qfp8"]
    assert unknown == ["--host", "0.0.0.0", "--trust-remote-code", "--port=1", "-O3", "--x", "-1", "--",
                       "--max-num-seqs", "9"]


def _parser() -> ArgvParser:
    parser = ArgvParser("engine")
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--dtype", choices=("auto", "half"))
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--sizes", nargs="+", type=int)
    return parser


def test_read_argv_is_argparse_for_the_declared_flags() -> None:
    read = read_argv(_parser(), ["/m", "--max_num_seqs", "3", "--no-enable-prefix-caching", "--sizes", "1", "2",
                                 "--max-num-seqs=5", "--other", "v", "extra"], Grammar(underscores=True))
    assert vars(read.namespace) == {"max_num_seqs": 5, "dtype": None, "enable_prefix_caching": False,
                                    "sizes": [1, 2]}
    assert read.positionals == ("/m", "extra")
    assert read.unknown == ("--other", "v")


def test_read_argv_without_underscores_sets_them_aside() -> None:
    read = read_argv(_parser(), ["--max_num_seqs", "3"])
    assert read.namespace.max_num_seqs is None
    assert read.unknown == ("--max_num_seqs", "3")


def test_read_argv_never_abbreviates() -> None:
    read = read_argv(_parser(), ["--max-num", "3", "--dty", "half"])
    assert (read.namespace.max_num_seqs, read.namespace.dtype) == (None, None)
    assert read.unknown == ("--max-num", "3", "--dty", "half")


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--dtype", "nope"], "argument --dtype: invalid choice: 'nope'"),
     (["--max-num-seqs", "x"], "argument --max-num-seqs: invalid int value: 'x'"),
     (["--max-num-seqs"], "argument --max-num-seqs: expected one argument"),
     (["--enable-prefix-caching=yes"], "ignored explicit argument 'yes'"),
     (["--sizes"], "argument --sizes: expected at least one argument")],
)
def test_read_argv_refuses_in_argparses_words(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        read_argv(_parser(), argv)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--max-num-seqs", "3", "--foo", "1"], ("--foo", "1")),
        (["--max-num-seqs=3", "--foo"], ("--foo",)),
        (["--max_num_seqs", "3"], ()),
        (["--no-enable-prefix-caching", "--enforce-eager"], ("--enforce-eager",)),
        (["--no_enable_prefix_caching", "--x"], ("--x",)),
        (["--enable-prefix-caching", "--x"], ("--x",)),
        (["--sizes", "1", "2", "--x"], ("--x",)),
    ],
)
def test_strip_options(argv: list[str], expected: tuple[str, ...]) -> None:
    assert strip_options(argv, {"--max-num-seqs": 1, "--enable-prefix-caching": 0, "--sizes": 2}) == expected


def test_option_values_reads_a_planned_argv_by_dest() -> None:
    argv = ["/py", "-m", "vllm", "serve", "/m", "--max-num-seqs", "8", "--enforce-eager",
            "--no-enable-prefix-caching", "--kv-cache-memory-bytes=100", "--max-num-seqs", "9", "--max-model-len",
            "-1"]
    assert option_values(argv) == {"max_num_seqs": "9", "enforce_eager": True, "enable_prefix_caching": False,
                                   "kv_cache_memory_bytes": "100", "max_model_len": "-1"}
