"""The validate report off a terminal, without rich: the bytes rich writes there (no colour), for a fifth of the cost.

rich's console and table cost about 95 M instructions to import (a sixth of dspark's import floor), and off a
terminal they write plain text: the markup's tags dropped, a table's cells wrapped and padded. This draws that
text for what the report holds: rich's markup as plain text (markup_text), and rich's `Table(show_header=False,
box=None, pad_edge=False)` at a width (table_lines: rich's column measuring, collapsing and word wrapping). Each
answers None for what it does not draw exactly as rich would (a tag rich would refuse or act on, a control
character, a cell character whose width needs rich's Unicode tables), and the caller then draws with rich;
tests/commands/test_plain_text.py compares both with rich over generated rows and widths.
"""

from __future__ import annotations

import builtins
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import IO

# Characters one cell wide in every rich release (its single-cell ranges), plus the symbols dspark's own rows use.
# A table cell holding any other character is drawn by rich, which measures it with its Unicode tables.
_ONE_CELL = frozenset(
    [chr(c) for lo, hi in ((0x20, 0x7E), (0xA0, 0xAC), (0xAE, 0x2FF), (0x370, 0x482)) for c in range(lo, hi + 1)]
    + ["≤", "≥", "…", "—", "–", "→", "±", "≈"]
)
# What rich's Text removes (bell, backspace, vertical tab, form feed, carriage return) or expands (tab): a string
# holding one is drawn by rich.
_REWRITTEN = frozenset("\x07\x08\x0b\x0c\r\t")
_ELLIPSIS = "…"


def draws_plain(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether rich's console on `stream` would write no colour and no terminal codes: not a terminal, no
    FORCE_COLOR or TTY_COMPATIBLE=1 asking for them, not Windows' console, not a Jupyter kernel, not a stream
    rich's live display stands in for."""
    env = os.environ if environ is None else environ
    if sys.platform == "win32" or hasattr(builtins, "get_ipython"):
        return False
    if env.get("FORCE_COLOR") or env.get("TTY_COMPATIBLE") == "1" or hasattr(stream, "rich_proxied_file"):
        return False
    try:
        return not stream.isatty()
    except ValueError:  # a closed stream: rich decides
        return False


_tags: re.Pattern[str] | None = None


def markup_text(markup: str) -> str | None:
    """The text rich prints for `markup` (its console markup, emoji off): tags dropped, escaped brackets kept;
    None where rich would refuse the markup, act on a tag (@ handlers) or rewrite a character."""
    global _tags  # noqa: PLW0603 - compiled on first use: most lines hold no tag
    if _REWRITTEN.intersection(markup):
        return None
    if "[" not in markup:
        return markup
    if _tags is None:
        _tags = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")  # rich.markup.RE_TAGS
    out: list[str] = []
    opened: list[str] = []  # the open tags, innermost last
    position = 0
    for match in _tags.finditer(markup):
        full_text, escapes, tag_text = match.groups()
        start, end = match.span()
        if start > position:
            out.append(markup[position:start].replace("\\[", "["))
        position = end
        if escapes:
            backslashes, escaped = divmod(len(escapes), 2)
            out.append("\\" * backslashes)
            if escaped:
                out.append(full_text[len(escapes):].replace("\\[", "["))
                continue
        name = tag_text.partition("=")[0]
        if name.startswith("@"):
            return None
        if not name.startswith("/"):
            opened.append(name)
        elif name[1:].strip() or not opened:
            # A named closing tag: rich matches it by its parsed style, which this does not parse; a bare one
            # with nothing open: rich refuses the markup.
            return None
        else:
            opened.pop()
    if position < len(markup):
        out.append(markup[position:].replace("\\[", "["))
    return "".join(out)


def unmarked_text(text: str) -> str | None:
    """The text rich prints for `text` printed with markup off: itself, or None where rich would rewrite it."""
    return None if _REWRITTEN.intersection(text) else text


def _normal(low: int, high: int) -> tuple[int, int]:
    """rich's Measurement.normalize."""
    low = min(max(0, low), high)
    return max(0, low), max(0, low, high)


def _measure(text: str, max_width: int, left: int, right: int) -> tuple[int, int]:
    """rich's Measurement.get of a str cell inside its Padding (left, right) at max_width."""
    if max_width < 1:
        return 0, 0
    if max_width - left - right < 1:
        low, high = max_width, max_width
    else:
        words = text.split()  # the text's own measurement (rich's Text.__rich_measure__, one line)
        high = len(text)
        low = max(map(len, words)) if words else high
        low, high = _normal(low, high)
        low, high = min(low, max_width), min(high, max_width)
        if high < 1:
            low, high = 0, 0
        else:
            low, high = _normal(low, high)
        low, high = min(low + left + right, max_width), min(high + left + right, max_width)
    low, high = _normal(low, high)
    low, high = min(low, max_width), min(high, max_width)
    return (0, 0) if high < 1 else _normal(low, high)


def _column_width(cells: Sequence[str], max_width: int, left: int, right: int) -> int:
    """The maximum of rich's Table._measure_column (no fixed width, no minimum or maximum)."""
    if max_width < 1:
        return 0
    highs = [_measure(cell, max_width, left, right)[1] for cell in cells]
    return min(max(highs) if highs else max_width, max_width)


def _ratio_reduce(total: int, ratios: list[int], maximums: list[int], values: list[int]) -> list[int]:
    """rich._ratio.ratio_reduce."""
    ratios = [ratio if most else 0 for ratio, most in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    result = []
    for ratio, most, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            distributed = min(most, round(ratio * remaining / total_ratio))
            result.append(value - distributed)
            remaining -= distributed
            total_ratio -= ratio
        else:
            result.append(value)
    return result


def _collapse(widths: list[int], max_width: int) -> list[int]:
    """rich's Table._collapse_widths, every column wrapable."""
    total = sum(widths)
    excess = total - max_width
    while total and excess > 0:
        widest = max(widths)
        second = max(w if w != widest else 0 for w in widths)
        ratios = [1 if w == widest else 0 for w in widths]
        if not widest - second:
            break
        widths = _ratio_reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        total = sum(widths)
        excess = total - max_width
    return widths


_word: re.Pattern[str] | None = None


def _wrap(text: str, width: int) -> list[str]:
    """rich's Text.wrap of one line at `width`: justify left, overflow ellipsis (a table column's defaults)."""
    global _word  # noqa: PLW0603 - compiled on first use: most cells fit
    breaks: list[int] = []
    if len(text) > width:  # rich.divide_line, fold=False
        if _word is None:
            _word = re.compile(r"\s*\S+\s*")  # rich._wrap.re_word
        offset = 0
        match = _word.match(text, 0)
        while match is not None:
            start, end = match.span()
            word = match.group(0)
            length = len(word.rstrip())
            if width - offset >= length:
                offset += len(word)
            elif length > width or (offset and start):
                if start:
                    breaks.append(start)
                offset = len(word)
            match = _word.match(text, end)
    lines = []
    for a, b in zip([0, *breaks], [*breaks, len(text)], strict=True):
        line = text[a:b]
        if len(line) > width:  # rich's Text.rstrip_end
            trailing = len(line) - len(line.rstrip())
            line = line[: len(line) - min(trailing, len(line) - width)] if trailing else line
        if len(line) > width:  # rich's Text.truncate, overflow ellipsis, then padded to the width
            line = line[: width - 1] + _ELLIPSIS
        lines.append(line + " " * (width - len(line)))
    return lines


def table_lines(rows: Sequence[Sequence[str]], width: int) -> list[str] | None:
    """The lines rich's `Table(show_header=False, box=None, pad_edge=False)` holding `rows` (each cell's markup)
    prints at `width` off a terminal; None where rich would draw it differently (see the module docstring)."""
    if not rows or width < 1 or len({len(row) for row in rows}) != 1 or not rows[0]:
        return None
    cells: list[list[str]] = []
    for marked in rows:
        texts = [markup_text(cell) for cell in marked]
        plain = [text for text in texts if text is not None and _ONE_CELL.issuperset(text)]
        if len(plain) != len(texts):
            return None
        cells.append(plain)
    count = len(cells[0])
    pads = [(0 if i == 0 else 1, 0 if i == count - 1 else 1) for i in range(count)]
    columns = [[row[i] for row in cells] for i in range(count)]
    widths = [_column_width(col, width, *pad) or 1 for col, pad in zip(columns, pads, strict=True)]
    if sum(widths) > width:
        widths = _collapse(widths, width)
        if sum(widths) > width:
            widths = _ratio_reduce(sum(widths) - width, [1] * count, widths, widths)
        widths = [_column_width(col, w, *pad) for w, col, pad in zip(widths, columns, pads, strict=True)]
    out = []
    for row in cells:
        drawn = []
        for cell, w, (left, right) in zip(row, widths, pads, strict=True):
            inner = w - left - right
            drawn.append([" " * left + line + " " * right for line in _wrap(cell, inner)] if inner >= 1 else [])
        height = max(1, *map(len, drawn))
        for n in range(height):
            out.append("".join(lines[n] if n < len(lines) else " " * w
                               for lines, w in zip(drawn, widths, strict=True)))
    return out
