"""The recipe's schema: pydantic builds it from dspark.config.recipe_model; pydantic-core validates with it.

Building a pydantic schema means loading pydantic's model machinery, which costs a plain `dspark validate` about as
much again as importing all of its dependencies (docs/testing.md). So the core schema pydantic generates is checked
in, as data, in dspark.config.recipe_core_schema, and a recipe is validated by pydantic-core's SchemaValidator built
straight from it: the same validator pydantic would build, without the machinery. The copy is used only under the
pydantic-core release that generated it; under any other, pydantic builds the schema afresh, as it would anyway.
tests/config/test_recipe_schema.py fails while the checked-in copy differs from what pydantic generates today:
`python -m dspark.config.recipe_schema --write` regenerates it (and the JSON Schema editors read).

Entry points: recipe_validator() (what the loader uses), recipe_schema() (the schema it uses), schema_path_note()
(which of the two paths that is, for `--debug`), recipe_data() (a
recipe as JSON-ready data), recipe_core_schema_fresh() (pydantic's, afresh), recipe_json_schema(),
render_core_schema_module() and render_json_schema() (the checked-in files' text).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic_core

from dspark.config.recipe_model import Recipe

if TYPE_CHECKING:
    from pydantic import TypeAdapter

CORE_SCHEMA_FILE = Path(__file__).with_name("recipe_core_schema.py")
JSON_SCHEMA_FILE = Path(__file__).parents[1] / "data" / "recipe.schema.json"
# Keys of a core schema that only pydantic's JSON Schema generation reads (metadata), or that name a definition no
# other part refers to (ref): the validator never reads them, and a ref carries the class's id(), new each run.
_DROPPED_KEYS = frozenset({"metadata", "ref"})


def checked_in_schema_applies() -> bool:
    """Whether the checked-in core schema is the one to use: it was generated under this pydantic-core release.

    An exact match, not a range: the core schema is the format pydantic and pydantic-core agree on release by
    release (each pydantic pins one pydantic-core), so only the release that generated the copy says it is current.
    """
    from dspark.config import recipe_core_schema  # noqa: PLC0415 - data for one pydantic-core release

    return pydantic_core.__version__ == recipe_core_schema.PYDANTIC_CORE_VERSION


@functools.cache
def recipe_schema() -> dict[str, Any]:
    """The recipe's core schema: the checked-in copy under the pydantic-core release that made it, else afresh."""
    from dspark.config import recipe_core_schema  # noqa: PLC0415 - data for one pydantic-core release

    if checked_in_schema_applies():
        return recipe_core_schema.SCHEMA
    return recipe_core_schema_fresh()


def schema_path_note() -> str:
    """Which path recipe_schema() takes here, in one line (`--debug` prints it once a recipe was loaded)."""
    from dspark.config import recipe_core_schema  # noqa: PLC0415 - data for one pydantic-core release

    made_by = recipe_core_schema.PYDANTIC_CORE_VERSION
    if checked_in_schema_applies():
        return f"recipe schema: the checked-in copy (pydantic-core {made_by})"
    return (f"recipe schema: built afresh by pydantic (pydantic-core {pydantic_core.__version__}; the checked-in "
            f"copy is pydantic-core {made_by}'s: python -m dspark.config.recipe_schema --write regenerates it)")


@functools.cache
def recipe_validator() -> pydantic_core.SchemaValidator:
    """The validator of a whole recipe, built by pydantic-core from recipe_schema()."""
    return pydantic_core.SchemaValidator(recipe_schema())


def recipe_data(recipe: Recipe) -> dict[str, Any]:
    """The recipe as JSON-ready data (dates as text), as pydantic-core's serializer for its schema writes it."""
    data: dict[str, Any] = _serializer().to_python(recipe, mode="json")
    return data


@functools.cache
def _serializer() -> pydantic_core.SchemaSerializer:
    return pydantic_core.SchemaSerializer(recipe_schema())


@functools.cache
def _type_adapter() -> TypeAdapter[Recipe]:
    """pydantic's adapter for Recipe, with the names its annotations use in scope."""
    # The annotations are text (recipe_model imports these only for type checkers); pydantic resolves them in the
    # module's globals and then in the namespace of the frame that builds the adapter: this one.
    from pydantic import TypeAdapter  # noqa: PLC0415

    from dspark.config.recipe_pydantic import (  # noqa: F401, PLC0415 - read by pydantic from this frame
        AfterValidator,
        Annotated,
        BeforeValidator,
        ByteSize,
        Field,
        Real,
        TokenCount,
        Whole,
    )

    return TypeAdapter(Recipe)


def recipe_core_schema_fresh() -> dict[str, Any]:
    """pydantic's core schema for Recipe, without the keys the validator never reads."""
    schema: dict[str, Any] = _stripped(_type_adapter().core_schema)
    return schema


def _stripped(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _stripped(v) for k, v in node.items() if k not in _DROPPED_KEYS}
    if isinstance(node, list | tuple):
        return type(node)(_stripped(v) for v in node)
    return node


def recipe_json_schema() -> dict[str, Any]:
    """The recipe JSON Schema (draft 2020-12), for editors' YAML support."""
    schema = _type_adapter().json_schema()
    schema["title"] = "dspark recipe"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render_json_schema() -> str:
    """The JSON Schema exactly as checked in at dspark/data/recipe.schema.json."""
    return json.dumps(recipe_json_schema(), indent=2, sort_keys=True) + "\n"


class _Source:
    """A value that pprint writes as the Python text that rebuilds it (a class, a function, a default instance)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _as_source(node: Any, imports: set[tuple[str, str]]) -> Any:
    """node with every class, function and dataclass instance replaced by the source text that names it."""
    if isinstance(node, dict):
        return {k: _as_source(v, imports) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return type(node)(_as_source(v, imports) for v in node)
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if isinstance(node, type) and node.__module__ == "builtins":
        return _Source(node.__name__)  # a default_factory: list, dict
    if isinstance(node, type) or callable(node):
        return _Source(_imported(node, imports))
    if dataclasses.is_dataclass(node):
        args = ", ".join(f"{f.name}={_as_source(getattr(node, f.name), imports)!r}"
                         for f in dataclasses.fields(node) if f.init)
        return _Source(f"{_imported(type(node), imports)}({args})")
    raise TypeError(f"the recipe's core schema holds {node!r}, which has no source form: give the recipe a plain value")


def _imported(obj: Any, imports: set[tuple[str, str]]) -> str:
    """obj's name in the generated module, importing it from dspark (nothing else may be needed at run time)."""
    module, name = getattr(obj, "__module__", ""), getattr(obj, "__qualname__", "")
    if not module.startswith("dspark.") or "." in name or getattr(sys.modules[module], name, None) is not obj:
        raise TypeError(f"the recipe's core schema refers to {module}.{name}: only dspark's module-level names "
                        "can be written out (a pydantic helper would load pydantic at run time)")
    imports.add((module, name))
    return name


def render_core_schema_module(schema: dict[str, Any] | None = None) -> str:
    """The text of dspark/config/recipe_core_schema.py for `schema` (default: pydantic's, afresh)."""
    import pprint  # noqa: PLC0415 - only the writer and its test format the schema; loading a recipe does not

    imports: set[tuple[str, str]] = set()
    body = pprint.pformat(_as_source(schema if schema is not None else recipe_core_schema_fresh(), imports),
                          width=112, sort_dicts=True)
    lines = [
        '"""The recipe\'s core schema, as pydantic generates it from dspark.config.recipe_model. GENERATED.',
        "",
        "Regenerate with `python -m dspark.config.recipe_schema --write` (dspark.config.recipe_schema says why it is",
        'checked in); tests/config/test_recipe_schema.py fails while it differs from what pydantic generates.',
        '"""',
        "",
        "from typing import Any",
        "",
    ]
    for module in sorted({m for m, _ in imports}):
        names = sorted(n for m, n in imports if m == module)
        lines.append(f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")")
    lines += [
        "",
        f"PYDANTIC_CORE_VERSION = {pydantic_core.__version__!r}  # the release whose schema format this is",
        "",
        "SCHEMA: dict[str, Any] = (",
        "    " + body.replace("\n", "\n    "),
        ")",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """`--write` regenerates both checked-in files; `--check` exits 1 when either differs."""
    wanted = {CORE_SCHEMA_FILE: render_core_schema_module(), JSON_SCHEMA_FILE: render_json_schema()}
    stale = [path for path, text in wanted.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    if argv[:1] == ["--write"]:
        for path in stale:
            path.write_text(wanted[path], encoding="utf-8")
            print(f"wrote {path}")
        return 0
    for path in stale:
        print(f"{path} differs from what pydantic generates: run python -m dspark.config.recipe_schema --write")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
