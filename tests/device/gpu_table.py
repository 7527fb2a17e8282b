"""Print the GPU-truth table: the engine's recorded figures beside dspark's, replanned with this checkout's code.

    python tests/device/gpu_table.py tests/device/results/2026-12-01 [--markdown]

Reads every rows*.jsonl and probe.json in the folder (what gpu_truth.py wrote on the GPU machine). For each row
it replans with `dspark validate --json --hardware <that machine's probe>` on the same config and flags, so a
change to dspark's estimate shows here without a GPU; the figure dspark printed on the machine at the time is
kept beside it. Errors are dspark minus engine, relative to the engine. Runs anywhere (no GPU, no vLLM).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
GiB = 1 << 30


def replan(rec: dict[str, Any], probe: Path, version: str) -> dict[str, Any]:
    """This checkout's `dspark validate --json` for a recorded row, against the recorded hardware."""
    snapshot = rec["hardware"] if isinstance(rec.get("hardware"), dict) else json.loads(probe.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp) / "hardware.json"  # the snapshot without gpu_truth.py's own _rc/_seconds keys
        hw.write_text(json.dumps({k: v for k, v in snapshot.items() if not k.startswith("_")}))
        cfg = HERE / "configs" / f"{rec['model']}.json"
        model = Path(tmp) / "model"
        model.mkdir()
        (model / "config.json").write_text(cfg.read_text())
        argv = [sys.executable, "-m", "dspark", "validate", "--json", "--model", str(model), "--engine", "vllm",
                "--hardware", str(hw), "--engine-version", version, *rec.get("dspark_options", []), "--",
                *rec["flags"]]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    try:
        out: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": (proc.stderr or proc.stdout)[-300:]}
    return out


def pct(ours: float | None, theirs: float | None) -> str:
    """(ours - theirs) / theirs as a signed percentage."""
    if ours is None or not theirs:
        return "–"
    return f"{(ours - theirs) / theirs * 100:+.2f}%"


def num(text: Any) -> float | None:
    """A number from the engine's log text ('814,368', '111.84'), or None."""
    if text is None:
        return None
    return float(str(text).replace(",", ""))


def main() -> int:
    """Print one line per recorded row."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--engine-version", default=os.environ.get("DSPARK_GPU_ENGINE_VERSION", "0.25.0"),
                    help="the release dspark plans for (the one that ran there)")
    args = ap.parse_args()
    probe = args.results / "probe.json"
    rows = [json.loads(line) for f in sorted(args.results.glob("rows*.jsonl")) for line in f.read_text().splitlines()
            if line.strip()]
    head = ("| row | engine KV budget GiB | dspark then | dspark now | error now | engine pool tokens | dspark now "
            "| error now | engine concurrency | dspark now | date (UTC) | start s | note |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for rec in rows:
        eng = rec.get("engine") or {}
        probe_rec = rec.get("probe") or {}
        then = ((rec.get("dspark") or {}).get("capacity")) or {}
        now_all = replan(rec, probe, args.engine_version)
        now = now_all.get("capacity") or {}
        eng_budget = probe_rec.get("available_kv")
        eng_budget_gib = eng_budget / GiB if eng_budget is not None else num(eng.get("available_kv_gib"))
        then_gib = then.get("kv_budget_bytes", 0) / GiB if then else None
        now_gib = now.get("kv_budget_bytes", 0) / GiB if now else None
        eng_tok = num(eng.get("kv_tokens"))
        err = eng.get("error") or rec.get("error") or now_all.get("error")
        refused = [f["code"] for f in now_all.get("findings") or [] if f.get("level") == "fail"]
        note = (f"dspark refuses: {', '.join(refused)}; engine not started" if refused and not eng
                else str(err or ""))
        cells = [
            rec["row"],
            f"{eng_budget_gib:.2f}" if eng_budget_gib is not None else "–",
            f"{then_gib:.2f}" if then_gib is not None else "–",
            f"{now_gib:.2f}" if now_gib is not None else "–",
            pct(now_gib, eng_budget_gib),
            f"{int(eng_tok):,}" if eng_tok is not None else "–",
            f"{now.get('kv_pool_tokens'):,}" if now.get("kv_pool_tokens") is not None else "–",
            pct(now.get("kv_pool_tokens"), eng_tok),
            f"{eng.get('max_concurrency')}x" if eng.get("max_concurrency") else "–",
            f"{now.get('max_concurrency', 0):.2f}x" if now.get("max_concurrency") else "–",
            str(rec.get("date", ""))[:16].replace("T", " "),
            str(eng.get("seconds_to_kv_line", "–")),
            note,
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
