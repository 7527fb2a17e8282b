"""The version matrix's word on unmodelled releases, and the finding validate builds from it."""

from __future__ import annotations

import pytest

from dspark.engines import engine_spec
from dspark.engines.release_matrix import ENTRIES, matrix_entry, matrix_note
from dspark.validate import ValidateRequest, validate


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
    assert matrix_entry("vllm", "0.27.1") is None
    assert "did not run vllm 0.27.1" in matrix_note("vllm", "0.27.1")


def test_what_differs_is_named() -> None:
    note = matrix_note("sglang", "0.5.21")
    assert "differs from 0.5.23" in note
    assert "0.891" in note


@pytest.mark.parametrize("version", ["0.5.19", "0.5.20", "0.5.21", "0.5.22"])
def test_the_sglang_releases_the_witness_runs_say_so(version: str) -> None:
    """`dspark start` runs SGLang's own sizing for these (_witness_sglang.py); the note must not deny it."""
    note = matrix_note("sglang", version)
    assert "its own planner runs as the witness" in note
    assert "cannot read" not in note


def test_a_release_the_witness_cannot_run_says_why() -> None:
    note = matrix_note("sglang", "0.5.18")
    assert "witness cannot read it" in note and "override_platform" in note


def test_validate_names_the_matrix_beside_the_nearest_modelled_release() -> None:
    report = validate(ValidateRequest(flags={"hardware": "gb10x2"}, recipe="flash-next-vllm", env={},
                                      engine_version="0.30.0"))
    warned = [f.message for f in report.findings if f.code == "engine-version-not-modelled"]
    assert len(warned) == 1
    assert "vllm 0.30.0 gave 0.32.0's figures on every case it ran" in warned[0]
    assert report.capacity.engine_version == "0.32.0"
