"""`dspark observations list | show KEY | clear [KEY]` through the CLI, on a store of generated records."""

from __future__ import annotations

import json

import pytest

from dspark.cli import main
from dspark.runtime import boot_store
from dspark.runtime.boot_store import BootRecord


def _record(key: str, pool: int, when: str) -> BootRecord:
    return BootRecord(key=key, identity={"model": {"architecture": "Qwen3ForCausalLM"},
                                         "device": {"name": "NVIDIA H200", "platform": "cuda"},
                                         "settings": {"max_num_seqs": 8, "max_model_len": 4096}},
                      engine="vllm", engine_version="0.32.0", pool_tokens=pool, max_model_len=4096,
                      max_concurrency=pool / 4096, terms={"available_kv_gib": 73.88, "weights_gib": 51.02},
                      recorded_at=when)


A, B = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"


@pytest.fixture
def store() -> None:
    boot_store.save(_record(A, 814_368, "2026-12-01T22:08:41Z"))
    boot_store.save(_record(B, 145_632, "2026-12-02T06:00:00Z"))


def test_list_table_and_json(store: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observations"]) == 0
    out = capsys.readouterr().out
    assert out.index(B) < out.index(A)  # newest first
    assert "814,368" in out and "NVIDIA H200" in out and "2 record(s)" in out
    assert main(["observations", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["key"] for r in data["records"]] == [B, A] and data["warnings"] == []


def test_a_corrupt_file_is_a_warning_not_a_failure(store: None, capsys: pytest.CaptureFixture[str]) -> None:
    (boot_store.store_dir() / "cccccccccccccccc.json").write_text("{not json")
    assert main(["observations", "list", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert len(data["records"]) == 2 and len(data["warnings"]) == 1
    assert "warning:" in captured.err and "cccccccccccccccc.json is ignored: not JSON" in captured.err
    # show of that very key is bad input naming the file, exit 2, no traceback.
    assert main(["observations", "show", "cccccccccccccccc"]) == 2
    err = capsys.readouterr().err
    assert "is ignored" in err and "Traceback" not in err


def test_show_and_clear(store: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["observations", "show", A]) == 0
    out = capsys.readouterr().out
    assert "KV pool: 814,368 tokens" in out and "available_kv_gib: 73.88" in out and "keyed by:" in out
    assert main(["observations", "show", A, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pool_tokens"] == 814_368
    for bad in ("nothex", "../../../etc/passwd", A.upper()):
        assert main(["observations", "show", bad]) == 2
        assert "not a record key" in capsys.readouterr().err
    assert main(["observations", "show", "dddddddddddddddd"]) == 2
    assert "no recorded boot" in capsys.readouterr().err
    assert main(["observations", "clear", A, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 1
    assert main(["observations", "clear"]) == 0
    assert "removed 1 recorded boot(s)" in capsys.readouterr().out
    assert main(["observations"]) == 0
    assert "no recorded boots" in capsys.readouterr().out
