"""Run dspark's witness (dspark/engines/_witness.py) on many requests in one engine interpreter.

One process per release instead of one per case: the engine's import is most of a witness's time.
Reads a JSON list of {"id", "request"} on stdin; prints one "WITNESS-BATCH {json}" line per request.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "dspark" / "engines" / "_witness.py"


def main() -> int:
    """Load the witness module by path (it must not import dspark) and answer every request."""
    spec = importlib.util.spec_from_file_location("dspark_witness", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for item in json.load(sys.stdin):
        answer = module.witness(item["request"])
        print("WITNESS-BATCH " + json.dumps({"id": item["id"], **answer}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
