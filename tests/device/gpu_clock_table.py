"""Print the GPU-clock table from a recorded results folder (anywhere; no GPU, no engine).

    python tests/device/gpu_clock_table.py tests/device/results/2026-12-02-clock

Reads RESULTS/points.jsonl (gpu_clock.py) and, where present, RESULTS/aiconfigurator.json
(aiconfigurator_points.py); prints one Markdown row per point (and per warm re-run): the measured aggregate
decode, per-stream decode, TTFT mean, TPOT mean and wall time, each with aiconfigurator's static-mode figure and
its error beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = (("aggregate_decode_tps", "agg tok/s", "{:.0f}"), ("per_stream_decode_tps", "per-stream tok/s", "{:.1f}"),
           ("ttft_mean_s", "TTFT mean s", "{:.3f}"), ("tpot_mean_ms", "TPOT mean ms", "{:.2f}"),
           ("wall_time_s", "wall s", "{:.2f}"))


def cell(measured: float | None, predicted: float | None, fmt: str) -> str:
    if measured is None:
        return "-"
    text = fmt.format(measured)
    if predicted is None:
        return text
    return f"{text} / {fmt.format(predicted)} ({(predicted - measured) / measured * 100:+.0f}%)"


def rows(results: Path) -> list[str]:
    aic_doc = results / "aiconfigurator.json"
    aic: dict[str, dict[str, Any]] = {}
    if aic_doc.exists():
        aic = {p["point"]: p for p in json.loads(aic_doc.read_text())["points"]}
    head = "| configuration | c | in/out |" + "".join(f" {label} |" for _, label, _ in COLUMNS)
    out = [head, "|" + " --- |" * (3 + len(COLUMNS))]
    for line in (results / "points.jsonl").read_text().splitlines():
        p = json.loads(line)
        cfg = p["config"]
        key = f"{cfg['engine_config']}/{cfg['point']}"
        pred = aic.get(key, {})
        io = f"{cfg['input_len']}/{cfg['output_len']}"
        runs = [(cfg["engine_config"], p["summary"], pred.get("static"))]
        if p.get("warm"):
            hit = p["warm"]["engine"]["prefix_hit_rate"]
            runs.append((f"{cfg['engine_config']} warm re-run ({hit:.1%} prefix hits)", p["warm"],
                         pred.get("warm_static")))
        for name, measured, predicted in runs:
            cells = [cell(measured.get(k), (predicted or {}).get(k), fmt) for k, _, fmt in COLUMNS]
            out.append(f"| {name} | {cfg['concurrency']} | {io} | " + " | ".join(cells) + " |")
    return out


def main() -> int:
    print("\n".join(rows(Path(sys.argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
