"""The SGLang version matrix: each release's own pool sizing (the witness, in-process) against dspark's pure model.

For each SGLang release in .engines-matrix/, the product's SGLang sizing (dspark_inside.sglang.sizing) runs the
release's own ServerArgs resolution and pool sizing (KVCacheConfigurator from 0.5.16, the ModelRunner mixin before) on:
  seed-6/16/32 : the flash-next-sglang recipe (Flash-Next, TP=2 over two GB10s, 262,144-token context, NEXTN
                 4 steps / top-1 / 5 draft tokens) at 118 GiB free at start-up and 26 GiB loaded, 6/16/32 seats
                 (the standard of docs/version-matrix.md's seed table);
  tiny cases   : the oracle suite's tiny dense and hybrid models (tests/real_engines/test_sglang_oracle.py) on its H200.
Beside each: dspark's pure model (it models 0.5.23). A release that refuses the recipe's flags is rerun with the
flags its own refusal names (case id suffixed "+extra-buffer"), so its pool can still be compared.
Writes results/sglang.json (merged with earlier runs); render.py puts it into docs/version-matrix.md. With
--all-probes, 0.5.19 on also get every platform probe rebound as the older releases do (results/
sglang_all_probes.json); the witness itself answers CUDA only for sglang.srt.utils.is_cuda, the binding their
override_platform leaves and the prefill CUDA graph's default reads, and the two runs must agree.

Run from the repository root, with the real-engine suite's folder on PYTHONPATH (its modules import each other by bare
name, as pytest puts that folder on sys.path):
  PYTHONPATH=tests/real_engines python -m benchmarks.version_matrix.sglang_matrix [--matrix-dir DIR] \
      [--releases 0.5.10,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import test_sglang_oracle as oracle
import yaml

from benchmarks.version_matrix import seed_sglang
from dspark.engines.sglang.capacity import compute_sglang_capacity
from dspark.engines.sglang.options import parse_sglang_flags
from dspark.model.architecture import parse_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

GIB = 1 << 30
RESULTS = HERE / "results"
RELEASES = ",".join(f"0.5.{n}" for n in range(10, 24))
SEED_FREE, SEED_FOOTPRINT = 118 * GIB, 26 * GIB
TINY = ("dense-default", "hybrid-default", "hybrid-nextn-default")
# What 0.5.10-0.5.13 ask for before they size a hybrid model with speculative decoding and the radix cache
# (their ServerArgs._handle_mamba_radix_cache refusal names both).
EXTRA_BUFFER_FLAGS = ("--mamba-scheduler-strategy", "extra_buffer")
EXTRA_BUFFER_ENV = {"SGLANG_ENABLE_SPEC_V2": "1"}


def cases(seed_dir: str, tiny_dirs: dict[str, Path]) -> list[dict[str, Any]]:
    """The witness's cases: the seed deployment at 6/16/32 seats, then the tiny oracle cases."""
    out = [seed_sglang.case(f"seed-{n}", seed_dir, n, SEED_FREE, SEED_FOOTPRINT, 4) for n in (6, 16, 32)]
    for c in oracle.CASES:
        if c.id in TINY:
            out.append({"id": c.id, "argv": oracle._argv(c, tiny_dirs), "gpu_mib": c.gpu_mib,
                        "free_before": c.free_before, "free_after": c.free_before - c.weights,
                        "capability": list(c.capability), "integrated": c.integrated, "env": dict(c.env)})
    return out


def asks_for_extra_buffer(error: str | None) -> bool:
    """True when a release refused with the message that names --mamba-scheduler-strategy extra_buffer."""
    return bool(error) and "extra_buffer" in str(error) and "SGLANG_ENABLE_SPEC_V2" in str(error)


def with_extra_buffer(case: dict[str, Any]) -> dict[str, Any]:
    """The same case with the flags and environment the refusal names."""
    return {**case, "id": case["id"] + "+extra-buffer", "argv": [*EXTRA_BUFFER_FLAGS, *case["argv"]],
            "env": {**case.get("env", {}), **EXTRA_BUFFER_ENV}}


def dspark_pool(case: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """dspark's pure model (0.5.23) for a witness case: the pool and the seats it admits."""
    argv = [a for a in case["argv"] if a not in EXTRA_BUFFER_FLAGS]
    model_dir = argv[argv.index("--model-path") + 1]
    cap = compute_sglang_capacity(
        parse_config(config, model_dir), parse_sglang_flags(argv), gpu_capacity_bytes=case["gpu_mib"] << 20,
        free_before_load_bytes=case["free_before"], weights_per_gpu_bytes=case["free_before"] - case["free_after"],
        compute_capability=tuple(case["capability"]))
    if cap.refusals:
        return {"dspark_error": cap.refusals[0].code}
    return {"dspark_tokens": cap.max_total_num_tokens, "dspark_max_running_requests": cap.max_running_requests,
            "dspark_mem_fraction_static": cap.mem_fraction_static}


_KEEP = ("sizing_path", "stood_in", "mem_fraction_static", "attention_backend", "mamba_radix_cache_strategy",
         "prefill_graph_backend", "prefill_graph_bs_count",
         "mamba_cache_per_req", "cell_size", "max_total_num_tokens", "max_running_requests", "max_mamba_cache_size",
         "error", "error_stage")


def run_release(python: str, all_cases: list[dict[str, Any]], configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The witness on every case in one release's interpreter; refusals naming extra_buffer rerun with it."""
    got = seed_sglang.run_sizing(python, all_cases)
    if "_failed" in got:
        return {"_runner": got["_failed"]["error"]}
    retry = [with_extra_buffer(c) for c in all_cases if asks_for_extra_buffer(got.get(c["id"], {}).get("error"))]
    if retry:
        got.update(seed_sglang.run_sizing(python, retry))
    rows: dict[str, Any] = {}
    for c in [*all_cases, *retry]:
        rec = got.get(c["id"], {"error": "no result"})
        base = c["id"].split("+")[0]
        rows[c["id"]] = {**{k: rec.get(k) for k in _KEEP}, **dspark_pool(c, configs[base])}
    return rows


def main() -> int:
    """Run every release; print one line per release and case; merge into results/sglang.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix-dir", default=str(ROOT / ".engines-matrix"))
    ap.add_argument("--releases", default=RELEASES)
    ap.add_argument("--all-probes", action="store_true",
                    help="0.5.19 on: rebind every platform probe, as for older releases (sglang_all_probes.json)")
    args = ap.parse_args()
    recipe = yaml.safe_load((ROOT / "dspark/data/recipes/flash-next-sglang.yaml").read_text())
    root = Path(tempfile.mkdtemp(prefix="sglang-matrix-"))
    seed_dir = root / "flash-next"
    seed_dir.mkdir()
    (seed_dir / "config.json").write_text(json.dumps(recipe["model"]["config"]))
    tiny_dirs = oracle._write_models(root)
    all_cases = [{**c, "all_probes": args.all_probes} for c in cases(str(seed_dir), tiny_dirs)]
    configs = {f"seed-{n}": recipe["model"]["config"] for n in (6, 16, 32)}
    configs.update({c.id: oracle.CONFIGS[c.model] for c in oracle.CASES if c.id in TINY})
    path = RESULTS / ("sglang_all_probes.json" if args.all_probes else "sglang.json")
    merged: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for release in args.releases.split(","):
        python = str(Path(args.matrix_dir) / f"sglang-{release}" / "bin" / "python")
        rows = run_release(python, all_cases, configs)
        merged[release] = rows
        for cid, row in rows.items():
            print(release, cid, json.dumps(row)[:300] if isinstance(row, dict) else str(row)[:300], flush=True)
        RESULTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
