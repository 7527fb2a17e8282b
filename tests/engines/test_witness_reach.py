"""The witness says plainly when an interpreter's vLLM is outside what it reads, naming what is missing."""

from __future__ import annotations

import json
import subprocess
import sys

from dspark.engines.witness import MARKER, WITNESS_SCRIPT

REQUEST = {"engine": "vllm", "workers": [[{"name": "l0", "class": "FullAttentionSpec", "block_size": 16,
                                            "kwargs": {}}]]}


def test_an_interpreter_without_a_planner_is_named_outside_the_witness() -> None:
    # -I -S: no site-packages and no PYTHONPATH, so no vLLM whatever is installed; the witness needs only stdlib.
    proc = subprocess.run([sys.executable, "-I", "-S", str(WITNESS_SCRIPT)], input=json.dumps(REQUEST), text=True,
                          capture_output=True, timeout=120, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith(MARKER))
    answer = json.loads(line[len(MARKER):])
    assert answer["ok"] is False
    assert "outside what the witness reads" in answer["error"]
    assert "get_kv_cache_configs" in answer["error"]
