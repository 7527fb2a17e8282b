"""Bounded JSON reading: hostile config.json / probe files are input errors naming the file, not crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark.core.errors import InputError
from dspark.core.jsonfile import MAX_JSON_DEPTH, read_json_file
from dspark.model.modeldir import load_config, resolve_model


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"[" * 100_000 + b"]" * 100_000, f"nested deeper than {MAX_JSON_DEPTH} levels"),
        (b'{"a": ' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1), "nested deeper"),
        (b'{"hidden_size": 1e400}', "too large to be finite"),
        (b'{"hidden_size": Infinity}', "Infinity is not a number JSON allows"),
        (b'{"model_type": "\xff"}', "not UTF-8 text"),
        (b'{"model_type": ', "not valid JSON at line 1"),
    ],
)
def test_bad_config_json_is_an_input_error_naming_the_file(tmp_path: Path, content: bytes, problem: str) -> None:
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(InputError) as err:
        load_config(resolve_model(str(tmp_path)))
    assert str(tmp_path / "config.json") in str(err.value)
    assert problem in str(err.value)


def test_nesting_at_the_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    value = read_json_file(path)
    for _ in range(MAX_JSON_DEPTH - 1):
        value = value[0]
    assert value == []
