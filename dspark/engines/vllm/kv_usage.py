"""vLLM's KV pool used, counted as its own metric counts it: blocks held by running requests; pure.

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
prefixes of finished requests count as free.
"""

from __future__ import annotations

from dspark.capacity.usage import BlockGroup, KVCounting, KVPool
from dspark.capacity.usage import as_int as _int


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
