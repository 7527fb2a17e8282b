"""SGLang's KV pool used, counted as its own metric counts it; pure.

SGLang's `sglang:token_usage` is the largest of its pools' usage (PoolStatsObserver.get_max_pool_usage):
full-attention tokens held (page-aligned, radix-evictable prefixes free) over the token pool, and for hybrid
models the Mamba slots held over the Mamba pool.
"""

from __future__ import annotations

from dspark.capacity.usage import BlockGroup, KVCounting, KVPool
from dspark.capacity.usage import as_int as _int


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
