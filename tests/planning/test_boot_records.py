"""Recorded boots against the plan (dspark.planning.boot_records): the key, the record replayed to the token by
validate, drift when a boot moves, and nothing secret in what is stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dspark.planning.boot_records import BootRecorder, record_boot
from dspark.planning.validate import ValidateRequest, ValidationReport, validate
from dspark.runtime import boot_store
from dspark.runtime.engine_log import KvPoolLine
from dspark.runtime.supervise import EngineLog

SECRET = "hf_Zz9SecretTokenValue0123456789"  # noqa: S105 - a made-up value no record may hold


def _plan(recipe: str, *, hardware: str = "h200", env: dict[str, str] | None = None,
          flags: dict[str, Any] | None = None, engine_flags: tuple[str, ...] = ()) -> ValidationReport:
    return validate(ValidateRequest(flags={"hardware": hardware, **(flags or {})}, recipe=recipe,
                                    engine_flags=engine_flags, env=env or {}))


def _boot(report: ValidationReport, pool: int, terms: dict[str, float] | None = None) -> list[str]:
    assert report.boot_key is not None
    kv = KvPoolLine(pool, report.capacity.max_model_len, pool / report.capacity.max_model_len)
    return record_boot(report.boot_key, kv, terms or {"available_kv_gib": 12.5}, engine=report.spec.name,
                       engine_version=str(report.engine_version.requested), env={})[1]


def _reachable_pool(recipe: str, budget: int, **kw: Any) -> int:
    """A pool the engine's accounting can give for this plan: the one a pin of `budget` bytes buys."""
    return _plan(recipe, flags={"kv_cache_memory_bytes": budget}, **kw).capacity.kv_pool_tokens


@pytest.mark.parametrize("name", ["flash-next-vllm", "deepseek-v4-flash-vllm"])
@pytest.mark.parametrize("hardware", ["h200", "gb10x2"])
def test_a_recorded_boot_makes_validate_equal_the_engine_to_the_token(
    name: str, hardware: str, unpinned_recipe: Callable[[str], str],
) -> None:
    recipe = unpinned_recipe(name)
    before = _plan(recipe, hardware=hardware)
    assert before.capacity.kv_budget_source == "estimate" and before.boot_record is None
    plain = json.dumps(before.to_json(), default=str)
    assert "budget_source\"" not in plain.replace("kv_budget_source", "") and "observed_boot" not in plain
    # The engine printed another pool than dspark's estimate (one its accounting can reach): a record of it.
    engine_pool = _reachable_pool(recipe, int(before.capacity.kv_budget_bytes * 0.9), hardware=hardware)
    assert engine_pool != before.capacity.kv_pool_tokens
    lines = _boot(before, engine_pool)
    assert any("recorded this boot" in line for line in lines)
    after = _plan(recipe, hardware=hardware)
    cap = after.capacity
    assert cap.kv_pool_tokens == engine_pool
    assert cap.kv_budget_source == "observed"
    assert after.boot_record is not None and after.boot_record.pool_tokens == engine_pool
    out = after.to_json()["capacity"]
    assert out["budget_source"] == "observed" and out["observed_boot"]["pool_tokens"] == engine_pool
    assert set(before.to_json()["capacity"]) <= set(out)  # every field kept
    assert "kv-budget-observed" in {f.code for f in after.findings}
    assert "kv-budget-estimate" not in {f.code for f in after.findings}
    # The same plan on other hardware, or with other seats, is another key: the estimate again.
    other = _plan(recipe, hardware=hardware, flags={"max_num_seqs": before.capacity.max_num_seqs + 1})
    assert other.boot_record is None and other.capacity.kv_budget_source == "estimate"


def test_every_memory_setting_changes_the_key(unpinned_recipe: Callable[[str], str]) -> None:
    recipe = unpinned_recipe("flash-next-vllm")
    base = _plan(recipe)
    assert base.boot_key is not None
    variants = [
        _plan(recipe, hardware="h100-80gb"),
        _plan(recipe, flags={"max_model_len": 4096}),
        _plan(recipe, flags={"max_num_batched_tokens": 4096}),
        _plan(recipe, flags={"kv_cache_dtype": "fp8"}),
        _plan(recipe, flags={"gpu_memory_utilization": 0.8}),
        _plan(recipe, flags={"max_num_seqs": 3}),
        _plan(recipe, engine_flags=("--enforce-eager",)),
        _plan(recipe, engine_flags=("--max-cudagraph-capture-size", "16")),
        _plan(recipe, flags={"kv_cache_memory_bytes": 8 << 30}),
    ]
    keys = {v.boot_key.key for v in variants if v.boot_key is not None}
    assert len(keys) == len(variants) and base.boot_key.key not in keys
    # Launch-only flags and the environment are not memory: the same key.
    same = _plan(recipe, env={"HF_TOKEN": SECRET}, engine_flags=("--port", "8123", "--api-key", SECRET))
    assert same.boot_key is not None
    assert same.boot_key.identity["engine_flags"] == {"unread_flags": ["--api-key"]}
    assert SECRET not in json.dumps(same.boot_key.identity)


def test_a_stored_record_holds_no_secret(unpinned_recipe: Callable[[str], str]) -> None:
    recipe = unpinned_recipe("flash-next-vllm")
    report = _plan(recipe, env={"HF_TOKEN": SECRET, "VLLM_API_KEY": SECRET},
                   engine_flags=("--api-key", SECRET, f"--hf-token={SECRET}"))
    _boot(report, 1000)
    files = list(boot_store.store_dir().iterdir())
    assert len(files) == 1
    text = files[0].read_text()
    assert SECRET not in text and "HF_TOKEN" not in text and "VLLM_API_KEY" not in text
    assert '"--api-key"' in text  # the flag's name, so that another value of it is the same plan


def test_drift_is_said_and_the_record_follows_the_new_boot(unpinned_recipe: Callable[[str], str]) -> None:
    report = _plan(unpinned_recipe("flash-next-vllm"))
    assert _boot(report, 10_000)
    assert _boot(report, 10_000) == []  # the same pool again: counted, nothing to say
    lines = _boot(report, 9_000, {"available_kv_gib": 11.0})
    assert len(lines) == 1 and lines[0].startswith("dspark: drift: ")
    assert "held 10,000" in lines[0] and "-1,000 tokens" in lines[0] and "available_kv_gib 12.5 -> 11" in lines[0]
    assert report.boot_key is not None
    record, _ = boot_store.load(report.boot_key.key)
    assert record is not None
    assert (record.pool_tokens, record.previous_pool_tokens, record.boots) == (9_000, 10_000, 3)


def test_an_unreadable_record_is_a_warning_finding_and_the_estimate_stays(
    unpinned_recipe: Callable[[str], str],
) -> None:
    recipe = unpinned_recipe("flash-next-vllm")
    report = _plan(recipe)
    assert report.boot_key is not None
    path = boot_store.store_dir() / f"{report.boot_key.key}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "dspark-boot-record", "version": 99}')
    again = _plan(recipe)
    assert again.capacity.kv_pool_tokens == report.capacity.kv_pool_tokens
    finding = next(f for f in again.findings if f.code == "boot-record-unreadable")
    assert finding.level == "warn" and "version 99" in finding.message
    # start --watch replaces it with the boot's own figures, and says so.
    lines = _boot(again, 12_345)
    assert any("is ignored" in line and "replaced" in line for line in lines)


def test_a_pinned_plan_keeps_its_own_exact_figures(unpinned_recipe: Callable[[str], str]) -> None:
    pinned = _plan("flash-next-vllm")
    assert pinned.capacity.kv_budget_source == "pinned"
    _boot(pinned, 777)
    again = _plan("flash-next-vllm")
    assert again.boot_record is None and again.capacity.kv_pool_tokens == pinned.capacity.kv_pool_tokens


def test_the_recorder_counts_one_boot_and_adds_later_terms(unpinned_recipe: Callable[[str], str],
                                                           tmp_path: Path) -> None:
    report = _plan(unpinned_recipe("flash-next-vllm"))
    assert report.boot_key is not None
    recorder = BootRecorder(report.boot_key, engine="vllm", engine_version="0.32.0", env={})
    log = EngineLog(report.spec.log_format)
    assert recorder(log) == []  # no pool line yet: nothing recorded
    log.feed("(EngineCore pid=1) INFO [gpu_worker.py:538] Available KV cache memory: 73.88 GiB")
    log.feed("(EngineCore pid=1) INFO [kv_cache_utils.py:2327] GPU KV cache size: 4,096 tokens, Maximum concurrency "
             "for 4,096 tokens per request: 1.00x")
    first = recorder(log)
    assert len(first) == 1 and "recorded this boot" in first[0]
    log.feed("(EngineCore pid=1) INFO [model_runner.py:722] Graph capturing finished in 1 secs, took 0.15 GiB")
    assert recorder(log) == []
    record, _ = boot_store.load(report.boot_key.key)
    assert record is not None and record.boots == 1
    assert record.terms == {"available_kv_gib": 73.88, "cudagraph_captured_gib": 0.15}
    # A store that cannot be written is a warning line, never an exception into the engine's supervisor.
    blocked = tmp_path / "file"
    blocked.write_text("")
    stuck = BootRecorder(report.boot_key, engine="vllm", engine_version="0.32.0",
                         env={"DSPARK_DATA_DIR": str(blocked)})
    assert stuck(log)[0].startswith("dspark: warning: this boot was not recorded")
