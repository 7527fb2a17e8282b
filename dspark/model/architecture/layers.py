"""The layer kinds a model is made of, and the normalised architecture the engines' accounting reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Bytes per element of the dtypes that appear in configs and KV-cache flags.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
    "uint8": 1,
}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name as configs and engine flags spell it."""
    key = dtype.removeprefix("torch.").lower()
    if key == "bf16":
        key = "bfloat16"
    if key not in DTYPE_BYTES:
        raise KeyError(dtype)
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class AttentionLayer:
    """Softmax attention (MHA/GQA/MQA) that keeps K and V for every token; sliding when window is set."""

    num_kv_heads: int
    head_dim: int
    head_dim_v: int | None = None  # None: same as head_dim
    sliding_window: int | None = None
    kind: Literal["attention"] = "attention"

    @property
    def v_dim(self) -> int:
        """Width of one V head."""
        return self.head_dim if self.head_dim_v is None else self.head_dim_v


@dataclass(frozen=True)
class MLALayer:
    """Multi-head latent attention: one latent (kv_lora_rank + rope dim) per token, shared by all heads.

    compress_ratio: rows kept per token of context are 1/compress_ratio (DeepSeek-V2/V3/V3.2: 1).
    DeepSeek-V4 uses 4 ("CSA") or 128 ("HCA"), and 0 for layers that keep no full-context rows at
    all, only their sliding window. sliding_window (V4, every layer): a raw per-token window of that
    many tokens kept beside the compressed rows. index_head_dim: the lightning indexer's key cache,
    one key per compressed row (V3.2: every layer; V4: the ratio-4 layers).
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    index_head_dim: int | None = None  # DeepSeek-V3.2 / V4 lightning-indexer key cache
    compress_ratio: int = 1  # DeepSeek-V4 compressed attention: one row per this many tokens; 0 = none
    sliding_window: int | None = None  # DeepSeek-V4 raw window kept beside the compressed rows
    kind: Literal["mla"] = "mla"

    @property
    def latent_dim(self) -> int:
        """Elements stored per token: the compressed KV latent plus the decoupled RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def keeps_context_rows(self) -> bool:
        """True when the layer stores rows across the whole context (compress_ratio > 0)."""
        return self.compress_ratio > 0


@dataclass(frozen=True)
class LinearStateLayer:
    """Gated DeltaNet or Mamba2: a fixed state per sequence (convolution window + recurrent state).

    For Gated DeltaNet: k heads/dim are the key heads/dim, v heads/dim the value heads/dim.
    For Mamba2: num_k_heads = n_groups, head_k_dim = ssm state size, num_v_heads = heads, head_v_dim = head dim.
    Either way conv channels = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim.
    """

    family: Literal["gated_delta_net", "mamba2"]
    conv_kernel: int
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    ssm_dtype: str | None = None  # a dtype the config asks for the recurrent state (Qwen3.5: float32)
    kind: Literal["linear"] = "linear"

    @property
    def conv_dim(self) -> int:
        """Channels of the convolution state."""
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim


Layer = AttentionLayer | MLALayer | LinearStateLayer


@dataclass(frozen=True)
class MoE:
    """Routed experts of a mixture-of-experts model."""

    num_experts: int
    top_k: int
    num_shared_experts: int = 0
    moe_intermediate_size: int | None = None


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one decoder layer, with the parts that quantise or shard differently."""

    total: int
    routed_experts: int = 0  # routed expert weights (V4 stores them in FP4 beside FP8 elsewhere)
    replicated: int = 0  # every TP rank holds these whole: norms, routers, MLA down-projections
    kv_proj: int = 0  # K/V projections: replicated per KV head when TP exceeds the KV heads


@dataclass(frozen=True)
class ParameterCount:
    """Parameters the checkpoint holds, computed from the config's shapes (an estimate: no file read)."""

    embedding: int
    lm_head: int  # 0 when tied to the embedding
    layers: tuple[LayerParams, ...]  # one per decoder layer, in order
    final: int  # after the last layer: final norm (and DeepSeek-V4's mHC head)
    vision: int = 0  # vision encoder and projector of a multimodal checkpoint
    mtp: int = 0  # next-token-prediction modules; not in total (loaded only for method "mtp")

    @property
    def total(self) -> int:
        """All parameters of the served model, MTP modules excluded."""
        return self.embedding + self.lm_head + sum(p.total for p in self.layers) + self.final + self.vision

    @property
    def routed_experts(self) -> int:
        """Parameters in routed experts, all layers."""
        return sum(p.routed_experts for p in self.layers)


@dataclass(frozen=True)
class Drafter:
    """A speculative-decoding drafter whose layers keep KV of their own (MTP, EAGLE-3, DFlash)."""

    method: str  # "mtp", "eagle3", "eagle", "dflash", "draft_model"
    layers: tuple[Layer, ...]
    parameter_count: int | None = None
    source: str = ""
    dtype: str | None = None  # the drafter's own dtype (its KV follows the target's --kv-cache-dtype)
    block_size: int | None = None  # DFlash: tokens drafted per block (one non-causal pass)
    target_layer_ids: tuple[int, ...] = ()  # DFlash / EAGLE-3: target layers whose hidden states it reads
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RotaryTable:
    """One rope's table as the config defines it (rows and bytes are the engine's to compute)."""

    rope_type: str  # "default", "linear", "llama3", "yarn", "deepseek_yarn", "mrope", ...
    max_position: int  # max_position_embeddings
    rotary_dim: int  # the rotated width of a head (head_dim x partial_rotary_factor, or MLA's rope dim)
    theta: float = 10000.0  # rope_theta (the base): ropes that differ only in it are separate tables
    factor: float = 1.0  # rope_scaling / rope_parameters "factor"
    original_max_position: int | None = None  # original_max_position_embeddings (YaRN, llama3)


@dataclass(frozen=True)
class ModelArchitecture:
    """Everything the engines' memory accounting needs to know about one model."""

    model_type: str
    architecture: str  # config "architectures"[0], the class the engine instantiates
    dtype: str  # the model's activation/KV dtype when the KV-cache dtype is "auto"
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    layers: tuple[Layer, ...]
    num_attention_heads: int = 0
    moe: MoE | None = None
    mtp_layers: tuple[Layer, ...] = ()  # built-in next-token-prediction modules (used with method "mtp")
    parameter_count: int | None = None  # estimate from the config; exact weights come from safetensors
    quantization: str | None = None  # quantization_config.quant_method, e.g. "fp8", "modelopt_fp4"
    source: str = ""  # where the config came from (path or repo id)
    notes: tuple[str, ...] = field(default=())  # assumptions made while reading the config
    parameters: ParameterCount | None = None  # the estimate behind parameter_count, by part
    weight_format: str | None = None  # stored weight format: None (model dtype), "fp8", "nvfp4", "mxfp4", ...
    expert_weight_format: str | None = None  # when routed experts differ (DeepSeek-V4: "mxfp4")
    # FP8 block quantisation's fp32 weight_scale_inv, one per weight_block_size block of a quantised weight
    # (create_fp8_scale_parameter: ceil(N / bn) x ceil(K / bk)), per stored parameter: 4 / (bn x bk).
    block_scale_bytes_per_parameter: float = 0.0
    tie_word_embeddings: bool = False
    # vision_config's (num_hidden_layers, hidden_size), absent keys at SGLang's defaults 24 and 1024 (Qwen's
    # `depth` is not num_hidden_layers to the config classes SGLang loads); None: the config has no vision tower.
    vision_tower: tuple[int, int] | None = None
    wraps_text_config: bool = False  # the config nests its language model under text_config (a multimodal wrapper)
    rotary_tables: tuple[RotaryTable, ...] = ()  # the distinct ropes of its attention layers (none: not read)
    intermediate_size: int | None = None  # the dense MLP's width (config intermediate_size), when given
    shared_expert_intermediate_size: int | None = None  # Qwen-MoE's shared expert width, when given

    @property
    def num_layers(self) -> int:
        """Decoder layers of the main model (drafters and MTP excluded)."""
        return len(self.layers)

    @property
    def is_hybrid(self) -> bool:
        """True when some layers keep per-sequence linear state instead of per-token KV."""
        return any(isinstance(layer, LinearStateLayer) for layer in self.layers)

    @property
    def uses_mla(self) -> bool:
        """True when attention layers store an MLA latent."""
        return any(isinstance(layer, MLALayer) for layer in self.layers)
