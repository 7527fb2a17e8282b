"""A tensor-parallel size checked against the model as an engine checks it at start (generic part). Pure.

Each engine's package states its own rules (dspark/engines/<engine>/parallel.py): a function from the architecture
and a TP size to the engine's refusals, in its words. This module turns them into a `fail` finding with the
nearest TP size that passes, so that a size the engine refuses at start is never planned as `ok`.
"""

from __future__ import annotations

from collections.abc import Callable

from dspark.core.findings import Finding

Rules = Callable[[int], list[str]]  # TP size -> the engine's refusals (empty: it starts)
LARGEST_TP = 1024  # dspark's own bound on --tp


def nearest_valid(tp: int, rules: Rules, *, limit: int = LARGEST_TP) -> tuple[int, ...]:
    """The TP sizes nearest to `tp` that pass (the smaller first, both when two are as near); () when none does."""
    for distance in range(1, limit):
        found = tuple(size for size in (tp - distance, tp + distance) if 1 <= size <= limit and not rules(size))
        if found:
            return found
    return ()


def parallel_finding(engine: str, tp: int, rules: Rules) -> Finding | None:
    """A `fail` finding (code tp-does-not-divide) when `engine` refuses `tp` for this model; None when it starts."""
    problems = rules(tp)
    if not problems:
        return None
    nearest = nearest_valid(tp, rules)
    fix = (" or ".join(f"--tp {size}" for size in nearest) + " would pass this check"
           if nearest else "no tensor-parallel size passes this check")
    return Finding("fail", "tp-does-not-divide",
                   f"{engine} refuses tensor-parallel size {tp} for this model at start: {'; '.join(problems)}; {fix}")
