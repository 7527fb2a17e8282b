"""DeepSeek-V4's KV cache on vLLM 0.32.0 and 0.33.0 on CUDA: its caches, groups and pool (pure).

Each decoder layer of DeepseekV4ForCausalLM registers up to five caches, in this order
(vllm/models/deepseek_v4/attention.py DeepseekV4Attention.__init__):
  ratio-4 layers: the indexer's key cache (DeepseekV4IndexerCache, an MLAAttentionSpec with
    tokens_per_state 4) and the indexer compressor's state (CompressorStateCache);
  every layer: the raw sliding window (DeepseekV4SWACache, a SlidingWindowMLASpec of block 64);
  ratio-4/128 layers: the compressed rows (DeepseekV4Attention.get_kv_cache_spec, an
    MLAAttentionSpec with tokens_per_state = ratio) and the compressor's state (CompressorStateCache,
    a SlidingWindowMLASpec of block 4 / 8 and window 8 / 128).
MTP layers sit past num_hidden_layers and keep only their window. Every CUDA attention class the
model picks (_select_dsv4_attn_cls: FlashMLA, or FlashInfer-SM120 on SM12x) stores the fp8_ds_mla
layout: 584 bytes per row (448 fp8 NoPE + 128 RoPE + 8 scale bytes), pages rounded up to 576 bytes.
The pages differ in size, so the planner packs them block-outermost
(kv_cache_utils._get_packed_kv_cache_groups in 0.32.0, kv_cache_planning in 0.33.0): one block id
holds a page of every layer of its group side by side, and every group draws from one pool.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from dspark.engines.vllm.deepseek_v4_detect import (
    BLOCK_SIZE,
    DeepseekV4NotModelledError,
    is_deepseek_v4,
    kv_cache_dtype,
)
from dspark.model.architecture import MLALayer, ModelArchitecture

# Releases whose DeepSeek-V4 specs and packing were read and checked against their planner.
# 0.33.0 reads the ratios through transformers' DeepseekV4Config (layer_types + compress_rates) and
# plans in kv_cache_planning.py; the specs, the packing and the figures are those of 0.32.0.
MODELLED_VERSIONS = ("0.32.0", "0.33.0")

SWA_BLOCK_SIZE = 64  # DeepseekV4SWACache default block_size
FP8_DS_MLA_ROW_BYTES = 584  # state_content_bytes of the fp8_ds_mla layout
FP8_DS_MLA_ALIGNMENT = 576  # alignment of fp8_ds_mla pages (FlashMLA packing stride)
STATE_DTYPE_BYTES = 4  # CompressorStateCache: float32 kv + score state
INDEXER_QUANT_BLOCK = 128  # DeepseekV4Indexer: one fp32 scale per 128 fp8 key elements

Role = Literal["window", "compressed", "indexer", "state"]


@dataclass(frozen=True)
class V4Spec:
    """One cache the engine registers: the fields its KVCacheSpec groups and sizes by."""

    name: str
    role: Role
    sliding: bool  # SlidingWindowMLASpec (window, compressor state) vs MLAAttentionSpec
    block_size: int  # tokens per block
    page_bytes: int  # page_size_bytes, alignment padding included
    sliding_window: int | None = None
    extra_retained_tokens: int = 0

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """cdiv(max_memory_usage_bytes, page): a window holds its window plus in-flight tokens, +1."""
        if self.sliding and self.sliding_window is not None:
            tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens, max_model_len)
            return -(-tokens // self.block_size) + 1
        return -(-max_model_len // self.block_size)

    def uniform_key(self) -> tuple[object, ...]:
        """UniformTypeKVCacheSpecs.is_uniform_type: same block size and the same registry type."""
        if self.sliding:
            return ("sliding_mla", self.block_size, self.sliding_window)
        return ("full", self.block_size)


@dataclass(frozen=True)
class V4Group:
    """One KV-cache group: its layers' pages sit side by side in every block id it holds."""

    specs: tuple[V4Spec, ...]

    @property
    def layers(self) -> tuple[str, ...]:
        """Layer names in the group's order."""
        return tuple(s.name for s in self.specs)

    @property
    def bytes_per_block(self) -> int:
        """Bytes of one block id in this group: the sum of its layers' pages."""
        return sum(s.page_bytes for s in self.specs)

    @property
    def block_size(self) -> int:
        """Tokens per block (one per group: the planner buckets by block size)."""
        return self.specs[0].block_size

    @property
    def sliding(self) -> bool:
        """True for window / compressor-state groups, whose blocks are recycled."""
        return self.specs[0].sliding

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """UniformTypeKVCacheSpecs.max_memory_usage_pages: the most blocks any of its layers needs."""
        return max(s.blocks_per_request(max_model_len, max_in_flight_tokens) for s in self.specs)


@dataclass(frozen=True)
class V4Plan:
    """The planner's figures for one budget: groups, block bytes, num_blocks, concurrency, pool."""

    engine_version: str
    groups: tuple[V4Group, ...]
    bytes_per_block: int
    num_blocks: int  # num_gpu_blocks, the null block included
    blocks_per_request: int  # summed over groups, one request at max_model_len
    max_concurrency: float
    kv_pool_tokens: int
    needed_bytes: int  # one max-length request: bytes_per_block x blocks_per_request


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _page(states: int, row_bytes: int, alignment: int) -> int:
    """page_size_bytes with _apply_alignment_padding: states x row bytes, rounded up to the alignment."""
    return _round_up(states * row_bytes, alignment)


def check_version(engine_version: str) -> None:
    """Refuse a release whose DeepSeek-V4 accounting was not read (the planner changes between releases)."""
    if engine_version not in MODELLED_VERSIONS:
        raise DeepseekV4NotModelledError(
            f"DeepSeek-V4 on vLLM {engine_version}: only {', '.join(MODELLED_VERSIONS)} are modelled",
            hint=f"plan for vLLM {' or '.join(MODELLED_VERSIONS)}",
        )


def layer_specs(
    arch: ModelArchitecture, *, engine_version: str, drafting_mtp_layers: int = 0, extra_retained_tokens: int = 0
) -> tuple[V4Spec, ...]:
    """Every cache of the model in registration order (main layers, then the MTP layers that draft)."""
    check_version(engine_version)
    window_row = FP8_DS_MLA_ROW_BYTES
    specs: list[V4Spec] = []
    layers = list(arch.layers) + list(arch.mtp_layers[:drafting_mtp_layers])
    for index, layer in enumerate(layers):
        if not isinstance(layer, MLALayer) or layer.sliding_window is None:
            raise DeepseekV4NotModelledError(f"layer {index} is not a DeepSeek-V4 attention layer")
        prefix = f"model.layers.{index}.attn"
        # DeepseekV4Attention: layers past num_hidden_layers (MTP) keep their window only.
        ratio = layer.compress_ratio if index < arch.num_layers else 0
        if ratio == 4:
            index_dim = layer.index_head_dim or 0
            key_bytes = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4  # fp8 keys + fp32 scales
            specs.append(
                V4Spec(f"{prefix}.indexer.k_cache", "indexer", False, BLOCK_SIZE,
                       _page(BLOCK_SIZE // ratio, key_bytes, FP8_DS_MLA_ALIGNMENT))
            )
            specs.append(_state_spec(f"{prefix}.indexer.compressor.state_cache", ratio, index_dim))
        specs.append(
            V4Spec(f"{prefix}.swa_cache", "window", True, SWA_BLOCK_SIZE,
                   _page(SWA_BLOCK_SIZE, window_row, FP8_DS_MLA_ALIGNMENT), layer.sliding_window)
        )
        if ratio > 1:
            specs.append(
                V4Spec(prefix, "compressed", False, BLOCK_SIZE,
                       _page(BLOCK_SIZE // ratio, window_row, FP8_DS_MLA_ALIGNMENT))
            )
            specs.append(_state_spec(f"{prefix}.compressor.state_cache", ratio, layer.latent_dim))
    # get_kv_cache_configs: every SlidingWindowSpec retains num_prefill_lookahead_tokens - 1 more.
    return tuple(replace(s, extra_retained_tokens=extra_retained_tokens) if s.sliding else s for s in specs)


def _state_spec(name: str, ratio: int, head_dim: int) -> V4Spec:
    """CompressorStateCache: fp32 kv + score state of 2 x coff x head_dim, block 4 (ratio 4) or 8 (128)."""
    coff = 2 if ratio == 4 else 1  # ratio-4 compressors overlap two windows
    block = 4 if ratio == 4 else 8
    row = 2 * coff * head_dim * STATE_DTYPE_BYTES
    return V4Spec(name, "state", True, block, _page(block, row, FP8_DS_MLA_ALIGNMENT), coff * ratio)


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """_approximate_gcd: the chunk size in [lower_bound, max] with the least upward padding (ties: larger)."""
    low = max(1, lower_bound)
    high = max(values)
    if low > high:
        return low
    best, best_pad = low, None
    for d in range(low, high + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = d, pad
    return best


@dataclass(frozen=True)
class _Bucket:
    specs: tuple[V4Spec, ...]

    @property
    def by_page(self) -> dict[int, list[V4Spec]]:
        out: dict[int, list[V4Spec]] = {}
        for s in self.specs:
            out.setdefault(s.page_bytes, []).append(s)
        return out

    @property
    def balanced(self) -> bool:
        return len({len(v) for v in self.by_page.values()}) == 1

    @property
    def max_layers_per_page(self) -> int:
        return Counter(s.page_bytes for s in self.specs).most_common(1)[0][1]


def _buckets(specs: Sequence[V4Spec]) -> list[_Bucket]:
    """Greedy buckets in registration order: a layer joins the first bucket it is uniform-type with."""
    keys: list[tuple[object, ...]] = []
    members: list[list[V4Spec]] = []
    for s in specs:
        key = s.uniform_key()
        if key in keys:
            members[keys.index(key)].append(s)
        else:
            keys.append(key)
            members.append([s])
    return [_Bucket(tuple(m)) for m in members]


def pack_groups(specs: Sequence[V4Spec]) -> tuple[V4Group, ...]:
    """get_kv_cache_groups for these specs: one group when uniform, else the block-outermost packing."""
    if len({(s.sliding, s.block_size, s.page_bytes, s.sliding_window) for s in specs}) == 1:
        return (V4Group(tuple(specs)),)  # _get_kv_cache_groups_uniform_spec (all equal)
    if len({s.uniform_key() for s in specs}) == 1:
        return (V4Group(tuple(specs)),)  # UniformTypeKVCacheSpecs: one group
    if len({s.page_bytes for s in specs}) == 1:
        raise DeepseekV4NotModelledError("DeepSeek-V4 caches of one page size but several types: not modelled")
    buckets = _buckets(specs)
    mixed_balanced = [b.max_layers_per_page for b in buckets if b.balanced and len(b.by_page) > 1]
    floor = max(mixed_balanced, default=0)
    repeats = approximate_gcd([b.max_layers_per_page for b in buckets if b.balanced], floor) if floor else None

    def groups_for(bucket: _Bucket) -> int:
        return -(-bucket.max_layers_per_page // repeats) if bucket.balanced and repeats is not None else 1

    def is_state(bucket: _Bucket) -> bool:
        return repeats is None and bucket.specs[0].sliding

    def widest(bucket: _Bucket, n: int) -> int:
        return sum(-(-len(v) // n) * page for page, v in bucket.by_page.items())

    anchor = max((widest(b, len(b.specs) if is_state(b) else groups_for(b)) for b in buckets), default=0)
    groups: list[V4Group] = []
    for bucket in buckets:
        n = groups_for(bucket)
        if anchor and is_state(bucket):
            per_block = max(anchor // bucket.specs[0].page_bytes, 1)  # cap a state group at what a block holds
            n = max(n, -(-len(bucket.specs) // per_block))
        if n == 1:
            groups.append(V4Group(bucket.specs))
            continue
        pattern = list(zip(*bucket.by_page.values(), strict=False))
        if sum(len(p) for p in pattern) != len(bucket.specs):
            raise DeepseekV4NotModelledError("an unbalanced DeepSeek-V4 bucket split into groups is not modelled")
        for i in range(n):
            groups.append(V4Group(tuple(s for repeat in pattern[i::n] for s in repeat)))
    return tuple(groups)


def plan(
    groups: Sequence[V4Group],
    *,
    engine_version: str,
    budget_bytes: int,
    max_model_len: int,
    max_in_flight_tokens: int,
    num_gpu_blocks_override: int | None = None,
) -> V4Plan:
    """get_kv_cache_config_from_groups + get_kv_cache_capacity: blocks from the budget, then the pool.

    Block-outermost: a block id is as wide as the widest group (_get_kv_cache_bytes_per_block; the
    block-stride alignments are 1 here: kernel blocks equal the 256-token blocks, and the window and
    state backends take any multiple). Every group's blocks come from that one pool.
    """
    check_version(engine_version)
    bytes_per_block = max(g.bytes_per_block for g in groups)
    num_blocks = max(0, budget_bytes) // bytes_per_block
    if num_gpu_blocks_override is not None:
        num_blocks = num_gpu_blocks_override  # may_override_num_blocks
    per_request = sum(g.blocks_per_request(max_model_len, max_in_flight_tokens) for g in groups)
    concurrency = num_blocks / per_request
    return V4Plan(
        engine_version=engine_version,
        groups=tuple(groups),
        bytes_per_block=bytes_per_block,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        max_concurrency=concurrency,
        kv_pool_tokens=int(concurrency * max_model_len),
        needed_bytes=bytes_per_block * per_request,
    )


def budget_for_pool(
    groups: Sequence[V4Group], *, pool_tokens: int, max_model_len: int, max_in_flight_tokens: int
) -> int:
    """The smallest KV budget (bytes per GPU) whose pool is at least pool_tokens."""
    bytes_per_block = max(g.bytes_per_block for g in groups)
    per_request = sum(g.blocks_per_request(max_model_len, max_in_flight_tokens) for g in groups)
    blocks = math.ceil(pool_tokens * per_request / max_model_len)
    while int(blocks / per_request * max_model_len) < pool_tokens:
        blocks += 1
    return blocks * bytes_per_block


def context_bytes_per_token(groups: Sequence[V4Group]) -> int:
    """Bytes one more token of context costs per GPU: the full-context groups' block bytes / block size."""
    return sum(g.bytes_per_block // g.block_size for g in groups if not g.sliding)


__all__ = [
    "MODELLED_VERSIONS",
    "DeepseekV4NotModelledError",
    "V4Group",
    "V4Plan",
    "V4Spec",
    "approximate_gcd",
    "budget_for_pool",
    "check_version",
    "context_bytes_per_token",
    "is_deepseek_v4",
    "kv_cache_dtype",
    "layer_specs",
    "pack_groups",
    "plan",
]
