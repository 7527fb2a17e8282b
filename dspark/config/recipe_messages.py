"""Recipe problems as people read them: `file:line: key.path: message (got value)`, never a secret's value.

Turns pydantic's errors and dspark's own cross-field checks into one line each, with a suggestion where a
key or choice is close to a valid one (difflib), and the line from the YAML node tree (dspark.config.recipe_yaml).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date as Date
from typing import Any

from pydantic_core import ErrorDetails
from yaml.nodes import Node

from dspark.config.recipe_keys import FLAG_FIELDS, RUN_FLAGS
from dspark.config.recipe_schema import recipe_schema
from dspark.config.recipe_yaml import Problem, dotted, line_of
from dspark.core.redact import is_secret_name
from dspark.core.suggest import closest


def render_problems(source: str, root: Node, problems: list[Problem]) -> str:
    """One line per problem, `file:line: key.path: message (got value)`, in file order."""
    lines = sorted(
        ((line_of(root, p.loc), dotted(p.loc), _message(p)) for p in problems),
        key=lambda item: item[0],
    )
    count = f"{len(lines)} problem" + ("s" if len(lines) != 1 else "")
    body = "\n".join(f"  {source}:{line}: {path}: {message}" for line, path, message in lines)
    return f"{source}: invalid recipe ({count}):\n{body}"


def _message(p: Problem) -> str:
    if not p.show_value:
        return p.message
    return f"{p.message} (got {_show(p.value, p.loc)})"


def _is_secret_loc(loc: tuple[str | int, ...]) -> bool:
    """True where a value may be a credential: env values, engine flags, any secret-looking key on the path."""
    return (bool(loc) and loc[0] in ("env", "engine_args")) or any(
        isinstance(p, str) and is_secret_name(p) for p in loc
    )


def _show(value: object, loc: tuple[str | int, ...]) -> str:
    """A value as the user wrote it in YAML, shortened; never a secret."""
    if _is_secret_loc(loc):
        shown = "***" if isinstance(value, str) else kind_of(value)
    elif isinstance(value, bool) or value is None:
        shown = {True: "true", False: "false", None: "null"}[value]
    elif isinstance(value, int | float):
        shown = repr(value)
    elif isinstance(value, str):
        shown = repr(value if len(value) <= 60 else value[:57] + "...")
    elif isinstance(value, Date):
        shown = value.isoformat()
    else:
        shown = kind_of(value)
    return shown


# Most specific first: bool is an int, and datetime a date.
_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),
    (int, "a whole number"),
    (float, "a number"),
    (str, "a string"),
    (dict, "a mapping"),
    (list, "a list"),
    (Date, "a date"),
    (type(None), "null"),
)


def kind_of(value: object) -> str:
    """Plain words for a YAML value's type."""
    return next((words for kind, words in _KINDS if isinstance(value, kind)), type(value).__name__)


# pydantic error type -> our wording; the keys are pydantic's stable error codes.
_EXPECTED: dict[str, str] = {
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "dict_type": "expected a mapping",
    "dataclass_type": "expected a mapping of keys",
    "dataclass_args_type": "expected a mapping of keys",
    "list_type": "expected a list",
    "date_type": "expected a date (YYYY-MM-DD)",
    "date_parsing": "expected a date (YYYY-MM-DD)",
    "date_from_datetime_parsing": "expected a date (YYYY-MM-DD)",
    "missing": "missing required key",
}


def problem_from_pydantic(err: ErrorDetails) -> Problem:
    """Turn one pydantic error into a Problem with our wording and a suggestion where one is possible."""
    loc = tuple(part for part in err["loc"] if part != "[key]")
    kind = err["type"]
    value = err.get("input")
    if kind == "unexpected_keyword_argument":  # a key the section does not have (extra="forbid")
        return Problem(loc, _unknown_key(loc))
    if kind == "missing":
        return Problem(loc, _EXPECTED[kind])
    if kind == "literal_error":
        expected = _literal_choices(err)
        message = f"expected one of: {', '.join(expected)}"
        if isinstance(value, str):
            close = closest(value, expected)
            if close:
                message += f"; did you mean {close!r}?"
        return Problem(loc, message, value, True)
    if kind == "value_error":
        return Problem(loc, str(err["msg"]).removeprefix("Value error, "), value, True)
    if kind in _EXPECTED:
        message = _EXPECTED[kind]
        if (
            kind == "string_type"
            and isinstance(value, int | float)
            and not isinstance(value, bool)
            and not _is_secret_loc(loc)
        ):
            message += f' (quote it: "{value}")'
        return Problem(loc, message, value, True)
    # Constraint errors read well once pydantic's "Input should be" is turned into "must be".
    msg = str(err["msg"]).replace("Input should be", "must be").replace("String should have", "must have")
    return Problem(loc, msg, value, True)


def _literal_choices(err: ErrorDetails) -> list[str]:
    ctx = err.get("ctx") or {}
    raw = str(ctx.get("expected", ""))
    return [part.strip().strip("'") for part in re.split(r",| or ", raw) if part.strip()]


def _section_of(schema: Any) -> dict[str, Any] | None:
    """The section (a dataclass schema) a key's schema holds: defaults, nulls, lists and validators unwrapped."""
    while isinstance(schema, dict):
        if schema.get("type") == "dataclass":
            return schema
        schema = schema.get("items_schema") if schema.get("type") == "list" else schema.get("schema")
    return None


def _keys(section: dict[str, Any]) -> dict[str, Any]:
    """A section's keys, in the recipe's order, with each key's schema."""
    return {f["name"]: f["schema"] for f in section["schema"]["fields"]}


def _section(loc: tuple[str | int, ...]) -> dict[str, Any] | None:
    """The section describing the mapping at `loc` (list indices skipped)."""
    section: dict[str, Any] | None = recipe_schema()
    for part in loc:
        if isinstance(part, int):
            continue
        key = _keys(section).get(part) if section is not None else None
        section = _section_of(key) if key is not None else None
        if section is None:
            return None
    return section


def _all_paths(section: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(leaf name, dotted path) for every key of the recipe tree."""
    for name, schema in _keys(section).items():
        path = f"{prefix}{name}"
        yield name, path
        inner = _section_of(schema)
        if inner is not None:
            yield from _all_paths(inner, f"{path}.")


def _unknown_key(loc: tuple[str | int, ...]) -> str:
    """'unknown key' plus the most useful suggestion: a near spelling here, or the key's real home."""

    key = str(loc[-1])
    here = _section(loc[:-1])
    local = list(_keys(here)) if here is not None else []
    close = closest(key, local)
    if close:
        return f"unknown key; did you mean {close!r}?"
    prefix = ".".join(str(p) for p in loc[:-1] if isinstance(p, str))
    norm = key.lstrip("-").replace("-", "_").lower()
    target = FLAG_FIELDS.get(norm)
    if target is None:
        paths: dict[str, str] = {}
        for leaf, path in _all_paths(recipe_schema()):
            paths.setdefault(leaf, path)  # the shallowest home of a name wins
        if norm in paths:
            target = paths[norm]
        else:
            near = closest(norm, paths, cutoff=0.8)
            target = paths[near] if near else None
    if target is not None and target != f"{prefix}.{key}".lstrip("."):
        return f"unknown key here; did you mean {target!r}?"
    if norm in RUN_FLAGS:
        return f"unknown key: {key} belongs to one machine or run, not a recipe ({RUN_FLAGS[norm]})"
    return f"unknown key; valid keys here: {', '.join(local)}" if local else "unknown key"
