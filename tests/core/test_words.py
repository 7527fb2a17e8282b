"""dspark.core.words: counts in words."""

from __future__ import annotations

from dspark.core.words import counted, seats


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert seats(1) == "1 seat"
    for n in (0, 2, 7, 1000):
        assert seats(n) == f"{n} seats"
    assert counted(1, "request") == "1 request" and counted(3, "replica") == "3 replicas"
    assert counted(2, "child", "children") == "2 children"
