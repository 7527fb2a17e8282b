"""The recipe's keys as frozen dataclasses: what each section holds and how each value is read. Pure.

The annotations carry pydantic's constraints (dspark.config.recipe_pydantic defines the annotated types); pydantic
turns them into the core schema checked in as dspark.config.recipe_core_schema, which pydantic-core validates with
when a recipe loads (dspark.config.recipe_schema says why and how it is kept current). Importing this module costs
no pydantic: the annotations stay text until that schema is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date as Date
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from dspark.config.recipe_values import env_scalars_as_text, name_is_a_slug
from dspark.core.constants import MAX_NUM_SEQS_LIMIT, KvCacheDtype
from dspark.engines import ENGINE_NAMES

if TYPE_CHECKING:
    from typing import Annotated

    from pydantic import AfterValidator, BeforeValidator, Field

    from dspark.config.recipe_pydantic import ByteSize, Real, TokenCount, Whole

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
# Unknown keys are errors in every section (a typo never silently means "unset"): pydantic's ConfigDict, as data.
_FORBID_EXTRA: dict[str, Any] = {"extra": "forbid"}


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """base with over's keys laid on top; mappings present in both are merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The model to serve and, when its directory is not on this machine, its config inline."""

    __pydantic_config__ = _FORBID_EXTRA

    path: Annotated[
        str, Field(min_length=1, description="Model directory or Hugging Face repo id (may be absent here).")
    ]
    revision: Annotated[str | None, Field(description="Hugging Face revision (commit, tag or branch) to serve.")] = None
    served_name: Annotated[str | None, Field(description="Name clients use (--served-model-name).")] = None
    quantization: Annotated[
        WeightsFormat | None,
        Field(description="Weights format, for weight-size estimates when no safetensors are at hand."),
    ] = None
    config: Annotated[
        dict[str, Any] | None,
        Field(description="The model's config.json, inline; used when the directory is not on this machine."),
    ] = None
    config_overrides: Annotated[
        dict[str, Any] | None,
        Field(description="Keys merged over config.json (from the directory or `config`), nested mappings merged."),
    ] = None
    weights_bytes: Annotated[
        ByteSize | None, Field(description="Total weight bytes (all ranks) when no safetensors are at hand.")
    ] = None

    def resolve_config(self, on_disk: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """config.json to plan with: the directory's if read, else the inline one, with overrides merged over it."""
        base = dict(on_disk) if on_disk is not None else (dict(self.config) if self.config is not None else None)
        if base is None:
            return None
        return _deep_merge(base, self.config_overrides or {})


@dataclass(frozen=True, kw_only=True)
class Parallel:
    """How the model is split: tensor and pipeline parallelism, and the nodes it spans."""

    __pydantic_config__ = _FORBID_EXTRA

    tensor: Annotated[Whole | None, Field(ge=1, description="Tensor-parallel size (GPUs per pipeline stage).")] = None
    pipeline: Annotated[Whole | None, Field(ge=1, description="Pipeline-parallel size.")] = None
    nodes: Annotated[Whole | None, Field(ge=1, description="Number of machines the engine spans.")] = None
    master_addr: Annotated[
        str | None, Field(min_length=1, description="Address of node 0 for a multi-node launch.")
    ] = None
    master_port: Annotated[
        Whole | None, Field(ge=1, le=65535, description="Port of node 0 for a multi-node launch.")
    ] = None
    runtime: Annotated[
        Literal["native", "ray"] | None,
        Field(description="Multi-node runtime: the engine's own (torch.distributed) or Ray."),
    ] = None


@dataclass(frozen=True, kw_only=True)
class Context:
    """The context window the engine is started with."""

    __pydantic_config__ = _FORBID_EXTRA

    max_model_len: Annotated[
        TokenCount | None,
        Field(description="Window in tokens (--max-model-len / --context-length); default: the model's own."),
    ] = None


@dataclass(frozen=True, kw_only=True)
class KvCache:
    """KV-cache dtype and how its size is fixed: a pin (exact) or a memory fraction (the engine estimates)."""

    __pydantic_config__ = _FORBID_EXTRA

    dtype: Annotated[KvCacheDtype | None, Field(description="KV-cache dtype (--kv-cache-dtype); default auto.")] = None
    memory: Annotated[
        ByteSize | None,
        Field(description="KV pin per GPU. vLLM: --kv-cache-memory-bytes; SGLang: converted to --max-total-tokens."),
    ] = None
    tokens: Annotated[
        TokenCount | None, Field(description="KV pool pin in tokens (SGLang --max-total-tokens).")
    ] = None
    gpu_memory_utilization: Annotated[
        Real | None,
        Field(
            gt=0,
            le=1,
            allow_inf_nan=False,
            description="vLLM --gpu-memory-utilization (share of GPU memory vLLM may use).",
        ),
    ] = None
    mem_fraction_static: Annotated[
        Real | None,
        Field(
            gt=0,
            lt=1,
            allow_inf_nan=False,
            description="SGLang --mem-fraction-static (share for weights plus KV pool).",
        ),
    ] = None


@dataclass(frozen=True, kw_only=True)
class Batching:
    """Seats and the prefill budget."""

    __pydantic_config__ = _FORBID_EXTRA

    max_num_seqs: Annotated[
        Whole | None,
        Field(
            ge=1,
            le=MAX_NUM_SEQS_LIMIT,
            description="Seats: requests decoded together (vLLM --max-num-seqs, SGLang --max-running-requests).",
        ),
    ] = None
    max_num_batched_tokens: Annotated[
        TokenCount | None,
        Field(description="Prefill budget per step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size)."),
    ] = None


@dataclass(frozen=True, kw_only=True)
class Speculative:
    """Speculative decoding: built-in MTP layers or a separate drafter that keeps KV of its own."""

    __pydantic_config__ = _FORBID_EXTRA

    method: Annotated[SpeculativeMethod, Field(description="mtp uses the model's own layers; others need draft_model.")]
    num_speculative_tokens: Annotated[
        Whole,
        Field(
            ge=1,
            le=64,
            description="Tokens proposed per step (vLLM num_speculative_tokens; SGLang draft tokens = this + 1).",
        ),
    ]
    draft_model: Annotated[str | None, Field(min_length=1, description="Drafter directory or repo id.")] = None
    draft_config: Annotated[
        dict[str, Any] | None,
        Field(description="The drafter's config.json, inline; used when its directory is not on this machine."),
    ] = None


@dataclass(frozen=True, kw_only=True)
class Observation:
    """A figure measured on a real deployment of this recipe, with where it came from."""

    __pydantic_config__ = _FORBID_EXTRA

    metric: Annotated[
        Metric,
        Field(
            description=(
                "kv_pool_tokens: the engine's KV pool (vLLM 'KV cache size', SGLang max_total_num_tokens); "
                "full_contexts: the engine's 'Maximum concurrency' (pool / window); decode_tok_s, "
                "stream_decode_tok_s: aggregate and per-request decode tokens/s; ttft_s, wall_s: seconds; "
                "decode_step_ms: one decode step; prefill_ms_per_token: prompt compute per token; kv_usage_peak, "
                "prefix_hit_rate: shares from 0 to 1."
            )
        ),
    ]
    value: Annotated[Real, Field(ge=0, allow_inf_nan=False)]
    seats: Annotated[
        Whole | None, Field(ge=1, le=MAX_NUM_SEQS_LIMIT, description="max_num_seqs in force.")
    ] = None
    max_model_len: Annotated[
        Whole | None, Field(ge=1, le=1 << 40, description="Window the figure refers to; default the recipe's.")
    ] = None
    workload: Annotated[
        str | None, Field(description="The benchmark workload, for throughput and latency figures.")
    ] = None
    reps: Annotated[Whole | None, Field(ge=1, le=1_000_000, description="Runs averaged.")] = None
    engine_version: Annotated[
        str | None,
        Field(description="The engine version it was measured with; default the recipe's engine_version."),
    ] = None
    kv_cache_memory: Annotated[
        ByteSize | None,
        Field(description="The KV pin per GPU in force when it was measured; default the recipe's kv_cache."),
    ] = None
    hardware: Annotated[str | None, Field(description="Where it was measured, in words.")] = None
    source: Annotated[
        str, Field(min_length=1, description="Provenance: the log line, benchmark or document it comes from.")
    ]
    date: Date | None = None


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """One deployment: a model on an engine with its settings, plus observations measured on it."""

    # Each key is checked on its own by the schema; the checks that span keys are dspark.config.recipe_checks'.
    __pydantic_config__ = _FORBID_EXTRA

    name: Annotated[
        str, AfterValidator(name_is_a_slug), Field(description="Short name, also the file name of a shipped recipe.")
    ]
    description: str = ""
    engine: Engine
    engine_version: Annotated[
        str | None, Field(description="The engine version the observations were taken with.")
    ] = None
    model: ModelSpec
    hardware: Annotated[
        str | None,
        Field(min_length=1, description="Hardware profile to plan against when no GPU is present (e.g. gb10x2)."),
    ] = None
    parallel: Parallel = Parallel()
    context: Context = Context()
    kv_cache: KvCache = KvCache()
    batching: Batching = Batching()
    speculative: Speculative | None = None
    prefix_caching: Annotated[
        bool | None, Field(description="Prefix (radix) caching; default: the engine's.")
    ] = None
    engine_args: Annotated[
        list[str], Field(description="Extra engine flags, verbatim; checked by the engine's parser.")
    ] = field(default_factory=list)
    env: Annotated[
        dict[str, str], BeforeValidator(env_scalars_as_text), Field(description="Environment for the engine process.")
    ] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)

    # The file it was read from: set by the loader (dspark.config.recipes), not a key of the recipe.
    _source: ClassVar[str] = "<recipe>"

    @property
    def source(self) -> str:
        """The file this recipe was read from ("<recipe>" when built in code)."""
        return self._source
