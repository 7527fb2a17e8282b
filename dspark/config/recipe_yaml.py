"""Recipe YAML before validation: parsed with line numbers, bounded in depth and alias expansion, finite.

A recipe is a few dozen keys; what a YAML parser would happily build from a hostile file (a 1 KB alias bomb
expanding to billions of values, nesting that exhausts the stack, .inf where a count belongs) is refused here
with the file and line, before pydantic sees anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from dspark.core.errors import RecipeError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe: where (key path), what, and the offending value when it helps."""

    loc: tuple[str | int, ...]
    message: str
    value: object = field(default=None)
    show_value: bool = False


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps timestamps as text: pydantic parses dates and reports a bad one like any value."""


def _timestamp_as_text(loader: _Loader, node: Node) -> str:
    return str(node.value)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


# A recipe is a few dozen keys (a model.config a few hundred); these bounds are far above any real one and
# refuse what would exhaust the stack (deep nesting) or memory and time (aliases that expand exponentially).
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000


def parse_yaml(text: str, source: str) -> tuple[Node | None, object]:
    """The node tree (for line numbers) and the data built from it; RecipeError for broken or hostile YAML."""
    parsed = _parse_with_libyaml(text, source)
    root, data = parsed if parsed is not None else _parse_pure(text, source)
    _check_finite(data, (), source, root)
    return root, data


# libyaml composes nested nodes by recursion in C, beyond Python's recursion limit (1e5 levels crash the
# process): only text whose nesting is bounded this low by its structural characters goes to it.
_LIBYAML_MAX_STRUCTURE = 2_000
# Where libyaml reads text otherwise than the pure parser: tabs as separation and `?` keys it passes, a byte
# order mark past the start it skips, and the Unicode line breaks (unprintable characters are checked apart).
_LIBYAML_DIFFERS = re.compile("[\t?\ufeff\x85\u2028\u2029]")
# libyaml's scanner and composer where PyYAML was built with it; the same parser as the pure path otherwise.
_FAST_COMPOSER: type[yaml.SafeLoader] | type[yaml.CSafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_with_libyaml(text: str, source: str) -> tuple[Node | None, object] | None:
    """libyaml's tree, and the data _Loader builds from it, for a recipe it parses cleanly and that passes the
    shape checks, ten times faster than the pure-Python parser; None for anything else, which the pure parser
    then refuses in its own words.

    The nodes are the same (kinds, values, tags, lines: the resolver is the Python one) and so is the data (built
    by _Loader's constructors): only the scanner and the composer are C.
    """
    if yaml.reader.Reader.NON_PRINTABLE.search(text) or _LIBYAML_DIFFERS.search(text):
        return None
    if sum(text.count(c) for c in "[{:-?") > _LIBYAML_MAX_STRUCTURE:
        return None
    composer = _FAST_COMPOSER(text)
    constructor = _Loader("")
    try:
        root = composer.get_single_node()
        if root is not None:
            _check_shape(root, source)
        data = constructor.construct_document(root) if root is not None else None
    except Exception:  # noqa: BLE001 - any failure is the pure parser's to word
        return None
    finally:
        composer.dispose()
        constructor.dispose()
    return root, data


def _long_number(loader: yaml.SafeLoader) -> tuple[int, str, int] | None:
    """(line, dotted key, digits) of the first integer scalar too long for int() in the document being built."""
    root = getattr(loader, "_dspark_root", None)
    stack: list[tuple[Node, tuple[str | int, ...]]] = [(root, ())] if root is not None else []
    seen: set[int] = set()
    while stack:
        node, loc = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            digits = sum(c.isdigit() for c in str(node.value))
            if node.tag == "tag:yaml.org,2002:int" and digits > 4300:
                return node.start_mark.line + 1, dotted(loc) or "(top)", digits
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*loc, i)) for i, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((key, loc))
                stack.append((value, (*loc, str(key.value)[:40])))
    return None


def _parse_pure(text: str, source: str) -> tuple[Node | None, object]:
    """The pure-Python parser's tree and data; RecipeError naming the file, line and problem otherwise."""
    try:
        loader = _Loader(text)  # the reader rejects unprintable characters (NUL) here, before parsing
    except yaml.YAMLError as exc:
        raise RecipeError(f"{source}: not valid YAML: {_reader_problem(exc)}") from None
    try:
        root = loader.get_single_node()
        loader._dspark_root = root  # type: ignore[attr-defined]  # for _long_number's message
        if root is not None:
            _check_shape(root, source)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        # Built from the parts, never str(exc): that quotes the offending line, which may hold a secret.
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        raise RecipeError(f"{where}: not valid YAML: {what}") from None
    except RecursionError:
        raise RecipeError(
            f"{source}: not valid YAML for a recipe: nested deeper than {MAX_YAML_DEPTH} levels"
        ) from None
    except (yaml.YAMLError, ValueError) as exc:
        too_long = _long_number(loader)
        if too_long is not None:  # int() refuses past 4,300 digits, in words about sys.set_int_max_str_digits
            line, key, digits = too_long
            raise RecipeError(f"{source}:{line}: {key}: a number of {digits:,} digits; no recipe value has that many",
                              hint="write the number you mean (sizes may take a unit: 28GiB)") from None
        # No message text: a constructor's message may quote the value.
        raise RecipeError(f"{source}: not valid YAML ({type(exc).__name__})") from None
    finally:
        loader.dispose()
    return root, data


def _reader_problem(exc: yaml.YAMLError) -> str:
    """What the YAML reader rejected, without quoting the text (it may hold a secret)."""
    if isinstance(exc, yaml.reader.ReaderError):
        code = ord(exc.character) if isinstance(exc.character, str) else int(exc.character)
        return f"unprintable character #x{code:04x} at position {exc.position}"
    return type(exc).__name__


def _check_shape(root: Node, source: str) -> None:
    """Refuse nesting deeper than MAX_YAML_DEPTH and aliases expanding past MAX_YAML_NODES (an alias bomb).

    Each distinct node is measured once (memoised by identity), so an alias graph with 9 aliases on each of
    9 levels costs 81 visits, not 9**9; a node that contains itself is refused too.
    """
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    open_nodes: set[int] = set()

    def measure(node: Node) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key], depths[key]
        if key in open_nodes:
            raise RecipeError(f"{source}:{node.start_mark.line + 1}: an alias refers to a node that contains it")
        open_nodes.add(key)
        children: list[Node] = []
        if isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, SequenceNode):
            children = list(node.value)
        size, depth = 1, 1
        for child in children:
            child_size, child_depth = measure(child)
            size += child_size
            depth = max(depth, child_depth + 1)
            if depth > MAX_YAML_DEPTH:
                raise RecipeError(
                    f"{source}:{node.start_mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels; "
                    "a recipe is a few levels of keys"
                )
        if size > MAX_YAML_NODES:
            raise RecipeError(
                f"{source}:{node.start_mark.line + 1}: its aliases expand to more than {MAX_YAML_NODES:,} values; "
                "write the values out, or use fewer aliases"
            )
        open_nodes.discard(key)
        sizes[key], depths[key] = size, depth
        return size, depth

    measure(root)


def _check_finite(data: object, loc: tuple[str | int, ...], source: str, root: Node | None) -> None:
    """Every number in a recipe is finite: .inf / .nan are never a count, a share or a measurement."""
    if isinstance(data, float) and not math.isfinite(data):
        line = line_of(root, loc) if root is not None else 0
        raise RecipeError(f"{source}:{line}: {dotted(loc)}: not a finite number (got {data!r})")
    if isinstance(data, dict):
        for key, value in data.items():
            _check_finite(value, (*loc, str(key)), source, root)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_finite(value, (*loc, i), source, root)


def duplicate_keys(node: Node, loc: tuple[str | int, ...], seen_nodes: set[int] | None = None) -> Iterator[Problem]:
    """Keys given twice in one mapping (YAML would silently keep the last one); each node is visited once."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias to a node already checked
        return
    seen_nodes.add(id(node))
    if isinstance(node, MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else None
            if key is None:
                continue
            if key in seen:
                yield Problem((*loc, key), f"duplicate key (first given on line {seen[key]})")
            else:
                seen[key] = key_node.start_mark.line + 1
            yield from duplicate_keys(value_node, (*loc, key), seen_nodes)
    elif isinstance(node, SequenceNode):
        for i, item in enumerate(node.value):
            yield from duplicate_keys(item, (*loc, i), seen_nodes)


def line_of(root: Node, loc: tuple[str | int, ...]) -> int:
    """1-based line of the deepest node on `loc` that exists (a missing key points at its parent)."""
    node: Node = root
    line = root.start_mark.line + 1
    for part in loc:
        if isinstance(node, MappingNode) and isinstance(part, str):
            # The last one: that is the value YAML keeps when a key repeats.
            found = [(k, v) for k, v in node.value if isinstance(k, ScalarNode) and k.value == part]
            if not found:
                break
            key_node, node = found[-1]
            line = key_node.start_mark.line + 1
        elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def dotted(loc: tuple[str | int, ...]) -> str:
    """('observations', 0, 'value') -> 'observations[0].value'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(top level)"
