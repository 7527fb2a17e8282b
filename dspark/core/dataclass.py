"""`dataclass`, the standard library's, with frozen classes built at half the cost: same methods, same behaviour.

For a frozen class, dataclasses compiles six methods from source text (__init__, __repr__, __eq__, __hash__,
__setattr__, __delattr__), and compiling them is most of what defining the class costs: about 6 M instructions a
class on CPython 3.10-3.12, and `dspark validate` defines some 60 of them (docs/testing.md). Here __init__ alone
is compiled, from the text dataclasses writes for it, and only when the class is first called or its __init__ first
read (validate makes some 47 of its 60). The other five are closures over the field names that return
and raise what dataclasses' own do on 3.10-3.12 (tuples compared and hashed, "cannot assign to field 'x'",
"..." for a recursive repr). The rest is dataclasses' own: it processes the class with those methods turned off
(fields(), replace(), asdict(), __match_args__), and __dataclass_params__ then says what the class does.

Handed to dataclasses unchanged: any option but frozen=True, a class that writes one of the six methods, inherits
from a dataclass or has InitVar or keyword-only fields, and every class on other Python versions (3.13 writes the
methods otherwise). An InitVar or KW_ONLY under an alias the annotation's text does not name is refused (TypeError).
tests/core/test_dataclass.py holds every dspark frozen dataclass to a twin that dataclasses builds. mypy sees
dataclasses.dataclass itself.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import threading
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["dataclass"]

_T = TypeVar("_T")
_OWN_METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")
# The versions whose generated methods these mirror (dataclasses.py: _init_fn, _repr_fn, _cmp_fn, _hash_fn,
# _frozen_get_del_attr); 3.13 compares field by field and builds them another way.
_MIRRORED = (3, 10) <= sys.version_info[:2] <= (3, 12)
_HAS_DEFAULT_FACTORY = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", None)  # the `<factory>` default
_FIELD = getattr(dataclasses, "_FIELD", None)  # a field proper (not a ClassVar or InitVar pseudo-field)
_CLASSVAR = getattr(dataclasses, "_FIELD_CLASSVAR", None)


def _tuple_of(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """obj -> (obj.a, obj.b, ...), as dataclasses' `(self.a,self.b,)`."""
    if not names:
        return lambda _obj: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return attrgetter(*names)  # a tuple for two names or more


def _init(fields: list[dataclasses.Field[Any]], globals_: dict[str, Any], post_init: bool) -> Callable[..., None]:
    """__init__ from the text dataclasses writes for a frozen class (_init_fn, _field_init, _init_param)."""
    self_name = "__dataclass_self__" if "self" in (f.name for f in fields) else "self"
    local: dict[str, Any] = {f"_type_{f.name}": f.type for f in fields}
    local.update({"_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY, "__dataclass_builtins_object__": object,
                  "_return_type": None})
    params, body = [self_name], []
    for f in fields:
        default = f"_dflt_{f.name}"
        if f.default_factory is not dataclasses.MISSING:
            local[default] = f.default_factory
            value = f"{default}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init else f"{default}()"
        elif f.init:
            if f.default is not dataclasses.MISSING:
                local[default] = f.default
            value = f.name
        else:
            continue  # the class attribute holds its default; nothing to assign
        body.append(f"__dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})")
    for f in fields:
        if f.init:
            default = ("" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                       else f"=_dflt_{f.name}" if f.default is not dataclasses.MISSING else "=_HAS_DEFAULT_FACTORY")
            params.append(f"{f.name}:_type_{f.name}{default}")
    if post_init:
        body.append(f"{self_name}.__post_init__()")
    lines = "\n".join(f"  {line}" for line in body or ["pass"])
    text = (f"def __create_fn__({', '.join(local)}):\n def __init__({','.join(params)})->_return_type:\n{lines}\n"
            " return __init__")
    namespace: dict[str, Any] = {}
    # dont_inherit: compiled as dataclasses compiles it, so the annotations are the field types, not this module's
    # postponed strings.
    code = compile(text, "<string>", "exec", dont_inherit=True)
    exec(code, globals_, namespace)  # noqa: S102 - what dataclasses itself does: text built from field names only
    init: Callable[..., None] = namespace["__create_fn__"](**local)
    return init


class _InitOnFirstUse:
    """__init__, compiled the first time the class is called or its __init__ read (a command leaves some of the
    classes it imports unmade), then set on the class in place of this."""

    def __init__(self, owner: type, build: Callable[[], Callable[..., None]]) -> None:
        self._owner, self._build = owner, build

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        init = self._build()
        init.__qualname__ = f"{self._owner.__qualname__}.__init__"
        type.__setattr__(self._owner, "__init__", init)
        return init if obj is None else init.__get__(obj, objtype)


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    """__repr__: `Qualname(a=..., b=...)`, and "..." for an object already being shown on this thread."""
    running: set[tuple[int, int]] = set()

    def __repr__(self: Any) -> str:
        key = id(self), threading.get_ident()
        if key in running:
            return "..."
        running.add(key)
        try:
            qualname: str = self.__class__.__qualname__
            return qualname + "(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"
        finally:
            running.discard(key)

    return __repr__


def _eq(compared: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    return __eq__


def _hash(hashed: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    return __hash__


def _frozen(owner: type, names: frozenset[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    def __setattr__(self: object, name: str, value: Any) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)  # type: ignore[arg-type]  # owner is a class

    def __delattr__(self: object, name: str) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)  # type: ignore[arg-type]  # owner is a class

    return __setattr__, __delattr__


def _mirrorable(cls: type) -> bool:
    """Whether the class uses only what this mirrors (checked before dataclasses sees it)."""
    if any(name in vars(cls) for name in _OWN_METHODS):
        return False  # dataclasses keeps a class's own methods (and refuses its own __setattr__ when frozen)
    if any(getattr(base, "__dataclass_fields__", None) is not None for base in cls.__mro__[1:]):
        return False
    return not any(_special(name, annotation, vars(cls).get(name))
                   for name, annotation in vars(cls).get("__annotations__", {}).items())


def _special(name: str, annotation: Any, value: Any) -> bool:
    """Whether a field may be an InitVar or keyword-only (a postponed annotation is read as text: a false
    positive only costs the standard path)."""
    if isinstance(value, dataclasses.Field) and value.kw_only is True:
        return True
    if isinstance(annotation, str):
        return "InitVar" in annotation or "KW_ONLY" in annotation
    return annotation is dataclasses.KW_ONLY or annotation is dataclasses.InitVar or isinstance(
        annotation, dataclasses.InitVar)


def _frozen_dataclass(cls: type[_T], options: dict[str, Any]) -> type[_T]:
    """dataclasses.dataclass(**options) on cls (frozen=True, the rest at their defaults), the five methods other
    than __init__ as closures."""
    if not (_MIRRORED and _HAS_DEFAULT_FACTORY is not None and _FIELD is not None and _mirrorable(cls)):
        return dataclasses.dataclass(cls, **options)
    documented = bool(cls.__doc__)  # dataclasses writes one from __init__'s signature, which it does not make here
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    every: list[dataclasses.Field[Any]] = list(cls.__dataclass_fields__.values())  # type: ignore[attr-defined]
    kinds = [f._field_type for f in every]  # type: ignore[attr-defined]  # _FIELD, _FIELD_CLASSVAR, _FIELD_INITVAR
    fields = [f for f, kind in zip(every, kinds, strict=True) if kind is _FIELD]  # ClassVars are no fields
    if len(fields) != len(every) - kinds.count(_CLASSVAR) or any(f.kw_only is True for f in fields):
        # _mirrorable hands such classes to dataclasses; an alias of InitVar or KW_ONLY can get past it.
        raise TypeError(f"{cls.__qualname__}: InitVar and keyword-only fields need dataclasses.dataclass itself")
    _check_default_order(fields)
    module = sys.modules.get(cls.__module__)
    setattr_, delattr_ = _frozen(cls, frozenset(f.name for f in fields))
    globals_ = module.__dict__ if module is not None else {}
    post_init = hasattr(cls, "__post_init__")
    methods = {
        "__repr__": _repr(tuple(f.name for f in fields if f.repr)),
        "__eq__": _eq(_tuple_of(tuple(f.name for f in fields if f.compare))),
        "__hash__": _hash(_tuple_of(tuple(f.name for f in fields if (f.hash is None and f.compare) or f.hash))),
        "__setattr__": setattr_,
        "__delattr__": delattr_,
    }
    for name, method in methods.items():
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    type.__setattr__(cls, "__init__", _InitOnFirstUse(cls, lambda: _init(fields, globals_, post_init)))
    if not documented:  # dataclasses' docstring: the class's name and __init__'s signature
        try:
            cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            cls.__doc__ = cls.__name__
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init = params.repr = params.eq = params.frozen = True  # what the class now does, as dataclass() says it
    return cls


def _check_default_order(fields: list[dataclasses.Field[Any]]) -> None:
    """dataclasses' own TypeError for a field without a default after one with (before the text would not compile)."""
    seen_default = False
    for f in fields:
        if f.init:
            if not (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")


# dataclass()'s options at their defaults: with frozen=True, what _frozen_dataclass builds.
_DEFAULTS = {"init": True, "repr": True, "eq": True, "order": False, "unsafe_hash": False, "match_args": True,
             "kw_only": False, "slots": False, "weakref_slot": False}


def _dataclass(cls: type[_T] | None = None, /, **options: Any) -> Any:
    """dataclasses.dataclass; frozen=True with the other options at their defaults is built by _frozen_dataclass."""
    if options.get("frozen") is not True or any(_DEFAULTS.get(k, not v) != v for k, v in options.items()
                                                 if k != "frozen"):
        return dataclasses.dataclass(cls, **options) if cls is not None else dataclasses.dataclass(**options)
    if cls is None:
        return lambda cls: _frozen_dataclass(cls, options)
    return _frozen_dataclass(cls, options)


if TYPE_CHECKING:
    from dataclasses import dataclass
else:
    dataclass = _dataclass
