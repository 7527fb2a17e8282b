"""Lay out what a gpu_clock.py call brought back as a results folder the replanning tests read (anywhere).

    python tests/device/gpu_clock_record.py tests/device/results/DATE-clock-TAG OUT/clock-TAG.tar.gz [LOG ...]

From the archive: points.jsonl, engines.jsonl and predictions.jsonl (the device's own dspark advise figures) at
the top, every point's record as points/ENGINE/POINT.json (tests/advise/test_recorded_gpu.py replans them), every
engine's `dspark profile` as profiles/ENGINE.json (its calibrated check reads them); the archive itself is kept
beside them (its /metrics snapshots split TTFT as the engine does), and so are the logs given.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path


def record(folder: Path, archive: Path, logs: list[Path]) -> list[str]:
    """Write the folder; the paths written, relative to it."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts[1:]  # below clock-TAG/
            handle = tar.extractfile(member) if member.isfile() else None
            if handle is None or not parts:
                continue
            target: Path | None = None
            if len(parts) == 1 and parts[0] in ("points.jsonl", "engines.jsonl", "predictions.jsonl"):
                target = folder / parts[0]
            elif len(parts) == 2 and parts[1] == "profile.json":
                target = folder / "profiles" / f"{parts[0]}.json"
            elif len(parts) == 2 and parts[1].endswith(".json") and ".advise" not in parts[1]:
                data = json.loads(handle.read())
                handle = None
                if isinstance(data, dict) and "config" in data:
                    target = folder / "points" / parts[0] / parts[1]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(json.dumps(data, indent=1) + "\n")
                    written.append(str(target.relative_to(folder)))
                continue
            if target is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(handle.read())
                written.append(str(target.relative_to(folder)))
    for path in [archive, *logs]:
        shutil.copy(path, folder / path.name)
        written.append(path.name)
    return written


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    for name in record(Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
