"""`dspark recipes list | show NAME | schema`: the shipped recipes, one recipe, and the recipe JSON Schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

from dspark.config.recipe_schema import recipe_data
from dspark.config.recipes import Recipe, find_recipe, list_recipes, render_json_schema
from dspark.core.constants import DEFAULT_RECIPE


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
        stream.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + f"  {row[-1]}\n")
    stream.write("\n* the default recipe (a bare `dspark validate`); `dspark recipes show NAME` prints one\n")
    return 0


def recipes_show(name_or_path: str, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Print one recipe as written (comments kept) after validating it, or as one JSON object; returns 0."""
    stream = out if out is not None else sys.stdout
    recipe = find_recipe(name_or_path)
    if as_json:
        payload = {"source": recipe.source, "recipe": recipe_data(recipe)}
        stream.write(json.dumps(payload, indent=2) + "\n")
        return 0
    stream.write(f"# {recipe.source}\n")
    stream.write(Path(recipe.source).read_text(encoding="utf-8"))
    return 0


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
