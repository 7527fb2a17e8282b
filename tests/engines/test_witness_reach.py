"""The witness says plainly when an interpreter's vLLM is outside what it reads, naming what is missing."""

from __future__ import annotations

import sys
from pathlib import Path

from dspark.engines.witness import run_witness

REQUEST = {"engine": "vllm", "workers": [[{"name": "l0", "class": "FullAttentionSpec", "block_size": 16,
                                            "kwargs": {}}]]}


def test_an_interpreter_without_a_planner_is_named_outside_the_witness(tmp_path: Path) -> None:
    # -S: no site-packages, so no vLLM whatever is installed (PYTHONPATH still brings dspark_inside, stdlib only).
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    answer = run_witness(str(python), REQUEST, timeout=120)
    assert answer["ok"] is False
    assert "outside what the witness reads" in answer["error"]
    assert "get_kv_cache_configs" in answer["error"]
