"""docs/environment.md is the one the settings table generates (dspark.config.environment_doc --write-docs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark.config import environment_doc
from dspark.config.knobs import KNOBS


def test_the_checked_in_file_is_the_generated_one() -> None:
    assert environment_doc.DOC.read_text(encoding="utf-8") == environment_doc.environment_md(), (
        "docs/environment.md is stale: run python -m dspark.config.environment_doc --write-docs")


def test_each_knob_has_its_row_from_the_table() -> None:
    text = environment_doc.environment_md()
    for knob in KNOBS:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{knob.env}` | {knob.name} |"))
        assert row.endswith(f" | {knob.expected} |"), row
        assert (f"`{knob.flag}`" in row) == (knob.flag is not None), row


def test_a_changed_knob_changes_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = tuple(k._replace(expected=f"{k.expected}, changed") if k.name == "port" else k
                    for k in KNOBS)
    before = environment_doc.environment_md()
    monkeypatch.setattr(environment_doc, "KNOBS", changed)
    after = environment_doc.environment_md()
    assert after != before and "| 1 to 65535, changed |" in after


def test_check_docs_fails_on_a_stale_copy_and_write_docs_fixes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "environment.md"
    copy.write_text(environment_doc.environment_md().replace("MAX_NUM_SEQS", "MAX_NUM_SEQ", 1), encoding="utf-8")
    monkeypatch.setattr(environment_doc, "DOC", copy)
    assert environment_doc.main(["--check-docs"]) == 1
    assert "stale" in capsys.readouterr().err
    assert environment_doc.main(["--write-docs"]) == 0
    assert environment_doc.main(["--check-docs"]) == 0
    assert copy.read_text(encoding="utf-8") == environment_doc.environment_md()
