"""SGLang's own KV-pool sizing for any release from 0.5.10 on, in-process (no GPU): run by that release's python.

The sizing is the product's SGLang witness (dspark/engines/_witness_sglang.py, release-adaptive by what each
release has; it documents the stubs and the case format); this runs it as the matrix's script: a JSON list of
cases on stdin, one line per case starting with ``SGLANG-ORACLE ``.
"""

from __future__ import annotations

import runpy
from pathlib import Path

WITNESS = Path(__file__).resolve().parents[2] / "dspark" / "engines" / "_witness_sglang.py"

if __name__ == "__main__":
    runpy.run_path(str(WITNESS), run_name="__main__")
