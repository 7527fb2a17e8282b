"""Which start-up free memory makes each SGLang release's own sizing give the seed deployment's pools.

Flash-Next on SGLang, TP=2 over two GB10 nodes (unified memory: nvidia-smi says [N/A], free memory is the
host's MemAvailable), NEXTN with 4 steps / top-1 / 5 draft tokens, --context-length 262144, at 6, 16 and
32 seats. The pool is linear in free memory, so for each release and seat count this runs the release's
own ``_resolve_memory_pool_config`` (dspark_inside.sglang.sizing) at two free-memory readings, solves for the reading
that gives the observed pool, and checks it by running there. The footprint between the two readings
(weights and what loads with them) is an input, held fixed (--footprint-gib).

Usage: python benchmarks/version_matrix/seed_sglang.py [--matrix-dir DIR] [--releases 0.5.21,...]
       [--footprint-gib 26] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from dspark.engines.inside import InsideFailure, run_inside

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GIB = 1 << 30
OBSERVED = {6: 1_720_000, 16: 1_482_304, 32: 1_140_288}
GB10_MIB = 124_610  # what torch reports as a GB10's total when nvidia-smi answers [N/A] (MemTotal, MiB)


def seed_argv(model_dir: str, seats: int, steps: int, draft: int, fraction: float | None = None) -> list[str]:
    """The recipe's launch: TP=2, 262,144-token context, NEXTN (MTP) speculative decoding."""
    pinned = ["--mem-fraction-static", f"{fraction:.6f}"] if fraction is not None else []
    return [*pinned, "--model-path", model_dir, "--tp-size", "2", "--context-length", "262144",
            "--max-running-requests", str(seats), "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(draft), "--skip-tokenizer-init"]


def run_sizing(python: str, cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """SGLang's own sizing (dspark_inside.sglang.sizing) in the release's interpreter; results by case id."""
    try:
        return {rec["id"]: rec for rec in run_inside(python, "sglang.sizing", cases, 1200)}
    except InsideFailure as failure:
        return {"_failed": {"error": failure.last(30)[-1500:]}}


def case(cid: str, model_dir: str, seats: int, free_before: int, footprint: int, steps: int,
         fraction: float | None = None) -> dict[str, Any]:
    return {"id": cid, "argv": seed_argv(model_dir, seats, steps, steps + 1, fraction), "gpu_mib": GB10_MIB,
            "free_before": free_before, "free_after": free_before - footprint, "capability": [12, 1],
            "integrated": True}


def solve(python: str, model_dir: str, footprint: int, steps: int) -> list[dict[str, Any]]:
    """Per seat count: the free memory at start-up that gives the observed pool, and the pool there."""
    lo, hi = 100 * GIB, 118 * GIB
    probe = [case(f"{s}-{tag}", model_dir, s, f, footprint, steps)
             for s in OBSERVED for tag, f in (("lo", lo), ("hi", hi))]
    got = run_sizing(python, probe)
    rows, checks = [], []
    for seats, want in OBSERVED.items():
        a, b = got.get(f"{seats}-lo", {}), got.get(f"{seats}-hi", {})
        if a.get("error") or b.get("error") or "max_total_num_tokens" not in a:
            rows.append({"seats": seats, "observed": want, "error": a.get("error") or b.get("error") or "no result"})
            continue
        ta, tb = a["max_total_num_tokens"], b["max_total_num_tokens"]
        free = lo + round((want - ta) * (hi - lo) / (tb - ta))
        rows.append({"seats": seats, "observed": want, "free_before": free,
                     "tokens_per_gib": (tb - ta) / ((hi - lo) / GIB), "mem_fraction_static": a["mem_fraction_static"],
                     "mamba_cache_per_req": a.get("mamba_cache_per_req"), "cell_size": a.get("cell_size"),
                     "at_118_gib": tb})
        checks.append(case(f"{seats}-check", model_dir, seats, free, footprint, steps))
    for rec in run_sizing(python, checks).values():
        for row in rows:
            if rec.get("id") == f"{row['seats']}-check":
                row["pool_at_solution"] = rec.get("max_total_num_tokens")
    return rows


def solve_fraction(python: str, model_dir: str, footprint: int, steps: int, free: int) -> list[dict[str, Any]]:
    """Per seat count, at a fixed free memory: the --mem-fraction-static that gives the observed pool."""
    lo, hi = 0.6, 0.8
    probe = [case(f"{s}-{tag}", model_dir, s, free, footprint, steps, f)
             for s in OBSERVED for tag, f in (("lo", lo), ("hi", hi))]
    got = run_sizing(python, probe)
    rows, checks = [], []
    for seats, want in OBSERVED.items():
        a, b = got.get(f"{seats}-lo", {}), got.get(f"{seats}-hi", {})
        if a.get("error") or b.get("error") or "max_total_num_tokens" not in a:
            rows.append({"seats": seats, "observed": want, "error": a.get("error") or b.get("error") or "no result"})
            continue
        ta, tb = a["max_total_num_tokens"], b["max_total_num_tokens"]
        frac = lo + (want - ta) * (hi - lo) / (tb - ta)
        rows.append({"seats": seats, "observed": want, "free_before": free, "mem_fraction_static": frac})
        checks.append(case(f"{seats}-check", model_dir, seats, free, footprint, steps, frac))
    for rec in run_sizing(python, checks).values():
        for row in rows:
            if rec.get("id") == f"{row['seats']}-check":
                row["pool_at_solution"] = rec.get("max_total_num_tokens")
    return rows


def main() -> int:
    """Solve for every release; print one line per release and seat count; optionally write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix-dir", default=str(ROOT / ".engines-matrix"))
    ap.add_argument("--releases", default="0.5.21,0.5.22,0.5.23")
    ap.add_argument("--footprint-gib", type=float, default=26.0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--solve", choices=("free", "fraction"), default="free",
                    help="solve for the free memory at start-up (auto fraction) or for --mem-fraction-static")
    ap.add_argument("--free-gib", type=float, default=118.0, help="free memory at start-up for --solve fraction")
    args = ap.parse_args()
    recipe = yaml.safe_load((ROOT / "dspark/data/recipes/flash-next-sglang.yaml").read_text())
    model_dir = tempfile.mkdtemp(prefix="flash-next-")
    Path(model_dir, "config.json").write_text(json.dumps(recipe["model"]["config"]))
    footprint = int(args.footprint_gib * GIB)
    report: dict[str, Any] = {}
    for release in args.releases.split(","):
        python = str(Path(args.matrix_dir) / f"sglang-{release}" / "bin" / "python")
        rows = (solve(python, model_dir, footprint, args.steps) if args.solve == "free"
                else solve_fraction(python, model_dir, footprint, args.steps, int(args.free_gib * GIB)))
        report[release] = rows
        for r in rows:
            if "error" in r:
                print(f"{release} seats={r['seats']}: {r['error'][:200]}")
            else:
                print(f"{release} seats={r['seats']}: observed {r['observed']:,} needs free at start "
                      f"{r['free_before'] / GIB:.3f} GiB, mem_fraction_static {r['mem_fraction_static']:.4f} "
                      f"(pool there: {r.get('pool_at_solution')})")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
