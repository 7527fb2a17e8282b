"""dspark's tables of each engine release's flags (dspark/data/engine_flags) are that release's parser's own.

scripts/engine_flag_table.py, run in the engine's interpreter, lists every option string the serve parser matches
an argument against and how many values each takes; the checked-in table must be exactly that, or dspark would
read an abbreviation (or refuse a flag) otherwise than the engine does (issue 26 item 9).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "engine_flag_table.py"
TABLES = ROOT / "dspark" / "data" / "engine_flags"


def _table(python: str, engine: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run([python, str(SCRIPT), engine], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-2000:]
    table: dict[str, Any] = json.loads(proc.stdout)
    return table


def _checked_in(name: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads((TABLES / name).read_text())
    return table


def _same(live: dict[str, Any], shipped: dict[str, Any]) -> None:
    assert live["version"] == shipped["version"] and live["allow_abbrev"] is True
    missing = sorted(set(live["options"]) - set(shipped["options"]))
    extra = sorted(set(shipped["options"]) - set(live["options"]))
    assert (missing, extra) == ([], []), "regenerate the table with scripts/engine_flag_table.py"
    assert live["options"] == shipped["options"]


def test_vllm_032_table_is_its_parser_s(vllm_python: str) -> None:
    _same(_table(vllm_python, "vllm"), _checked_in("vllm-0.32.0.json"))


def test_vllm_033_table_is_its_parser_s(vllm033_python: str) -> None:
    # The 0.33.0 wheel is a CUDA build: its parser loads on the CPU platform here (VLLM_TARGET_DEVICE=cpu).
    _same(_table(vllm033_python, "vllm", {"VLLM_TARGET_DEVICE": "cpu"}), _checked_in("vllm-0.33.0.json"))


def test_sglang_0523_table_is_its_parser_s(sglang_python: str) -> None:
    _same(_table(sglang_python, "sglang"), _checked_in("sglang-0.5.23.json"))
