"""The KV pool used, counted as an engine's own usage metric counts it: pools, the groups that draw on them, and
what one running request holds in each (pure; each engine package builds its counting from its capacity figures:
dspark/engines/<engine>/kv_usage.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class BlockGroup:
    """What one running request holds in one group: context blocks (windowed or not) plus fixed state blocks."""

    block_tokens: int  # tokens per context block; 0 when the group holds no per-token blocks (Mamba state)
    fixed_blocks: int = 0  # blocks held whatever the context: state, speculative state slots
    window: int | None = None  # sliding window: blocks wholly before the last `window` tokens are freed

    def blocks(self, tokens: float) -> int:
        """Blocks a request with `tokens` slots allocated (computed + scheduled + lookahead) holds."""
        if tokens <= 0:
            return 0
        held = self.fixed_blocks
        if self.block_tokens > 0:
            held += math.ceil(tokens / self.block_tokens - 1e-9)
            if self.window is not None:
                held -= max(0, math.floor(tokens) - self.window + 1) // self.block_tokens
        return held


@dataclass(frozen=True)
class KVPool:
    """One pool the engine divides by: its size in blocks (or slots) and the groups that draw from it."""

    name: str
    size: int
    groups: tuple[BlockGroup, ...]
    lookahead_tokens: int = 0  # slots reserved past the scheduled tokens (the drafter's KV)

    def held(self, allocated_tokens: Iterable[float]) -> int:
        """Blocks held by running requests with these allocated token counts (lookahead added here)."""
        return sum(g.blocks(t + self.lookahead_tokens) for t in allocated_tokens if t > 0 for g in self.groups)


@dataclass(frozen=True)
class KVCounting:
    """How an engine's KV-usage metric counts; usage() is the largest pool's fraction, as both engines report."""

    metric: str
    pools: tuple[KVPool, ...]
    rule: str  # one sentence for the output's assumptions

    def usage(self, allocated_tokens: Iterable[float]) -> float:
        """The metric for running requests with these allocated token counts."""
        tokens = [t for t in allocated_tokens if t > 0]
        return max((p.held(tokens) / p.size if p.size > 0 else math.inf) for p in self.pools)

    def per_request(self, tokens: float) -> dict[str, int]:
        """Blocks (or slots) one request with `tokens` allocated holds, per pool."""
        return {p.name: p.held([tokens]) for p in self.pools}


def token_counting(pool_tokens: int, metric: str = "tokens held / pool tokens") -> KVCounting:
    """Tokens held over pool tokens: the fallback when the engine's block groups are not known."""
    return KVCounting(metric=metric, pools=(KVPool("tokens", pool_tokens, (BlockGroup(1),)),),
                      rule=f"KV pool used = tokens held by seated requests / {pool_tokens:,} pool tokens")


def as_int(value: object, default: int = 0) -> int:
    """An int read from JSON details; `default` for anything else (bools included)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default
