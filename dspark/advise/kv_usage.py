"""The KV pool used, counted as the engine's own metric counts it: blocks held by running requests; pure.

vLLM's `vllm:kv_cache_usage_perc` is BlockPool.get_usage(): 1 − free blocks ÷ (num_gpu_blocks − 1), one pool
shared by every KV-cache group, the null block left out. A running request holds, per group
(vllm/v1/core/single_type_kv_cache_manager.py):

- full attention (FullAttentionManager, MLA alike): cdiv(computed + scheduled + lookahead tokens, block_size)
  blocks, kept until the request finishes (KVCacheManager.allocate_slots adds VllmConfig.num_lookahead_tokens,
  the drafter's slots);
- sliding window (SlidingWindowManager): the same, less the whole blocks that fell out of the window
  (get_num_skipped_tokens: computed − window + 1; remove_skipped_blocks nulls them);
- Mamba / GDN state (MambaManager): 1 + num_speculative_blocks in "none" mode (a block of max_model_len tokens
  plus the speculative state slots) and in "align" mode as well (remove_skipped_blocks frees every state block
  before the one holding the last computed token, allocate_new_blocks keeps that one plus the speculative
  blocks; the previous state lingers one step when the state crosses a block boundary).

Blocks whose request finished go back to the free queue (BlockPool.free_blocks), prefix-cached or not: cached
prefixes of finished requests count as free. SGLang's `sglang:token_usage` is the largest of its pools' usage
(PoolStatsObserver.get_max_pool_usage): full-attention tokens held (page-aligned, radix-evictable prefixes
free) over the token pool, and for hybrid models the Mamba slots held over the Mamba pool.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from dspark.capacity import CapacitySummary


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


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def vllm_counting(details: dict[str, object]) -> KVCounting | None:
    """vLLM's BlockPool.get_usage from `validate --json`'s capacity details; None without groups."""
    groups_in = details.get("groups")
    num_blocks = _int(details.get("num_blocks"))
    if not isinstance(groups_in, list) or not groups_in or num_blocks < 2:
        return None
    groups: list[BlockGroup] = []
    parts: list[str] = []
    for g in groups_in:
        if not isinstance(g, dict):
            return None
        kind, block = str(g.get("kind")), _int(g.get("block_size"))
        if kind == "mamba":
            fixed = 1 + _int(g.get("speculative_blocks"))
            groups.append(BlockGroup(block_tokens=0, fixed_blocks=fixed))
            parts.append(f"{fixed} state")
        elif block > 0:
            window = g.get("sliding_window") if kind == "sliding" else None
            groups.append(BlockGroup(block_tokens=block, window=window if isinstance(window, int) else None))
            parts.append(f"cdiv(tokens, {block})" + (f" within a {window}-token window" if kind == "sliding" else ""))
        else:
            return None
    lookahead = _int(details.get("lookahead_tokens"))
    crossing = ""
    if details.get("mamba_cache_mode") == "align" and any(isinstance(g, dict) and g.get("kind") == "mamba"
                                                         for g in groups_in):
        # MambaManager frees the previous state block at the next allocation: while a request's state crosses
        # a block boundary (a few steps per block) it holds one more per state group. Not counted: a sampled
        # peak rarely lands on it.
        crossing = " (one more per state group for the few steps in which its state crosses a block, not counted)"
    usable = num_blocks - 1  # BlockPool keeps block 0 as the null block; get_usage divides by the rest
    rule = (f"KV pool used counted as vLLM's kv_cache_usage_perc (BlockPool.get_usage): blocks held by running "
            f"requests over {usable:,} blocks; per request {' + '.join(parts)}"
            + (f", tokens including {lookahead} lookahead slots" if lookahead else "") + crossing
            + "; prefixes cached by finished requests count as free")
    return KVCounting(metric="vllm:kv_cache_usage_perc",
                      pools=(KVPool("blocks", usable, tuple(groups), lookahead_tokens=lookahead),), rule=rule)


def sglang_counting(details: dict[str, object], pool_tokens: int) -> KVCounting:
    """SGLang's token_usage: max(full-attention tokens over the token pool, Mamba slots over the Mamba pool)."""
    page = max(1, _int(details.get("page_size"), 1))
    # Tokens held are page-aligned (kv_private_tokens: ceil_align(kv_allocated_len, page_size)): count pages.
    pools = [KVPool("pages", pool_tokens // page, (BlockGroup(page),))]
    rule = (f"KV pool used counted as SGLang's token_usage (PoolStatsObserver.get_max_pool_usage): full-attention "
            f"tokens held, in pages of {page}, over {pool_tokens:,} pool tokens")
    mamba = details.get("mamba")
    if isinstance(mamba, dict) and _int(mamba.get("max_mamba_cache_size")) > 0:
        # _calculate_mamba_ratio: 3 slots per running request + the ping-pong tracking slots a running request
        # holds (HybridReqToTokenPool: 2 with overlap scheduling, 1 without or lazy; none without a buffer).
        tracking = max(0, _int(mamba.get("ratio"), 1) - 3)
        size = _int(mamba.get("max_mamba_cache_size"))
        pools.append(KVPool("mamba slots", size, (BlockGroup(0, fixed_blocks=1 + tracking),)))
        rule += (f", or {1 + tracking} Mamba slot(s) per running request over {size:,}, whichever is larger "
                 "(state copies the radix cache keeps for running requests are not counted)")
    return KVCounting(metric="sglang:token_usage", pools=tuple(pools), rule=rule)


def counting_for(capacity: CapacitySummary) -> KVCounting:
    """The engine's counting for this capacity; tokens over pool tokens when its groups are not exported."""
    if capacity.engine == "vllm":
        found = vllm_counting(capacity.details)
        if found is not None:
            return found
    elif capacity.engine == "sglang":
        return sglang_counting(capacity.details, capacity.kv_pool_tokens)
    return token_counting(capacity.kv_pool_tokens)
