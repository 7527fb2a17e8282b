"""Counts in words: "1 seat", "2 seats" (never "1 seats")."""

from __future__ import annotations


def counted(n: int, word: str, plural: str | None = None) -> str:
    """`n word` with the word in the singular for exactly one, else its plural (word + "s" unless given)."""
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def seats(n: int) -> str:
    """"1 seat", "12 seats"."""
    return counted(n, "seat")
