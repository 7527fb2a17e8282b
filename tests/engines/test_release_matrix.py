"""The version matrix's word on unmodelled releases, and the finding validate builds from it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dspark.engines import ENGINE_NAMES, engine_spec
from dspark.engines.release_matrix import (
    ENTRIES,
    covered_range,
    extra_requirement,
    matrix_entry,
    matrix_note,
)
from dspark.planning.validate import ValidateRequest, validate

ROOT = Path(__file__).resolve().parents[2]


def test_no_entry_shadows_a_modelled_release() -> None:
    for entry in ENTRIES:
        assert entry.version not in engine_spec(entry.engine).modelled_versions
        assert entry.compared_with in engine_spec(entry.engine).modelled_versions


@pytest.mark.parametrize("version", ["0.28.0", "0.29.0", "0.30.0", "0.31.0"])
def test_every_cpu_release_before_the_modelled_ones_has_a_matrix_word(version: str) -> None:
    entry = matrix_entry("vllm", version)
    assert entry is not None
    assert entry.witness_reads


def test_a_release_the_matrix_did_not_run_is_said_so() -> None:
    assert matrix_entry("vllm", "0.24.0") is None
    assert "did not run vllm 0.24.0" in matrix_note("vllm", "0.24.0")


@pytest.mark.parametrize("version", ["0.27.0", "0.27.1"])
def test_vllm_027_is_planned_as_026_naming_the_budget_it_does_not_model(version: str) -> None:
    entry = matrix_entry("vllm", version)
    assert entry is not None and entry.compared_with == "0.26.0" and entry.witness_reads
    assert "0.32's accounting" in matrix_note("vllm", version)


def test_what_differs_is_named() -> None:
    note = matrix_note("sglang", "0.5.21")
    assert "differs from 0.5.23" in note
    assert "0.891" in note
    assert "its own planner runs as the witness" in note


@pytest.mark.parametrize("version", [f"0.5.{n}" for n in range(10, 23)])
def test_every_sglang_release_before_the_modelled_one_is_read_by_the_witness(version: str) -> None:
    entry = matrix_entry("sglang", version)
    assert entry is not None
    assert entry.witness_reads


def _seed_pools(rows: dict[str, Any]) -> tuple[int, int] | None:
    """The witness's seed pools at 16 / 32 seats: the recipe's flags, else those the release's refusal named."""
    for suffix in ("", "+extra-buffer"):
        a, b = rows.get(f"seed-16{suffix}", {}), rows.get(f"seed-32{suffix}", {})
        if a.get("max_total_num_tokens") is not None:
            return a["max_total_num_tokens"], b["max_total_num_tokens"]
    return None


def test_the_sglang_words_quote_what_the_matrix_measured() -> None:
    """Each SGLang entry quotes the seed pools the matrix's results hold, or says nothing differs when they equal
    dspark's (benchmarks/version_matrix/results/sglang.json, made by sglang_matrix.py)."""
    results = json.loads((ROOT / "benchmarks/version_matrix/results/sglang.json").read_text())
    checked = 0
    for version, rows in results.items():
        entry = matrix_entry("sglang", version)
        pools = _seed_pools(rows)
        if entry is None or pools is None:
            continue
        equal = all(rows[f"seed-{n}"].get("max_total_num_tokens") == rows[f"seed-{n}"].get("dspark_tokens")
                    for n in (16, 32) if f"seed-{n}" in rows)
        if entry.differs:
            assert f"{pools[0]:,} / {pools[1]:,}" in entry.differs, version
        else:
            assert equal and "seed-16" in rows, version
        checked += 1
    assert checked >= 13


def test_validate_names_the_matrix_beside_the_nearest_modelled_release() -> None:
    report = validate(ValidateRequest(flags={"hardware": "gb10x2"}, recipe="flash-next-vllm", env={},
                                      engine_version="0.30.0"))
    warned = [f.message for f in report.findings if f.code == "engine-version-not-modelled"]
    assert len(warned) == 1
    assert "vllm 0.30.0 gave 0.32.0's figures on every case it ran" in warned[0]
    assert report.capacity.engine_version == "0.32.0"


def test_a_limit_of_the_witness_on_a_release_it_reads_is_said() -> None:
    note = matrix_note("sglang", "0.5.12")
    assert "its own planner runs as the witness" in note
    assert "--cuda-graph-max-bs-decode" in note
    assert "--cuda-graph-max-bs-decode" not in matrix_note("sglang", "0.5.14")


def _extra(name: str) -> list[str]:
    """One single-line extra of pyproject.toml's [project.optional-dependencies] (no tomllib on Python 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    match = re.search(rf"^{name} = (\[.*\])", section, re.M)
    assert match is not None, f"pyproject.toml has no single-line [{name}] extra"
    value: list[str] = json.loads(match.group(1))
    return value


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_engine_extra_pins_the_range_the_matrix_covers(engine: str) -> None:
    assert _extra(engine) == [extra_requirement(engine)]
    oldest, newest = covered_range(engine)
    assert oldest in {e.version for e in ENTRIES if e.engine == engine} | set(engine_spec(engine).modelled_versions)
    assert newest == engine_spec(engine).newest_modelled
