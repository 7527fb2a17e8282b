"""The validate report drawn without rich off a terminal is what rich draws there: markup and tables compared
with rich itself over generated input, and every shipped recipe's report on every built-in profile."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Iterator

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.errors import MarkupError
from rich.table import Table

from dspark.cli import main
from dspark.commands import plain_text, validate
from dspark.commands.plain_text import draws_plain, markup_text, table_lines, unmarked_text
from dspark.config.recipes import shipped_recipe_names


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k in ("MAX_NUM_SEQS", "COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")
                 or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    yield


def _console(width: int) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, soft_wrap=True, width=width, emoji=False), out


def _rich_table(rows: list[list[str]], width: int) -> list[str]:
    console, out = _console(width)
    table = Table(show_header=False, box=None, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return out.getvalue().split("\n")[:-1]


def _rich_markup(markup: str) -> str | None:
    console, out = _console(120)
    try:
        console.print(markup)
    except MarkupError:
        return None
    return out.getvalue().removesuffix("\n")


_WORDS = ["a", "bb", "KV", "cache", "262,144", "≤", "·", "—", "é", "x" * 30, "y" * 95, "", "[1, 2]", "(per GPU)",
          "\u00a0", "2.00x", "[bold]b[/]", "\\[dim]", "[dim]", "tokens;", "z" * 140]
_SEPARATORS = [" ", "  ", "", " · ", "\u00a0"]


def _cell(rng: random.Random) -> str:
    parts = [rng.choice(_WORDS) for _ in range(rng.choice([0, 1, 1, 2, 3, 5, 12, 25]))]
    text = "".join(p + rng.choice(_SEPARATORS) for p in parts)
    return text if rng.random() < 0.8 else f" {text} "


def test_tables_are_drawn_as_rich_draws_them() -> None:
    rng = random.Random(24)  # noqa: S311 - reproducible test input, no secret
    drawn = 0
    for case in range(1500):
        columns = rng.choice([1, 2, 2, 2, 3])
        rows = [[_cell(rng) for _ in range(columns)] for _ in range(rng.randint(1, 9))]
        width = rng.choice([1, 2, 3, 5, 8, 20, 40, 80, 120, 120, 200, rng.randint(1, 160)])
        mine = table_lines(rows, width)
        if mine is not None:
            drawn += 1
            assert mine == _rich_table(rows, width), (case, rows, width)
    assert drawn > 1000  # the generated cells are mostly ones it draws itself


def test_markup_is_read_as_rich_reads_it() -> None:
    tokens = ["[bold]", "[/]", "[/bold]", "[dim]", "[yellow]", "\\[bold]", "\\\\[bold]", "\\\\\\[dim]", "[@click]",
              "[1]", "[a b]", "text", " ", "[", "]", "\\", "[link=https://x]", "[#ff0000]", "[not a style]", "·", "=",
              "[/link]", "[red on blue]", "x[y", "[/ ]"]
    rng = random.Random(7)  # noqa: S311 - reproducible test input, no secret
    same = 0
    for case in range(3000):
        markup = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 9)))
        mine, theirs = markup_text(markup), _rich_markup(markup)
        if theirs is None:
            assert mine is None, (case, markup)  # rich refuses it: rich must be the one to say so
        elif mine is not None:
            same += 1
            assert mine == theirs, (case, markup)
    assert same > 1500


@pytest.mark.parametrize("text", ["a\tb", "a\rb", "bell\x07", "\x08", "\x0b", "\x0c"])
def test_characters_rich_rewrites_are_left_to_rich(text: str) -> None:
    console, out = _console(120)
    console.print(text, markup=False)
    assert out.getvalue() != text + "\n"  # rich does rewrite it
    assert markup_text(text) is None and unmarked_text(text) is None
    assert table_lines([["k", text]], 120) is None
    assert unmarked_text("plain · text\nover lines") == "plain · text\nover lines"


def test_cells_wider_than_one_cell_are_left_to_rich() -> None:
    assert all(cell_len(ch) == 1 for ch in plain_text._ONE_CELL)
    for wide in ("模型", "😀", "e\u0301", "\x1b[1m"):
        assert table_lines([["k", wide]], 120) is None


def test_plain_only_where_rich_writes_no_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert draws_plain(io.StringIO(), {}) is True
    assert draws_plain(_Terminal(), {}) is False
    assert draws_plain(io.StringIO(), {"FORCE_COLOR": "1"}) is False
    assert draws_plain(io.StringIO(), {"TTY_COMPATIBLE": "1"}) is False
    assert draws_plain(io.StringIO(), {"FORCE_COLOR": ""}) is True  # rich: an empty FORCE_COLOR forces nothing
    closed = io.StringIO()
    closed.close()
    assert draws_plain(closed, {}) is False
    monkeypatch.setattr("builtins.get_ipython", lambda: None, raising=False)
    assert draws_plain(io.StringIO(), {}) is False


@pytest.mark.parametrize("recipe", shipped_recipe_names())
def test_every_shipped_report_is_drawn_without_rich_as_rich_draws_it(
    recipe: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = validate.plain_report
    for hardware in ("gb10", "gb10x2", "rtx5090", "h100-80gb", "h200", "h200:8", "b200"):  # the snapshot's
        for columns in ("120", "80"):
            monkeypatch.setenv("COLUMNS", columns)
            drawn: list[str | None] = []

            def spy(*args: object, drawn: list[str | None] = drawn, **kwargs: object) -> str | None:
                drawn.append(real(*args, **kwargs))  # type: ignore[arg-type]
                return drawn[-1]

            monkeypatch.setattr(validate, "plain_report", spy)
            code = main(["validate", recipe, "--hardware", hardware])
            plain = capsys.readouterr().out
            assert drawn and drawn[0] is not None, (recipe, hardware)  # drawn without rich
            monkeypatch.setattr(validate, "plain_report", lambda *_a, **_k: None)
            assert main(["validate", recipe, "--hardware", hardware]) == code
            assert capsys.readouterr().out == plain, (recipe, hardware, columns)
