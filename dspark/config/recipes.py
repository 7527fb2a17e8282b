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

import os
from pathlib import Path
from typing import Any

from pydantic_core import ValidationError

from dspark.config.recipe_checks import cross_problems
from dspark.config.recipe_messages import kind_of, problem_from_pydantic, render_problems
from dspark.config.recipe_model import Recipe
from dspark.config.recipe_schema import recipe_json_schema, recipe_validator, render_json_schema
from dspark.config.recipe_yaml import Problem, dotted, duplicate_keys, parse_yaml
from dspark.core.constants import DEFAULT_RECIPE
from dspark.core.errors import RecipeError
from dspark.core.files import RECIPE, exists_for_reading, read_text
from dspark.core.suggest import closest

__all__ = [
    "Recipe",
    "default_recipe",
    "find_recipe",
    "list_recipes",
    "load_recipe",
    "load_recipe_text",
    "recipe_from_data",
    "recipe_json_schema",
    "render_json_schema",
    "shipped_recipe_names",
    "shipped_recipes_dir",
]


# ---------------------------------------------------------------------------------------------------------
# Loading: YAML with line numbers (dspark.config.recipe_yaml), then pydantic, then errors that name file, line, key and
# value. MAX_YAML_DEPTH and MAX_YAML_NODES bound what a recipe file may build.


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Read and validate a recipe file, or raise RecipeError naming the file, line and key."""
    p = Path(path)
    # A regular file of at most RECIPE's limit: a FIFO, /dev/zero or a 50 MB file is refused before parsing.
    text = read_text(p, RECIPE, error=RecipeError)
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
    recipe = _validated(data)
    if isinstance(recipe, list):
        raise RecipeError(render_problems(source, root, recipe))
    object.__setattr__(recipe, "_source", source)  # the loader's one write to the frozen recipe: where it came from
    return recipe


def recipe_from_data(data: dict[str, Any]) -> Recipe:
    """Validate a recipe already parsed into Python data (no file, so no line numbers); raise RecipeError."""
    recipe = _validated(data)
    if isinstance(recipe, list):
        raise RecipeError("invalid recipe: " + "; ".join(f"{dotted(p.loc)}: {p.message}" for p in recipe))
    return recipe


def _validated(data: dict[str, Any]) -> Recipe | list[Problem]:
    """The recipe, or the problems that stop it: each key checked on its own, then (if all pass) across keys."""
    try:
        recipe: Recipe = recipe_validator().validate_python(data)
    except ValidationError as exc:
        return [problem_from_pydantic(err) for err in exc.errors()]
    problems = list(cross_problems(recipe))
    return problems or recipe


# ---------------------------------------------------------------------------------------------------------
# Shipped recipes (the JSON Schema is dspark.config.recipe_schema's).


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
    if os.path.isfile(shipped):  # noqa: PTH113 - False (not OSError) for a name too long to be a shipped one
        return load_recipe(shipped)
    if exists_for_reading(name_or_path):
        return load_recipe(name_or_path)
    names = shipped_recipe_names()
    close = closest(name_or_path, names)
    hint = f"did you mean {close!r}?" if close else "give a path to a recipe file, e.g. ./my-recipe.yaml"
    raise RecipeError(f"no recipe named {name_or_path!r}; shipped recipes: {', '.join(names)}", hint=hint)


def default_recipe() -> Recipe:
    """The recipe a bare `dspark validate` plans with: Flash-Next on vLLM, the deployment's main system."""
    return find_recipe(DEFAULT_RECIPE)


def list_recipes() -> list[Recipe]:
    """Every shipped recipe, loaded and validated, sorted by name."""
    return [load_recipe(shipped_recipes_dir() / f"{name}.yaml") for name in shipped_recipe_names()]
