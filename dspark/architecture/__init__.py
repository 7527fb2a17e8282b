"""A model's layers, normalised from config.json: what each layer keeps per token or per sequence.

Pure: takes already-parsed JSON (dicts); reading files is dspark.modeldir's job.
Engine accounting (dspark.capacity.*) only looks at these types, never at raw config keys.

Entry points: ``parse_config(config, source)`` for a target model, ``parse_drafter(config, method)``
for a speculative drafter. Both fail closed with ArchitectureError (naming the file, the key and the
fix) rather than guess a layer shape.

Giving an architecture by hand. A recipe may carry an inline config.json mapping (``model.config``,
or ``model.config_overrides`` merged over a directory's config.json); it goes straight to
parse_config, so it needs only the keys below (nested ``text_config`` works too). Keys every
family needs: ``model_type``, ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
``vocab_size``, ``max_position_embeddings``. Optional everywhere: ``num_key_value_heads``
(default: num_attention_heads), ``head_dim`` (default: hidden_size // num_attention_heads),
``torch_dtype`` or ``dtype`` (default bfloat16), ``quantization_config.quant_method``,
``intermediate_size`` (only the parameter estimate needs it). Then, per family:

- dense GQA/MHA (llama, mistral, qwen2, qwen3, gemma2/3, ...): nothing more. Sliding windows:
  ``sliding_window`` with ``layer_types`` (``"sliding_attention"`` / ``"full_attention"`` per layer);
  qwen2/qwen3 also ``use_sliding_window`` + ``max_window_layers``; gemma2/gemma3 alternate by
  default; any other family with ``sliding_window`` alone slides on every layer (Mistral).
- MoE (qwen3_moe, qwen2_moe, mixtral, ...): ``num_experts`` (or ``n_routed_experts`` /
  ``num_local_experts``), ``num_experts_per_tok``, ``moe_intermediate_size``.
- MLA (deepseek_v2, deepseek_v3): ``kv_lora_rank``, ``qk_rope_head_dim``; DeepSeek-V3.2
  (deepseek_v32) adds ``index_head_dim``.
- DeepSeek-V4 (deepseek_v4): ``head_dim``, ``qk_rope_head_dim``, ``sliding_window``,
  ``compress_ratios`` (one per layer, 0 = window only), ``index_head_dim``.
- Gated-DeltaNet hybrids (qwen3_next, qwen3_5, qwen3_5_moe): ``layer_types``
  (``"linear_attention"`` / ``"full_attention"``) or ``full_attention_interval``, and
  ``linear_num_key_heads``, ``linear_num_value_heads``, ``linear_key_head_dim``,
  ``linear_value_head_dim``, ``linear_conv_kernel_dim``; optional ``mamba_ssm_dtype``.
- Mamba2 hybrids: nemotron_h (``hybrid_override_pattern`` or ``layers_block_type``, ``n_groups``,
  ``ssm_state_size``, ``mamba_num_heads``, ``mamba_head_dim``, ``conv_kernel``) and
  granitemoehybrid (``layer_types``, ``mamba_n_groups``, ``mamba_d_state``, ``mamba_n_heads``,
  ``mamba_d_head``, ``mamba_d_conv``).
- MTP modules: ``num_nextn_predict_layers`` or ``mtp_num_hidden_layers`` (Qwen3-Next: 1 when unset).

Minimal example: ``{"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
"num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
"max_position_embeddings": 8192}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

from dspark.errors import ArchitectureError

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
    tie_word_embeddings: bool = False

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


_FIX = "give the field in the recipe's model.config, or pass a config.json that has it"
_REQUIRED: Any = object()

# model_type spellings that name the same family.
_ALIASES = {
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "gemma3_text": "gemma3",
}
_DENSE_FAMILIES = frozenset(
    {
        "llama",
        "mistral",
        "ministral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "granite",
        "granitemoe",
        "olmo2",
        "phi3",
        "glm4_moe",
    }
)
_MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"})
_GDN_FAMILIES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe"})
_MAMBA2_FAMILIES = frozenset({"nemotron_h", "granitemoehybrid"})
_QWEN_SLIDING = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})  # use_sliding_window + max_window_layers
_QK_NORM = frozenset({"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma3", "olmo2"})
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3"})
_SLIDING = "sliding_attention"
_FULL = frozenset({"full_attention", "attention"})


class _Fields:
    """Typed reads from a config (a nested text_config first, then the outer mapping); errors name file and key."""

    def __init__(self, config: Mapping[str, Any], source: str, *, nested: str = "text_config") -> None:
        inner = config.get(nested)
        self.inner: Mapping[str, Any] = inner if isinstance(inner, Mapping) else {}
        self.nested = nested if self.inner else ""
        self.outer = config
        self.source = source or "<inline config>"
        self.label = ""  # e.g. "model_type 'qwen3_next'", named in every error

    def raw(self, key: str) -> Any:
        """The key's value, or None when absent or null."""
        value = self.inner.get(key)
        return self.outer.get(key) if value is None else value

    def has(self, key: str) -> bool:
        """True when the key has a non-null value."""
        return self.raw(key) is not None

    def where(self, key: str) -> str:
        """The key as a user should write it (text_config.key when the config nests its text model)."""
        return f"{self.nested}.{key}" if self.nested else key

    def error(self, problem: str) -> ArchitectureError:
        """The ArchitectureError every parse failure becomes: file, family, problem, fix."""
        label = f" ({self.label})" if self.label else ""
        return ArchitectureError(f"{self.source}{label}: {problem}; {_FIX}")

    def fail(self, problem: str) -> NoReturn:
        """Raise error(problem)."""
        raise self.error(problem)

    def missing(self, key: str) -> NoReturn:
        """Raise for an absent required key."""
        self.fail(f"missing required key '{self.where(key)}'")

    def integer(self, key: str, default: Any = _REQUIRED) -> int:
        """A required (or defaulted) integer."""
        value = self.raw(key)
        if value is None:
            if default is _REQUIRED:
                self.missing(key)
            return int(default)
        return self._as_int(key, value)

    def opt_int(self, key: str) -> int | None:
        """An optional integer."""
        value = self.raw(key)
        return None if value is None else self._as_int(key, value)

    def positive(self, key: str, default: Any = _REQUIRED) -> int:
        """A required (or defaulted) integer > 0."""
        value = self.integer(key, default)
        if value <= 0:
            self.fail(f"'{self.where(key)}' must be a positive integer, got {value}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A boolean with a default."""
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(f"'{self.where(key)}' must be true or false, got {value!r}")
        return value

    def text(self, key: str) -> str | None:
        """An optional string."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(f"'{self.where(key)}' must be a string, got {value!r}")
        return value

    def int_list(self, key: str) -> tuple[int, ...] | None:
        """An optional list of integers."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, Sequence) or isinstance(value, str):
            self.fail(f"'{self.where(key)}' must be a list of integers, got {value!r}")
        return tuple(self._as_int(key, item) for item in value)

    def str_list(self, key: str) -> tuple[str, ...] | None:
        """An optional list of strings."""
        value = self.raw(key)
        if value is None:
            return None
        if not isinstance(value, Sequence) or isinstance(value, str) or not all(isinstance(v, str) for v in value):
            self.fail(f"'{self.where(key)}' must be a list of strings, got {value!r}")
        return tuple(value)

    def mapping(self, key: str) -> Mapping[str, Any]:
        """An optional nested mapping ({} when absent)."""
        value = self.raw(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(f"'{self.where(key)}' must be a mapping, got {value!r}")
        return value

    def _as_int(self, key: str, value: Any) -> int:
        # JSON writers sometimes emit 4096.0; bools are ints in Python but never a size.
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(f"'{self.where(key)}' must be an integer, got {value!r}")
        if isinstance(value, float) and not value.is_integer():
            self.fail(f"'{self.where(key)}' must be an integer, got {value!r}")
        return int(value)


def _architecture(f: _Fields) -> str:
    """The first of "architectures" (the class the engine builds), or "" when the config names none."""
    # The outer config names the class the engine builds (a VLM's text_config may name its own).
    outer = _Fields({"architectures": f.outer.get("architectures")}, f.source)
    names = outer.str_list("architectures") or f.str_list("architectures") or ("",)
    return names[0] if names else ""


def _family(f: _Fields) -> str:
    """The normalised model_type, or a family recognised from the fields; fails closed."""
    outer_type = f.outer.get("model_type")
    inner_type = f.inner.get("model_type")
    for value in (outer_type, inner_type):
        if value is not None and not isinstance(value, str):
            f.fail(f"'model_type' must be a string, got {value!r}")
    raw = outer_type or inner_type
    model_type = _ALIASES.get(raw or "", raw or "")
    if model_type in _DENSE_FAMILIES | _MLA_FAMILIES | _GDN_FAMILIES | _MAMBA2_FAMILIES | {"deepseek_v4"}:
        return model_type
    if isinstance(inner_type, str) and _ALIASES.get(inner_type, inner_type) in _GDN_FAMILIES | _DENSE_FAMILIES:
        return _ALIASES.get(inner_type, inner_type)
    # Unknown model_type: read it only when its fields say unambiguously what the layers are.
    if f.has("compress_ratios"):
        return "deepseek_v4"
    if f.has("kv_lora_rank"):
        return "deepseek_v32" if f.has("index_head_dim") else "deepseek_v3"
    if f.has("linear_num_value_heads"):
        return "qwen3_next"
    if f.has("hybrid_override_pattern") or f.has("layers_block_type"):
        return "nemotron_h"
    what = f"unknown model_type '{raw}'" if raw else "no 'model_type'"
    known = sorted(_DENSE_FAMILIES | _MLA_FAMILIES | _GDN_FAMILIES | _MAMBA2_FAMILIES | {"deepseek_v4"})
    raise f.error(
        f"{what} and no fields that identify its layers (kv_lora_rank, linear_num_value_heads, "
        f"compress_ratios, hybrid_override_pattern); known model_types: {', '.join(known)} "
        "(a llama-style model can set model_type 'llama' in model.config_overrides)"
    )


def _dtype(f: _Fields, notes: list[str]) -> str:
    """The dtype the engines run the model (and an "auto" KV cache) in."""
    raw = f.text("torch_dtype") or f.text("dtype")
    if raw is None:
        notes.append("config gives no torch_dtype/dtype: assumed bfloat16 (vLLM and SGLang's default)")
        return "bfloat16"
    name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32", "fp32": "float32"}.get(
        raw.removeprefix("torch.").lower(), raw.removeprefix("torch.").lower()
    )
    if name not in {"bfloat16", "float16", "float32"}:
        f.fail(f"'{f.where('torch_dtype')}' is '{raw}', not one of bfloat16, float16, float32")
    if name == "float32":
        # Both engines' dtype "auto" serves float32 checkpoints in bfloat16 (vLLM _resolve_auto_dtype).
        notes.append("config dtype float32: engines serve it as bfloat16 unless --dtype float32 is given")
        return "bfloat16"
    return name


def _state_dtype(f: _Fields, key: str) -> str | None:
    """A recurrent-state dtype the config asks for (Qwen3.5 mamba_ssm_dtype float32)."""
    raw = f.text(key)
    if raw is None:
        return None
    name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(raw.lower(), raw.lower())
    if name not in {"bfloat16", "float16", "float32"}:
        f.fail(f"'{f.where(key)}' is '{raw}', not one of bfloat16, float16, float32")
    return name


# quant_method -> stored weight format, for methods whose name says it all.
_QUANT_FORMATS = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "modelopt_mxfp4": "mxfp4",
}
_INT_METHODS = frozenset({"awq", "awq_marlin", "gptq", "gptq_marlin", "auto-round", "auto_round"})


def _quantization(f: _Fields, notes: list[str]) -> tuple[str | None, str | None, str | None]:
    """(quant method as vLLM names it, stored weight format, routed-expert format) from quantization_config."""
    qc = f.mapping("quantization_config") or f.mapping("compression_config")
    in_qc = qc.get("expert_dtype")
    expert_dtype = f.text("expert_dtype") or (in_qc if isinstance(in_qc, str) else None)
    # DeepSeek-V4 keeps routed experts in FP4 (E2M1 + one E8M0 scale per 32: the MXFP4 layout) beside FP8.
    expert_format = {"fp4": "mxfp4", "mxfp4": "mxfp4", "fp8": "fp8"}.get(expert_dtype or "")
    if expert_dtype and expert_format is None:
        f.fail(f"'expert_dtype' is '{expert_dtype}', not one of fp4, fp8")
    if not qc:
        return None, None, expert_format
    method = qc.get("quant_method")
    if not isinstance(method, str):
        f.fail(f"'{f.where('quantization_config')}.quant_method' is missing or not a string")
    method = method.lower()
    algo = str(qc.get("quant_algo") or "").upper()
    weight_format: str | None = _QUANT_FORMATS.get(method)
    if method == "modelopt":
        # vLLM names a ModelOpt NVFP4 checkpoint "modelopt_fp4" and an FP8 one "modelopt".
        method, weight_format = ("modelopt_fp4", "nvfp4") if "FP4" in algo else (method, "fp8")
    elif method in _INT_METHODS:
        weight_format = "int8" if qc.get("bits", qc.get("w_bit", 4)) == 8 else "int4"
    elif method == "compressed-tensors":
        weight_format = _compressed_tensors_format(qc)
    elif method == "bitsandbytes":
        weight_format = "int4" if qc.get("load_in_4bit") else "int8"
    if weight_format is None:
        notes.append(f"quantization '{method}': weight format unknown, weights estimated at the model dtype")
    return method, weight_format, expert_format


def _compressed_tensors_format(qc: Mapping[str, Any]) -> str | None:
    """The weight format of a compressed-tensors config: its first config group's weights scheme."""
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            continue
        bits, kind, size = weights.get("num_bits"), weights.get("type"), weights.get("group_size")
        if bits == 8:
            return "fp8" if kind == "float" else "int8"
        if bits == 4 and kind == "float":
            return "mxfp4" if size == 32 else "nvfp4"
        if bits == 4:
            return "int4"
    return None


def _attention_shape(f: _Fields) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) of softmax attention: explicit head_dim wins over hidden // heads."""
    heads = f.positive("num_attention_heads")
    kv_heads = f.positive("num_key_value_heads", heads)
    head_dim = f.opt_int("head_dim")
    if head_dim is None:
        head_dim = f.opt_int("attention_head_dim")
    if head_dim is None:
        hidden = f.positive("hidden_size")
        if hidden % heads:
            f.fail(f"'hidden_size' {hidden} is not a multiple of num_attention_heads {heads}; give 'head_dim'")
        head_dim = hidden // heads
    if head_dim <= 0:
        f.fail(f"'{f.where('head_dim')}' must be a positive integer, got {head_dim}")
    return heads, kv_heads, head_dim


def _window(f: _Fields) -> int | None:
    """sliding_window as the engines read it: 0 and null both mean none."""
    window = f.opt_int("sliding_window")
    return window if window else None


def _sliding_windows(f: _Fields, family: str, n: int, layer_types: tuple[str, ...] | None) -> list[int | None]:
    """The sliding window of each softmax layer (None = full attention), as vLLM assigns it."""
    window = _window(f)
    if family in _QWEN_SLIDING and not f.flag("use_sliding_window", False):
        # transformers' Qwen2/Qwen3 configs null sliding_window unless use_sliding_window is set.
        window = None
    if layer_types is not None:
        if window is None and _SLIDING in layer_types and family not in _QWEN_SLIDING:
            f.missing("sliding_window")
        return [window if kind == _SLIDING else None for kind in layer_types]
    if window is None:
        return [None] * n
    if family in _QWEN_SLIDING:
        first = f.integer("max_window_layers", 0)
        return [window if i >= first else None for i in range(n)]
    if family == "gemma2":
        return [window if i % 2 == 0 else None for i in range(n)]
    if family == "gemma3":
        pattern = f.positive("sliding_window_pattern", 6)
        return [window if (i + 1) % pattern else None for i in range(n)]
    return [window] * n


def _layer_types(f: _Fields, n: int, allowed: Iterable[str]) -> tuple[str, ...] | None:
    """layer_types, checked against the layer count and the kinds this family can have."""
    kinds = f.str_list("layer_types")
    if kinds is None:
        return None
    if len(kinds) < n:
        f.fail(f"'{f.where('layer_types')}' lists {len(kinds)} layers but num_hidden_layers is {n}")
    allowed = set(allowed)
    unknown = sorted(set(kinds[:n]) - allowed)
    if unknown:
        f.fail(f"'{f.where('layer_types')}' has layer kinds dspark does not size: {', '.join(unknown)}")
    return kinds[:n]


def _moe(f: _Fields) -> MoE | None:
    """Routed experts, when the config has any."""
    experts = f.opt_int("num_experts") or f.opt_int("n_routed_experts") or f.opt_int("num_local_experts") or 0
    if experts <= 0:
        return None
    top_k = f.positive("num_experts_per_tok") if not f.has("moe_topk") else f.positive("moe_topk")
    shared = f.opt_int("n_shared_experts")
    if shared is None:
        shared = 1 if (f.opt_int("shared_expert_intermediate_size") or 0) > 0 else 0
    inter = f.opt_int("moe_intermediate_size")
    if inter is None and f.has("num_local_experts"):
        inter = f.opt_int("intermediate_size")  # Mixtral: experts are intermediate_size wide
    return MoE(num_experts=experts, top_k=top_k, num_shared_experts=shared, moe_intermediate_size=inter)


# ---------------------------------------------------------------------------------------------
# Parameter estimate: shapes as the checkpoints store them (checked against transformers' models).
# ---------------------------------------------------------------------------------------------


class _NoEstimate(Exception):
    """A field only the parameter estimate needs is absent: the estimate is skipped, not the parse."""


def _need(f: _Fields, key: str) -> int:
    """An integer only the parameter estimate needs."""
    value = f.opt_int(key)
    if value is None:
        raise _NoEstimate(f"the config has no '{f.where(key)}'")
    if value <= 0:
        f.fail(f"'{f.where(key)}' must be a positive integer, got {value}")
    return value


def _mlp(hidden: int, inter: int, bias: bool = False) -> int:
    """A gated (SwiGLU-style) MLP: gate, up and down projections."""
    return 3 * hidden * inter + (2 * inter + hidden if bias else 0)


def _gqa_params(f: _Fields, family: str, gated: bool = False) -> tuple[int, int, int]:
    """(total, replicated, kv_proj) of one softmax-attention block."""
    hidden = f.positive("hidden_size")
    heads, kv_heads, head_dim = _attention_shape(f)
    q_out = heads * head_dim * (2 if gated else 1)  # gated attention emits a sigmoid gate beside q
    kv = 2 * hidden * kv_heads * head_dim
    total = hidden * q_out + kv + heads * head_dim * hidden
    all_bias = f.flag("attention_bias", False)
    if family in {"qwen2", "qwen2_moe"}:
        total += q_out + 2 * kv_heads * head_dim  # Qwen2 has q/k/v biases, no o_proj bias
    elif all_bias:
        total += q_out + 2 * kv_heads * head_dim + hidden
    replicated = 2 * head_dim if family in _QK_NORM else 0
    return total + replicated, replicated, kv


def _qwen_moe_block(f: _Fields, moe: MoE) -> LayerParams:
    """Qwen2-MoE / Qwen3-MoE / Qwen3-Next / Qwen3.5-MoE sparse block: experts, router, shared expert + its gate."""
    hidden = f.positive("hidden_size")
    inter = moe.moe_intermediate_size or _need(f, "moe_intermediate_size")
    experts = moe.num_experts * 3 * hidden * inter
    router = moe.num_experts * hidden
    shared_inter = f.opt_int("shared_expert_intermediate_size") or 0
    shared = _mlp(hidden, shared_inter) + hidden if shared_inter else 0  # + sigmoid shared_expert_gate
    replicated = router + (hidden if shared_inter else 0)
    return LayerParams(total=experts + router + shared, routed_experts=experts, replicated=replicated)


def _is_qwen_moe_layer(f: _Fields, i: int) -> bool:
    """Qwen MoE layer schedule: mlp_only_layers stay dense; decoder_sparse_step spaces the sparse ones."""
    only = f.int_list("mlp_only_layers") or ()
    step = f.positive("decoder_sparse_step", 1)
    return i not in only and (i + 1) % step == 0


def _dense_params(f: _Fields, family: str, n: int, moe: MoE | None) -> list[LayerParams]:
    """Per-layer parameters of a llama-style decoder (dense or MoE)."""
    hidden = f.positive("hidden_size")
    attn, attn_rep, kv = _gqa_params(f, family)
    norms = (4 if family in {"gemma2", "gemma3"} else 2) * hidden
    out = []
    for i in range(n):
        if moe is not None and family == "mixtral":
            block = LayerParams(
                total=moe.num_experts * 3 * hidden * _need(f, "intermediate_size") + moe.num_experts * hidden,
                routed_experts=moe.num_experts * 3 * hidden * _need(f, "intermediate_size"),
                replicated=moe.num_experts * hidden,
            )
        elif moe is not None and family in {"qwen2_moe", "qwen3_moe"} and _is_qwen_moe_layer(f, i):
            block = _qwen_moe_block(f, moe)
        elif moe is not None and family not in {"qwen2_moe", "qwen3_moe"}:
            raise _NoEstimate(f"dspark does not know the MoE layout of {family}")
        else:
            block = LayerParams(total=_mlp(hidden, _need(f, "intermediate_size"), f.flag("mlp_bias", False)))
        out.append(
            LayerParams(
                total=attn + block.total + norms,
                routed_experts=block.routed_experts,
                replicated=attn_rep + block.replicated + norms,
                kv_proj=kv,
            )
        )
    return out


def _gdn_params(f: _Fields) -> tuple[int, int]:
    """(total, replicated) of one Gated-DeltaNet mixer (Qwen3-Next in_proj_qkvz/ba = Qwen3.5 qkv/z/b/a)."""
    hidden = f.positive("hidden_size")
    nk, nv = f.positive("linear_num_key_heads"), f.positive("linear_num_value_heads")
    dk, dv = f.positive("linear_key_head_dim"), f.positive("linear_value_head_dim")
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    projections = hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * nv + value_dim * hidden
    small = conv_dim * f.positive("linear_conv_kernel_dim") + 2 * nv + dv  # conv1d, dt_bias + A_log, norm
    return projections + small, dv


def _hybrid_gdn_params(f: _Fields, family: str, kinds: Sequence[str], moe: MoE | None) -> list[LayerParams]:
    """Per-layer parameters of Qwen3-Next / Qwen3.5: gated full attention or Gated DeltaNet, then MLP or MoE."""
    hidden = f.positive("hidden_size")
    attn, attn_rep, kv = _gqa_params(f, family, gated=f.flag("attn_output_gate", True))
    gdn, gdn_rep = _gdn_params(f)
    out = []
    for i, kind in enumerate(kinds):
        if moe is not None and _is_qwen_moe_layer(f, i):
            block = _qwen_moe_block(f, moe)
        else:
            block = LayerParams(total=_mlp(hidden, _need(f, "intermediate_size")))
        mixer, mixer_rep, mixer_kv = (gdn, gdn_rep, 0) if kind == "linear_attention" else (attn, attn_rep, kv)
        out.append(
            LayerParams(
                total=mixer + block.total + 2 * hidden,
                routed_experts=block.routed_experts,
                replicated=mixer_rep + block.replicated + 2 * hidden,
                kv_proj=mixer_kv,
            )
        )
    return out


def _qwen_vision_params(f: _Fields) -> int:
    """The Qwen3.5 / Qwen3-VL vision tower: patch embed, position embed, ViT blocks, patch merger(s)."""
    v = f.mapping("vision_config")
    if not v:
        return 0
    vf = _Fields(v, f.source)
    h, inter, depth = vf.positive("hidden_size"), vf.positive("intermediate_size"), vf.positive("depth")
    patch = vf.positive("in_channels", 3) * vf.positive("temporal_patch_size", 2) * vf.positive("patch_size") ** 2
    block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h)
    merged = h * vf.positive("spatial_merge_size", 2) ** 2
    out_h = vf.positive("out_hidden_size")
    merger = 2 * h + merged * merged + merged + out_h * merged + out_h
    deepstack = len(vf.int_list("deepstack_visual_indexes") or ())
    deepstack_merger = 2 * merged + merged * merged + merged + out_h * merged + out_h
    positions = vf.integer("num_position_embeddings", 0) * h
    return patch * h + h + positions + depth * block + merger + deepstack * deepstack_merger


def _mla_attention_params(f: _Fields, family: str) -> tuple[int, int]:
    """(total, replicated) of one DeepSeek MLA block (with the V3.2 indexer)."""
    hidden = f.positive("hidden_size")
    heads = f.positive("num_attention_heads")
    kv_rank, rope = f.positive("kv_lora_rank"), f.positive("qk_rope_head_dim")
    nope, v_dim = _need(f, "qk_nope_head_dim"), _need(f, "v_head_dim")
    q_rank = f.opt_int("q_lora_rank")
    q_head = heads * (nope + rope)
    if q_rank:
        q_down = hidden * q_rank + q_rank  # q_a_proj + q_a_layernorm: replicated in vLLM
        q_total, replicated = q_down + q_rank * q_head, q_down
    else:
        q_total, replicated = hidden * q_head, 0
    kv_down = hidden * (kv_rank + rope) + kv_rank  # kv_a_proj_with_mqa + kv_a_layernorm: replicated
    total = q_total + kv_down + kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden
    replicated += kv_down
    if family == "deepseek_v32":
        ih, ihd = _need(f, "index_n_heads"), f.positive("index_head_dim")
        indexer = (q_rank or hidden) * ih * ihd + hidden * ihd + 2 * ihd + hidden * ih
        total += indexer
        replicated += indexer  # vLLM builds the indexer from ReplicatedLinear
    return total, replicated


def _deepseek_moe_block(f: _Fields, moe: MoE, bias: bool) -> LayerParams:
    """DeepSeek routed experts + shared experts + router (+ the noaux_tc score-correction bias)."""
    hidden = f.positive("hidden_size")
    inter = moe.moe_intermediate_size or _need(f, "moe_intermediate_size")
    experts = moe.num_experts * 3 * hidden * inter
    router = moe.num_experts * hidden + (moe.num_experts if bias else 0)
    shared = 3 * hidden * inter * moe.num_shared_experts
    return LayerParams(total=experts + router + shared, routed_experts=experts, replicated=router)


def _mla_params(f: _Fields, family: str, n: int, moe: MoE | None) -> tuple[list[LayerParams], LayerParams]:
    """Per-layer parameters of DeepSeek-V2/V3/V3.2, and one MoE layer (the MTP block's body)."""
    hidden = f.positive("hidden_size")
    attn, attn_rep = _mla_attention_params(f, family)
    first_dense = f.integer("first_k_dense_replace", 0)
    freq = f.positive("moe_layer_freq", 1)
    bias = f.text("topk_method") == "noaux_tc"
    dense = LayerParams(total=_mlp(hidden, _need(f, "intermediate_size")))
    sparse = _deepseek_moe_block(f, moe, bias) if moe is not None else dense

    def layer(block: LayerParams) -> LayerParams:
        return LayerParams(
            total=attn + block.total + 2 * hidden,
            routed_experts=block.routed_experts,
            replicated=attn_rep + block.replicated + 2 * hidden,
        )

    out = [layer(sparse if moe is not None and i >= first_dense and i % freq == 0 else dense) for i in range(n)]
    return out, layer(sparse)


def _v4_params(f: _Fields, ratios: Sequence[int], moe: MoE) -> tuple[list[LayerParams], int, int]:
    """Per-layer parameters of DeepSeek-V4, its final mHC head, and one MTP module (transformers' shapes)."""
    hidden = f.positive("hidden_size")
    heads, _, head_dim = _attention_shape(f)
    q_rank = _need(f, "q_lora_rank")
    o_groups, o_rank = _need(f, "o_groups"), _need(f, "o_lora_rank")
    ih, ihd = _need(f, "index_n_heads"), f.positive("index_head_dim")
    hc = f.positive("hc_mult", 4)
    n_hash = f.integer("num_hash_layers", 3)
    # Replicated in vLLM: q down-projection, the single-head KV projection, compressors, indexers, mHC.
    attn_rep = hidden * q_rank + q_rank + hidden * head_dim + head_dim
    attn = attn_rep + q_rank * heads * head_dim + heads  # + q_b_proj, attention sinks
    attn += o_groups * o_rank * (heads * head_dim // o_groups) + hidden * o_groups * o_rank  # grouped output
    mhc = 2 * ((2 + hc) * hc * hc * hidden + (2 + hc) * hc + 3)  # attention and FFN hyper-connections
    norms = 2 * hidden

    def compressor(ratio: int) -> int:
        if ratio <= 0:
            return 0
        coff = 2 if ratio == 4 else 1  # ratio-4 compressors overlap windows: twice the width
        total = ratio * coff * head_dim + 2 * hidden * coff * head_dim + head_dim
        if ratio == 4:  # the lightning indexer rides on the ratio-4 layers
            total += ratio * 2 * ihd + 2 * hidden * 2 * ihd + ihd + q_rank * ih * ihd + hidden * ih
        return total

    def layer(i: int, ratio: int) -> LayerParams:
        block = _deepseek_moe_block(f, moe, bias=i >= n_hash)
        extra = compressor(ratio)
        return LayerParams(
            total=attn + extra + block.total + norms + mhc,
            routed_experts=block.routed_experts,
            replicated=attn_rep + extra + block.replicated + norms + mhc,
        )

    n = len(ratios)
    layers = [layer(i, r) for i, r in enumerate(ratios)]
    head = hc * hc * hidden + hc + 1
    all_ratios = _v4_ratios(f, n)
    mtp_ratio = all_ratios[n] if len(all_ratios) > n else 0
    mtp = layer(n, mtp_ratio).total + 2 * hidden * hidden + 3 * hidden + head
    return layers, head, mtp


def _v4_ratios(f: _Fields, n: int) -> tuple[int, ...]:
    """compress_ratios, one per layer (plus trailing MTP entries), with 1 read as 0: window only.

    vLLM's DeepSeek-V4 attention keeps only the sliding window when compress_ratio <= 1, and its
    compressor knows ratios 4 and 128 alone; anything else is refused rather than guessed.
    """
    ratios = f.int_list("compress_ratios")
    if ratios is None:
        f.missing("compress_ratios")
    if len(ratios) < n:
        f.fail(f"'compress_ratios' lists {len(ratios)} layers but num_hidden_layers is {n}")
    bad = sorted(set(ratios) - {0, 1, 4, 128})
    if bad:
        f.fail(f"'compress_ratios' has ratios dspark does not size: {bad} (DeepSeek-V4 uses 0, 1, 4, 128)")
    return tuple(0 if r <= 1 else r for r in ratios)


# ---------------------------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------------------------


@dataclass
class _Parsed:
    layers: list[Layer]
    mtp_layers: list[Layer] = field(default_factory=list)
    per_layer: Callable[[], tuple[list[LayerParams], int, int, int]] | None = None  # layers, final, vision, mtp
    notes: list[str] = field(default_factory=list)


def _mtp_count(f: _Fields, family: str) -> int:
    """MTP modules the checkpoint ships."""
    if family in {"qwen3_5", "qwen3_5_moe"}:
        return f.integer("mtp_num_hidden_layers", 0)
    if family == "qwen3_next":
        return f.integer("num_nextn_predict_layers", 1)  # the config omits it; vLLM defaults to 1
    return f.integer("num_nextn_predict_layers", 0)


def _embeddings(f: _Fields, family: str) -> tuple[int, int, bool]:
    """(embedding, lm_head, tied) parameters."""
    vocab, hidden = f.positive("vocab_size"), f.positive("hidden_size")
    tied = f.flag("tie_word_embeddings", family in _TIED_BY_DEFAULT)
    return vocab * hidden, 0 if tied else vocab * hidden, tied


def _parse_dense(f: _Fields, family: str, n: int, moe: MoE | None) -> _Parsed:
    _, kv_heads, head_dim = _attention_shape(f)
    kinds = _layer_types(f, n, {_SLIDING, *_FULL})
    windows = _sliding_windows(f, family, n, kinds)
    layers: list[Layer] = [AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=w) for w in windows]
    parsed = _Parsed(layers=layers)
    mtp = _mtp_count(f, family)
    if mtp:
        # GLM/MiMo-style MTP blocks are one full-attention decoder layer each.
        parsed.mtp_layers = [AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim)] * mtp
    hidden = f.positive("hidden_size")

    def count() -> tuple[list[LayerParams], int, int, int]:
        per_layer = _dense_params(f, family, n, moe)
        return per_layer, hidden, 0, mtp * per_layer[-1].total

    parsed.per_layer = count
    if mtp:
        parsed.notes.append("MTP parameters estimated as one decoder layer per module")
    return parsed


def _parse_gdn(f: _Fields, family: str, n: int, moe: MoE | None) -> _Parsed:
    _, kv_heads, head_dim = _attention_shape(f)
    kinds = _layer_types(f, n, {"linear_attention", *_FULL})
    if kinds is None:
        if not f.has("full_attention_interval"):
            f.fail("needs 'layer_types' or 'full_attention_interval' to place its full-attention layers")
        interval = f.positive("full_attention_interval")
        kinds = tuple("full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n))
    state = LinearStateLayer(
        family="gated_delta_net",
        conv_kernel=f.positive("linear_conv_kernel_dim"),
        num_k_heads=f.positive("linear_num_key_heads"),
        num_v_heads=f.positive("linear_num_value_heads"),
        head_k_dim=f.positive("linear_key_head_dim"),
        head_v_dim=f.positive("linear_value_head_dim"),
        ssm_dtype=_state_dtype(f, "mamba_ssm_dtype"),
    )
    attention = AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim)
    layers: list[Layer] = [state if kind == "linear_attention" else attention for kind in kinds]
    mtp = _mtp_count(f, family)
    parsed = _Parsed(layers=layers, mtp_layers=[attention] * mtp)
    if family == "qwen3_next" and not f.has("num_nextn_predict_layers"):
        parsed.notes.append("Qwen3-Next ships 1 MTP layer its config does not list; vLLM defaults it to 1")
    hidden = f.positive("hidden_size")

    def count() -> tuple[list[LayerParams], int, int, int]:
        per_layer = _hybrid_gdn_params(f, family, kinds, moe)
        full = next(p for p, kind in zip(per_layer, kinds, strict=True) if kind != "linear_attention")
        # Qwen3-Next / Qwen3.5 MTP: full-attention layers + fc(2h -> h) + three norms; embeddings shared.
        mtp_params = mtp * full.total + 2 * hidden * hidden + 3 * hidden if mtp else 0
        vision = _qwen_vision_params(f) if family in {"qwen3_5", "qwen3_5_moe"} else 0
        return per_layer, hidden, vision, mtp_params

    parsed.per_layer = count
    return parsed


def _parse_mla(f: _Fields, family: str, n: int, moe: MoE | None) -> _Parsed:
    index_dim = f.positive("index_head_dim") if family == "deepseek_v32" else None
    mla = MLALayer(
        kv_lora_rank=f.positive("kv_lora_rank"),
        qk_rope_head_dim=f.positive("qk_rope_head_dim"),
        index_head_dim=index_dim,
    )
    mtp = _mtp_count(f, family)
    parsed = _Parsed(layers=[mla] * n, mtp_layers=[mla] * mtp)
    hidden = f.positive("hidden_size")

    def count() -> tuple[list[LayerParams], int, int, int]:
        per_layer, mtp_layer = _mla_params(f, family, n, moe)
        # DeepSeek MTP: a decoder layer + eh_proj(2h -> h) + enorm, hnorm, shared_head.norm. The
        # checkpoint also stores copies of embed_tokens and the head there; vLLM shares the target's.
        return per_layer, hidden, 0, mtp * (mtp_layer.total + 2 * hidden * hidden + 3 * hidden)

    parsed.per_layer = count
    return parsed


def _parse_v4(f: _Fields, n: int, moe: MoE | None) -> _Parsed:
    ratios = _v4_ratios(f, n)
    window = _window(f)
    if window is None:
        f.missing("sliding_window")
    _, _, head_dim = _attention_shape(f)
    rope = f.positive("qk_rope_head_dim")
    index_dim = f.positive("index_head_dim")

    def layer(ratio: int) -> MLALayer:
        # One 512-wide KV head (448 NoPE + 64 RoPE) per row; ratio-4 layers add the indexer's keys.
        return MLALayer(
            kv_lora_rank=head_dim - rope,
            qk_rope_head_dim=rope,
            index_head_dim=index_dim if ratio == 4 else None,
            compress_ratio=ratio,
            sliding_window=window,
        )

    mtp = _mtp_count(f, "deepseek_v4")
    mtp_ratios = [ratios[n + i] if n + i < len(ratios) else 0 for i in range(mtp)]
    parsed = _Parsed(layers=[layer(r) for r in ratios[:n]], mtp_layers=[layer(r) for r in mtp_ratios])
    parsed.notes.append(
        "DeepSeek-V4 layers: every layer keeps a raw sliding window; compress_ratio 4/128 layers add "
        "one compressed row per 4/128 tokens (ratio 4 also an indexer key); 0 = window only"
    )
    if mtp and len(ratios) < n + mtp:
        parsed.notes.append("compress_ratios has no MTP entry: MTP layer assumed window-only (ratio 0)")

    def count() -> tuple[list[LayerParams], int, int, int]:
        if moe is None:
            raise _NoEstimate(f"the config has no '{f.where('n_routed_experts')}'")
        per_layer, head, mtp_one = _v4_params(f, ratios[:n], moe)
        return per_layer, f.positive("hidden_size") + head, 0, mtp * mtp_one

    parsed.per_layer = count
    return parsed


def _mamba_kinds(f: _Fields, n: int, family: str) -> tuple[str, ...]:
    """Each layer's kind in a Mamba2 hybrid: "mamba", "attention", or a cache-less "mlp"/"moe"."""
    if family == "nemotron_h":
        pattern = f.text("hybrid_override_pattern")
        if pattern is not None:
            names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
            unknown = sorted(set(pattern) - set(names))
            if unknown:
                f.fail(f"'hybrid_override_pattern' has layer symbols dspark does not size: {unknown}")
            kinds = tuple(names[c] for c in pattern)
        else:
            kinds = f.str_list("layers_block_type") or f.missing("hybrid_override_pattern")
    else:
        kinds = f.str_list("layer_types") or f.missing("layer_types")
    if len(kinds) != n:
        f.fail(f"the layer pattern lists {len(kinds)} layers but num_hidden_layers is {n}")
    unknown = sorted(set(kinds) - {"mamba", "attention", "mlp", "moe"})
    if unknown:
        f.fail(f"layer kinds dspark does not size: {', '.join(unknown)}")
    return kinds


def _parse_mamba2(f: _Fields, family: str, n: int) -> _Parsed:
    kinds = _mamba_kinds(f, n, family)
    _, kv_heads, head_dim = _attention_shape(f)
    if family == "nemotron_h":
        groups, state, heads = f.positive("n_groups"), f.positive("ssm_state_size"), f.positive("mamba_num_heads")
        head_v, kernel = f.positive("mamba_head_dim"), f.positive("conv_kernel")
        ssm_dtype = _state_dtype(f, "mamba_ssm_cache_dtype")
    else:
        groups, state, heads = f.positive("mamba_n_groups"), f.positive("mamba_d_state"), f.positive("mamba_n_heads")
        raw_head = f.raw("mamba_d_head")
        if raw_head in (None, "auto"):
            head_v = f.positive("mamba_expand", 2) * f.positive("hidden_size") // heads
        else:
            head_v = f.positive("mamba_d_head")
        kernel, ssm_dtype = f.positive("mamba_d_conv"), None
    mamba = LinearStateLayer(
        family="mamba2",
        conv_kernel=kernel,
        num_k_heads=groups,
        num_v_heads=heads,
        head_k_dim=state,
        head_v_dim=head_v,
        ssm_dtype=ssm_dtype,
    )
    attention = AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=_window(f))
    layers: list[Layer] = [mamba if k == "mamba" else attention for k in kinds if k in {"mamba", "attention"}]
    parsed = _Parsed(layers=layers)
    dropped = sum(k in {"mlp", "moe"} for k in kinds)
    if dropped:
        parsed.notes.append(f"{dropped} MLP/MoE-only layers keep no cache and are not listed in layers")
    parsed.notes.append("Mamba2 hybrid: no parameter estimate from the config (weights come from safetensors)")
    return parsed


def parse_config(config: Mapping[str, Any], source: str = "") -> ModelArchitecture:
    """Normalise a config.json mapping into layers; raises ArchitectureError naming source, key and fix."""
    if not isinstance(config, Mapping):
        raise ArchitectureError(f"{source or '<inline config>'}: a model config must be a JSON object; {_FIX}")
    f = _Fields(config, source)
    family = _family(f)
    f.label = f"model_type '{family}'"
    notes: list[str] = []
    n = f.positive("num_hidden_layers")
    hidden = f.positive("hidden_size")
    heads = f.positive("num_attention_heads")
    vocab = f.positive("vocab_size")
    max_pos = f.positive("max_position_embeddings")
    dtype = _dtype(f, notes)
    quantization, weight_format, expert_format = _quantization(f, notes)
    moe = _moe(f)
    if family in _MLA_FAMILIES:
        parsed = _parse_mla(f, family, n, moe)
    elif family == "deepseek_v4":
        parsed = _parse_v4(f, n, moe)
    elif family in _GDN_FAMILIES:
        parsed = _parse_gdn(f, family, n, moe)
    elif family in _MAMBA2_FAMILIES:
        parsed = _parse_mamba2(f, family, n)
    else:
        parsed = _parse_dense(f, family, n, moe)
    notes.extend(parsed.notes)

    embedding, lm_head, tied = _embeddings(f, family)
    parameters: ParameterCount | None = None
    if parsed.per_layer is not None:
        try:
            per_layer, final, vision, mtp = parsed.per_layer()
        except _NoEstimate as missing:
            notes.append(f"no parameter estimate: {missing.args[0]}")
        else:
            parameters = ParameterCount(
                embedding=embedding,
                lm_head=lm_head,
                layers=tuple(per_layer),
                final=final,
                vision=vision,
                mtp=mtp,
            )
            if f.mapping("vision_config") and not vision:
                notes.append("vision tower not counted in the parameter estimate")
    return ModelArchitecture(
        model_type=family,
        architecture=_architecture(f),
        dtype=dtype,
        hidden_size=hidden,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        layers=tuple(parsed.layers),
        num_attention_heads=heads,
        moe=moe,
        mtp_layers=tuple(parsed.mtp_layers),
        parameter_count=None if parameters is None else parameters.total,
        quantization=quantization,
        source=source,
        notes=tuple(notes),
        parameters=parameters,
        weight_format=weight_format,
        expert_weight_format=expert_format,
        tie_word_embeddings=tied,
    )


# ---------------------------------------------------------------------------------------------
# Drafters
# ---------------------------------------------------------------------------------------------

DRAFTER_METHODS = ("mtp", "eagle3", "eagle", "dflash", "draft_model")


def _dflash_layers(f: _Fields, n: int, kv_heads: int, head_dim: int) -> list[Layer]:
    """DFlash draft layers as vLLM's qwen3_dflash resolves them (_resolve_layer_attention)."""
    dflash = f.mapping("dflash_config")
    kinds = _layer_types(f, n, {_SLIDING, *_FULL})
    use_swa = bool(dflash.get("use_swa", False))
    any_sliding = kinds is not None and _SLIDING in kinds
    window = _Fields(dflash, f.source).opt_int("swa_window_size") or _window(f)
    layers: list[Layer] = []
    for i in range(n):
        sliding = use_swa if kinds is None or (use_swa and not any_sliding) else kinds[i] == _SLIDING
        if sliding and window is None:
            f.missing("sliding_window")
        layers.append(
            AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=window if sliding else None)
        )
    return layers


def parse_drafter(
    config: Mapping[str, Any] | None,
    method: str,
    source: str = "",
    *,
    target: ModelArchitecture | None = None,
) -> Drafter:
    """Normalise a drafter's config.json (MTP: the target's own modules) into the layers that keep KV."""
    if method not in DRAFTER_METHODS:
        raise ArchitectureError(
            f"{source or '<speculative config>'}: speculative method '{method}' is not one of "
            f"{', '.join(DRAFTER_METHODS)}; use a method dspark sizes"
        )
    if method == "mtp":
        arch = target if target is not None else parse_config(config or {}, source)
        if not arch.mtp_layers:
            raise ArchitectureError(
                f"{arch.source or source or '<inline config>'}: model_type '{arch.model_type}' has no MTP "
                "modules (num_nextn_predict_layers / mtp_num_hidden_layers is 0 or absent); "
                f"{_FIX}, or use another speculative method"
            )
        mtp_params = arch.parameters.mtp if arch.parameters is not None else None
        return Drafter(
            method="mtp",
            layers=arch.mtp_layers,
            parameter_count=mtp_params,
            source=arch.source or source,
            dtype=arch.dtype,
        )
    if config is None:
        raise ArchitectureError(
            f"{source or '<speculative config>'}: method '{method}' needs the drafter's config.json"
        )
    if method == "draft_model":
        arch = parse_config(config, source)
        return Drafter(
            method=method,
            layers=arch.layers,
            parameter_count=arch.parameter_count,
            source=source,
            dtype=arch.dtype,
            notes=arch.notes,
        )
    # speculators-format checkpoints nest the transformer under transformer_layer_config.
    nested = "transformer_layer_config" if "transformer_layer_config" in config else "text_config"
    f = _Fields(config, source, nested=nested)
    f.label = f"{method} drafter"
    notes: list[str] = []
    dtype = _dtype(f, notes)
    if method == "dflash":
        return _dflash_drafter(f, source, dtype, notes)
    return _eagle_drafter(f, method, source, dtype, notes)


def _dflash_drafter(f: _Fields, source: str, dtype: str, notes: list[str]) -> Drafter:
    """A DFlash drafter: Qwen3-style layers (sliding per vLLM's rules) fed by fused target hidden states."""
    n = f.positive("num_hidden_layers")
    hidden = f.positive("hidden_size")
    _, kv_heads, head_dim = _attention_shape(f)
    family = _ALIASES.get(str(f.raw("model_type") or "qwen3"), str(f.raw("model_type") or "qwen3"))
    attn, _, _ = _gqa_params(f, family)
    inter = f.opt_int("intermediate_size")
    df = _Fields(f.mapping("dflash_config"), f"{f.source} dflash_config")
    block = df.opt_int("block_size") or f.opt_int("block_size")
    targets = df.int_list("target_layer_ids") or f.int_list("eagle_aux_hidden_state_layer_ids") or ()
    layers = _dflash_layers(f, n, kv_heads, head_dim)
    params = None
    if inter is not None:
        fc_in = (f.opt_int("target_hidden_size") or hidden) * (len(targets) or n)
        params = n * (attn + _mlp(hidden, inter) + 2 * hidden) + fc_in * hidden + 2 * hidden
        notes.append("DFlash parameters: draft layers + fc + norms; embedding and LM head are the target's")
    if "DFlash2" in _architecture(f):
        notes.append("DFlash2 extras (convolutions, candidate selector) not in the parameter estimate")
    return Drafter(
        method="dflash",
        layers=tuple(layers),
        parameter_count=params,
        source=source,
        dtype=dtype,
        block_size=block,
        target_layer_ids=targets,
        notes=tuple(notes),
    )


def _eagle_drafter(f: _Fields, method: str, source: str, dtype: str, notes: list[str]) -> Drafter:
    """An EAGLE / EAGLE-3 drafter: Llama- or Qwen3-style decoder layers; vLLM gives each its own KV."""
    n = f.positive("num_hidden_layers")
    hidden = f.positive("hidden_size")
    heads, kv_heads, head_dim = _attention_shape(f)
    family = _ALIASES.get(str(f.raw("model_type") or "llama"), str(f.raw("model_type") or "llama"))
    attn, _, kv = _gqa_params(f, family)
    inter = f.opt_int("intermediate_size")
    kinds = _layer_types(f, n, {_SLIDING, *_FULL})
    windows = _sliding_windows(f, family if family in _DENSE_FAMILIES else "llama", n, kinds)
    layers = [AttentionLayer(num_kv_heads=kv_heads, head_dim=head_dim, sliding_window=w) for w in windows]
    targets = f.int_list("eagle_aux_hidden_state_layer_ids") or ()
    params = None
    if inter is not None:
        q_o = attn - kv
        if method == "eagle3":
            # Layer 0 reads [embedding, hidden] (2h) into q/k/v; fc fuses 3 target hidden states.
            first = q_o + hidden * heads * head_dim + 2 * kv + _mlp(hidden, inter) + 3 * hidden
            rest = (n - 1) * (attn + _mlp(hidden, inter) + 2 * hidden)
            fc = (f.opt_int("target_hidden_size") or hidden) * (len(targets) or 3) * hidden
            vocab = f.opt_int("draft_vocab_size") or f.positive("vocab_size")
            params = first + rest + fc + hidden + vocab * hidden
        else:
            params = n * (attn + _mlp(hidden, inter) + 2 * hidden) + 2 * hidden * hidden
        notes.append("drafter parameters exclude the input embedding, which vLLM shares with the target")
    return Drafter(
        method=method,
        layers=tuple(layers),
        parameter_count=params,
        source=source,
        dtype=dtype,
        target_layer_ids=targets,
        notes=tuple(notes),
    )
