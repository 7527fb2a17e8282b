"""dspark.core.dataclass builds frozen classes that behave as dataclasses.dataclass(frozen=True) builds them.

Every dspark dataclass is held to a twin that dataclasses itself builds from the same fields and namespace:
the same signature, docstring, params and match args, and instances that print, compare, hash, refuse
assignment and deletion, and go through replace() and asdict() alike. Small classes cover what dspark's do
not happen to use (a recursive repr, a field named self, ClassVars, init=False fields, no docstring, bad field order).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib
import inspect
import pkgutil
import sys
import textwrap
from collections.abc import Callable
from typing import Any, ClassVar, cast

import pytest

import dspark
from dspark.core import dataclass as fast
from dspark.core.dataclass import dataclass

MIRRORED = (3, 10) <= sys.version_info[:2] <= (3, 12)
_GENERATED = {"__dict__", "__weakref__", "__dataclass_fields__", "__dataclass_params__", "__match_args__",
              "__annotations__", "__hash__", *fast._OWN_METHODS}


def _dspark_modules() -> list[str]:
    """Every dspark module this interpreter imports (the scripts that run in an engine's interpreter are not)."""
    names = []
    for info in pkgutil.walk_packages(dspark.__path__, "dspark."):
        if ".inside" in info.name or info.name.rsplit(".", 1)[1].startswith("_"):
            continue  # run by the engine's interpreter, with the engine importable
        names.append(info.name)
    return names


def _dspark_dataclasses() -> list[type]:
    found: dict[str, type] = {}
    for name in _dspark_modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == name:
                found[f"{name}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


DSPARK_DATACLASSES = _dspark_dataclasses()
FROZEN = [c for c in DSPARK_DATACLASSES if c.__dataclass_params__.frozen]  # type: ignore[attr-defined]


def _twin(cls: type) -> type:
    """The class dataclasses.dataclass(frozen=True) makes of cls's fields and namespace."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory, init=f.init,
                                                 repr=f.repr, hash=f.hash, compare=f.compare, metadata=f.metadata,
                                                 kw_only=f.kw_only))
              for f in dataclasses.fields(cls)]
    names = {f.name for f in dataclasses.fields(cls)}
    namespace = {k: v for k, v in vars(cls).items() if k not in _GENERATED and k not in names}
    # A class whose source has no docstring gets dataclasses' own (None lets make_dataclass write it).
    namespace["__doc__"] = cls.__doc__ if _has_docstring(cls) else None
    where: dict[str, Any] = {"module": cls.__module__} if sys.version_info >= (3, 12) else {}
    namespace["__module__"] = cls.__module__
    return dataclasses.make_dataclass(cls.__name__, fields, bases=cls.__bases__, namespace=namespace, frozen=True,
                                      **where)


def _has_docstring(cls: type) -> bool:
    """Whether the class's source writes a docstring (whatever a decorator made of __doc__)."""
    node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(node, ast.ClassDef)
    return ast.get_docstring(node) is not None


def _outcome(action: Callable[[], Any]) -> tuple[str, Any]:
    """What an action returned, or the type and message of what it raised."""
    try:
        return "returned", action()
    except Exception as exc:  # the exception is the outcome compared
        return "raised", (type(exc).__name__, str(exc))


def _arguments(cls: type) -> dict[str, Any]:
    """A value for each __init__ field without a default (text, which every dspark class takes)."""
    return {f.name: f"<{f.name}>" for f in dataclasses.fields(cls)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def _behaviour(cls: type) -> dict[str, Any]:
    """Everything compared between a class and its twin, as plain values."""
    args = _arguments(cls)
    made = _outcome(lambda: cls(**args))
    seen: dict[str, Any] = {
        "signature": str(inspect.signature(cls)),
        "defaults": [p.default for p in inspect.signature(cls).parameters.values()],
        "init annotations": cast(Any, cls).__init__.__annotations__,
        "doc": cls.__doc__,
        "params": repr(cls.__dataclass_params__),  # type: ignore[attr-defined]
        "match args": cls.__match_args__,  # type: ignore[attr-defined]
        "qualnames": [getattr(cls, m).__qualname__.split(".", 1)[1] for m in fast._OWN_METHODS],
        "made": made[0] if made[0] == "returned" else made,
    }
    if made[0] == "raised":
        return seen
    obj = made[1]
    first = next((f.name for f in dataclasses.fields(cls) if f.init and f.compare), None)
    ignored = next((f.name for f in dataclasses.fields(cls) if f.init and not f.compare), None)
    seen |= {
        "repr": repr(obj),
        "hash": _outcome(lambda: hash(obj)),
        "equal": obj == cls(**args),
        "not equal to other types": (obj == object(), obj.__eq__(object()) is NotImplemented),
        "assign field": _outcome(lambda: setattr(obj, dataclasses.fields(cls)[0].name, 1)),
        "assign new": _outcome(lambda: setattr(obj, "not_a_field", 1)),
        "delete": _outcome(lambda: delattr(obj, dataclasses.fields(cls)[0].name)),
        "asdict": _outcome(lambda: dataclasses.asdict(obj)),
        "deepcopy equal": _outcome(lambda: copy.deepcopy(obj) == obj),
    }
    if first is not None:
        seen["changed field"] = _outcome(lambda: dataclasses.replace(obj, **{first: "<other>"}) == obj)
    if ignored is not None:
        seen["changed ignored field"] = _outcome(lambda: dataclasses.replace(obj, **{ignored: "<other>"}) == obj)
    return seen


@pytest.mark.parametrize("cls", FROZEN, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_frozen_dspark_dataclass_behaves_as_dataclasses_builds_it(cls: type) -> None:
    assert _behaviour(cls) == _behaviour(_twin(cls))


def _compiled_by_dataclasses(cls: type) -> bool:
    code = vars(cls)["__setattr__"].__code__
    return bool(code.co_filename != fast.__file__)


def test_dspark_frozen_dataclasses_take_the_fast_path() -> None:
    assert len(FROZEN) > 100  # the module walk found them
    slow = [c.__qualname__ for c in FROZEN if _compiled_by_dataclasses(c)]
    # Keyword-only classes go to dataclasses by design: the recipe's sections (pydantic-core builds them).
    keyword_only = [c.__qualname__ for c in FROZEN if any(f.kw_only is True for f in dataclasses.fields(c))]
    assert sorted(keyword_only) == ["Batching", "Context", "KvCache", "ModelSpec", "Observation", "Parallel",
                                    "Recipe", "Speculative"]
    assert slow == (keyword_only if MIRRORED else [c.__qualname__ for c in FROZEN])


# Cases dspark's classes do not happen to cover.


@dataclass(frozen=True)
class _Node:
    """Holds itself: the repr says '...' where dataclasses' does."""

    children: list[Any] = dataclasses.field(default_factory=list)
    label: str = "n"


@dataclass(frozen=True)
class _Odd:
    """A field named self, a ClassVar, a field left out of __init__, one out of the repr, one out of eq."""

    self: int
    shared: ClassVar[int] = 3
    later: list[int] = dataclasses.field(default_factory=list, init=False)
    fixed: int = dataclasses.field(default=7, init=False)
    hidden: str = dataclasses.field(default="h", repr=False)
    loose: str = dataclasses.field(default="l", compare=False)
    unhashed: str = dataclasses.field(default="u", hash=False)

    def __post_init__(self) -> None:
        self.later.append(self.self)


@dataclass(frozen=True)
class _NoDoc:
    x: int = 1


def test_a_recursive_repr_reads_as_dataclasses_writes_it() -> None:
    node = _Node()
    node.children.append(node)
    assert repr(node) == "_Node(children=[...], label='n')"


def test_small_classes_behave_as_dataclasses_builds_them() -> None:
    for cls in (_Node, _Odd, _NoDoc):
        assert not _compiled_by_dataclasses(cls) or not MIRRORED
        assert _behaviour(cls) == _behaviour(_twin(cls))
    odd = _Odd(self=2)
    assert (odd.later, odd.fixed, _Odd.shared) == ([2], 7, 3)
    assert [f.name for f in dataclasses.fields(_Odd)] == ["self", "later", "fixed", "hidden", "loose", "unhashed"]


def test_a_field_without_default_after_one_with_is_dataclasses_type_error() -> None:
    def define(decorator: Callable[[type], type]) -> tuple[str, Any]:
        class Bad:
            """x has a default, y none."""

            x: int = 1
            y: int

        return _outcome(lambda: decorator(Bad))

    assert define(dataclass(frozen=True)) == define(dataclasses.dataclass(frozen=True))
    assert define(dataclass(frozen=True))[0] == "raised"


def test_what_it_does_not_mirror_goes_to_dataclasses() -> None:
    @dataclass(frozen=True, order=True)
    class Ordered:
        """order=True is dataclasses' alone."""

        x: int = 1

    @dataclass
    class Mutable:
        """Not frozen."""

        x: int = 1

    @dataclass(frozen=True)
    class KeywordOnly:
        """kw_only through the field."""

        x: int = dataclasses.field(default=1, kw_only=True)

    @dataclass(frozen=True)
    class AfterMarker:
        """kw_only through the KW_ONLY marker."""

        _: dataclasses.KW_ONLY
        y: int = 2

    @dataclass(frozen=True)
    class WithInitVar:
        """An InitVar reaches __post_init__."""

        seed: dataclasses.InitVar[int]
        doubled: int = dataclasses.field(default=0, init=False)

        def __post_init__(self, seed: int) -> None:
            object.__setattr__(self, "doubled", 2 * seed)

    for cls in (Ordered, KeywordOnly, AfterMarker, WithInitVar):
        assert _compiled_by_dataclasses(cls), cls
    assert Ordered(1) < Ordered(2)
    assert not Mutable.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert str(inspect.signature(KeywordOnly)) == "(*, x: 'int' = 1) -> None"
    assert str(inspect.signature(AfterMarker)) == "(*, y: 'int' = 2) -> None"
    assert WithInitVar(3).doubled == 6


Seed = dataclasses.InitVar  # an alias whose text does not say InitVar


def test_an_initvar_under_an_alias_is_refused_where_mirrored() -> None:
    def define() -> type:
        @dataclass(frozen=True)
        class Aliased:
            """The annotation's text names no InitVar."""

            seed: Seed[int]

        return Aliased

    if MIRRORED:
        with pytest.raises(TypeError, match=r"InitVar and keyword-only fields need dataclasses\.dataclass itself"):
            define()
    else:  # dataclasses builds every class there
        assert str(inspect.signature(define())) == "(seed: 'Seed[int]') -> None"


def test_init_is_compiled_when_the_class_is_first_called_or_read() -> None:
    @dataclass(frozen=True)
    class Late:
        """Not made yet."""

        x: int = 1

    assert type(vars(Late)["__init__"]).__name__ == ("_InitOnFirstUse" if MIRRORED else "function")
    assert str(inspect.signature(Late)) == "(x: 'int' = 1) -> None"  # reading it compiles it
    assert inspect.isfunction(vars(Late)["__init__"])

    @dataclass(frozen=True)
    class Called:
        """Made first."""

        y: int

    assert Called(2).y == 2 and inspect.isfunction(vars(Called)["__init__"])
    assert Called.__init__.__qualname__ == f"{Called.__qualname__}.__init__"
