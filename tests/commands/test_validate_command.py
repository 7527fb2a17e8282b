"""`dspark validate` through the real CLI: what the table and the JSON say, and that each sentence follows from
the numbers it quotes."""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.highlighter import NullHighlighter, ReprHighlighter

from dspark.cli import main
from dspark.commands.validate import make_console

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    yield


def _model(tmp_path: Path, config: str) -> str:
    (tmp_path / "config.json").write_text((CONFIGS / config).read_text())
    return str(tmp_path)


# --- issue 16 item 7: a sliding-window model's bytes per token ---------------------------------------------

def test_sliding_window_model_reports_what_a_token_costs_inside_the_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Mistral-7B-v0.1: every one of its 32 layers slides over 4,096 tokens; 8 KV heads x 128, bf16. A token inside
    # the window costs 32 x 2 (K and V) x 8 x 128 x 2 B = 131,072 B; past the window it costs nothing more.
    argv = ["validate", "--model", _model(tmp_path, "mistral-7b-v0.1.json"), "--engine", "vllm", "--hardware", "h200"]
    main(argv)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("KV bytes per token"))
    assert "131,072 inside the 4,096-token sliding window" in row
    assert "0 past it" in row
    main([*argv, "--json"])
    cap = json.loads(capsys.readouterr().out)["capacity"]
    assert cap["kv_bytes_per_token"] == 0  # no layer grows with the whole context
    assert cap["kv_bytes_per_token_in_window"] == 32 * 2 * 8 * 128 * 2 == 131_072
    assert cap["sliding_window"] == 4096


def test_full_attention_model_has_no_window_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Llama-3-8B: 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B per token of context, no sliding window.
    main(["validate", "--model", _model(tmp_path, "llama-3-8b-instruct.json"), "--engine", "vllm", "--hardware",
          "h200", "--json"])
    cap = json.loads(capsys.readouterr().out)["capacity"]
    assert cap["kv_bytes_per_token"] == 131_072
    assert cap["kv_bytes_per_token_in_window"] is None and cap["sliding_window"] is None


# --- issue 16 item 6: predicted and observed side by side, labelled ------------------------------------------

def test_table_shows_predicted_and_observed_pools_labelled(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", "flash-next-sglang", "--hardware", "gb10x2", "--json"])
    cap = json.loads(capsys.readouterr().out)["capacity"]
    main(["validate", "flash-next-sglang", "--hardware", "gb10x2"])
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in capsys.readouterr().out.splitlines()
                if re.search(r"\S\s{2,}\S", line))
    assert rows["KV cache size"] == f"{cap['kv_pool_tokens']:,} tokens predicted · 1,482,304 observed"
    assert rows["Maximum concurrency"] == (f"{cap['max_concurrency']:.2f}x predicted · 5.65x observed for 262,144 "
                                           "tokens per request")  # 1,482,304 / 262,144 = 5.65
    assert rows["safe seats (full windows)"] == (
        f"5 (the lower of predicted {cap['observed']['predicted_safe_max_num_seqs']} and observed 5)")
    assert rows["average context at 16 seats"].endswith("≤ 92,644 observed")  # 1,482,304 // 16
    assert cap["observed"]["kv_pool_tokens"] == 1_482_304 and cap["safe_max_num_seqs"] == 5


def test_the_table_highlights_numbers_only_where_colour_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # Off a terminal no colour is written, so the highlighter's regexes are skipped; forced colour keeps them.
    for name in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(make_console(io.StringIO()).highlighter, NullHighlighter)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert isinstance(make_console(io.StringIO()).highlighter, ReprHighlighter)


# --- issue 26 item 24: piped output respects COLUMNS ----------------------------------------------------------

def test_piped_table_follows_columns_and_defaults_to_120(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from dspark.commands.validate import PIPE_WIDTH, output_width  # noqa: PLC0415

    assert PIPE_WIDTH == 120
    for columns, width in (("90", 90), ("abc", 120), ("0", 120), ("", 120), (" 100 ", 100)):
        assert output_width(io.StringIO(), {"COLUMNS": columns}) == width
    assert output_width(io.StringIO(), {}) == 120

    class _Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert output_width(_Terminal(), {"COLUMNS": "90"}) is None  # a terminal: rich reads its size (and COLUMNS)
    # The widest table (predicted · observed pools, ~100 columns) is laid out within COLUMNS=80 when piped.
    monkeypatch.setenv("COLUMNS", "80")
    main(["validate", "flash-next-sglang", "--hardware", "gb10x2"])
    out = capsys.readouterr().out.splitlines()
    table = [line for line in out if re.match(r"^\S.*\S\s{2,}\S", line) and not line.startswith(("info", "warn"))]
    assert table and max(len(line.rstrip()) for line in table) <= 80
    monkeypatch.delenv("COLUMNS")
    main(["validate", "flash-next-sglang", "--hardware", "gb10x2"])
    wide = capsys.readouterr().out.splitlines()
    assert any(line.startswith("Maximum concurrency") and "tokens per request" in line for line in wide)
