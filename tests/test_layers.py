"""The package layout's rules, checked on the source: no import cycle (function-level and TYPE_CHECKING imports
included), every package inside the import-linter contracts, no engine name branched on outside dspark/engines/.

The layer order itself is import-linter's (pyproject.toml [tool.importlinter], run by scripts/test);
docs/architecture.md says what each package holds.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grimp
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (requires-python): pytest itself brings tomli there
    import tomli as tomllib

from dspark.engines import ENGINE_NAMES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dspark"


def _cycles(graph: grimp.ImportGraph) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: set[frozenset[str]] = set()

    def enter(module: str) -> tuple[str, Iterator[str]]:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        return module, iter(sorted(graph.find_modules_directly_imported_by(module)))

    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [enter(root)]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    work.append(enter(child))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = {stack.pop()}
                while node not in component:
                    component.add(stack.pop())
                on_stack.difference_update(component)
                if len(component) > 1:
                    components.add(frozenset(component))
    return components


def _graph(package: str, path: Path) -> grimp.ImportGraph:
    """The package's import graph, from the source under `path` (not another copy), which must be importable
    from there: grimp finds the package as `import` would (importlib.util.find_spec)."""
    spec = importlib.util.find_spec(package)
    origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
    assert origin == (path / package / "__init__.py").resolve(), (
        f"{package} imports from {origin}, not from {path}: install this checkout (pip install -e .) or run "
        f"with PYTHONPATH={path}")
    return grimp.build_graph(package, exclude_type_checking_imports=False, cache_dir=None)


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(tmp_path)  # pytest's own way, undone after the test: grimp imports by name
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc import b\n")
    (pkg / "b.py").write_text("def f():\n    from cyc import c\n")
    (pkg / "c.py").write_text("import cyc.a\n")
    (pkg / "d.py").write_text("import cyc.a\n")
    assert _cycles(_graph("cyc", tmp_path)) == {frozenset({"cyc.a", "cyc.b", "cyc.c"})}


def test_no_import_cycle_between_dspark_modules() -> None:
    found = _cycles(_graph("dspark", ROOT))
    assert not found, f"import cycles: {sorted(sorted(c) for c in found)}"


def test_every_package_is_inside_the_layer_contracts() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["type"]: c for c in config["contracts"]}
    layered = {name.strip() for layer in contracts["layers"]["layers"] for name in layer.split("|")}
    modules = [p for p in PACKAGE.iterdir() if p.suffix == ".py" and p.stem not in ("__init__", "__main__")]
    top = {f"dspark.{p.stem}" for p in modules} | {f"dspark.{p.name}" for p in PACKAGE.iterdir()
                                                  if (p / "__init__.py").is_file()}
    assert layered == top
    forbidden = contracts["forbidden"]
    assert set(forbidden["source_modules"]) == top - {"dspark.engines"}
    assert set(forbidden["forbidden_modules"]) == {f"dspark.engines.{name}" for name in ENGINE_NAMES}
    assert all((PACKAGE / "engines" / name / "spec.py").is_file() for name in ENGINE_NAMES)


def engine_name_uses(source: str, names: tuple[str, ...] = ENGINE_NAMES) -> list[tuple[int, str]]:
    """(line, what) for each comparison with, membership test on, dict key or match case of an engine name."""

    def is_name(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    def holds_name(node: ast.AST) -> bool:
        return is_name(node) or (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(is_name, node.elts)))

    def keyed_call(node: ast.Call) -> bool:  # dict(vllm=...), table.get("vllm")
        if isinstance(node.func, ast.Name) and node.func.id == "dict":
            return any(kw.arg in names for kw in node.keywords)
        lookup = isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault")
        return lookup and bool(node.args) and is_name(node.args[0])

    checks: list[tuple[type[ast.AST], str, Callable[[Any], bool]]] = [
        (ast.Compare, "compared", lambda n: any(map(holds_name, [n.left, *n.comparators]))),
        (ast.Dict, "as a dict key", lambda n: any(map(is_name, n.keys))),
        (ast.Call, "as a dict key", keyed_call),
        (ast.Subscript, "as a subscript", lambda n: is_name(n.slice)),
        (ast.MatchValue, "as a match case", lambda n: is_name(n.value)),
        (ast.MatchMapping, "as a match case", lambda n: any(map(is_name, n.keys))),
    ]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        found += [(line, what) for kind, what, hit in checks if isinstance(node, kind) and hit(node)]
    return found


@pytest.mark.parametrize("code", [
    'engine == "vllm"',
    '"sglang" != engine',
    'engine in ("vllm", "sglang")',
    'engine not in {"sglang"}',
    '"vllm" in engines',
    '{"vllm": 256, "sglang": 2048}[engine]',
    "dict(vllm=1)",
    'table["sglang"]',
    'table.get("vllm", 0)',
    'match engine:\n    case "sglang":\n        pass',
    'match d:\n    case {"vllm": x}:\n        pass',
])
def test_the_engine_name_check_catches(code: str) -> None:
    assert engine_name_uses(code)


@pytest.mark.parametrize("code", [
    "engine == name",  # a name read from the registry
    "engine in ENGINE_NAMES",
    'f"{engine} is not vllm"',  # text
    '# engine == "vllm" in a comment',
    'x = "vllm"',
    'metric == "sglang:token_usage"',
])
def test_the_engine_name_check_lets_pass(code: str) -> None:
    assert engine_name_uses(code) == []


def test_outside_dspark_engines_no_module_branches_on_an_engine_name() -> None:
    engines = PACKAGE / "engines"
    inside = PACKAGE / "_inside_root" / "dspark_inside"
    # An engine's own inside tools (dspark_inside/<engine>/, run in that engine's interpreter) know their engine.
    own_tools = {inside / name for name in ENGINE_NAMES}
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: engine name {what}"
        for path in sorted(PACKAGE.rglob("*.py")) if engines not in path.parents and not own_tools & set(path.parents)
        for line, what in engine_name_uses(path.read_text())
    ]
    assert offenders == [], "engine knowledge belongs in dspark/engines/<engine>/ (ask the EngineSpec registry):\n" + (
        "\n".join(offenders))


_PATH_CHANGES = frozenset({"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__iadd__"})


def _is_sys_path(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def _code_in(node: ast.AST) -> str | None:
    """The text of a string literal (an f-string's fields stood in for by a name) that mentions sys.path."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "_"
                       for v in node.values)
    else:
        return None
    return text if "sys.path" in text else None


def sys_path_edits(source: str) -> list[int]:
    """Lines that change sys.path (a call of a list method on it, an assignment to it or to a slice of it,
    `from sys import path`), also in code written as a string (a `-c` child, a generated script)."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_sys_path(node.func.value) \
                and node.func.attr in _PATH_CHANGES:
            found.append(line)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            if any(_is_sys_path(t.value if isinstance(t, ast.Subscript) else t) for t in targets):
                found.append(line)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            found.append(line)
        elif (code := _code_in(node)) is not None:
            try:
                inner = sys_path_edits(code)
            except SyntaxError:  # prose that names sys.path
                continue
            found += [line] * bool(inner)
    return sorted(set(found))


# Spelled through {p}, so that this file's own literals hold no sys.path edit for the check below to find.
@pytest.mark.parametrize("code", [c.format(p="sys.path") for c in [
    "{p}.insert(0, 'x')",
    "{p}.append(str(ROOT))",
    "{p}[:0] = [a, b]",
    "{p} = ['x']",
    "{p} += ['x']",
    "del {p}[0]",
    "{p}.remove('x')",
    "if True:\n    def f():\n        {p}.extend(dirs)",
    "from sys import path",
    "run(['python', '-c', 'import sys; {p}.insert(0, \\'x\\'); import dspark'])",
    "script.write_text(f'import sys\\n{p}.insert(0, {{where!r}})\\n')",
]])
def test_the_sys_path_check_catches(code: str) -> None:
    assert sys_path_edits(code)


@pytest.mark.parametrize("code", [c.format(p="sys.path") for c in [
    "first = {p}[0]",
    "paths = list({p})",
    "'x' in {p}",
    "# {p}.insert(0, 'x') in a comment",
    "'text that names {p} in prose'",
    "monkeypatch.syspath_prepend(tmp_path)",
    "env = {{'PYTHONPATH': str(ROOT)}}",
]])
def test_the_sys_path_check_lets_pass(code: str) -> None:
    assert sys_path_edits(code) == []


def test_no_sys_path_edits_outside_the_inside_runtime() -> None:
    """Issue 24: code finds dspark, the tests' helpers and the benchmarks as packages (an install, `python -m`
    from the checkout, PYTHONPATH for a child, pytest's `pythonpath`), never by editing sys.path. Only
    dspark/_inside_root/ (run in the engine's interpreter) manages it; tests/device/ runs on the GPU machine."""
    skipped = (PACKAGE / "_inside_root", ROOT / "tests" / "device")
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for top in (PACKAGE, ROOT / "tests", ROOT / "benchmarks")
        for path in sorted(top.rglob("*.py")) if not any(s in path.parents for s in skipped)
        for line in sys_path_edits(path.read_text())
    ]
    assert offenders == [], "sys.path edited (run as a module, or pass PYTHONPATH to a child):\n" + (
        "\n".join(offenders))
