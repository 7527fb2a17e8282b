"""dspark.engines.parser_flags: an argv read against an engine release's whole table of flags, as argparse does.

The oracle for abbreviations is argparse itself, given every option string of the table (the engines' parsers
resolve prefixes over exactly those strings); tests/real_engines/test_parser_flag_tables.py checks the tables
against the engines' parsers, and tests/real_engines/test_argv_readers.py the readings against their parses.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import pytest

from dspark.core.errors import SettingsError
from dspark.engines import engine_spec
from dspark.engines.argv import PLAIN
from dspark.engines.parser_flags import FlagTable, engine_argv, flag_table
from dspark.engines.pasted_flags import read_engine_flags
from dspark.engines.vllm.options import GRAMMAR

RNG = random.Random(26)  # noqa: S311 - reproducible cases, no secret


def _table(engine: str, version: str) -> FlagTable:
    table = flag_table(engine, version)
    assert table is not None and table.exact
    return table


VLLM = _table("vllm", "0.32.0")
VLLM33 = _table("vllm", "0.33.0")
SGLANG = _table("sglang", "0.5.23")


class _Ambiguous(Exception):
    pass


class _Oracle(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _Ambiguous(message)


def _oracle(table: FlagTable) -> _Oracle:
    parser = _Oracle(prog="oracle", add_help=False, allow_abbrev=True)
    for option, values in table.options.items():
        if values == 0:
            parser.add_argument(option, action="store_true")
        else:
            parser.add_argument(option, nargs=None if values == 1 else values)
    return parser


def _argparse_reads(parser: _Oracle, arg: str) -> str | None:
    """The option string argparse reads `arg` as; None: no such option; raises _Ambiguous."""
    found = parser._parse_optional(arg)
    return None if found is None or found[0] is None else str(found[1])


def _prefixes(table: FlagTable, count: int) -> list[str]:
    longs = [o for o in table.options if o.startswith("--")]
    picked = RNG.sample(longs, count)
    out = [o[:RNG.randrange(3, len(o) + 1)] for o in picked]
    out += [p + "=" + str(RNG.randrange(9)) for p in out[: count // 4]]
    return out + ["--" + "".join(RNG.choice("abcdefghijklmnopqrstuvwxyz-") for _ in range(6)) for _ in range(20)]


@pytest.mark.parametrize("table", [VLLM, VLLM33, SGLANG], ids=["vllm-0.32.0", "vllm-0.33.0", "sglang-0.5.23"])
def test_every_generated_prefix_resolves_as_argparse_resolves_it(table: FlagTable) -> None:
    parser = _oracle(table)
    for arg in _prefixes(table, 300):
        try:
            expected: str | None = _argparse_reads(parser, arg)
            ambiguous = False
        except _Ambiguous:
            expected, ambiguous = None, True
        read, found = table.resolve(arg)
        assert (len(found) > 1) == ambiguous, arg
        if not ambiguous:
            assert (found[0] if found else None) == expected, arg
            if expected is not None:
                assert read.partition("=")[0] == expected and read.partition("=")[2] == arg.partition("=")[2], arg


def test_the_issue_s_abbreviations_plan_64_seats_at_half_the_memory() -> None:
    """issue 26 item 9: `--max-num-se 64 --gpu-memory-util 0.5` is 64 seats at 0.5 to vLLM 0.32.0."""
    read = read_engine_flags(engine_spec("vllm"), ("--max-num-se", "64", "--gpu-memory-util", "0.5"), "0.32.0")
    assert read.options.max_num_seqs == 64 and read.options.gpu_memory_utilization == 0.5
    assert read.argv == ("--max-num-seqs", "64", "--gpu-memory-utilization", "0.5")
    assert [f.code for f in read.findings] == ["engine-flag-abbreviated"]


@pytest.mark.parametrize(("engine", "version", "argv", "candidates"), [
    ("vllm", "0.32.0", ("--kv-cache-dt", "fp8"), ("--kv-cache-dtype", "--kv-cache-dtype-skip-layers")),
    ("vllm", "0.33.0", ("--enable-p", "4"), ("--enable-prefix-caching", "--enable-prompt-embeds")),
    ("sglang", "0.5.23", ("--cuda-graph-max-bs", "8"), ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill")),
])
def test_an_ambiguous_prefix_is_refused_naming_the_candidates(engine: str, version: str, argv: tuple[str, ...],
                                                              candidates: tuple[str, ...]) -> None:
    with pytest.raises(SettingsError, match="ambiguous option") as err:
        read_engine_flags(engine_spec(engine), argv, version)
    for candidate in candidates:
        assert candidate in err.value.message and candidate in (err.value.hint or "")


def test_another_engine_s_flag_is_refused_naming_this_engine_s() -> None:
    """issue 26 item 20: the README's promise, for flags pasted after `--` too."""
    with pytest.raises(SettingsError, match="has no flag --max-total-tokens") as err:
        read_engine_flags(engine_spec("vllm"), ("--max-total-tokens", "100000"), "0.32.0")
    assert "--kv-cache-memory-bytes" in (err.value.hint or "")
    with pytest.raises(SettingsError, match="has no flag --gpu-memory-utilization") as err:
        read_engine_flags(engine_spec("sglang"), ("--gpu-memory-utilization", "0.5"), "0.5.23")
    assert "--mem-fraction-static" in (err.value.hint or "")


def test_ordinary_flags_the_parser_has_are_read_without_a_word() -> None:
    """issue 26 item 20: --trust-remote-code and --api-key turned the verdict into warn (argv-not-checked)."""
    for engine, version in (("vllm", "0.32.0"), ("sglang", "0.5.23")):
        read = read_engine_flags(engine_spec(engine), ("--trust-remote-code", "--api-key", "sk-x"), version)
        assert read.findings == ()


def test_a_release_without_a_table_is_read_against_the_nearest_and_only_warned_about() -> None:
    older = flag_table("vllm", "0.25.0")
    newer = flag_table("vllm", "0.40.1")
    assert older is not None and (older.version, older.exact) == ("0.32.0", False)
    assert newer is not None and (newer.version, newer.exact) == ("0.33.0", False)
    assert flag_table("vllm", None) == VLLM33
    read = read_engine_flags(engine_spec("vllm"), ("--bogus", "1", "--kv-cache-dt", "fp8"), "0.25.0")
    assert [f.code for f in read.findings] == ["argv-not-checked", "argv-not-checked"]
    assert flag_table("no-such-engine", "1.0") is None


def test_vllm_s_pre_pass_runs_before_abbreviations() -> None:
    argv = ("--max_num_se=4", "--compilation.cudagraph_mode", "FULL", "-cc.mode=3", "-O3", "-t", "2", "-qfp8")
    read = engine_argv(argv, VLLM, GRAMMAR)
    assert read.argv == ("--max-num-seqs=4", "--compilation-config.cudagraph_mode", "FULL", "-cc.mode=3", "-O3",
                         "-tp", "2", "-qfp8")
    assert read.unknown == () and read.ambiguous == ()
    options = read_engine_flags(engine_spec("vllm"), argv, "0.32.0").options
    # Two fold keys (--compilation-config and -cc) become two JSON values of one dest: the last wins, as in vLLM.
    assert (options.max_num_seqs, options.tensor_parallel_size, options.cudagraph_mode) == (4, 2, None)
    assert read_engine_flags(engine_spec("vllm"), argv[:3], "0.32.0").options.cudagraph_mode == "FULL"


def test_sglang_has_no_pre_pass_and_everything_after_a_bare_dashdash_is_positional() -> None:
    assert engine_argv(("--tp_size", "2"), SGLANG, PLAIN).unknown == ("--tp_size",)
    assert engine_argv(("--", "--bogus"), SGLANG, PLAIN).unknown == ()
    assert engine_argv(("-5", "a b", "--x y"), SGLANG, PLAIN).unknown == ()  # values, as argparse takes them


def test_vllm_033_s_disable_forms_are_read() -> None:
    options = read_engine_flags(engine_spec("vllm"), ("--disable-prefix-caching",), "0.33.0").options
    assert options.enable_prefix_caching is False
    with pytest.raises(SettingsError, match="has no flag --disable-prefix-caching"):
        read_engine_flags(engine_spec("vllm"), ("--disable-prefix-caching",), "0.32.0")
