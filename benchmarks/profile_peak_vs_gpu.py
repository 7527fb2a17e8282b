"""The traced profile-run peak (dspark_inside.vllm.profile_peak) against the H200's recorded torch peak increase.

    python -m benchmarks.profile_peak_vs_gpu --python .engines/vllm/bin/python [--vllm-site DIR] [RESULTS]

For every recorded GPU row (tests/device/results/DATE/rows.jsonl) with the worker's own terms, the release's
profile run is traced on this host (one engine import for all rows) for the row's config.json and its
max_num_batched_tokens / max_num_seqs / max_model_len / KV dtype, on the recorded GPU's facts, and compared with
the probe's `torch_peak_increase` and what the forward left for the sampler (sampler_start - profile_start);
the trace allocates torch's cuBLAS workspace (32 MiB on SM 9.0) at its first cuBLAS GEMM. `--vllm-site` puts a
release's unpacked wheel first on PYTHONPATH (0.25.0, the release the rows ran).
Compiled rows are listed too: the trace is the eager run's peak, and what compiling adds shows as their error.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from dspark.engines.inside import run_inside

ROOT = Path(__file__).resolve().parent.parent
CUBLAS_WORKSPACE_SM90 = 32 << 20
H200 = {"name": "NVIDIA H200", "capability": [9, 0], "total_bytes": 150754820096, "sm_count": 132}


def _flag(flags: list[str], name: str) -> str | None:
    return flags[flags.index(name) + 1] if name in flags else None


def requests(rows: list[dict[str, object]], configs: Path = ROOT / "tests" / "device" / "configs"
             ) -> list[tuple[dict[str, object], dict[str, object]]]:
    """(row, trace request) for each row with probe terms."""
    out = []
    for row in rows:
        probe = row.get("probe")
        if not isinstance(probe, dict) or "torch_peak_increase" not in probe:
            continue
        argv = [str(a) for a in row["argv"]]  # type: ignore[attr-defined]
        if "--speculative-config" in argv:
            continue  # the drafter's dummy run is not traced
        config = json.loads((configs / f"{row['model']}.json").read_text())
        engine_args: dict[str, object] = {
            "max_num_batched_tokens": probe["max_num_batched_tokens"], "max_num_seqs": probe["max_num_seqs"],
            "max_model_len": int(_flag(argv, "--max-model-len") or 32768),
        }
        if (kv := _flag(argv, "--kv-cache-dtype")) is not None:
            engine_args["kv_cache_dtype"] = kv
        if "--language-model-only" in argv:
            engine_args["language_model_only"] = True
        out.append((row, {"config": config, "engine_args": engine_args, "device": H200,
                          "cublas_workspace_bytes": CUBLAS_WORKSPACE_SM90}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", default=str(ROOT / "tests" / "device" / "results" / "2026-12-01"))
    ap.add_argument("--python", required=True, help="the engine's interpreter")
    ap.add_argument("--vllm-site", help="an unpacked release to put first on PYTHONPATH")
    ap.add_argument("--out", help="also write one JSON line per row (row, the engine's figures, the trace's)")
    ap.add_argument("--configs", default=str(ROOT / "tests" / "device" / "configs"), help="the rows' config.json files")
    ap.add_argument("--row-env", action="append", default=[], metavar="ROW:KEY=VALUE",
                    help="an engine variable a row ran with that rows.jsonl does not record (gpu_rows.py's env)")
    args = ap.parse_args()
    rows = [json.loads(line) for line in (Path(args.results) / "rows.jsonl").read_text().splitlines() if line]
    pairs = requests(rows, Path(args.configs))
    base = dict(os.environ)
    if args.vllm_site:
        rest = [base["PYTHONPATH"]] if base.get("PYTHONPATH") else []
        base["PYTHONPATH"] = os.pathsep.join([args.vllm_site, *rest])
    extra: dict[str, dict[str, str]] = {}
    for item in args.row_env:
        name, _, assignment = item.partition(":")
        key, _, value = assignment.partition("=")
        extra.setdefault(name, {})[key] = value
    groups: dict[str, list[int]] = {}  # one engine import per distinct engine environment
    envs: dict[str, dict[str, str]] = {}
    for i, (row, _) in enumerate(pairs):
        row_env = {str(k): str(v) for k, v in dict(row.get("dspark_env") or {}).items()  # type: ignore[call-overload]
                   if str(k).startswith("VLLM_")}
        row_env.update(extra.get(str(row["row"]), {}))
        key = json.dumps(row_env, sort_keys=True)
        groups.setdefault(key, []).append(i)
        envs[key] = {**base, **row_env}
    answers: list[dict[str, Any]] = [{} for _ in pairs]
    for key, members in groups.items():
        got = run_inside(args.python, "vllm.profile_peak", [pairs[i][1] for i in members], 1200, env=envs[key])
        for i, ans in zip(members, got, strict=True):
            answers[i] = ans
    records = []
    print(f"{'row':<24} {'runner':<6} {'mode':<9} {'engine peak':>15} {'traced':>15} {'error':>8} "
          f"{'engine kept':>15} {'traced kept':>15}")
    for (row, _), ans in zip(pairs, answers, strict=True):
        probe = row["probe"]
        assert isinstance(probe, dict)
        engine = int(probe["torch_peak_increase"])
        kept = int(probe["sampler_start_allocated"]) - int(probe["profile_start_allocated"])
        mode = "eager" if probe.get("cudagraph_mode") == "NONE" else "compiled"
        keep = ("ok", "error", "engine_version", "runner", "forward_peak_bytes", "kept_bytes", "sampler_peak_bytes",
                "peak_bytes", "sampler", "cublas_at")
        records.append({"row": row["row"], "mode": mode, "torch_peak_increase": probe["torch_peak_increase"],
                        "available_kv": probe["available_kv"], "kept": kept,
                        "trace": {k: ans.get(k) for k in keep if k in ans}})
        if not ans.get("ok"):
            print(f"{row['row']:<24} {'':<6} {mode:<9} {engine:>15,} {'-':>15}  {ans.get('error')}")
            continue
        traced = int(ans["peak_bytes"])
        print(f"{row['row']:<24} {ans['runner']:<6} {mode:<9} {engine:>15,} {traced:>15,} "
              f"{(traced - engine) / engine:>+8.2%} {kept:>15,} {int(ans['kept_bytes']):>15,}  ({ans['seconds']} s)")
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
