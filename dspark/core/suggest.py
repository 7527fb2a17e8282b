"""The known word closest to a mistyped one, for "did you mean" hints (difflib, loaded only on that path)."""

from __future__ import annotations

from collections.abc import Iterable


def closest(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The choice most like `word` (difflib's similarity ratio at least `cutoff`), or None when none is."""
    import difflib  # noqa: PLC0415 - only a mistake needs it: a command given right input never loads it

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return found[0] if found else None
