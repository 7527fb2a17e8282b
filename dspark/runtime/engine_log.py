"""What dspark reads in an engine's start-up log: its KV pool and its own account of its arguments. Pure.

Each engine states them in its own words; its EngineSpec gives the LogFormat (dspark/engines/<engine>/logs.py),
and the supervisor reads every line of a started engine with the format of the plan's engine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KvPoolLine:
    """The engine's own statement of its KV pool (and, where it prints them, the window and its concurrency)."""

    pool_tokens: int
    max_model_len: int | None = None
    max_concurrency: float | None = None


def _no_args(_line: str) -> dict[str, object] | None:
    return None


def _no_terms(_line: str) -> Mapping[str, float] | None:
    return None


@dataclass(frozen=True)
class LogFormat:
    """One engine's start-up lines: the KV-pool line, the arguments line and its own memory accounting.

    kv_pool_pattern: a regex; group 1 is the pool in tokens, optional groups 2 and 3 the window and the
    concurrency (digits with thousands separators). engine_args: the arguments line's values by dest name, or
    None for any other line. memory_terms: the memory figures a line states, by dspark's name for each term
    (`weights_gib`, `available_kv_gib`, ...: as printed, in the engine's unit), or None. The empty pattern reads
    no pool (a child that is no engine).
    """

    kv_pool_pattern: str = ""
    engine_args: Callable[[str], dict[str, object] | None] = _no_args
    memory_terms: Callable[[str], Mapping[str, float] | None] = _no_terms
    _compiled: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.kv_pool_pattern) if self.kv_pool_pattern else None)

    def kv_pool(self, line: str) -> KvPoolLine | None:
        """The KV pool the line states, or None."""
        m = self._compiled.search(line) if self._compiled is not None else None
        if m is None:
            return None
        groups = [g.replace(",", "") if g else None for g in m.groups()] + [None, None]
        return KvPoolLine(
            pool_tokens=int(groups[0] or 0),
            max_model_len=int(groups[1]) if groups[1] else None,
            max_concurrency=float(groups[2]) if groups[2] else None,
        )


NO_LOG_FORMAT = LogFormat()  # a child that is no engine: its lines are kept, none is parsed
