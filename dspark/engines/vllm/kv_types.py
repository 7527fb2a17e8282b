"""vLLM KV accounting: the values it produces (specs, groups, budget, figures) and the engine's log line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from dspark.capacity import CapacitySummary
from dspark.capacity.result import NotModelledError
from dspark.capacity.seats import expert_coverage, safe_seats_full_window, seats_for_typical_context
from dspark.core.errors import InputError
from dspark.engines.vllm.graphs import VllmGraphPlan

GiB = 1 << 30
Platform = Literal["cpu", "cuda"]
SpecKind = Literal["full", "sliding", "mla", "indexer", "mamba"]

# CacheConfig.gpu_memory_utilization default (config/cache.py), 0.9 before 2026-04-21.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS: the floor the CPU MLA path raises tokens to.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# Speculative methods whose drafter keeps KV (SpeculativeConfig.uses_draft_kv_cache / use_eagle).
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
DRAFT_KV_METHODS = EAGLE_METHODS | {"draft_model"}
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # mla_attention.py get_kv_cache_spec: state_content_bytes for fp8_ds_mla


class VllmNotModelledError(NotModelledError):
    """A model or setting whose 0.32.0 accounting dspark does not reproduce (it would guess, so it refuses)."""


class CpuFeatures(NamedTuple):
    """The host CPU facts vLLM's CPU platform branches on (torch.cpu._is_amx_tile_supported, ...)."""

    amx: bool = True  # AMX tiles: MLA runs the AMX backend (block 128) instead of CPU_MLA (block 16)
    avx512_bf16: bool = True  # accelerated GDN: an SSM dtype other than float32 is reset to float32
    avx512: bool = True  # 0.33: fp8 KV attention needs AVX-512 (or AMX)
    arch: Literal["x86", "arm", "riscv", "powerpc", "other"] = "x86"


def cpu_features_from_flags(flags: Sequence[str], machine: str | None) -> CpuFeatures:
    """vLLM's CPU-platform facts from the host's ISA flags (/proc/cpuinfo) and machine name (platform.machine())."""
    name = (machine or "").lower()
    family: Literal["x86", "arm", "riscv", "powerpc", "other"] = "other"
    if name in ("aarch64", "arm64"):
        family = "arm"
    elif name in ("x86_64", "amd64"):
        family = "x86"
    elif name.startswith("riscv"):
        family = "riscv"
    elif name.startswith("ppc"):
        family = "powerpc"
    # CpuPlatform checks the architecture before torch.cpu._is_amx_tile_supported(): AMX is an x86 branch.
    return CpuFeatures(
        amx=family == "x86" and "amx_tile" in flags,
        avx512_bf16="avx512_bf16" in flags,
        avx512="avx512f" in flags,
        arch=family,
    )


@dataclass(frozen=True)
class LayerSpec:
    """One layer's KV-cache spec as vLLM builds it (one per attention/state layer, drafter layers too)."""

    name: str
    kind: SpecKind
    block_size: int  # tokens per block (mamba "none": max_model_len)
    page_bytes: int  # page_size_bytes: bytes of one block of this layer, padding included
    unpadded_page_bytes: int
    per_token_bytes: int = 0  # attention kinds: bytes per token of this layer (0 for mamba)
    sliding_window: int | None = None
    extra_retained_tokens: int = 0
    mamba_blocks_per_request: int = 0  # mamba kinds: 1+spec ("none"), 2+spec(+1 Mamba2) ("align")
    identity: tuple[object, ...] = ()  # what makes two specs equal (KVCacheSpec __eq__)
    # The engine's constructor arguments for this spec (FullAttentionSpec, MambaSpec, ...), for the witness.
    engine_kwargs: tuple[tuple[str, object], ...] = ()

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """cdiv(max_memory_usage_bytes, page_size_bytes) for one request at max_model_len."""
        if self.kind == "mamba":
            return self.mamba_blocks_per_request
        if self.kind == "sliding" and self.sliding_window is not None:
            # SlidingWindowSpec.max_admission_blocks_per_request: window-1 + retained + in-flight, +1.
            tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens, max_model_len)
            return -(-tokens // self.block_size) + 1
        return -(-max_model_len // self.block_size)  # FullAttentionSpec (MLA and indexer alike)


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group: layers sharing a block table; every group draws blocks from one pool."""

    kind: SpecKind
    layers: tuple[str, ...]
    padding_layers: int  # empty slots ("Add %d padding layers"): the group is narrower by as many pages
    block_size: int
    page_bytes: int  # bytes of one block of one layer slot
    bytes_per_block: int  # what one block id costs in this group: the sum of its (real) layers' pages
    blocks_per_request: int  # blocks one request at max_model_len takes from the pool
    uniform_type: bool = False  # UniformTypeKVCacheSpecs: one group of same-type layers, mixed pages


@dataclass(frozen=True)
class VllmRefusal:
    """An error vLLM would raise at start-up, predicted: code, the engine's message, and a suggestion."""

    code: str
    message: str
    suggested_max_model_len: int | None = None
    suggested_max_num_seqs: int | None = None


@dataclass(frozen=True)
class KVBudget:
    """KV bytes per GPU (or CPU node): exact when pinned, otherwise an estimate with its terms."""

    bytes: int
    source: Literal["pinned", "estimate"]
    how: str  # "--kv-cache-memory-bytes", "VLLM_CPU_KVCACHE_SPACE", "estimate"
    assumptions: tuple[str, ...] = ()
    terms: tuple[tuple[str, int], ...] = ()  # the estimate's parts, in bytes


@dataclass(frozen=True)
class VllmCapacity:
    """vLLM's KV-cache figures for one launch, as 0.32.0 computes and prints them."""

    engine_version: str
    platform: Platform
    max_model_len: int
    max_model_len_source: Literal["flag", "derived", "auto-fit"]
    max_num_seqs: int
    max_num_batched_tokens: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    block_size: int
    kv_cache_dtype: str
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    mamba_cache_mode: Literal["none", "align"] | None
    mamba_block_size: int | None
    mamba_state_dtypes: tuple[str, str] | None  # (conv, ssm) after the CPU reset
    mamba_page_bytes: int | None  # unpadded state page of one linear layer
    mamba_page_padded_bytes: int | None
    speculative_method: str | None
    num_speculative_tokens: int
    layers: tuple[LayerSpec, ...]
    groups: tuple[KVGroup, ...]
    bytes_per_block: int
    budget: KVBudget
    num_blocks: int  # the engine's num_gpu_blocks (the null block included)
    blocks_per_request: int  # sum over groups: one max-length request
    max_concurrency: float
    kv_pool_tokens: int
    kv_line: str | None  # the exact line vLLM logs; None when it would refuse to start first
    graphs: VllmGraphPlan
    refusals: tuple[VllmRefusal, ...]
    checks: tuple[VllmRefusal, ...]  # start-up gates that would fail (free memory), kept apart from KV fit
    notes: tuple[str, ...]
    moe: tuple[int, int] | None = None  # (experts, top_k) for expert coverage
    runtime_overhead_bytes: int = 0  # CUDA: activation peak + non-torch + graphs beside weights and KV (heuristic)
    context_bytes_per_token: int | None = None  # DeepSeek-V4: compressed pages hold fractions of a token each
    # What the engine's own planner takes, for the witness: the layers' specs before planning, and the settings
    # its planning functions read.
    engine_layers: tuple[LayerSpec, ...] = ()
    prefill_lookahead_tokens: int = 0
    max_in_flight_tokens: int = 0
    # The engine's scheduler: AsyncScheduler when async, and the batches EngineCore keeps in flight.
    async_scheduling: bool = False
    max_concurrent_batches: int = 1
    auto_fit: bool = False
    engine_max_model_len: int = 0  # the length the planner starts from (auto-fit may shorten it)
    model_layers: int = 0  # the main model's layers, which pipeline stages split
    disable_hybrid_kv_cache_manager: bool = False
    num_gpu_blocks_override: int | None = None

    @property
    def fits(self) -> bool:
        """True when vLLM would start and print the KV line."""
        return not self.refusals and not self.checks

    @property
    def usable_blocks(self) -> int:
        """Blocks the scheduler can hand out: BlockPool keeps one as the null block."""
        return max(0, self.num_blocks - 1)

    @property
    def lookahead_tokens(self) -> int:
        """VllmConfig.num_lookahead_tokens: KV slots allocate_slots reserves past the scheduled tokens (drafter KV)."""
        if self.speculative_method == "dflash":
            return self.num_speculative_tokens + 1
        return self.num_speculative_tokens if self.speculative_method in DRAFT_KV_METHODS else 0

    def _group_spec(self, group: KVGroup) -> LayerSpec | None:
        """The spec of the group's first layer (every layer of a group has an equal spec)."""
        return next((spec for spec in self.layers if group.layers and spec.name == group.layers[0]), None)

    def _group_details(self, group: KVGroup) -> dict[str, object]:
        spec = self._group_spec(group)
        kwargs = dict(spec.engine_kwargs) if spec is not None else {}
        speculative_blocks = kwargs.get("num_speculative_blocks", 0) if group.kind == "mamba" else 0
        return {
            "kind": group.kind,
            "layers": len(group.layers),
            "padding_layers": group.padding_layers,
            "block_size": group.block_size,
            "page_bytes": group.page_bytes,
            "blocks_per_request": group.blocks_per_request,
            "sliding_window": spec.sliding_window if spec is not None and group.kind == "sliding" else None,
            "speculative_blocks": speculative_blocks if isinstance(speculative_blocks, int) else 0,
        }

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token of context adds per GPU: per-token pages of the layers that grow with context."""
        if self.context_bytes_per_token is not None:
            return self.context_bytes_per_token
        return sum(spec.per_token_bytes for spec in self.layers if spec.kind in ("full", "mla", "indexer"))

    @property
    def sliding_window(self) -> int | None:
        """The smallest sliding window of the layers that keep one (tokens); None without such layers."""
        if self.context_bytes_per_token is not None:
            return None  # DeepSeek-V4: its windows sit inside compressed groups, counted in context_bytes_per_token
        windows = [s.sliding_window for s in self.layers if s.kind == "sliding" and s.sliding_window]
        return min(windows) if windows else None

    @property
    def kv_bytes_per_token_in_window(self) -> int | None:
        """Bytes a token costs per GPU while inside the sliding window: sliding and growing layers together."""
        if self.sliding_window is None:
            return None
        return self.kv_bytes_per_token + sum(s.per_token_bytes for s in self.layers if s.kind == "sliding")

    def typical_context_seats(self, pool_tokens: int, typical: int, reserve: int) -> int:
        """Largest seat count whose requests of `typical` tokens, plus `reserve` cached tokens, fit at once (0 if none).

        Counted in blocks, as the engine's "Maximum concurrency" is (kv_cache_utils.py
        get_max_concurrency_for_kv_cache_config: blocks ÷ blocks per request): every request also holds blocks that
        do not grow with its length (a hybrid model's linear-state blocks, a sliding window's ring).
        """
        if not self.groups:
            return seats_for_typical_context(pool_tokens, typical, reserve)
        per_request = 0
        reserved = 0
        for group in self.groups:
            if group.kind == "mamba":
                per_request += group.blocks_per_request  # fixed per request: its state, not its length
            elif group.kind == "sliding":
                per_request += min(math.ceil(typical / group.block_size), group.blocks_per_request)
            else:
                per_request += math.ceil(typical / group.block_size)
                reserved += math.ceil(reserve / group.block_size)  # cached prefixes live in the growing groups
        return max(0, int(self.num_blocks - reserved) // per_request)

    def summary(self, max_num_seqs: int | None = None) -> CapacitySummary:
        """The engine-independent figures `dspark validate --json` prints (seats default to max_num_seqs)."""
        seats = max_num_seqs if max_num_seqs is not None else self.max_num_seqs
        coverage = None
        if self.moe is not None:
            experts, top_k = self.moe
            coverage = expert_coverage(experts, top_k, seats * (1 + self.num_speculative_tokens))
        return CapacitySummary(
            engine="vllm",
            engine_version=self.engine_version,
            kv_pool_tokens=self.kv_pool_tokens,
            max_concurrency=self.max_concurrency,
            max_model_len=self.max_model_len,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_budget_bytes=self.budget.bytes,
            kv_budget_source=self.budget.source,
            kv_budget_assumptions=self.budget.assumptions,
            cudagraph_max_capture_size=self.graphs.applied.max_capture_size,
            cudagraph_capture_sizes=self.graphs.applied.sizes,
            max_num_seqs=seats,
            safe_max_num_seqs=safe_seats_full_window(self.max_concurrency),
            avg_context_at_max_num_seqs=self.kv_pool_tokens // seats if seats > 0 else 0,
            expert_coverage=coverage,
            details=self.details(),
            sliding_window=self.sliding_window,
            kv_bytes_per_token_in_window=self.kv_bytes_per_token_in_window,
        )

    def details(self) -> dict[str, object]:
        """Engine-specific figures for --json: blocks, groups, mamba mode, graphs, refusals."""
        return {
            "block_size": self.block_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "num_blocks": self.num_blocks,
            "usable_blocks": self.usable_blocks,
            "blocks_per_request": self.blocks_per_request,
            "bytes_per_block": self.bytes_per_block,
            "max_model_len_source": self.max_model_len_source,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "enable_prefix_caching": self.enable_prefix_caching,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "mamba_cache_mode": self.mamba_cache_mode,
            "mamba_block_size": self.mamba_block_size,
            "mamba_state_dtypes": list(self.mamba_state_dtypes) if self.mamba_state_dtypes else None,
            "mamba_page_bytes": self.mamba_page_bytes,
            "mamba_page_padded_bytes": self.mamba_page_padded_bytes,
            "speculative_method": self.speculative_method,
            "num_speculative_tokens": self.num_speculative_tokens,
            "lookahead_tokens": self.lookahead_tokens,
            "async_scheduling": self.async_scheduling,
            "max_concurrent_batches": self.max_concurrent_batches,
            "groups": [self._group_details(g) for g in self.groups],
            "kv_budget_how": self.budget.how,
            "kv_budget_terms": dict(self.budget.terms),
            "kv_line": self.kv_line,
            "cudagraph_on_cuda": {
                "max_capture_size": self.graphs.on_cuda.max_capture_size,
                "sizes": list(self.graphs.on_cuda.sizes),
            },
            "cudagraph_not_applied_because": self.graphs.reason or None,
            "refusals": [r.__dict__ for r in (*self.refusals, *self.checks)],
            "notes": list(self.notes),
        }


def format_gib(num_bytes: float) -> float:
    """vllm/utils/mem_utils.py format_gib: round(bytes / GiB, 2)."""
    return round(num_bytes / GiB, 2)


def kv_cache_line(platform: Platform, pool_tokens: int, max_model_len: int, max_concurrency: float) -> str:
    """update_kv_cache_capacity's line; the device name is "GPU" for cuda, else the upper-cased type."""
    device = "GPU" if platform == "cuda" else platform.upper()
    return (
        f"{device} KV cache size: {pool_tokens:,} tokens, "
        f"Maximum concurrency for {max_model_len:,} tokens per request: {max_concurrency:.2f}x"
    )


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def divide_exact(numerator: int, denominator: int, what: str) -> int:
    """vllm.distributed.utils.divide: exact division or the engine's assertion."""
    if numerator % denominator:
        raise InputError(f"{what} ({numerator}) is not divisible by the tensor-parallel size ({denominator})")
    return numerator // denominator
