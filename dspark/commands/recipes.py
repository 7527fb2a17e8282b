"""`dspark recipes list | show NAME | schema`: the shipped recipes, one recipe, and the recipe JSON Schema.

A recipe is shown with its secrets hidden (values of secret `env` variables and of secret `engine_args` flags,
credentials in URLs) and its control characters as escapes: a recipe from someone else prints as text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from dspark.config.recipe_schema import recipe_data
from dspark.config.recipes import Recipe, find_recipe, list_recipes, render_json_schema
from dspark.core.constants import DEFAULT_RECIPE
from dspark.core.redact import printable, redact_argv, redact_env, redact_text, secret_argv_values, secret_env_values


def recipes_list(*, as_json: bool = False, out: TextIO | None = None) -> int:
    """Print the shipped recipes (name, engine, seats, window, model), or one JSON object; returns 0."""
    stream = out if out is not None else sys.stdout
    recipes = list_recipes()
    if as_json:
        payload = {"default": DEFAULT_RECIPE, "recipes": [_summary(r) for r in recipes]}
        stream.write(json.dumps(payload, indent=2) + "\n")
        return 0
    rows = [("NAME", "ENGINE", "SEATS", "WINDOW", "MODEL")]
    for r in recipes:
        rows.append(
            (
                r.name + (" *" if r.name == DEFAULT_RECIPE else ""),
                r.engine,
                _or_dash(r.batching.max_num_seqs),
                _or_dash(r.context.max_model_len),
                r.model.path,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + f"  {row[-1]}"
        stream.write(printable(redact_text(line)) + "\n")
    stream.write("\n* the default recipe (a bare `dspark validate`); `dspark recipes show NAME` prints one\n")
    return 0


def recipes_show(name_or_path: str, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Print one recipe as written (comments kept) after validating it, or as one JSON object; returns 0."""
    stream = out if out is not None else sys.stdout
    recipe = find_recipe(name_or_path)
    if as_json:
        data = recipe_data(recipe)
        data["env"] = redact_env(data.get("env") or {})
        data["engine_args"] = redact_argv(data.get("engine_args") or [])
        payload = {"source": recipe.source, "recipe": data}
        stream.write(redact_text(json.dumps(payload, indent=2), _secrets(recipe), patterns=False) + "\n")
        return 0
    text = f"# {recipe.source}\n" + Path(recipe.source).read_text(encoding="utf-8")
    stream.write(printable(redact_text(text, _secrets(recipe))))
    return 0


def _secrets(recipe: Recipe) -> set[str]:
    """The values a recipe holds that are never shown: secret env values, secret flags' values, URL credentials."""
    return secret_env_values(recipe.env) | secret_argv_values(recipe.engine_args)


def recipes_schema(*, out: TextIO | None = None) -> int:
    """Print the recipe JSON Schema (for `# yaml-language-server: $schema=...` in editors); returns 0."""
    stream = out if out is not None else sys.stdout
    stream.write(render_json_schema())
    return 0


def _summary(recipe: Recipe) -> dict[str, object]:
    return {
        "name": recipe.name,
        "engine": recipe.engine,
        "model": recipe.model.path,
        "max_num_seqs": recipe.batching.max_num_seqs,
        "max_model_len": recipe.context.max_model_len,
        "description": recipe.description,
        "source": recipe.source,
        "default": recipe.name == DEFAULT_RECIPE,
    }


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
