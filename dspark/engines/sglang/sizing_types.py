"""SGLang sizing: its constants (with the 0.5.23 source they come from) and the values the sizing produces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dspark.capacity import CapacitySummary
from dspark.capacity.seats import expert_coverage, safe_seats_full_window, seats_for_typical_context
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
SPEC_PARAMS_5_4_8 = frozenset({"LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"})
# model_config.is_deepseek_dsa: MLA with the lightning indexer when the config has index_topk.
DSA_INDEXER_QUANT_BLOCK = 128  # memory_pool.DSATokenToKVPool.quant_block_size
EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
# model_overrides/qwen3_5.py _qwen3_5_hybrid_overrides: SM100 picks trtllm_mha (page 64) or triton (page 1).
QWEN3_5_HYBRID_ARCHS = frozenset(
    {"Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
     "InternS2MobiusForConditionalGeneration", "Qwen3_5ForConditionalGeneration"}
)  # fmt: skip
# memory_hook.handle_gpu_memory_settings: the prefill graph's largest capture size with MLA, and with pipeline
# parallelism (_DEFAULT_PP_PREFILL_CUDA_GRAPH_MAX_TOKENS) when its backend is left at the default.
MLA_PREFILL_GRAPH_MAX_TOKENS = 8192
PP_PREFILL_GRAPH_MAX_TOKENS = 8192
# cuda_graph_hook.disable_breakable_cudagraph_if_incompatible: the breakable prefill graph is turned off for
# DeepSeek-V4 (no prefill context parallelism: model_config.is_deepseek_v4) and for multimodal models outside
# multimodal_breakable_cuda_graph_supported_model_archs (model_config.multimodal_model_archs less that list and
# the archs whose multimodal part is off by default).
PREFILL_GRAPH_OFF_ARCHS = frozenset(
    {
        "DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark",
        "BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration",
        "BailingMoeV3VLForConditionalGeneration", "CLIPModel", "Cosmos3EdgeForConditionalGeneration",
        "DeepseekOCRForCausalLM", "DeepseekVL2ForCausalLM", "DiffusionGemmaForBlockDiffusion", "Dots3NoteForCausalLM",
        "DotsOCRForCausalLM", "DotsVLMForCausalLM", "EmbeddingGemma2Model", "Ernie4_5_VLMoeForConditionalGeneration",
        "Gemma3nForConditionalGeneration", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
        "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "GlmAsrForConditionalGeneration",
        "GlmImageForConditionalGeneration", "GlmOcrForConditionalGeneration", "Grok1AForCausalLM",
        "Grok1VForCausalLM", "InternS1ForConditionalGeneration", "InternS1ProForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration", "InternVLChatModel", "JetVLMForConditionalGeneration",
        "KimiVLForConditionalGeneration", "Lfm2VlForConditionalGeneration", "LightOnOCRForConditionalGeneration",
        "LlavaForConditionalGeneration", "LlavaLlamaForCausalLM", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM",
        "LlavaVidForCausalLM", "LocateAnythingForConditionalGeneration", "MiDashengLMModel", "MiMoV2ASRForCausalLM",
        "MiniCPMO", "MiniCPMV", "Mistral3ForConditionalGeneration", "MllamaForConditionalGeneration",
        "MossVLForConditionalGeneration", "MultiModalityCausalLM", "NVILAForConditionalGeneration",
        "NVILALiteForConditionalGeneration", "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2",
        "NemotronH_Omni_Reasoning_V3", "POINTSV15ChatModel", "Phi4MMForCausalLM", "PixtralForConditionalGeneration",
        "Qwen2AudioForConditionalGeneration", "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration", "Qwen3ASRForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration", "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
        "Sarashina2VisionForCausalLM", "Step3p7ForConditionalGeneration", "StepVLForConditionalGeneration",
        "UnlimitedOCRForCausalLM", "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
    }
)  # fmt: skip
# model_config.multimodal_model_archs (MIMO_V2_MULTIMODAL_ARCHS included): the architectures SGLang serves as
# multimodal (model_config.is_multimodal, with a config that nests text_config), unless enable_multimodal is
# off by default for them (MULTIMODAL_OFF_BY_DEFAULT) or the launch is language-only.
SGLANG_MULTIMODAL_ARCHS = frozenset(
    {
        "BailingMM2NativeForConditionalGeneration", "BailingMMNativeForConditionalGeneration",
        "BailingMoeV3VLForConditionalGeneration", "CLIPModel", "Cohere2VisionForConditionalGeneration",
        "Cosmos3EdgeForConditionalGeneration", "DeepseekOCRForCausalLM", "DeepseekVL2ForCausalLM",
        "DiffusionGemmaForBlockDiffusion", "Dots3NoteForCausalLM", "DotsOCRForCausalLM", "DotsVLMForCausalLM",
        "EmbeddingGemma2Model", "Ernie4_5_VLMoeForConditionalGeneration", "Gemma3ForConditionalGeneration",
        "Gemma3nForConditionalGeneration", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
        "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "Glm5NextForConditionalGeneration",
        "GlmAsrForConditionalGeneration", "GlmImageForConditionalGeneration", "GlmOcrForConditionalGeneration",
        "Grok1AForCausalLM", "Grok1VForCausalLM", "InternS1ForConditionalGeneration",
        "InternS1ProForConditionalGeneration", "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration", "InternVLChatModel", "JetVLMForConditionalGeneration",
        "KimiK25ForConditionalGeneration", "KimiVLForConditionalGeneration", "Lfm2VlForConditionalGeneration",
        "LightOnOCRForConditionalGeneration", "Llama4ForConditionalGeneration", "LlavaForConditionalGeneration",
        "LlavaLlamaForCausalLM", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM", "LlavaVidForCausalLM",
        "LocateAnythingForConditionalGeneration", "MiDashengLMModel", "MiMoV2ASRForCausalLM", "MiMoV2ForCausalLM",
        "MiniCPMO", "MiniCPMV", "MiniMaxM3SparseForConditionalGeneration", "Mistral3ForConditionalGeneration",
        "MllamaForConditionalGeneration", "MossVLForConditionalGeneration", "MultiModalityCausalLM",
        "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration", "NVILAForConditionalGeneration",
        "NVILALiteForConditionalGeneration", "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2",
        "NemotronH_Omni_Reasoning_V3", "POINTSV15ChatModel", "PaddleOCRVLForConditionalGeneration",
        "Phi4MMForCausalLM", "PixtralForConditionalGeneration", "Qwen2AudioForConditionalGeneration",
        "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3ASRForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration", "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration", "Sarashina2VisionForCausalLM",
        "Step3VLForConditionalGeneration", "Step3p7ForConditionalGeneration", "StepVLForConditionalGeneration",
        "UnlimitedOCRForCausalLM", "VoxtralForConditionalGeneration", "WhisperForConditionalGeneration",
    }
)  # fmt: skip
# environ.SGLANG_VLM_CACHE_SIZE_MB's default: the multimodal embedding cache, reserved out of the KV budget.
VLM_CACHE_SIZE_MB = 100
# ModelConfig.__init__'s mm_disabled_models: multimodal off unless --enable-multimodal.
MULTIMODAL_OFF_BY_DEFAULT = frozenset({"Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                                       "Step3VLForConditionalGeneration", "InklingForConditionalGeneration"})
KV_DTYPE_BYTES = {"fp8_e5m2": 1, "fp8_e4m3": 1, "bf16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class PrefillGraph:
    """SGLang's prefill CUDA graph: the backend the default fraction reserves for, the one it ends with, sizes."""

    sizing_backend: str  # cuda_graph_config[prefill].backend when handle_gpu_memory_settings runs
    backend: str  # after the whole resolution: a later handler may turn it off, the reserve stays
    capture_sizes: tuple[int, ...]  # cuda_graph_config[prefill].bs (tokens) as memory_hook lists it, even when off
    reserve_mib: float  # reserve_for_graph_mb's prefill term in the default mem_fraction_static


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
    prefill_graph: PrefillGraph
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
    # The memory readings the sizing rests on, for the witness (SGLang's own sizing on the same readings).
    free_before_load_bytes: int | None = None
    free_after_load_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    # Scheduling settings the launch gives (None: SGLang's default), for the scheduler replay.
    schedule_policy: str | None = None
    enable_mixed_chunk: bool = False
    max_prefill_tokens: int | None = None
    radix_cache: bool = True

    @property
    def cudagraph_max_capture_size(self) -> int:
        """Largest decode batch captured in a CUDA graph (0: none)."""
        return max(self.cuda_graph_capture_bs, default=0)

    @property
    def max_concurrency(self) -> float:
        """Full contexts the pool holds: max_total_num_tokens / context_len."""
        return (self.max_total_num_tokens or 0) / self.context_len

    def typical_context_seats(self, pool_tokens: int, typical: int, reserve: int) -> int:
        """Largest seat count whose requests of `typical` tokens, plus `reserve` cached tokens, fit at once (0 if none).

        Token arithmetic over the pool of full-attention tokens, then a hybrid's state-slot cap (mamba.slot_cap):
        however short the requests, SGLang runs no more at once than it has state slots for.
        """
        seats = seats_for_typical_context(pool_tokens, typical, reserve)
        return min(seats, self.mamba.slot_cap) if self.mamba is not None else seats

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
            "speculative_num_steps": self.speculative_num_steps,
            "speculative_eagle_topk": self.speculative_eagle_topk,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "requested_max_running_requests": self.requested_max_running_requests,
            "profiled_tokens": self.profiled_tokens,
            "pinned": self.pinned,
            "pre_model_load_gib": self.pre_model_load_gib,
            "available_gib": self.available_gib,
            "refusals": [{"code": r.code, "message": r.message} for r in self.refusals],
            "schedule_policy": self.schedule_policy,
            "enable_mixed_chunk": self.enable_mixed_chunk,
            "max_prefill_tokens": self.max_prefill_tokens,
            "radix_cache": self.radix_cache,
        }
        if self.mamba is not None:
            m = self.mamba
            out["mamba"] = {
                "per_req_bytes": m.per_req_bytes, "ssm_dtype": m.ssm_dtype, "strategy": m.strategy,
                "ratio": m.ratio, "branch": m.branch, "max_mamba_cache_size": m.max_mamba_cache_size,
                "state_bytes": m.state_bytes, "intermediate_bytes": m.intermediate_bytes, "slot_cap": m.slot_cap,
            }
        return out
