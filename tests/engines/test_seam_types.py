"""The engine seam is checked by mypy: no Any in EngineSpec's fields, and a hook of another engine's types is an
error on the spec that takes it (shown on the stub third engine, tests/fixtures/toy_engine)."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from mypy import api

from dspark.engines import spec as spec_module

REPO = Path(__file__).resolve().parents[2]
# The modules spec.py names only under TYPE_CHECKING, for resolving its annotations at run time.
_TYPE_ONLY = ("dspark.capacity", "dspark.capacity.result", "dspark.capacity.usage", "dspark.engines.serve_config",
              "dspark.hardware", "dspark.model.architecture", "dspark.model.weights", "dspark.runtime.launch")


def _anys(hint: object) -> Iterator[object]:
    if hint is typing.Any:
        yield hint
    for arg in typing.get_args(hint):
        for inner in arg if isinstance(arg, list) else [arg]:  # Callable's argument list
            yield from _anys(inner)


def test_no_field_of_engine_spec_is_typed_any() -> None:
    names: dict[str, object] = dict(vars(spec_module))
    for module in _TYPE_ONLY:
        names.update(vars(importlib.import_module(module)))
    hints = typing.get_type_hints(spec_module.EngineSpec, globalns=names)
    assert set(hints) >= {"parse_flags", "capacity", "witness_request", "data_parallel", "read_back", "replay"}
    assert {name: hint for name, hint in hints.items() if list(_anys(hint))} == {}


def test_any_finder_finds_any_where_it_is() -> None:
    assert list(_anys(typing.Callable[[typing.Mapping[str, typing.Any]], int]))
    assert list(_anys(dict[str, typing.Any] | None))
    assert not list(_anys(typing.Callable[[typing.Mapping[str, object]], int]))


def test_mypy_refuses_a_hook_that_takes_another_engines_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.chdir(REPO)  # mypy finds `tests.fixtures...` and its cache from the repository's root
    probe = tmp_path / "seam_probe.py"
    probe.write_text(
        "from dataclasses import replace\n\n"
        "from dspark.engines.sglang.options import SglangOptions\n"
        "from tests.fixtures.toy_engine.engine.options import ToyOptions\n"
        "from tests.fixtures.toy_engine.engine.spec import SPEC\n\n\n"
        "def toy_dp(options: ToyOptions) -> tuple[int, bool]:\n    return 1, False\n\n\n"
        "def sglang_dp(options: SglangOptions) -> tuple[int, bool]:\n    return 1, False\n\n\n"
        "GOOD = replace(SPEC, data_parallel=toy_dp)\n"
        "BAD = replace(SPEC, data_parallel=sglang_dp)\n"
    )
    out, err, status = api.run(["--config-file", str(REPO / "pyproject.toml"), str(probe)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1 and len(errors) == 1, out + err
    assert ":17: error: " in errors[0]  # the BAD line; GOOD passes
    assert 'expected "Callable[[ToyOptions], tuple[int, bool]]"' in errors[0]
