"""Typed, bounded reads from config.json, and what every family shares: dtype, attention, windows, MoE."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from dspark.core.errors import ArchitectureError
from dspark.model.architecture.layers import MoE

FIX_HINT = "give the field in the recipe's model.config, or pass a config.json that has it"
_REQUIRED: Any = object()

# model_type spellings that name the same family.
ALIASES = {
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "gemma3_text": "gemma3",
}
DENSE_FAMILIES = frozenset(
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
MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"})
GDN_FAMILIES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe"})
MAMBA2_FAMILIES = frozenset({"nemotron_h", "granitemoehybrid"})
_QWEN_SLIDING = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})  # use_sliding_window + max_window_layers
QK_NORM = frozenset({"qwen3", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma3", "olmo2"})
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3"})
SLIDING = "sliding_attention"
FULL_KINDS = frozenset({"full_attention", "attention"})

# Upper bounds on integers read from a config: far above any real model, low enough that a typo or a
# hostile file (num_hidden_layers: 10**30) is refused with its key named instead of exhausting memory
# in a per-layer list. Keys not listed share the last line's bound.
_LAYER_COUNT = 10_000  # the largest published decoders have a few hundred layers
_MTP_COUNT = 64
_HEADS = 1 << 16
_WIDTH = 1 << 20  # hidden sizes, head and intermediate dims
INT_LIMITS: dict[str, int] = {
    "num_hidden_layers": _LAYER_COUNT,
    "max_window_layers": _LAYER_COUNT,
    "first_k_dense_replace": _LAYER_COUNT,
    "num_hash_layers": _LAYER_COUNT,
    "full_attention_interval": _LAYER_COUNT,
    "num_nextn_predict_layers": _MTP_COUNT,
    "mtp_num_hidden_layers": _MTP_COUNT,
    "num_attention_heads": _HEADS,
    "num_key_value_heads": _HEADS,
    "linear_num_key_heads": _HEADS,
    "linear_num_value_heads": _HEADS,
    "mamba_num_heads": _HEADS,
    "mamba_n_heads": _HEADS,
    "n_groups": _HEADS,
    "mamba_n_groups": _HEADS,
    "index_n_heads": _HEADS,
    "num_experts": _HEADS,
    "n_routed_experts": _HEADS,
    "num_local_experts": _HEADS,
    "num_experts_per_tok": _HEADS,
    "moe_topk": _HEADS,
    "n_shared_experts": _HEADS,
    "vocab_size": 1 << 24,
    "draft_vocab_size": 1 << 24,
}
DEFAULT_INT_LIMIT = _WIDTH * 2048  # 2**31: context lengths, windows, widths


class ConfigFields:
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
        return ArchitectureError(f"{self.source}{label}: {problem}; {FIX_HINT}")

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
        limit = INT_LIMITS.get(key, DEFAULT_INT_LIMIT)
        if value > limit:
            shown = f"{int(value):.3g}" if value < 1e300 else f"a {int(value).bit_length():,}-bit number"
            self.fail(f"'{self.where(key)}' is {shown}, above the largest dspark accepts ({limit:,})")
        return int(value)


def architecture_class(f: ConfigFields) -> str:
    """The first of "architectures" (the class the engine builds), or "" when the config names none."""
    # The outer config names the class the engine builds (a VLM's text_config may name its own).
    outer = ConfigFields({"architectures": f.outer.get("architectures")}, f.source)
    names = outer.str_list("architectures") or f.str_list("architectures") or ("",)
    return names[0] if names else ""


def family_of(f: ConfigFields) -> str:
    """The normalised model_type, or a family recognised from the fields; fails closed."""
    outer_type = f.outer.get("model_type")
    inner_type = f.inner.get("model_type")
    for value in (outer_type, inner_type):
        if value is not None and not isinstance(value, str):
            f.fail(f"'model_type' must be a string, got {value!r}")
    raw = outer_type or inner_type
    model_type = ALIASES.get(raw or "", raw or "")
    if model_type in DENSE_FAMILIES | MLA_FAMILIES | GDN_FAMILIES | MAMBA2_FAMILIES | {"deepseek_v4"}:
        return model_type
    if isinstance(inner_type, str) and ALIASES.get(inner_type, inner_type) in GDN_FAMILIES | DENSE_FAMILIES:
        return ALIASES.get(inner_type, inner_type)
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
    known = sorted(DENSE_FAMILIES | MLA_FAMILIES | GDN_FAMILIES | MAMBA2_FAMILIES | {"deepseek_v4"})
    raise f.error(
        f"{what} and no fields that identify its layers (kv_lora_rank, linear_num_value_heads, "
        f"compress_ratios, hybrid_override_pattern); known model_types: {', '.join(known)} "
        "(a llama-style model can set model_type 'llama' in model.config_overrides)"
    )


def model_dtype(f: ConfigFields, notes: list[str]) -> str:
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


def state_dtype(f: ConfigFields, key: str) -> str | None:
    """A recurrent-state dtype the config asks for (Qwen3.5 mamba_ssm_dtype float32)."""
    raw = f.text(key)
    if raw is None:
        return None
    name = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(raw.lower(), raw.lower())
    if name not in {"bfloat16", "float16", "float32"}:
        f.fail(f"'{f.where(key)}' is '{raw}', not one of bfloat16, float16, float32")
    return name



def attention_shape(f: ConfigFields) -> tuple[int, int, int]:
    """(query heads, KV heads, head dim) of softmax attention: explicit head_dim wins over hidden // heads."""
    heads = f.positive("num_attention_heads")
    kv_heads = f.positive("num_key_value_heads", heads)
    # Grouped-query attention shares each KV head among heads // kv_heads query heads: the engines'
    # attention layers (and transformers' repeat_kv) cannot build a model where that is not whole.
    if kv_heads > heads or heads % kv_heads:
        f.fail(
            f"'{f.where('num_key_value_heads')}' {kv_heads} must divide num_attention_heads {heads} "
            "(each KV head serves a whole group of query heads)"
        )
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


def window_of(f: ConfigFields) -> int | None:
    """sliding_window as the engines read it: 0 and null both mean none."""
    window = f.opt_int("sliding_window")
    if window is not None and window < 0:
        f.fail(f"'{f.where('sliding_window')}' must be a positive number of tokens (0 or null: none), got {window}")
    return window if window else None


def sliding_windows(f: ConfigFields, family: str, n: int, layer_types: tuple[str, ...] | None) -> list[int | None]:
    """The sliding window of each softmax layer (None = full attention), as vLLM assigns it."""
    window = window_of(f)
    if family in _QWEN_SLIDING and not f.flag("use_sliding_window", False):
        # transformers' Qwen2/Qwen3 configs null sliding_window unless use_sliding_window is set.
        window = None
    if layer_types is not None:
        if window is None and SLIDING in layer_types and family not in _QWEN_SLIDING:
            f.missing("sliding_window")
        return [window if kind == SLIDING else None for kind in layer_types]
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


def layer_types(f: ConfigFields, n: int, allowed: Iterable[str]) -> tuple[str, ...] | None:
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


def read_moe(f: ConfigFields) -> MoE | None:
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
