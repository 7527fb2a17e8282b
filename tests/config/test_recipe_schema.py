"""The recipe's schema: the checked-in core schema is pydantic's, and validating with it is validating with pydantic.

dspark.config.recipe_core_schema holds the core schema pydantic generates from dspark.config.recipe_model, so that
loading a recipe needs pydantic-core alone. These tests hold that copy to what pydantic generates now, and compare
what pydantic's own TypeAdapter says with what the loader's validator says, over the shipped recipes and over
inputs broken key by key.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pydantic
import pydantic_core
import pytest
import yaml

from dspark import cli
from dspark.config import recipe_core_schema, recipe_schema
from dspark.config.recipe_model import Parallel
from dspark.config.recipes import load_recipe_text, shipped_recipe_names, shipped_recipes_dir
from dspark.core.errors import RecipeError


def test_the_checked_in_core_schema_is_the_one_pydantic_generates() -> None:
    assert pydantic_core.__version__ == recipe_core_schema.PYDANTIC_CORE_VERSION, (
        "install the pydantic the test extra pins (pip install -e '.[test]'), or regenerate: "
        "python -m dspark.config.recipe_schema --write"
    )
    checked_in = recipe_schema.CORE_SCHEMA_FILE.read_text(encoding="utf-8")
    assert checked_in == recipe_schema.render_core_schema_module(), (
        "regenerate: python -m dspark.config.recipe_schema --write"
    )
    assert recipe_schema.main(["--check"]) == 0


def test_the_loader_uses_the_checked_in_copy() -> None:
    assert recipe_schema.recipe_schema() is recipe_core_schema.SCHEMA


def _shipped() -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load((shipped_recipes_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
            for name in shipped_recipe_names()}


def _broken(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The recipe with one key at a time made wrong: a value of each wrong kind, and an unknown key beside it."""
    def leaves(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        if isinstance(node, dict):
            yield (*path, "not_a_key")
            for key, value in node.items():
                yield from leaves(value, (*path, key))
        elif isinstance(node, list) and node and isinstance(node[0], dict):
            for i, item in enumerate(node):
                yield from leaves(item, (*path, i))
        else:
            yield path

    wrongs: tuple[object, ...] = ("text", 0, -3, 1.5, True, None, [], {}, "28GB", "8K", 10**20)
    for path in leaves(data, ()):
        for wrong in wrongs:
            mutated = copy.deepcopy(data)
            node = mutated
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = wrong
            yield f"{'.'.join(map(str, path))}={wrong!r}", mutated


def _outcome(validate: Any, data: dict[str, Any]) -> object:
    try:
        return validate(data)
    except pydantic_core.ValidationError as exc:
        return [(e["type"], e["loc"], e["msg"], repr(e.get("input"))) for e in exc.errors()]


def test_the_loaders_validator_says_what_pydantics_own_says() -> None:
    ours = recipe_schema.recipe_validator().validate_python
    theirs = recipe_schema._type_adapter().validate_python  # pydantic's own, built afresh
    compared = failed = 0
    for name, data in _shipped().items():
        assert _outcome(ours, data) == _outcome(theirs, data), name
        for what, mutated in _broken(data):
            mine = _outcome(ours, mutated)
            assert mine == _outcome(theirs, mutated), f"{name}: {what}"
            compared += 1
            failed += isinstance(mine, list)
    assert 1000 < failed < compared  # the comparison saw many errors and many valid recipes


def _forget_the_schema() -> None:
    """The cached schema, validator and serializer dropped, so the next load decides again which schema to use."""
    for cached in (recipe_schema.recipe_schema, recipe_schema.recipe_validator, recipe_schema._serializer):
        cached.cache_clear()


def test_under_another_pydantic_core_the_schema_is_built_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (shipped_recipes_dir() / "flash-next-vllm.yaml").read_text(encoding="utf-8")
    bad = text.replace("kv_cache:", "kv_cache:\n  memmory: 1GB", 1)
    compiled = load_recipe_text(text, "r.yaml")
    with pytest.raises(RecipeError) as compiled_error:
        load_recipe_text(bad, "r.yaml")
    monkeypatch.setattr(recipe_core_schema, "PYDANTIC_CORE_VERSION", "0.0.0")
    _forget_the_schema()
    try:
        assert recipe_schema.recipe_schema() is not recipe_core_schema.SCHEMA
        assert recipe_schema.recipe_schema() == recipe_core_schema.SCHEMA
        assert load_recipe_text(text, "r.yaml") == compiled
        with pytest.raises(RecipeError) as fresh_error:
            load_recipe_text(bad, "r.yaml")
        assert str(fresh_error.value) == str(compiled_error.value)
        assert "kv_cache.memmory: unknown key; did you mean 'memory'?" in str(fresh_error.value)
    finally:
        monkeypatch.undo()
        _forget_the_schema()


def test_a_loaded_recipe_is_a_frozen_dataclass_with_its_sections_defaults() -> None:
    recipe = load_recipe_text("name: x\nengine: vllm\nmodel: {path: m}\n", "r.yaml")
    assert recipe.parallel == Parallel() and recipe.engine_args == [] and recipe.source == "r.yaml"
    with pytest.raises(AttributeError):
        recipe.name = "y"  # type: ignore[misc]


def test_the_writer_refuses_a_schema_that_would_load_pydantic_at_run_time() -> None:
    schema = {"type": "function-after", "function": {"type": "no-info", "function": pydantic.TypeAdapter},
              "schema": {"type": "int"}}
    with pytest.raises(TypeError, match="pydantic"):
        recipe_schema.render_core_schema_module(schema)


# --- which path ran: the checked-in copy or pydantic afresh ------------------------------------------------------

def _pinned_pydantic() -> str:
    """The pydantic release the test extra pins (pyproject.toml)."""
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    pins = re.findall(r'"pydantic==([^"\s;]+)"', text)
    assert len(pins) == 1, pins
    return str(pins[0])


def test_the_pinned_pydantic_takes_the_checked_in_path() -> None:
    # pydantic pins the one pydantic-core it builds schemas for: the pinned pydantic's must be the copy's.
    assert pydantic.__version__ == _pinned_pydantic(), "install the test extra: pip install -e '.[test]'"
    wanted = [r for r in metadata.requires("pydantic") or [] if re.match(r"pydantic[-_]core\s*==", r)]
    pinned_core = [r.split("==")[1].split(";")[0].strip() for r in wanted]
    assert pinned_core == [recipe_core_schema.PYDANTIC_CORE_VERSION], (
        "the pinned pydantic would build the schema afresh: regenerate with python -m dspark.config.recipe_schema "
        "--write")
    assert recipe_schema.checked_in_schema_applies()
    assert recipe_schema.schema_path_note() == (
        f"recipe schema: the checked-in copy (pydantic-core {recipe_core_schema.PYDANTIC_CORE_VERSION})")


def test_debug_says_which_schema_path_ran(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--debug", "validate", "flash-next-vllm", "--hardware", "gb10", "--json"]
    _forget_the_schema()
    assert cli.main(argv) == 0
    assert "recipe schema: the checked-in copy" in capsys.readouterr().err
    monkeypatch.setattr(recipe_core_schema, "PYDANTIC_CORE_VERSION", "0.0.0")
    _forget_the_schema()
    try:
        assert cli.main(argv) == 0
        err = capsys.readouterr().err
        assert f"built afresh by pydantic (pydantic-core {pydantic_core.__version__}; the checked-in copy is " \
               "pydantic-core 0.0.0's" in err
        assert cli.main(argv[1:]) == 0  # without --debug: not said
        assert "recipe schema" not in capsys.readouterr().err
    finally:
        monkeypatch.undo()
        _forget_the_schema()
