"""`dspark bench` exactly as `python -m dspark bench ...` runs it, also writing every pass's per-request records.

    python3 tests/device/dspark_records.py RECORDS.json bench --url ... (dspark's own arguments)

The records are what dspark's statistics were computed from (dspark.bench.runner's call of `summarize`, wrapped:
the same records, the same wall time), so another SLO set's goodput can be recomputed from them with dspark's own
arithmetic (`dspark.bench.stats.summarize`), as vLLM's `--save-detailed` allows for its side. Used by
tests/device/gpu_parity.py's open-loop goodput case; RECORDS.json: [{"wall_time_s", "slos_ms", "records": [...]}]
one entry per pass.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def main() -> int:
    out = Path(sys.argv[1])
    from dspark.__main__ import run  # noqa: PLC0415
    from dspark.bench import runner  # noqa: PLC0415 - from dspark's PYTHONPATH
    from dspark.bench.stats import PassStats, RequestRecord  # noqa: PLC0415

    passes: list[dict[str, Any]] = []
    summarize = runner.summarize  # type: ignore[attr-defined]

    def keep(records: Sequence[RequestRecord], wall_time_s: float,
             slos_ms: Mapping[str, float] | None = None) -> PassStats:
        passes.append({"wall_time_s": wall_time_s, "slos_ms": dict(slos_ms or {}),
                       "records": [{"index": r.index, "start": r.start, "end": r.end, "first_token": r.first_token,
                                    "last_token": r.last_token, "output_tokens": r.output_tokens,
                                    "prompt_tokens": r.prompt_tokens, "error": r.error} for r in records]})
        return summarize(records, wall_time_s, slos_ms)

    runner.summarize = keep  # type: ignore[attr-defined]
    sys.argv = ["dspark", *sys.argv[2:]]
    try:
        return run()
    finally:
        out.write_text(json.dumps(passes))


if __name__ == "__main__":
    sys.exit(main())
