"""The store of recorded boots (dspark.runtime.boot_store): where it is, atomic and bounded writes, readers that
warn on what is not a record instead of failing, and nothing secret in a file."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from dspark.runtime import boot_store
from dspark.runtime.boot_store import BootRecord, RecordError

KEY = "0123456789abcdef"


def _record(key: str = KEY, pool: int = 2_327_808, **extra: object) -> BootRecord:
    fields: dict[str, object] = {
        "key": key, "identity": {"engine": "vllm", "settings": {"max_num_seqs": 2, "engine_values": {"u": 0.12}}},
        "engine": "vllm", "engine_version": "0.32.0", "pool_tokens": pool, "max_model_len": 2048,
        "max_concurrency": pool / 2048, "terms": {"available_kv_gib": 2.22}, "recorded_at": "2026-12-02T06:18:59Z",
    }
    fields.update(extra)
    return BootRecord(**fields)  # type: ignore[arg-type]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"DSPARK_DATA_DIR": str(tmp_path / "data")}


def test_where_the_store_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSPARK_DATA_DIR")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert boot_store.store_dir({"DSPARK_DATA_DIR": "/srv/d"}) == Path("/srv/d/observations")
    assert boot_store.store_dir({"XDG_DATA_HOME": "/x"}) == Path("/x/dspark/observations")
    # A relative XDG_DATA_HOME is invalid by the spec: the default is used.
    assert boot_store.store_dir({"XDG_DATA_HOME": "rel", "HOME": "/h"}).parts[-3:] == ("share", "dspark",
                                                                                         "observations")
    assert boot_store.store_dir({"DSPARK_DATA_DIR": " ", "XDG_DATA_HOME": "/x"}) == Path("/x/dspark/observations")
    # A request's partial environment falls back to the process's for what it does not carry.
    monkeypatch.setenv("DSPARK_DATA_DIR", "/proc-own")
    assert boot_store.store_dir({}) == Path("/proc-own/observations")
    assert boot_store.store_dir({"DSPARK_DATA_DIR": "/req"}) == Path("/req/observations")


def test_save_then_load_round_trips_and_writes_atomically(env: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    record = _record()
    path = boot_store.save(record, env)
    assert path == boot_store.store_dir(env) / f"{KEY}.json"
    assert boot_store.load(KEY, env) == (record, None)
    assert json.loads(path.read_text())["version"] == boot_store.VERSION
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)  # mkstemp's mode: the user's only
    # A write that fails half-way leaves the old record whole and no temporary file behind.
    def broken_fsync(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        boot_store.save(_record(pool=1), env)
    assert boot_store.load(KEY, env) == (record, None)
    assert [p.name for p in boot_store.store_dir(env).iterdir()] == [f"{KEY}.json"]


def _corruptions(good: str) -> list[bytes]:
    """Generated bad files: every truncation point of a good record, random bytes, and wrong shapes."""
    rng = random.Random(28)  # noqa: S311 - reproducible test data, not cryptography
    cut = [good[:n].encode() for n in range(0, len(good), max(1, len(good) // 25))]
    noise = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) for _ in range(10)]
    data = json.loads(good)
    shapes = []
    for field, bad in [("format", "other-tool"), ("version", 2), ("version", None), ("key", "ZZ"),
                       ("pool_tokens", -5), ("pool_tokens", "many"), ("pool_tokens", True), ("terms", {"x": "1"}),
                       ("terms", [1]), ("identity", "text"), ("engine", 7), ("max_concurrency", "x"),
                       ("boots", -1), ("key", "fedcba9876543210")]:
        shapes.append(json.dumps({**data, field: bad}).encode())
    shapes += [b"[]", b"null", b"{}", b'"a"', b"[" * 100_000, b'{"a": ' + b"1" * 70_000 + b"}"]
    return cut + noise + shapes


def test_corrupt_or_foreign_files_are_warnings_never_crashes(env: dict[str, str]) -> None:
    good = json.dumps(_record().to_json())
    folder = boot_store.store_dir(env)
    folder.mkdir(parents=True)
    for n, raw in enumerate(_corruptions(good)):
        (folder / f"{KEY}.json").write_bytes(raw)
        record, problem = boot_store.load(KEY, env)
        assert record is None, n
        assert problem is not None and f"{KEY}.json" in problem, n
        records, warnings = boot_store.list_records(env)
        assert records == [] and len(warnings) == 1, n


def test_a_directory_where_the_file_should_be_is_a_warning(env: dict[str, str]) -> None:
    (boot_store.store_dir(env) / f"{KEY}.json").mkdir(parents=True)
    record, problem = boot_store.load(KEY, env)
    assert record is None and problem is not None and "cannot be read" in problem


def test_list_sorts_newest_first_and_clear_removes(env: dict[str, str]) -> None:
    old = _record("aaaaaaaaaaaaaaaa", recorded_at="2026-01-01T00:00:00Z")
    new = _record("bbbbbbbbbbbbbbbb", recorded_at="2026-12-01T00:00:00Z")
    for r in (old, new):
        boot_store.save(r, env)
    (boot_store.store_dir(env) / ".left.tmp").write_text("x")
    assert [r.key for r in boot_store.list_records(env)[0]] == [new.key, old.key]
    assert boot_store.clear(old.key, env) == 1
    assert boot_store.clear(old.key, env) == 0
    assert boot_store.clear(None, env) == 1
    assert list(boot_store.store_dir(env).iterdir()) == []
    assert boot_store.clear(None, {"DSPARK_DATA_DIR": str(Path(env["DSPARK_DATA_DIR"]) / "none")}) == 0


def test_bounded_and_never_writes_what_it_would_refuse(env: dict[str, str]) -> None:
    many = {f"t{i}": float(i) for i in range(boot_store.MAX_TERMS + 40)}
    path = boot_store.save(_record(terms=many), env)
    assert len(json.loads(path.read_text())["terms"]) == boot_store.MAX_TERMS
    with pytest.raises(RecordError):
        boot_store.save(_record(identity={"x": "y" * (boot_store.MAX_TEXT + 1)}), env)
    with pytest.raises(RecordError):
        boot_store.save(_record(key="not-a-key"), env)
    assert path.stat().st_size < boot_store.MAX_FILE_BYTES


def test_is_key() -> None:
    assert boot_store.is_key(KEY)
    for bad in ("", "0123", KEY.upper(), KEY + "0", "../../etc/passwd", "0123456789abcdeg"):
        assert not boot_store.is_key(bad), bad
