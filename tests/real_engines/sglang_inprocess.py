"""Run SGLang's own KV-pool sizing in-process (no GPU): a script for .engines/sglang's python.

The sizing harness is the product's SGLang witness (dspark/engines/_witness_sglang.py, which documents the
stubs and the case format); this runs it as the oracle script: a JSON list of cases on stdin, one line per
case starting with ``SGLANG-ORACLE ``.
"""

from __future__ import annotations

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "dspark" / "engines" / "_witness_sglang.py"),
                   run_name="__main__")
