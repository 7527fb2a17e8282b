"""Recipes: one YAML file per deployment (model, engine, parallelism, KV, seats, measured observations).

Entry points other layers use (keep these stable):
  load_recipe(path) -> Recipe                 read and validate a file, or raise RecipeError
  load_recipe_text(text, source) -> Recipe    the same for text already in memory
  find_recipe(name_or_path) -> Recipe         a shipped recipe by name ("flash-next-vllm") or a file path
  default_recipe() -> Recipe                  the recipe a bare `dspark validate` uses (DEFAULT_RECIPE)
  list_recipes() -> list[Recipe]              every shipped recipe, sorted by name
  recipe_json_schema() -> dict                the JSON Schema editors use (checked in as data/recipe.schema.json)

Knob fields (seats, window, KV, parallelism, ...) are None when the file does not set them: the built-in
defaults live in dspark.config.settings, which also applies the flag > environment > recipe > default precedence.
Read knobs from dspark.config.settings.ResolvedSettings, and the rest (model, observations, env, engine_args) here.

Shipped recipes: dspark/data/recipes/*.yaml, installed as package data; the repository's top-level recipes/
is a symbolic link to that directory, so there is one copy and nothing to keep in step.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from datetime import date as Date
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    Strict,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from dspark.config.recipe_checks import cross_problems
from dspark.config.recipe_messages import kind_of, problem_from_pydantic, render_problems
from dspark.config.recipe_yaml import Problem, dotted, duplicate_keys, parse_yaml
from dspark.core.constants import DEFAULT_RECIPE, MAX_NUM_SEQS_LIMIT, KvCacheDtype
from dspark.core.errors import RecipeError
from dspark.core.units import SIZE_PATTERN, SIZE_UNITS_HELP, parse_count, parse_size

Engine = Literal["vllm", "sglang"]
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
    engine_version: str | None = None
    hardware: str | None = Field(default=None, description="Where it was measured, in words.")
    source: str = Field(min_length=1, description="Provenance: the log line, benchmark or document it comes from.")
    date: Date | None = None


class Recipe(_Strict):
    """One deployment: a model on an engine with its settings, plus observations measured on it."""

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

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> Recipe:
        problems = list(cross_problems(self))
        if problems:
            sink = info.context.get("problems") if isinstance(info.context, dict) else None
            if isinstance(sink, list):
                sink.extend(problems)
            else:
                raise ValueError("; ".join(f"{dotted(p.loc)}: {p.message}" for p in problems))
        return self


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """base with over's keys laid on top; mappings present in both are merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------------------------------
# Loading: YAML with line numbers (dspark.config.recipe_yaml), then pydantic, then errors that name file, line, key and
# value. MAX_YAML_DEPTH and MAX_YAML_NODES bound what a recipe file may build.


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Read and validate a recipe file, or raise RecipeError naming the file, line and key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(f"{p}: recipe file not found") from None
    except IsADirectoryError:
        raise RecipeError(f"{p}: is a directory, not a recipe file") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{p}: is not UTF-8 text") from None
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read the recipe ({exc.strerror})") from None
    return load_recipe_text(text, str(p))


def load_recipe_text(text: str, source: str = "<recipe>") -> Recipe:
    """Validate recipe YAML held in memory; `source` names it in messages; raise RecipeError."""
    root, data = parse_yaml(text, source)
    if root is None or data is None:
        raise RecipeError(f"{source}: the recipe is empty; it needs at least name, engine and model.path")
    duplicates = list(duplicate_keys(root, ()))
    if duplicates:
        raise RecipeError(render_problems(source, root, duplicates))
    if not isinstance(data, dict):
        raise RecipeError(
            f"{source}:{root.start_mark.line + 1}: a recipe is a mapping of keys (name:, engine:, model:, ...), "
            f"not {kind_of(data)}"
        )
    collected: list[Problem] = []
    try:
        recipe = Recipe.model_validate(data, context={"problems": collected})
    except ValidationError as exc:
        raise RecipeError(render_problems(source, root, [problem_from_pydantic(err) for err in exc.errors()])) from None
    if collected:
        raise RecipeError(render_problems(source, root, collected))
    recipe._source = source
    return recipe


# ---------------------------------------------------------------------------------------------------------
# Shipped recipes and the JSON Schema.


def shipped_recipes_dir() -> Path:
    """Where the installed package keeps its recipes (the repository's recipes/ links here)."""
    return Path(__file__).parents[1] / "data" / "recipes"


def shipped_recipe_names() -> list[str]:
    """Names of the shipped recipes, sorted."""
    return sorted(p.stem for p in shipped_recipes_dir().glob("*.yaml"))


def find_recipe(name_or_path: str) -> Recipe:
    """A shipped recipe by name, or a recipe file by path; RecipeError (with a suggestion) when neither."""
    looks_like_path = os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    if looks_like_path:
        return load_recipe(Path(name_or_path).expanduser())
    shipped = shipped_recipes_dir() / f"{name_or_path}.yaml"
    if shipped.is_file():
        return load_recipe(shipped)
    if Path(name_or_path).is_file():
        return load_recipe(name_or_path)
    names = shipped_recipe_names()
    close = difflib.get_close_matches(name_or_path, names, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "give a path to a recipe file, e.g. ./my-recipe.yaml"
    raise RecipeError(f"no recipe named {name_or_path!r}; shipped recipes: {', '.join(names)}", hint=hint)


def default_recipe() -> Recipe:
    """The recipe a bare `dspark validate` plans with: Flash-Next on vLLM, the deployment's main system."""
    return find_recipe(DEFAULT_RECIPE)


def list_recipes() -> list[Recipe]:
    """Every shipped recipe, loaded and validated, sorted by name."""
    return [load_recipe(shipped_recipes_dir() / f"{name}.yaml") for name in shipped_recipe_names()]


def recipe_json_schema() -> dict[str, Any]:
    """The recipe JSON Schema (draft 2020-12), for editors' YAML support."""
    schema = Recipe.model_json_schema()
    schema["title"] = "dspark recipe"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render_json_schema() -> str:
    """The schema exactly as checked in at dspark/data/recipe.schema.json."""
    return json.dumps(recipe_json_schema(), indent=2, sort_keys=True) + "\n"
