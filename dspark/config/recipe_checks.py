"""Recipe checks that span fields (pydantic's per-field validators cannot see them); each names the key to change.

Pure: takes a validated Recipe, yields Problems with their location so the loader can point at the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from dspark.config.knobs import BY_NAME
from dspark.config.recipe_keys import FLAG_FIELDS, RUN_FLAGS
from dspark.config.recipe_model import Parallel, Recipe, Speculative
from dspark.config.recipe_yaml import Problem
from dspark.engines import foreign_knobs

_WHOLE_METRICS = frozenset({"kv_pool_tokens", "cudagraph_max_capture_size"})
_NEEDS_DRAFT_MODEL = frozenset({"eagle", "eagle3", "dflash", "draft_model"})
_ENV_NAME_RE = r"[A-Za-z_][A-Za-z0-9_]*"


def _flag_key(arg: str) -> str | None:
    """'--no-enable-prefix-caching=x' -> 'enable_prefix_caching'; None for values (no leading dash)."""
    if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit():
        return None
    key = arg.lstrip("-").split("=", 1)[0].replace("-", "_").lower()
    if key.startswith("no_") and key[3:] in FLAG_FIELDS:
        key = key[3:]
    return key


def cross_problems(recipe: Recipe) -> Iterator[Problem]:
    """Everything pydantic's per-field checks cannot see."""
    yield from _kv_problems(recipe)
    yield from _parallel_problems(recipe.parallel)
    if recipe.speculative is not None:
        yield from _speculative_problems(recipe.speculative)
    yield from _passthrough_problems(recipe)
    for i, obs in enumerate(recipe.observations):
        if obs.metric in _WHOLE_METRICS and obs.value != int(obs.value):
            yield Problem(
                ("observations", i, "value"), f"{obs.metric} is a count; expected a whole number", obs.value, True
            )


def _kv_problems(recipe: Recipe) -> Iterator[Problem]:
    kv = recipe.kv_cache
    if kv.memory is not None and kv.tokens is not None:
        yield Problem(("kv_cache", "tokens"), "set kv_cache.memory or kv_cache.tokens, not both: each pins the pool")
    yield from _foreign_keys(recipe)


def _foreign_keys(recipe: Recipe) -> Iterator[Problem]:
    """The recipe keys of knobs its engine has no such setting for: the settings' knob x engine rule
    (EngineSpec.foreign_knobs), said at the key's line when the recipe loads."""
    engine = recipe.engine
    for name, instead in foreign_knobs(engine):
        path = BY_NAME[name].recipe_path
        if path is None:
            continue
        node: object = recipe
        for part in path.split("."):
            node = getattr(node, part, None)
        if node is not None:
            use = BY_NAME[instead].recipe_path or BY_NAME[instead].env
            yield Problem(tuple(path.split(".")), f"{engine} has no such setting; for {engine} use {use}")


def _parallel_problems(par: Parallel) -> Iterator[Problem]:
    nodes = par.nodes or 1
    gpus = (par.tensor or 1) * (par.pipeline or 1)
    if nodes > 1 and gpus % nodes:
        yield Problem(
            ("parallel", "nodes"), f"tensor x pipeline = {gpus} GPUs cannot be split evenly over {nodes} nodes"
        )


def _speculative_problems(spec: Speculative) -> Iterator[Problem]:
    if spec.method in _NEEDS_DRAFT_MODEL and spec.draft_model is None:
        yield Problem(("speculative", "draft_model"), f"is required for method {spec.method}")
    if spec.method not in _NEEDS_DRAFT_MODEL and spec.draft_model is not None:
        yield Problem(
            ("speculative", "draft_model"), f"is not used by method {spec.method} (it drafts with the model itself)"
        )
    if spec.draft_config is not None and spec.draft_model is None:
        yield Problem(("speculative", "draft_config"), "describes a drafter, but speculative.draft_model is not set")


def _passthrough_problems(recipe: Recipe) -> Iterator[Problem]:
    """engine_args and env must not carry what the recipe's own fields (or dspark's settings) own."""
    for i, arg in enumerate(recipe.engine_args):
        key = _flag_key(arg)
        flag = arg.split("=", 1)[0]
        if key in FLAG_FIELDS:
            yield Problem(
                ("engine_args", i),
                f"{flag} is a recipe field: set {FLAG_FIELDS[key]} instead "
                "(one place per setting, so the precedence chain sees it)",
            )
        elif key in RUN_FLAGS:
            yield Problem(
                ("engine_args", i), f"{flag} belongs to one machine or run, not a recipe: use {RUN_FLAGS[key]}"
            )
    for name in recipe.env:
        if not re.fullmatch(_ENV_NAME_RE, name):
            yield Problem(("env", name), "is not a valid environment variable name")
        elif name == "MAX_NUM_SEQS" or name.startswith("DSPARK_"):
            yield Problem(
                ("env", name),
                "is read by dspark itself, not by the engine: set the recipe's own field, "
                "or export it when you run dspark",
            )
