"""The recipe's keys as pydantic models (extra="forbid"): what each section holds and how each value is read. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date as Date
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    WithJsonSchema,
    field_validator,
)

from dspark.core.constants import MAX_NUM_SEQS_LIMIT, KvCacheDtype
from dspark.core.units import SIZE_PATTERN, SIZE_UNITS_HELP, parse_count, parse_size
from dspark.engines import ENGINE_NAMES

if TYPE_CHECKING:
    Engine = str
else:  # the registry's names: the JSON schema's enum and pydantic's "Input should be ..." list them
    Engine = Literal[ENGINE_NAMES]
WeightsFormat = Literal["bf16", "fp16", "fp8", "nvfp4", "mxfp4", "int4", "int8"]
# The methods whose drafter dspark can size (dspark.model.architecture.DRAFTER_METHODS; a test keeps them equal).
SpeculativeMethod = Literal["mtp", "eagle3", "eagle", "dflash", "draft_model"]
Metric = Literal[
    "kv_pool_tokens",
    "full_contexts",
    "cudagraph_max_capture_size",
    "decode_tok_s",
    "stream_decode_tok_s",
    "ttft_s",
    "wall_s",
    "decode_step_ms",
    "prefill_ms_per_token",
    "kv_usage_peak",
    "prefix_hit_rate",
]
# Metrics whose value is a count, so a fraction means a typo.
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """base with over's keys laid on top; mappings present in both are merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _size(value: object) -> object:
    """Let pydantic see bytes for a size written as "28GB"; other types fall through to its own error."""
    if isinstance(value, str | int) and not isinstance(value, bool):
        return parse_size(value)
    return value


def _count(value: object) -> object:
    """Let pydantic see an int for a token count written as "256K"; other types fall through."""
    if isinstance(value, str):
        return parse_count(value)
    return value


# Strict numbers: YAML reads `true` as a bool, which lax validation would take as the count 1.
Whole = Annotated[int, Strict()]
Real = Annotated[float, Strict()]

ByteSize = Annotated[
    int,
    BeforeValidator(_size),
    Strict(),
    Field(gt=0),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "exclusiveMinimum": 0},
                {"type": "string", "pattern": SIZE_PATTERN},
            ],
            "description": f"A size: {SIZE_UNITS_HELP.removeprefix('use ')}.",
        }
    ),
]
TokenCount = Annotated[
    int,
    BeforeValidator(_count),
    Strict(),
    Field(gt=0),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "exclusiveMinimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?[kKmMgG]?\s*$"},
            ],
            "description": "Tokens: an int, or vLLM's suffixes (8k = 8,000, 8K = 8,192).",
        }
    ),
]


class _Strict(BaseModel):
    """Base of every recipe section: unknown keys are errors (a typo never silently means 'unset')."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Strict):
    """The model to serve and, when its directory is not on this machine, its config inline."""

    path: str = Field(min_length=1, description="Model directory or Hugging Face repo id (may be absent here).")
    revision: str | None = Field(default=None, description="Hugging Face revision (commit, tag or branch) to serve.")
    served_name: str | None = Field(default=None, description="Name clients use (--served-model-name).")
    quantization: WeightsFormat | None = Field(
        default=None, description="Weights format, for weight-size estimates when no safetensors are at hand."
    )
    config: dict[str, Any] | None = Field(
        default=None, description="The model's config.json, inline; used when the directory is not on this machine."
    )
    config_overrides: dict[str, Any] | None = Field(
        default=None,
        description="Keys merged over config.json (from the directory or `config`), nested mappings merged.",
    )
    weights_bytes: ByteSize | None = Field(
        default=None, description="Total weight bytes (all ranks) when no safetensors are at hand."
    )

    def resolve_config(self, on_disk: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """config.json to plan with: the directory's if read, else the inline one, with overrides merged over it."""
        base = dict(on_disk) if on_disk is not None else (dict(self.config) if self.config is not None else None)
        if base is None:
            return None
        return _deep_merge(base, self.config_overrides or {})


class Parallel(_Strict):
    """How the model is split: tensor and pipeline parallelism, and the nodes it spans."""

    tensor: Whole | None = Field(default=None, ge=1, description="Tensor-parallel size (GPUs per pipeline stage).")
    pipeline: Whole | None = Field(default=None, ge=1, description="Pipeline-parallel size.")
    nodes: Whole | None = Field(default=None, ge=1, description="Number of machines the engine spans.")
    master_addr: str | None = Field(
        default=None, min_length=1, description="Address of node 0 for a multi-node launch."
    )
    master_port: Whole | None = Field(
        default=None, ge=1, le=65535, description="Port of node 0 for a multi-node launch."
    )
    runtime: Literal["native", "ray"] | None = Field(
        default=None, description="Multi-node runtime: the engine's own (torch.distributed) or Ray."
    )


class Context(_Strict):
    """The context window the engine is started with."""

    max_model_len: TokenCount | None = Field(
        default=None, description="Window in tokens (--max-model-len / --context-length); default: the model's own."
    )


class KvCache(_Strict):
    """KV-cache dtype and how its size is fixed: a pin (exact) or a memory fraction (the engine estimates)."""

    dtype: KvCacheDtype | None = Field(default=None, description="KV-cache dtype (--kv-cache-dtype); default auto.")
    memory: ByteSize | None = Field(
        default=None,
        description="KV pin per GPU. vLLM: --kv-cache-memory-bytes; SGLang: converted to --max-total-tokens.",
    )
    tokens: TokenCount | None = Field(default=None, description="KV pool pin in tokens (SGLang --max-total-tokens).")
    gpu_memory_utilization: Real | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="vLLM --gpu-memory-utilization (share of GPU memory vLLM may use).",
    )
    mem_fraction_static: Real | None = Field(
        default=None,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="SGLang --mem-fraction-static (share for weights plus KV pool).",
    )


class Batching(_Strict):
    """Seats and the prefill budget."""

    max_num_seqs: Whole | None = Field(
        default=None,
        ge=1,
        le=MAX_NUM_SEQS_LIMIT,
        description="Seats: requests decoded together (vLLM --max-num-seqs, SGLang --max-running-requests).",
    )
    max_num_batched_tokens: TokenCount | None = Field(
        default=None,
        description="Prefill budget per step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size).",
    )


class Speculative(_Strict):
    """Speculative decoding: built-in MTP layers or a separate drafter that keeps KV of its own."""

    method: SpeculativeMethod = Field(description="mtp uses the model's own layers; others need draft_model.")
    num_speculative_tokens: Whole = Field(
        ge=1,
        le=64,
        description="Tokens proposed per step (vLLM num_speculative_tokens; SGLang draft tokens = this + 1).",
    )
    draft_model: str | None = Field(default=None, min_length=1, description="Drafter directory or repo id.")
    draft_config: dict[str, Any] | None = Field(
        default=None, description="The drafter's config.json, inline; used when its directory is not on this machine."
    )


class Observation(_Strict):
    """A figure measured on a real deployment of this recipe, with where it came from."""

    metric: Metric = Field(
        description=(
            "kv_pool_tokens: the engine's KV pool (vLLM 'KV cache size', SGLang max_total_num_tokens); "
            "full_contexts: the engine's 'Maximum concurrency' (pool / window); decode_tok_s, "
            "stream_decode_tok_s: aggregate and per-request decode tokens/s; ttft_s, wall_s: seconds; "
            "decode_step_ms: one decode step; prefill_ms_per_token: prompt compute per token; kv_usage_peak, "
            "prefix_hit_rate: shares from 0 to 1."
        )
    )
    value: Real = Field(ge=0, allow_inf_nan=False)
    seats: Whole | None = Field(default=None, ge=1, le=MAX_NUM_SEQS_LIMIT, description="max_num_seqs in force.")
    max_model_len: Whole | None = Field(
        default=None, ge=1, description="Window the figure refers to; default the recipe's."
    )
    workload: str | None = Field(
        default=None, description="The benchmark workload, for throughput and latency figures."
    )
    reps: Whole | None = Field(default=None, ge=1, description="Runs averaged.")
    engine_version: str | None = Field(
        default=None, description="The engine version it was measured with; default the recipe's engine_version."
    )
    kv_cache_memory: ByteSize | None = Field(
        default=None, description="The KV pin per GPU in force when it was measured; default the recipe's kv_cache."
    )
    hardware: str | None = Field(default=None, description="Where it was measured, in words.")
    source: str = Field(min_length=1, description="Provenance: the log line, benchmark or document it comes from.")
    date: Date | None = None


class RecipeFields(_Strict):
    """Every key of a recipe, each checked on its own (the cross-field checks are Recipe's)."""

    name: str = Field(description="Short name, also the file name of a shipped recipe.")
    description: str = ""
    engine: Engine
    engine_version: str | None = Field(default=None, description="The engine version the observations were taken with.")
    model: ModelSpec
    hardware: str | None = Field(
        default=None, min_length=1, description="Hardware profile to plan against when no GPU is present (e.g. gb10x2)."
    )
    parallel: Parallel = Parallel()
    context: Context = Context()
    kv_cache: KvCache = KvCache()
    batching: Batching = Batching()
    speculative: Speculative | None = None
    prefix_caching: bool | None = Field(default=None, description="Prefix (radix) caching; default: the engine's.")
    engine_args: list[str] = Field(
        default_factory=list, description="Extra engine flags, verbatim; checked by the engine's parser."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment for the engine process.")
    observations: list[Observation] = Field(default_factory=list)

    _source: str = PrivateAttr(default="<recipe>")

    @property
    def source(self) -> str:
        """The file this recipe was read from ("<recipe>" when built in code)."""
        return self._source

    @field_validator("name")
    @classmethod
    def _name_is_a_slug(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError("use lower-case letters, digits, '.', '_' and '-' (it is also a file name)")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_scalars_as_text(cls, value: object) -> object:
        # YAML reads `VLLM_X: 4` as an int; an environment only holds text, and "4" is what was meant.
        # Booleans are not converted: "True" is rarely what a program expects for true.
        if isinstance(value, dict):
            return {
                k: (str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v) for k, v in value.items()
            }
        return value
