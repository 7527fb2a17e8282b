"""SGLang 0.5.23's KV-pool sizing, reproduced exactly (pure: no I/O, no SGLang or torch import).

What SGLang computes at start-up, in the order it computes it (file / function of sglang 0.5.23):
1. Server-argument resolution (arg_groups/pipeline.py run_resolution_pipeline):
   handle_gpu_memory_settings (arg_groups/memory_hook.py) picks chunked_prefill_size and the decode
   CUDA-graph max_bs from nvidia-smi's memory.total (MiB), caps that max_bs at an explicit
   --max-running-requests, lists the decode batch sizes (cuda_graph_hook.generate_decode_cuda_graph_
   batch_sizes) and sets the default mem_fraction_static = round((gpu - reserved) / gpu, 3). Later the
   speculative hook (speculative_hook._handle_eagle_family, ...) sets --max-running-requests to 48 and
   picks (steps, topk, draft tokens); _mamba_radix_cache_resolution (overrides.py) picks the hybrid
   state-cache strategy.
2. Free memory before the weights (distributed/bootstrap.measure_pre_model_load_memory) and after them
   (kv_cache_configurator._profile_available_bytes): utils/common.get_available_gpu_memory, in GiB; with
   more than one rank it goes through a float32 all-reduce (MIN), which rounds the bytes to float32.
3. KVCacheConfigurator._profile_available_bytes: rest = after - before * (1 - mem_fraction_static);
   hybrid models take their linear-state pool out of it (_handle_max_mamba_cache).
4. DefaultPoolConfigurator.calculate_pool_sizes: tokens = bytes // cell_size, floored to the page size;
   _apply_token_constraints: min with --max-total-tokens.
5. resolve_max_num_reqs: the running-request limit, capped by the state slots on hybrid models.
6. CUDA graphs are captured for the decode batch sizes <= max_running_requests
   (runner/base_cuda_graph_runner.get_batch_sizes_to_capture).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
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
from dspark.capacity.seats import expert_coverage, safe_seats_full_window
from dspark.engines.sglang.options import SglangOptions
from dspark.engines.sglang.versions import MODELLED_VERSIONS

ENGINE_VERSION = MODELLED_VERSIONS[-1]
GIB = 1 << 30
MIB = 1 << 20

# kv_cache_configurator.py: state slots per running request with the radix cache, before tracking slots.
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3
# arg_groups/fields/schedule.py mamba_full_memory_ratio fallback; max_prefill_tokens default.
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9
DEFAULT_MAX_PREFILL_TOKENS = 16384
# speculative_hook.py: --max-running-requests when speculative decoding leaves it unset.
SPEC_DEFAULT_MAX_RUNNING_REQUESTS = 48

# overrides.py _MAMBA_RADIX_CACHE_ARCHS: hybrids whose radix cache keeps linear states (strategy resolution).
MAMBA_RADIX_CACHE_ARCHS = frozenset(
    {
        "KimiLinearForCausalLM", "KimiK3ForConditionalGeneration", "BailingMoeV2_5ForCausalLM",
        "BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration", "Qwen3NextForCausalLM",
        "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForCausalLM", "Qwen4ExpForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3", "FalconH1ForCausalLM", "JetNemotronForCausalLM",
        "JetVLMForConditionalGeneration", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "ZayaForCausalLM",
        "Glm5NextForConditionalGeneration",
    }
)  # fmt: skip
# overrides.py _MAMBA_EXTRA_BUFFER_ARCHS: may keep the extra (ping-pong) state buffer (triton linear attention).
MAMBA_EXTRA_BUFFER_ARCHS = frozenset(
    {
        "KimiLinearForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3NextForCausalLM", "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration", "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration", "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM",
        "BailingMoeV3VLForConditionalGeneration", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
        "Glm5NextForConditionalGeneration", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3", "KimiK3ForConditionalGeneration", "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
    }
)  # fmt: skip
# speculative_hook._handle_eagle_family: MTP checkpoints whose draft path defaults to the target's own.
DRAFT_PATH_FROM_TARGET_ARCHS = frozenset(
    {
        "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
        "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
        "HYV3ForCausalLM", "HYV4ForCausalLM", "Qwen4ExpForConditionalGeneration",
    }
)  # fmt: skip
# speculative_hook._auto_choose_speculative_params: (steps, topk, draft tokens); (3, 1, 4) otherwise.
_SPEC_PARAMS_5_4_8 = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
# model_config.is_deepseek_dsa: MLA with the lightning indexer when the config has index_topk.
_DSA_INDEXER_QUANT_BLOCK = 128  # memory_pool.DSATokenToKVPool.quant_block_size
_EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
# model_overrides/qwen3_5.py _qwen3_5_hybrid_overrides: SM100 picks trtllm_mha (page 64) or triton (page 1).
_QWEN3_5_HYBRID_ARCHS = frozenset(
    {"Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
     "InternS2MobiusForConditionalGeneration", "Qwen3_5ForConditionalGeneration"}
)  # fmt: skip
_KV_DTYPE_BYTES = {"fp8_e5m2": 1, "fp8_e4m3": 1, "bf16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class SglangRefusal:
    """An error SGLang raises for these settings, predicted: a code and SGLang's own message."""

    code: str
    message: str


@dataclass(frozen=True)
class MambaPool:
    """The hybrid linear-state pool as _handle_max_mamba_cache sizes it (bytes per GPU)."""

    per_req_bytes: int  # conv + recurrent state of every linear layer, one request (mamba_cache_per_req)
    conv_bytes: int
    ssm_bytes: int
    conv_dtype: str
    ssm_dtype: str
    strategy: str  # the radix-cache strategy resolved: extra_buffer, extra_buffer_lazy, no_buffer, disabled
    ratio: int  # state slots each running request holds (_calculate_mamba_ratio)
    branch: Literal["max_mamba_cache_size", "disable_radix_cache", "auto"]
    max_mamba_cache_size: int  # K: state slots (the pool holds K + 1, one padding slot)
    state_bytes: int  # (K + 1) * per_req
    intermediate_requests: int  # requests with speculative intermediate states, padding slot included
    intermediate_bytes: int  # per_req * intermediate_requests * draft tokens (0 without speculation)
    slot_cap: int  # max_running_requests cap: K // ratio


@dataclass(frozen=True)
class SglangCapacity:
    """What SGLang 0.5.23 will size for one launch; None where an input was missing or SGLang stops first."""

    engine_version: str
    context_len: int
    tp_size: int
    pp_size: int
    page_size: int
    kv_cache_dtype: str  # the storage dtype of the KV pool
    cell_size: int  # KV bytes per token per GPU, all full-attention layers (+ draft layers sharing the pool)
    full_attention_layers: int
    draft_kv_layers: int | None  # layers the cell was scaled by for the draft (EAGLE/MTP/DFLASH), None: none
    mem_fraction_static: float
    mem_fraction_static_source: Literal["flag", "default"]
    reserved_mem_mib: float | None  # the default's reserve (activations, graphs, parallel slack), MiB
    gpu_capacity_mib: float | None  # what nvidia-smi's memory.total says; None: unknown
    chunked_prefill_size: int
    speculative_algorithm: str | None  # after SGLang's aliasing (NEXTN -> EAGLE)
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    requested_max_running_requests: int | None  # the flag, or SGLang's default (48 with speculation)
    decode_graph_max_bs: int | None  # None: decode CUDA graphs disabled
    decode_graph_bs: tuple[int, ...]  # the resolved list before the running-request filter (kept when disabled)
    pre_model_load_gib: float | None  # free GiB before the weights, as SGLang reads it
    available_gib: float | None  # free GiB after the weights, as SGLang reads it
    rest_memory_gib: float | None  # after the slack and the linear-state pool: the KV budget in GiB
    kv_budget_bytes: int | None  # int(rest * 2**30)
    mamba: MambaPool | None
    profiled_tokens: int | None  # bytes // cell_size, page-aligned, before --max-total-tokens
    max_total_num_tokens: int | None  # the pool: the engine's max_total_num_tokens
    pinned: bool  # --max-total-tokens decided the pool
    max_running_requests: int | None  # the engine's max_running_requests (seats)
    cuda_graph_capture_bs: tuple[int, ...]  # decode batch sizes captured
    refusals: tuple[SglangRefusal, ...] = ()
    notes: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    moe: tuple[int, int] | None = None
    footprint_bytes: int | None = None  # weights + state + KV: the static part SGLang holds per GPU

    @property
    def cudagraph_max_capture_size(self) -> int:
        """Largest decode batch captured in a CUDA graph (0: none)."""
        return max(self.cuda_graph_capture_bs, default=0)

    @property
    def max_concurrency(self) -> float:
        """Full contexts the pool holds: max_total_num_tokens / context_len."""
        return (self.max_total_num_tokens or 0) / self.context_len

    def summary(self, seats: int | None = None) -> CapacitySummary:
        """The engine-independent figures `dspark validate --json` prints (seats default to the engine's)."""
        pool = self.max_total_num_tokens or 0
        seats = seats if seats is not None else (self.max_running_requests or self.requested_max_running_requests
                                                 or 0)
        safe = safe_seats_full_window(self.max_concurrency)
        if self.mamba is not None:
            safe = min(safe, max(1, self.mamba.slot_cap))
        tokens_per_seat = self.speculative_num_draft_tokens if self.speculative_algorithm else 1
        coverage = None
        if self.moe is not None and seats > 0:
            coverage = expert_coverage(self.moe[0], self.moe[1], seats * (tokens_per_seat or 1))
        return CapacitySummary(
            engine="sglang",
            engine_version=self.engine_version,
            kv_pool_tokens=pool,
            max_concurrency=self.max_concurrency,
            max_model_len=self.context_len,
            kv_bytes_per_token=self.cell_size,
            kv_budget_bytes=self.kv_budget_bytes if self.kv_budget_bytes is not None else pool * self.cell_size,
            kv_budget_source="pinned" if self.pinned else "estimate",
            kv_budget_assumptions=self.assumptions,
            cudagraph_max_capture_size=self.cudagraph_max_capture_size,
            cudagraph_capture_sizes=self.cuda_graph_capture_bs,
            max_num_seqs=seats,
            safe_max_num_seqs=safe,
            avg_context_at_max_num_seqs=pool // seats if seats > 0 else 0,
            expert_coverage=coverage,
            details=self.details(),
        )

    def details(self) -> dict[str, object]:
        """SGLang-specific figures for --json."""
        out: dict[str, object] = {
            "cell_size": self.cell_size,
            "full_attention_layers": self.full_attention_layers,
            "draft_kv_layers": self.draft_kv_layers,
            "kv_cache_dtype": self.kv_cache_dtype,
            "page_size": self.page_size,
            "tp_size": self.tp_size,
            "mem_fraction_static": self.mem_fraction_static,
            "mem_fraction_static_source": self.mem_fraction_static_source,
            "reserved_mem_mib": self.reserved_mem_mib,
            "gpu_capacity_mib": self.gpu_capacity_mib,
            "chunked_prefill_size": self.chunked_prefill_size,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
            "max_running_requests": self.max_running_requests,
            "requested_max_running_requests": self.requested_max_running_requests,
            "profiled_tokens": self.profiled_tokens,
            "pinned": self.pinned,
            "pre_model_load_gib": self.pre_model_load_gib,
            "available_gib": self.available_gib,
            "refusals": [{"code": r.code, "message": r.message} for r in self.refusals],
        }
        if self.mamba is not None:
            m = self.mamba
            out["mamba"] = {
                "per_req_bytes": m.per_req_bytes, "ssm_dtype": m.ssm_dtype, "strategy": m.strategy,
                "ratio": m.ratio, "branch": m.branch, "max_mamba_cache_size": m.max_mamba_cache_size,
                "state_bytes": m.state_bytes, "intermediate_bytes": m.intermediate_bytes, "slot_cap": m.slot_cap,
            }
        return out


# --------------------------------------------------------------------------------------------------
# Server-argument defaults (arg_groups/memory_hook.py, cuda_graph_hook.py, speculative_hook.py)
# --------------------------------------------------------------------------------------------------


def gpu_memory_defaults(gpu_mib: float | None, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode graph max_bs) by nvidia-smi memory.total: handle_gpu_memory_settings."""
    if gpu_mib is None:
        return 4096, 160
    table = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (90, 8192, 256, 512),
             (160, 8192, 256, 512))  # fmt: skip
    for below_gib, chunk, small_tp, large_tp in table:
        if gpu_mib < below_gib * 1024:
            return chunk, small_tp if tp_size < 4 else large_tp
    return 16384, 512


def decode_graph_batch_sizes(max_bs: int, *, speculative: bool, no_padding: bool = False) -> tuple[int, ...]:
    """cuda_graph_hook.generate_decode_cuda_graph_batch_sizes: the decode batch sizes up to max_bs."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
                 *range(272, max_bs + 1, 16)]  # fmt: skip
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return tuple(sizes)


def captured_batch_sizes(decode_bs: tuple[int, ...], max_running_requests: int) -> tuple[int, ...]:
    """get_batch_sizes_to_capture (alignment 1: no DP attention, no two-batch overlap)."""
    sizes = list(decode_bs)
    if max(sizes) > max_running_requests:
        sizes.append(max_running_requests)
    return tuple(sorted({bs for bs in sizes if bs <= max_running_requests}))


def default_mem_fraction_static(
    gpu_mib: float | None, *, chunked_prefill_size: int, max_prefill_tokens: int, tp_size: int, pp_size: int,
    decode_graph_max_bs: int | None,
) -> tuple[float, float | None]:
    """(mem_fraction_static, reserved MiB): handle_gpu_memory_settings + reserve_for_graph_mb, no disaggregation.

    The prefill CUDA graph is off by default in 0.5.23 (its reserve is 0); DP attention and DeepEP not modelled.
    """
    if gpu_mib is None:
        return 0.95, None
    activation_tokens = max(chunked_prefill_size, 2048) if chunked_prefill_size > 0 else max(max_prefill_tokens, 2048)
    reserved: float = 512
    reserved += activation_tokens * 1.5
    reserved += tp_size * pp_size / 8 * 1024
    reserved += decode_graph_max_bs * 2 if decode_graph_max_bs is not None else 0.0
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3), reserved


def speculative_params(algorithm: str, architecture: str) -> tuple[int, int, int]:
    """_auto_choose_speculative_params: (steps, topk, draft tokens) when --speculative-num-steps is unset."""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    return (5, 4, 8) if architecture in _SPEC_PARAMS_5_4_8 else (3, 1, 4)


# --------------------------------------------------------------------------------------------------
# Per-token KV cell and per-request linear state (pool_configurator.py, configs/mamba_utils.py)
# --------------------------------------------------------------------------------------------------


def kv_storage(
    kv_cache_dtype: str | None, arch: ModelArchitecture, capability: tuple[int, int] | None = None
) -> tuple[str, int]:
    """(dtype name, bytes per element) of the KV pool: mem_cache/kv_cache_dtype.configure_kv_cache_dtype."""
    name = kv_cache_dtype or "auto"
    dsa = any(isinstance(layer, MLALayer) and layer.index_head_dim is not None for layer in arch.layers)
    if dsa and name == "auto":
        # overrides._dsa_kv_cache_dtype_default: fp8_e4m3 from SM100 on, bfloat16 before.
        name = "fp8_e4m3" if capability is not None and capability[0] >= 10 else "bfloat16"
    if name == "auto":
        return arch.dtype, dtype_bytes(arch.dtype)
    if name in _KV_DTYPE_BYTES:
        return name, _KV_DTYPE_BYTES[name]
    raise ValueError(f"--kv-cache-dtype {name}: dspark does not model SGLang's {name} KV layout")


def _full_attention(arch: ModelArchitecture) -> list[Layer]:
    return [layer for layer in arch.layers if not isinstance(layer, LinearStateLayer)]


def mha_cell_size(layer: AttentionLayer, num_layers: int, tp_size: int, elem: int) -> int:
    """_compute_cell_size, MHA/GQA: max(1, kv_heads // tp) * (head_dim + v_head_dim) * layers * bytes."""
    heads = max(1, layer.num_kv_heads // tp_size)
    return heads * (layer.head_dim + layer.v_dim) * num_layers * elem


def mla_cell_size(layer: MLALayer, num_layers: int, kv_dtype: str, elem: int, *, raw_layout: bool = False) -> int:
    """_compute_cell_size, MLA: calculate_mla_kv_cache_dim * layers * bytes, + the DSA indexer keys.

    raw_layout: the DSA backends are trtllm (SM100's default), which keep the plain latent even in FP8.
    """
    dim = layer.latent_dim
    if layer.index_head_dim is not None and kv_dtype == "fp8_e4m3" and not raw_layout:
        # calculate_mla_kv_cache_dim, DSA with FP8 (non-trtllm backends): per-128 scales + bf16 rope.
        dim = layer.kv_lora_rank + layer.kv_lora_rank // _DSA_INDEXER_QUANT_BLOCK * 4 + layer.qk_rope_head_dim * 2
    return dim * num_layers * elem + dsa_indexer_cell_size(layer, num_layers)


def dsa_indexer_cell_size(layer: MLALayer, num_layers: int) -> int:
    """_compute_dsa_indexer_cell_size: uint8 index keys + one 4-byte scale per 128, every layer (kpool 1)."""
    if layer.index_head_dim is None:
        return 0
    dim = layer.index_head_dim
    return (dim + dim // _DSA_INDEXER_QUANT_BLOCK * 4) * num_layers


def linear_state_bytes(
    layer: LinearStateLayer, tp_size: int, *, ssm_dtype: str, conv_dtype: str = "bfloat16"
) -> tuple[int, int]:
    """(conv, recurrent) bytes of one layer, one request: Mamba2StateShape.create + mamba_cache_per_req."""
    n_groups = layer.num_k_heads
    if n_groups % tp_size != 0:
        n_groups += tp_size - n_groups  # extra_groups_for_head_shards
    intermediate = layer.head_v_dim * layer.num_v_heads
    conv_dim = intermediate + 2 * n_groups * layer.head_k_dim
    if conv_dim % tp_size or layer.num_v_heads % tp_size:
        raise ValueError(f"linear-attention heads do not divide by tp_size {tp_size}")
    conv = conv_dim // tp_size * (layer.conv_kernel - 1) * dtype_bytes(conv_dtype)
    ssm = layer.num_v_heads // tp_size * layer.head_v_dim * layer.head_k_dim * dtype_bytes(ssm_dtype)
    return conv, ssm


# --------------------------------------------------------------------------------------------------
# Free-memory readings and the pool
# --------------------------------------------------------------------------------------------------


def float32(value: int) -> float:
    """A byte count as the float32 tensor SGLang all-reduces it through (round to nearest, ties to even)."""
    return float(struct.unpack("f", struct.pack("f", float(value)))[0])


def available_gib(free_bytes: int, world_size: int) -> float:
    """get_available_gpu_memory(distributed=world_size > 1): free bytes / 2**30, via float32 when distributed."""
    value = float32(free_bytes) if world_size > 1 else float(free_bytes)
    return value / GIB


def resolve_max_num_reqs(
    token_capacity: int, context_len: int, requested: int | None, mamba_cap: int | None
) -> int:
    """KVCacheConfigurator.resolve_max_num_reqs (one DP worker)."""
    estimated = int(token_capacity / context_len * 512)
    estimated = max(min(estimated, 4096), 2048)
    if requested is not None:
        max_num_reqs = min(max(1, requested), token_capacity // 2)
    else:
        max_num_reqs = min(estimated, token_capacity // 2)
    if mamba_cap is not None:
        max_num_reqs = min(max_num_reqs, mamba_cap)
    return max_num_reqs


@dataclass
class _Run:
    """Accumulates what the computation finds; frozen into SglangCapacity at the end."""

    refusals: list[SglangRefusal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    stopped: bool = False  # SGLang raised: nothing after this point is sized

    def fatal(self, code: str, message: str) -> None:
        """Record an error SGLang raises; sizing stops there."""
        self.refusals.append(SglangRefusal(code, message))
        self.stopped = True


def _mamba_strategy(arch: ModelArchitecture, o: SglangOptions, page_size: int) -> tuple[str, bool]:
    """(strategy, overlap on): overrides._mamba_radix_cache_resolution."""
    overlap = not o.disable_overlap_schedule
    if o.disable_radix_cache:
        return "disabled", overlap
    strategy = o.mamba_radix_cache_strategy or "auto"
    if strategy == "auto" and arch.architecture in MAMBA_RADIX_CACHE_ARCHS:
        if (overlap or page_size > 1) and arch.architecture in MAMBA_EXTRA_BUFFER_ARCHS:
            return "extra_buffer", overlap
        return "no_buffer", False  # no_buffer forces disable_overlap_schedule
    return strategy, overlap


def mamba_ratio(strategy: str, overlap: bool) -> int:
    """_calculate_mamba_ratio: 1 without the radix cache, else 3 + tracking slots (2 with overlap, 1 lazy)."""
    if strategy == "disabled":
        return 1
    extra = 0
    if strategy == "extra_buffer_lazy":
        extra = 1
    elif strategy == "extra_buffer":
        extra = 2 if overlap else 1
    return MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + extra


def _handle_max_mamba_cache(
    rest_gib: float, state: _State, o: SglangOptions, a: _Args
) -> tuple[float, MambaPool]:
    """KVCacheConfigurator._handle_max_mamba_cache (no PP, DP attention or ReplaySSM): rest GiB after the pool."""
    per_req, ratio = state.per_req, state.ratio
    d = a.draft_tokens if a.algorithm is not None else None
    mrr = a.requested_mrr if a.requested_mrr is not None else 1
    intermediate_reqs = 0
    branch: Literal["max_mamba_cache_size", "disable_radix_cache", "auto"]
    if o.max_mamba_cache_size is not None:
        branch, k = "max_mamba_cache_size", o.max_mamba_cache_size
        if d is not None:
            intermediate_reqs = min(max(1, mrr), k // ratio) + 1
            rest_gib = rest_gib - (per_req * intermediate_reqs * d / GIB)
    elif o.disable_radix_cache and a.requested_mrr is not None:
        branch, k = "disable_radix_cache", max(1, a.requested_mrr)
        if d is not None:
            intermediate_reqs = k + 1
            rest_gib = rest_gib - (per_req * intermediate_reqs * d / GIB)
    else:
        branch = "auto"
        r = o.mamba_full_memory_ratio if o.mamba_full_memory_ratio is not None else DEFAULT_MAMBA_FULL_MEMORY_RATIO
        budget_bytes = rest_gib * r / (1 + r) * GIB
        if d is not None:
            # Joint solve: K slots + (capped requests + 1) * D intermediate states fit the mamba budget.
            k = int((budget_bytes - per_req * (1 + d) - 0) // (per_req * (1 + d / ratio) + 0))
            intermediate_reqs = min(max(1, mrr), k // ratio) + 1
            rest_gib = rest_gib - (per_req * intermediate_reqs * d / GIB)
        else:
            k = int((budget_bytes - 0 - per_req) // per_req)
    pool = MambaPool(
        per_req_bytes=per_req, conv_bytes=state.conv, ssm_bytes=state.ssm, conv_dtype="bfloat16",
        ssm_dtype=state.ssm_dtype, strategy=state.strategy, ratio=ratio, branch=branch, max_mamba_cache_size=k,
        state_bytes=(k + 1) * per_req, intermediate_requests=intermediate_reqs,
        intermediate_bytes=per_req * intermediate_reqs * (d or 0), slot_cap=k // ratio,
    )
    if k <= 0:
        return rest_gib, pool
    return rest_gib - ((k + 1) * (per_req + 0) + 0) / GIB, pool  # +1: the pool's padding slot


def _path_less_mtp_layers(arch: ModelArchitecture, run: _Run) -> int | None:
    """A path-less MTP draft is sized off the target config's num_nextn_predict_layers (None when absent)."""
    declared = not any("config does not list" in note for note in arch.notes)
    if arch.mtp_layers and declared:
        return len(arch.mtp_layers)
    if arch.mtp_layers:
        run.notes.append(
            "the target config does not list num_nextn_predict_layers: SGLang does not grow the KV cell for the "
            "MTP layer (the draft worker's one-layer KV pool then sits outside the profiled budget)"
        )
    return None


def _draft_kv_layers(
    arch: ModelArchitecture, o: SglangOptions, algorithm: str | None, drafter: Drafter | None, run: _Run
) -> int | None:
    """spec_aux_hidden_state: the draft layers the target's KV cell is scaled by (EAGLE family, DFLASH)."""
    if algorithm == "DFLASH":
        return len(drafter.layers) if drafter is not None else None
    if algorithm not in _EAGLE_FAMILY:
        return None
    from_target = arch.architecture in DRAFT_PATH_FROM_TARGET_ARCHS
    if o.speculative_draft_model_path is None and not from_target:
        return _path_less_mtp_layers(arch, run)
    if o.speculative_draft_model_path is None or drafter is None:
        if arch.mtp_layers:
            return len(arch.mtp_layers)  # the target checkpoint read as its MTP draft
        run.notes.append("drafter layers unknown: the KV cell is not scaled for the draft model")
        return None
    return len(drafter.layers)


def _draft_cell(first: Layer, cell: int, n: int, draft_layers: int, a: _Args, drafter: Drafter | None) -> int:
    """The cell with the draft's share: EAGLE scaling, or DFLASH's own draft KV (pool_configurator.py)."""
    if a.algorithm in _EAGLE_FAMILY:
        if isinstance(first, MLALayer) and first.index_head_dim is not None:
            target_indexer = dsa_indexer_cell_size(first, n)
            draft_kv = int((cell - target_indexer) * draft_layers / n)
            return cell + draft_kv + dsa_indexer_cell_size(first, draft_layers)
        return cell + int(cell * draft_layers / n)
    # DFLASH: scale_kv_cell_size_per_token_for_dflash, with dflash_draft_cell_size_per_token when resolvable.
    attention = [layer for layer in (drafter.layers if drafter else ()) if isinstance(layer, AttentionLayer)]
    if attention and drafter is not None:
        d = attention[0]
        elem = a.kv_elem if a.kv_explicit else dtype_bytes(drafter.dtype or a.kv_dtype)
        return cell + max(1, d.num_kv_heads // a.tp) * (d.head_dim + d.v_dim) * draft_layers * elem
    return (cell * (n + draft_layers) + n - 1) // n


def _cell_size(arch: ModelArchitecture, a: _Args, drafter: Drafter | None, run: _Run) -> tuple[int, int]:
    """(cell_size, full-attention layers): DefaultPoolConfigurator.__init__ + _compute_cell_size."""
    full = _full_attention(arch)
    if not full:
        raise ValueError("the model has no attention layer: SGLang's KV pool would be empty")
    first = full[0]
    if any(isinstance(layer, AttentionLayer) and layer.sliding_window is not None for layer in full):
        run.notes.append(
            "sliding-window layers: SGLang sizes a separate SWA pool (HybridSWAPoolConfigurator), not modelled; "
            "every layer is counted as full attention"
        )
    n = len(full)
    if isinstance(first, MLALayer):
        cell = mla_cell_size(first, n, a.kv_dtype, a.kv_elem, raw_layout=a.sm100)
    elif isinstance(first, AttentionLayer):
        cell = mha_cell_size(first, n, a.tp, a.kv_elem)
    else:  # pragma: no cover - _full_attention drops linear layers
        raise TypeError(type(first).__name__)
    if a.draft_layers is None or a.draft_layers <= 0:
        return cell, n
    return _draft_cell(first, cell, n, a.draft_layers, a, drafter), n


def _sm100_default_backend(arch: ModelArchitecture, o: SglangOptions) -> str:
    """The attention backend SGLang picks on SM100 when none is given (page-size relevant ones only)."""
    first = next((layer for layer in arch.layers if isinstance(layer, MLALayer)), None)
    if first is not None:
        # model_overrides/deepseek_v2.py: DeepSeek V3/R1 (not DSA) take trtllm_mla; other MLA take flashinfer.
        return "trtllm_mla" if arch.architecture == "DeepseekV3ForCausalLM" else "flashinfer"
    # get_default_attn_backend, MHA on SM100 (is_no_spec_infer_or_topk_one reads the raw flags).
    topk = o.speculative_eagle_topk
    no_spec_or_topk_one = topk is None or (topk == 1 and o.page_size in (None, 1))
    algorithm = (o.speculative_algorithm or "").upper()
    trtllm = no_spec_or_topk_one and (not algorithm or topk is not None or algorithm == "DFLASH")
    if arch.architecture in _QWEN3_5_HYBRID_ARCHS:
        # Triton unless trtllm_mha can serve: it cannot with the radix cache, no extra buffer and no speculation.
        extra_buffer = not o.disable_radix_cache and o.mamba_radix_cache_strategy in ("extra_buffer",
                                                                                     "extra_buffer_lazy")
        plain_radix = not extra_buffer and not o.disable_radix_cache and not algorithm
        return "trtllm_mha" if trtllm and not plain_radix else "triton"
    return "trtllm_mha" if trtllm else "flashinfer"


def resolve_page_size(arch: ModelArchitecture, o: SglangOptions, capability: tuple[int, int] | None) -> int:
    """--page-size after SGLang's defaults and backend constraints (overrides._mla_backend_page_constraints)."""
    mla = next((layer for layer in arch.layers if isinstance(layer, MLALayer)), None)
    if mla is not None and mla.index_head_dim is not None:
        return 64  # model_overrides/deepseek_v2.py: DeepSeek DSA on CUDA, 64 * index_kpool (kpool 1)
    page = o.page_size or 1
    backend = o.attention_backend
    sm100 = capability is not None and capability[0] == 10
    if backend is None and sm100:
        backend = _sm100_default_backend(arch, o)
        if arch.architecture in _QWEN3_5_HYBRID_ARCHS:
            return 64 if backend == "trtllm_mha" else 1  # the override sets page_size itself
    if backend == "flashmla":
        return 64
    if backend in ("trtllm_mla", "cutedsl_mla") and page not in (32, 64):
        return 64
    if backend == "trtllm_mha" and page not in (16, 32, 64, 128):
        return 64
    return page


@dataclass(frozen=True)
class _Args:
    """The server arguments after SGLang's resolution pipeline, as far as sizing reads them."""

    tp: int
    pp: int
    context_len: int
    gpu_mib: float | None
    chunked: int
    fraction: float
    fraction_source: Literal["flag", "default"]
    reserved: float | None
    graphs_on: bool
    decode_max_bs: int
    decode_bs: tuple[int, ...]
    algorithm: str | None
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    requested_mrr: int | None
    page_size: int
    kv_dtype: str
    kv_elem: int
    kv_explicit: bool
    draft_layers: int | None
    sm100: bool  # compute capability 10.x: DSA's default prefill/decode backends are trtllm


@dataclass(frozen=True)
class _State:
    """The hybrid model's per-request linear state and its radix-cache strategy."""

    per_req: int
    conv: int
    ssm: int
    ssm_dtype: str
    strategy: str
    ratio: int


def _resolve_speculative(
    arch: ModelArchitecture, o: SglangOptions, drafter: Drafter | None, run: _Run
) -> tuple[str | None, int | None, int | None, int | None, int | None]:
    """(algorithm, steps, topk, draft tokens, max_running_requests): speculative_hook.handle_speculative_decoding."""
    algorithm = o.speculative_algorithm.upper() if o.speculative_algorithm else None
    if algorithm == "NEXTN":
        algorithm = "EAGLE"  # _resolve_speculative_algorithm_alias
    steps, topk, draft = o.speculative_num_steps, o.speculative_eagle_topk, o.speculative_num_draft_tokens
    mrr = o.max_running_requests
    if algorithm is None:
        return None, None, None, None, mrr
    if mrr is None:
        mrr = SPEC_DEFAULT_MAX_RUNNING_REQUESTS
    if algorithm in _EAGLE_FAMILY:
        if steps is not None and topk is None:
            run.fatal(
                "sglang-speculative-args",
                "TypeError: '>' not supported between instances of 'NoneType' and 'int' (_handle_eagle_family: "
                "--speculative-num-steps without --speculative-eagle-topk)",
            )
            return algorithm, steps, topk, draft, mrr
        if steps is None:
            if topk is not None or draft is not None:
                run.fatal(
                    "sglang-speculative-args",
                    "AssertionError: (_handle_eagle_family) --speculative-eagle-topk and "
                    "--speculative-num-draft-tokens must stay unset when --speculative-num-steps is unset",
                )
            steps, topk, draft = speculative_params(algorithm, arch.architecture)
        if topk == 1:
            draft = steps + 1  # "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1"
    elif algorithm == "DFLASH":
        if o.speculative_draft_model_path is None:
            run.fatal("sglang-speculative-args",
                      "DFLASH speculative decoding requires setting --speculative-draft-model-path.")
        steps, topk = 1, 1  # _handle_dflash forces both to 1
        if draft is None:  # the draft config's block_size, else 16
            draft = drafter.block_size if drafter is not None and drafter.block_size else 16
    else:
        run.notes.append(f"speculative algorithm {algorithm}: its state and KV terms are not modelled")
    return algorithm, steps, topk, draft, mrr


def _resolve_args(
    arch: ModelArchitecture, o: SglangOptions, gpu_mib: float | None, drafter: Drafter | None, run: _Run,
    capability: tuple[int, int] | None,
) -> _Args:
    """ServerArgs resolution as far as sizing reads it (memory_hook, speculative_hook, model_config)."""
    tp, pp = o.tp_size or 1, o.pp_size or 1
    derived = arch.max_position_embeddings
    context_len = o.context_length if o.context_length is not None else derived
    if o.context_length is not None and o.context_length > derived:
        run.fatal(
            "sglang-context-length",
            f"Warning: User-specified context_length ({o.context_length}) is greater than the derived "
            f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the "
            "derived context_length may differ from max_position_embeddings in the model's config. To allow "
            "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        )
    chunk_default, max_bs_default = gpu_memory_defaults(gpu_mib, tp)
    chunked = o.chunked_prefill_size if o.chunked_prefill_size is not None else chunk_default
    if o.cuda_graph_bs is not None:
        decode_bs: tuple[int, ...] = tuple(o.cuda_graph_bs)
        decode_max_bs = max(decode_bs)
    else:
        decode_max_bs = o.cuda_graph_max_bs if o.cuda_graph_max_bs is not None else max_bs_default
        if o.cuda_graph_max_bs is None and o.max_running_requests is not None:
            decode_max_bs = min(decode_max_bs, o.max_running_requests)
        decode_bs = decode_graph_batch_sizes(decode_max_bs, speculative=o.speculative_algorithm is not None,
                                             no_padding=bool(o.disable_cuda_graph_padding))
    graphs_on = not o.disable_cuda_graph
    fraction_source: Literal["flag", "default"] = "flag"
    reserved: float | None = None
    if o.mem_fraction_static is not None:
        fraction = o.mem_fraction_static
    else:
        fraction_source = "default"
        fraction, reserved = default_mem_fraction_static(
            gpu_mib, chunked_prefill_size=chunked,
            max_prefill_tokens=o.max_prefill_tokens or DEFAULT_MAX_PREFILL_TOKENS, tp_size=tp, pp_size=pp,
            decode_graph_max_bs=decode_max_bs if graphs_on else None,
        )
        if gpu_mib is None:
            run.assumptions.append("GPU capacity unknown: SGLang's fallback mem_fraction_static 0.95")
    algorithm, steps, topk, draft, mrr = _resolve_speculative(arch, o, drafter, run)
    try:
        kv_dtype, kv_elem = kv_storage(o.kv_cache_dtype, arch, capability)
    except ValueError as exc:
        run.notes.append(f"{exc}; counted at the model dtype")
        kv_dtype, kv_elem = arch.dtype, dtype_bytes(arch.dtype)
    return _Args(
        tp=tp, pp=pp, context_len=context_len, gpu_mib=gpu_mib, chunked=chunked, fraction=fraction,
        fraction_source=fraction_source, reserved=reserved, graphs_on=graphs_on, decode_max_bs=decode_max_bs,
        decode_bs=decode_bs, algorithm=algorithm, steps=steps, topk=topk, draft_tokens=draft, requested_mrr=mrr,
        page_size=resolve_page_size(arch, o, capability), kv_dtype=kv_dtype, kv_elem=kv_elem,
        kv_explicit=o.kv_cache_dtype not in (None, "auto"),
        draft_layers=_draft_kv_layers(arch, o, algorithm, drafter, run),
        sm100=capability is not None and capability[0] == 10,
    )


def _state(arch: ModelArchitecture, o: SglangOptions, a: _Args, run: _Run) -> _State | None:
    """The linear state per request (configs/mamba_utils.mamba_cache_per_req) and slots per request."""
    linear = [layer for layer in arch.layers if isinstance(layer, LinearStateLayer)]
    if not linear:
        return None
    ssm_dtype = o.mamba_ssm_dtype or linear[0].ssm_dtype or "float32"  # mamba2_state_dtype: env > config > fp32
    conv, ssm = linear_state_bytes(linear[0], a.tp, ssm_dtype=ssm_dtype)
    strategy, overlap = _mamba_strategy(arch, o, a.page_size)
    if arch.architecture not in MAMBA_RADIX_CACHE_ARCHS and not o.disable_radix_cache:
        run.notes.append(f"{arch.architecture}: SGLang's hybrid-cache strategy for it is not modelled (3 slots)")
    n = len(linear)
    return _State(per_req=(conv + ssm) * n, conv=conv * n, ssm=ssm * n, ssm_dtype=ssm_dtype, strategy=strategy,
                  ratio=mamba_ratio(strategy, overlap))


def _pool(
    o: SglangOptions, a: _Args, state: _State | None, cell: int, free_before: int, free_after: int, run: _Run
) -> dict[str, object]:
    """_profile_available_bytes -> calculate_pool_sizes -> _apply_token_constraints -> resolve_max_num_reqs."""
    world = a.tp * a.pp
    pre = available_gib(free_before, world)
    avail = available_gib(max(free_after, 0), world)
    rest = avail - pre * (1 - a.fraction) - 0.0  # mm_runtime_reservation_gb: 0 for text models
    out: dict[str, object] = {"pre_model_load_gib": pre, "available_gib": avail,
                              "footprint_bytes": int(pre * a.fraction * GIB)}
    mamba: MambaPool | None = None
    if state is not None:
        rest, mamba = _handle_max_mamba_cache(rest, state, o, a)
        out["mamba"] = mamba
        if mamba.max_mamba_cache_size <= 0:
            run.fatal(
                "sglang-mamba-cache-too-small",
                "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
                f"max_mamba_cache_size={mamba.max_mamba_cache_size} (total_rest_memory={rest:.2f} GB, "
                f"mamba_cache_per_req={state.per_req / MIB:.2f} MB). Try: (1) reduce --max-running-requests, (2) "
                "increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs "
                "with more memory.",
            )
    out["rest_memory_gib"] = rest
    if not run.stopped and rest <= 0:
        minimum = 1 - avail / pre
        run.fatal(
            "sglang-weights-leave-no-kv",
            f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={a.fraction}. "
            f"Raise --mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} (minimum viable = 1 - "
            f"available/pre = {minimum:.4f}). If using speculative decoding, draft weights are now counted.",
        )
    if run.stopped:
        return out
    budget = int(rest * GIB)
    profiled = budget // cell // a.page_size * a.page_size
    out.update(kv_budget_bytes=budget, profiled_tokens=profiled)
    if profiled <= 0:
        run.fatal("sglang-not-enough-memory", "Not enough memory. Please try to increase --mem-fraction-static.")
        return out
    tokens = profiled
    if o.max_total_tokens is not None and o.max_total_tokens < profiled:
        tokens = o.max_total_tokens // a.page_size * a.page_size
    elif o.max_total_tokens is not None and o.max_total_tokens > profiled:
        run.notes.append(f"max_total_tokens={o.max_total_tokens} is larger than the profiled value {profiled}. "
                         "Use the profiled value instead.")
    if tokens <= 0:
        run.fatal("sglang-not-enough-memory", "Not enough memory. Please try to increase --mem-fraction-static.")
        return out
    out.update(max_total_num_tokens=tokens, pinned=tokens != profiled)
    _seats(out, tokens, a, mamba, run)
    return out


def _seats(out: dict[str, object], tokens: int, a: _Args, mamba: MambaPool | None, run: _Run) -> None:
    """resolve_max_num_reqs, its errors and warnings, and the CUDA graphs captured for it."""
    mrr = resolve_max_num_reqs(tokens, a.context_len, a.requested_mrr, mamba.slot_cap if mamba else None)
    if mamba is not None and mrr <= 0:
        run.fatal(
            "sglang-mamba-no-requests",
            "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={mamba.max_mamba_cache_size}, mamba_ratio={mamba.ratio}, resulting "
            f"max_num_reqs={mrr}. Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
            "or (3) use GPUs with more memory.",
        )
        return
    uncapped = resolve_max_num_reqs(tokens, a.context_len, a.requested_mrr, None)
    if mamba is not None and mrr < uncapped:
        run.notes.append(
            f"max_running_requests is capped to {mrr} by the mamba state cache "
            f"(max_mamba_cache_size={mamba.max_mamba_cache_size}, {mamba.ratio} state slots per request)"
        )
    elif a.requested_mrr is not None and mrr < a.requested_mrr:
        run.notes.append(f"max_running_requests was reduced from the requested {a.requested_mrr} to {mrr} "
                         "(per dp worker) due to the available KV cache capacity.")
    out["max_running_requests"] = mrr
    out["cuda_graph_capture_bs"] = captured_batch_sizes(a.decode_bs, mrr) if a.graphs_on else ()


def compute_sglang_capacity(
    arch: ModelArchitecture,
    options: SglangOptions,
    *,
    gpu_capacity_bytes: int | None,
    free_before_load_bytes: int | None,
    weights_per_gpu_bytes: int | None,
    drafter: Drafter | None = None,
    engine_version: str = ENGINE_VERSION,
    free_after_load_bytes: int | None = None,
    gpu_capacity_mib: float | None = None,
    compute_capability: tuple[int, int] | None = None,
) -> SglangCapacity:
    """SGLang's own sizing for this launch: pool, seats, graphs and the errors it would raise (per GPU).

    gpu_capacity_bytes: the device total nvidia-smi reports (floored to MiB); gpu_capacity_mib overrides it.
    free_before_load_bytes: free memory when SGLang starts (MemAvailable on unified-memory parts).
    free_after_load_bytes: free memory once weights (and draft weights) are loaded; default before - weights.
    compute_capability: decides SM100's attention backend, hence the page size (None: Hopper-like, page 1).
    """
    run = _Run()
    o = options
    for flag in o.ambiguous:
        run.refusals.append(SglangRefusal(
            "sglang-ambiguous-flag", f"argparse: ambiguous option: {flag} could match {flag}-decode, {flag}-prefill"
        ))
    if engine_version != ENGINE_VERSION:
        run.notes.append(f"modelled on SGLang {ENGINE_VERSION}; asked for {engine_version}")
    if (o.pp_size or 1) > 1:
        run.notes.append("pipeline parallel: SGLang sizes each stage from its own layers; not modelled (all layers)")
    if gpu_capacity_mib is None and gpu_capacity_bytes is not None:
        gpu_capacity_mib = float(gpu_capacity_bytes // MIB)
    a = _resolve_args(arch, o, gpu_capacity_mib, drafter, run, compute_capability)
    cell, full_layers = _cell_size(arch, a, drafter, run)
    state = _state(arch, o, a, run)
    values: dict[str, object] = {}
    if not run.stopped:
        if free_before_load_bytes is None:
            values = _pinned_without_memory(o, a, run)
        else:
            if free_after_load_bytes is None:
                if weights_per_gpu_bytes is None:
                    run.assumptions.append("weights unknown: counted as 0 bytes")
                free_after_load_bytes = free_before_load_bytes - (weights_per_gpu_bytes or 0)
            run.assumptions.append(f"free memory {free_before_load_bytes:,} B before the weights and "
                                   f"{free_after_load_bytes:,} B after them")
            values = _pool(o, a, state, cell, free_before_load_bytes, free_after_load_bytes, run)
    fields_: dict[str, object] = {
        "pre_model_load_gib": None, "available_gib": None, "rest_memory_gib": None, "kv_budget_bytes": None,
        "mamba": None, "profiled_tokens": None, "max_total_num_tokens": None, "pinned": False,
        "max_running_requests": None, "cuda_graph_capture_bs": (), "footprint_bytes": None,
    }
    fields_.update(values)
    return SglangCapacity(
        engine_version=engine_version, context_len=a.context_len, tp_size=a.tp, pp_size=a.pp,
        page_size=a.page_size, kv_cache_dtype=a.kv_dtype, cell_size=cell, full_attention_layers=full_layers,
        draft_kv_layers=a.draft_layers, mem_fraction_static=a.fraction, mem_fraction_static_source=a.fraction_source,
        reserved_mem_mib=a.reserved, gpu_capacity_mib=a.gpu_mib, chunked_prefill_size=a.chunked,
        speculative_algorithm=a.algorithm, speculative_num_steps=a.steps, speculative_eagle_topk=a.topk,
        speculative_num_draft_tokens=a.draft_tokens, requested_max_running_requests=a.requested_mrr,
        decode_graph_max_bs=a.decode_max_bs if a.graphs_on else None,
        decode_graph_bs=a.decode_bs,
        refusals=tuple(run.refusals), notes=tuple(run.notes), assumptions=tuple(run.assumptions),
        moe=(arch.moe.num_experts, arch.moe.top_k) if arch.moe is not None else None,
        **fields_,  # type: ignore[arg-type]
    )


def _pinned_without_memory(o: SglangOptions, a: _Args, run: _Run) -> dict[str, object]:
    """No free-memory figure: only --max-total-tokens can name the pool (SGLang keeps min(it, profiled))."""
    if o.max_total_tokens is None:
        run.assumptions.append("free GPU memory unknown: the pool cannot be computed")
        return {}
    run.assumptions.append("free GPU memory unknown: pool taken as --max-total-tokens (SGLang keeps the smaller "
                           "of it and the profiled pool)")
    tokens = o.max_total_tokens // a.page_size * a.page_size
    out: dict[str, object] = {"max_total_num_tokens": tokens, "pinned": True}
    _seats(out, tokens, a, None, run)
    return out
