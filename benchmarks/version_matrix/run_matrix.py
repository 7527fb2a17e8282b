"""The vLLM version matrix: each CPU release's real engine, and its planner for GPU parameters, against dspark.

Two parts, each writing JSON under benchmarks/version_matrix/results/:
  engine  : for each vllm-cpu release, start the real engine (--enforce-eager) on the tiny oracle models
            (tests/real_engines/build_tiny_models.py; dense, hybrid with and without prefix caching, MTP, MLA,
            fp8 KV) and read its own KV line; beside it dspark's pure model for the same case.
  planner : for each release (0.28.0-0.33.0), vllm_planner.py runs the release's own config, hybrid
            alignment and planner code for GPU parameters (Flash-Next's shape under the seed recipe's
            28 GB pin; FlashAttention and FlashInfer kernel blocks; MTP 0/2/4; bf16 and fp32 SSM state;
            prefix caching on and off), on a GB10 (SM12.1, CUDA 13: the device vllm_planner.py makes the
            platform report); for 0.33.0 also on SM90 and two controls where its FlashInfer GDN condition
            is false (CUDA 12 on SM12.1, head_k_dim 64); beside it dspark's pure model (`dspark validate
            --json` with the matching profile).
  planner-dspark : recompute only dspark's column of results/planner.json.
  start   : `dspark start` itself per release (start_matrix.py): the real exec on the CPU builds, the exec
            seam for vLLM 0.33.0 and SGLang; the detected version, the witness's figure, the pin, the engine's line.
  witness : dspark's witness (dspark_inside.vllm.witness) in each release's interpreter on the engine part's
            cases, dspark's own specs and pin (results/witness.json; render.py puts it beside the engine's line).
SGLang's releases have their own script (sglang_matrix.py: each release's sizing in-process, results/sglang.json).
Run from the repository root, with the real-engine suite's folder on PYTHONPATH (its modules import each other by bare
name, as pytest puts that folder on sys.path):
  PYTHONPATH=tests/real_engines python -m benchmarks.version_matrix.run_matrix {engine|planner|witness|start} \
      [--matrix-dir DIR] [--releases ...]
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

from vllm_harness import OracleCase, run_batch

from dspark.engines.inside import InsideFailure, run_inside

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# run_batch starts the suite's own tests/real_engines/oracle_runner.py, which reads any release from 0.28.0.

ENGINE_CASES = ("dense-1gib-env", "dense-fp8-odd", "hybrid-1gib-env", "hybrid-noprefix-bf16ssm", "hybrid-mtp2",
                "mla-default", "mla-fp8-noprefix")
RESULTS = HERE / "results"
PIN = 28_000_000_000
# No "dspark" in this path: vLLM renames speculative method "mtp" to "dspark" when the draft path contains it.
MODELS = Path(tempfile.gettempdir()) / "vm-tiny-models"


def build_models(matrix: Path) -> Path:
    """The tiny oracle models (dense, hybrid, MLA) under MODELS, built by 0.32.0's transformers."""
    builder = str(matrix / "vllm-0.32.0" / "bin" / "python")
    subprocess.run([builder, str(ROOT / "tests/real_engines/build_tiny_models.py"), str(MODELS),
                    "dense-qwen3", "hybrid-qwen3-next", "mla-deepseek-v3"], check=True, capture_output=True)
    return MODELS


def engine_part(matrix: Path, releases: list[str], only: set[str] | None = None) -> dict[str, Any]:
    """Real engine per release on the tiny models; dspark's pure prediction beside each line."""
    import test_vllm_oracle as oracle  # noqa: PLC0415 - the oracle suite's cases and dspark's direct prediction

    cases: list[OracleCase] = [c for c in oracle.CASES if c.id in (only or ENGINE_CASES)]
    models = build_models(matrix)
    report: dict[str, Any] = {}
    for release in releases:
        python = str(matrix / f"vllm-{release}" / "bin" / "python")
        pending: list[dict[str, object]] = [
            {"id": c.id, "env": dict(c.env),
             "argv": ["--model", str(models / c.model), *c.flags, "--skip-tokenizer-init", "--enforce-eager"]}
            for c in cases]
        rows: dict[str, Any] = {}
        while pending:
            done, out = run_batch(python, pending, timeout=1500)
            if not done:
                rows["_runner"] = out[-3000:]
                break
            for r in done:
                rows[r.case_id] = {"engine_line": r.line, "engine_tokens": r.tokens,
                                   "engine_concurrency": r.concurrency, "engine_error": r.error,
                                   "seconds": round(r.seconds, 1)}
            pending = [c for c in pending if c["id"] not in rows]
        for c in cases:
            try:
                cap = oracle.predict_direct(models, c)
                rows.setdefault(c.id, {}).update(dspark_tokens=cap.kv_pool_tokens,
                                                 dspark_concurrency=f"{cap.max_concurrency:.2f}")
            except Exception as exc:  # noqa: BLE001 - the model's refusal is a figure too
                rows.setdefault(c.id, {})["dspark_error"] = f"{type(exc).__name__}: {exc}"
        report[release] = rows
        print(release, json.dumps(rows)[:2000], flush=True)
    return report


def witness_part(matrix: Path, releases: list[str]) -> dict[str, Any]:
    """The witness in each release's interpreter on dspark's own specs and pin, for the engine part's cases."""
    import test_vllm_oracle as oracle  # noqa: PLC0415

    from dspark.engines.vllm.witness_input import vllm_witness_request  # noqa: PLC0415

    cases: list[OracleCase] = [c for c in oracle.CASES if c.id in ENGINE_CASES]
    models = MODELS
    requests = []
    for c in cases:
        cap = oracle.predict_direct(models, c)
        requests.append({"id": c.id, "request": vllm_witness_request(cap)})
    report: dict[str, Any] = {}
    for release in releases:
        python = str(matrix / f"vllm-{release}" / "bin" / "python")
        rows = report.setdefault(release, {})
        try:
            answers = run_inside(python, "vllm.witness", [r["request"] for r in requests], 1800,
                                 env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind"})
        except InsideFailure as failure:
            rows["_witness"] = failure.last(40)[-2000:]
            answers = []
        for item, rec in zip(requests, answers, strict=False):
            rows.setdefault(item["id"], {}).update(
                witness_tokens=rec.get("kv_pool_tokens"), witness_error=rec.get("error"),
                witness_concurrency=(f"{rec['max_concurrency']:.2f}" if rec.get("max_concurrency") else None))
        print(release, "witness", json.dumps(rows)[:1500], flush=True)
    return report


# The device facts a CUDA worker reads (vllm_planner.py stubs only these): GB10 as dspark's gb10x2 profile, and
# an SM90 part. CUDA 13.0: the runtime of 0.33's wheels; 12.8 for the controls where 0.33's condition is false.
GB10 = {"capability": [12, 1], "cuda": "13.0", "name": "NVIDIA GB10"}
H200 = {"capability": [9, 0], "cuda": "13.0", "name": "NVIDIA H200"}
GB10_HW = ["--hardware", "gb10x2", "--nnodes", "2"]
H200_HW = ["--hardware", "h200:2"]


def _seed_args(spec: int, ssm: str = "auto", prefix: bool = True) -> dict[str, Any]:
    """The seed recipe's engine arguments (TP=2, 262,144 tokens, 28 GB pin) with MTP, SSM dtype, prefix caching."""
    ea: dict[str, Any] = {"tensor_parallel_size": 2, "max_model_len": 262144, "kv_cache_memory_bytes": PIN,
                          "max_num_seqs": 6, "max_num_batched_tokens": 8192, "mamba_ssm_cache_dtype": ssm,
                          "enable_prefix_caching": prefix}
    if spec:
        ea["speculative_config"] = {"method": "mtp", "num_speculative_tokens": spec}
    return ea


def planner_cases(config: dict[str, Any]) -> list[dict[str, Any]]:
    """Flash-Next under the seed recipe's pin, with the inputs that reach release-specific paths, on a GB10."""
    cases = []
    for spec in (0, 2, 4):
        for ssm in ("auto", "float32"):
            for prefix in (True, False):
                for kernel, sizes in (("fa", ["x16"]), ("fi", [16, 32, 64])):
                    if kernel == "fi" and (ssm != "auto" or not prefix):
                        continue  # FlashInfer's 16/32/64 only changes the prefix-caching bf16 case
                    cid = f"mtp{spec}-{ssm}-{'prefix' if prefix else 'noprefix'}-{kernel}"
                    cases.append({"id": cid, "config": config, "engine_args": _seed_args(spec, ssm, prefix),
                                  "kv_bytes": PIN, "kernel_block_sizes": sizes, "device": GB10, "hardware": GB10_HW})
    return cases


def device_cases(config: dict[str, Any]) -> list[dict[str, Any]]:
    """0.33's GDN prefill choice beyond GB10: SM90, and controls where its FlashInfer condition is false.

    cuda_runtime_major: dspark's CLI has no flag for torch's CUDA runtime, so those rows are computed through
    compute_vllm_capacity(cuda_runtime_major=...); fallback: the release dspark's figure must then equal (0.32.0).
    """
    cuda12 = {**GB10, "cuda": "12.8"}
    narrow = {**config, "linear_key_head_dim": 64}  # head_k_dim != 128: SM12x's FlashInfer condition fails
    base = {"kv_bytes": PIN, "kernel_block_sizes": ["x16"]}
    cases = [{**base, "id": f"mtp{n}-auto-prefix-fa-sm90", "config": config, "engine_args": _seed_args(n),
              "device": H200, "hardware": H200_HW} for n in (0, 2, 4)]
    cases += [{**base, "id": f"mtp{n}-auto-prefix-fa-sm121-cuda12", "config": config, "engine_args": _seed_args(n),
               "device": cuda12, "hardware": GB10_HW, "cuda_runtime_major": 12, "fallback": "0.32.0"}
              for n in (0, 2, 4)]
    cases.append({**base, "id": "mtp0-auto-prefix-fa-sm90-cuda12", "config": config, "engine_args": _seed_args(0),
                  "device": {**H200, "cuda": "12.8"}, "hardware": H200_HW, "cuda_runtime_major": 12})
    cases.append({**base, "id": "mtp0-auto-prefix-fa-headk64", "config": narrow, "engine_args": _seed_args(0),
                  "device": GB10, "hardware": GB10_HW, "fallback": "0.32.0"})
    return cases


def dspark_for(case: dict[str, Any], version: str) -> dict[str, Any]:
    """dspark's pure model for a planner case: `dspark validate --model DIR --engine vllm ... --json -- FLAGS`
    (through compute_vllm_capacity where the case names a CUDA runtime, which the CLI does not take)."""
    ea = case["engine_args"]
    flags = ["--tensor-parallel-size", "2", "--max-model-len", str(ea["max_model_len"]),
             "--max-num-seqs", str(ea["max_num_seqs"]), "--max-num-batched-tokens", str(ea["max_num_batched_tokens"]),
             "--enable-prefix-caching" if ea["enable_prefix_caching"] else "--no-enable-prefix-caching"]
    if ea["mamba_ssm_cache_dtype"] != "auto":
        flags += ["--mamba-ssm-cache-dtype", ea["mamba_ssm_cache_dtype"]]
    if "speculative_config" in ea:
        flags += ["--speculative-config", json.dumps(ea["speculative_config"])]
    if case.get("cuda_runtime_major") is not None:
        return _dspark_api(case, version, flags)
    config_dir = tempfile.mkdtemp(prefix="flash-next-")
    Path(config_dir, "config.json").write_text(json.dumps(case["dspark_config"]))
    argv = [sys.executable, "-m", "dspark", "validate", "--model", config_dir, "--engine", "vllm",
            *case.get("hardware", GB10_HW), "--kv-cache-memory", str(PIN), "--engine-version", version,
            "--json", "--", *flags]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        cap = json.loads(proc.stdout)["capacity"]
        return {"dspark_tokens": cap["kv_pool_tokens"], "dspark_concurrency": round(float(cap["max_concurrency"]), 4),
                "dspark_block": cap["details"]["block_size"], "dspark_blocks": cap["details"]["num_blocks"],
                "dspark_how": " ".join(["dspark validate", *case.get("hardware", GB10_HW)])}
    except (ValueError, KeyError, TypeError):
        return {"dspark_error": (proc.stdout + proc.stderr)[-500:]}


def _dspark_api(case: dict[str, Any], version: str, flags: list[str]) -> dict[str, Any]:
    """dspark's model with the case's CUDA runtime and compute capability (the CLI's profiles assume CUDA >= 13)."""
    from dspark.engines.vllm.capacity import compute_vllm_capacity  # noqa: PLC0415
    from dspark.engines.vllm.options import parse_vllm_serve_flags  # noqa: PLC0415
    from dspark.model.architecture import parse_config  # noqa: PLC0415

    major, minor = case["device"]["capability"]
    cap = compute_vllm_capacity(
        parse_config(case["dspark_config"]), parse_vllm_serve_flags([*flags, "--kv-cache-memory-bytes", str(PIN)]),
        platform="cuda", device_total_bytes=None, device_free_bytes=None, compute_capability=(major, minor),
        weights_per_gpu_bytes=None, engine_version=version, cuda_runtime_major=case["cuda_runtime_major"],
    )
    return {"dspark_tokens": cap.kv_pool_tokens, "dspark_concurrency": round(cap.max_concurrency, 4),
            "dspark_block": cap.block_size, "dspark_blocks": cap.num_blocks,
            "dspark_how": f"compute_vllm_capacity(compute_capability=({major}, {minor}), "
                          f"cuda_runtime_major={case['cuda_runtime_major']})"}


def dspark_columns(case: dict[str, Any], version: str) -> dict[str, Any]:
    """dspark's figure for the case as `version` (plus the fallback release's, for the negative controls)."""
    row = {**dspark_for(case, version), "dspark_models": version}
    if case.get("fallback"):
        fb = dspark_for({**case, "cuda_runtime_major": None}, case["fallback"])
        row.update({f"fallback_{k.removeprefix('dspark_')}": v for k, v in fb.items()}, fallback=case["fallback"])
    return row


def _cases_for(release: str, config: dict[str, Any], dspark_config: dict[str, Any]) -> list[dict[str, Any]]:
    """The planner cases for a release; 0.33.0 adds the device cases (its GDN prefill choice moves the figure)."""
    cases = planner_cases(config) + (device_cases(config) if release == "0.33.0" else [])
    for c in cases:  # dspark reads the recipe's config as it is (its quantization too)
        c["dspark_config"] = {**dspark_config, **{k: v for k, v in c["config"].items() if config.get(k) != v}}
    return cases


def _recipe_config() -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    recipe = yaml.safe_load((ROOT / "dspark/data/recipes/flash-next-vllm.yaml").read_text())
    return dict(recipe["model"]["config"])


def refresh_dspark(releases: list[str]) -> dict[str, Any]:
    """Recompute only dspark's column of results/planner.json for these releases (after a dspark change)."""
    dspark_config = _recipe_config()
    report = json.loads((RESULTS / "planner.json").read_text())
    for release in releases:
        modelled = "0.33.0" if release == "0.33.0" else "0.32.0"
        cases = {c["id"]: c for c in _cases_for(release, _planner_config(dspark_config), dspark_config)}
        for cid, row in report.get(release, {}).items():
            if cid in cases:
                row.update(dspark_columns(cases[cid], modelled))
    return {r: report[r] for r in releases if r in report}


def _planner_config(dspark_config: dict[str, Any]) -> dict[str, Any]:
    """The config the CPU build can load: no ModelOpt NVFP4 there, and KV sizing never reads it."""
    return {k: v for k, v in dspark_config.items() if k != "quantization_config"}


def planner_part(matrix: Path, releases: list[str]) -> dict[str, Any]:
    """Each release's planner for GPU parameters; dspark's pure model beside it."""
    dspark_config = _recipe_config()
    config = _planner_config(dspark_config)
    report: dict[str, Any] = {}
    for release in releases:
        # dspark models 0.32.0 and 0.33.0; for the older releases it computes with 0.32.0 (their nearest).
        modelled = "0.33.0" if release == "0.33.0" else "0.32.0"
        cases = _cases_for(release, config, dspark_config)
        python = str(matrix / f"vllm-{release}" / "bin" / "python")
        # VLLM_TARGET_DEVICE: 0.33.0's wheel is not a CPU build; the CPU platform still builds its config.
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_TARGET_DEVICE": "cpu"}
        sent = [{k: v for k, v in c.items() if k not in ("dspark_config", "hardware")} for c in cases]
        proc = subprocess.run([python, str(HERE / "vllm_planner.py")], input=json.dumps(sent), text=True,
                              capture_output=True, timeout=1800, check=False, env=env)
        by_id = {c["id"]: c for c in cases}
        rows: dict[str, Any] = {}
        for line in proc.stdout.splitlines():
            if line.startswith("VLLM-PLANNER "):
                rec = json.loads(line.split(" ", 1)[1])
                rec.pop("traceback", None)
                rows[rec["id"]] = {**rec, "device": by_id[rec["id"]].get("device"),
                                   **dspark_columns(by_id[rec["id"]], modelled)}
        if not rows:
            rows["_runner"] = proc.stderr[-3000:]
        report[release] = rows
        print(release, len(rows), "cases", flush=True)
    return report


def _listed(text: str) -> list[str]:
    """A comma-separated option; empty: none."""
    return [item for item in text.split(",") if item]


def main() -> int:
    """Run one part over the releases; write results/<part>.json (merged with earlier runs)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=("engine", "planner", "witness", "planner-dspark", "start"))
    ap.add_argument("--matrix-dir", default=str(ROOT / ".engines-matrix"))
    ap.add_argument("--releases", default="0.28.0,0.29.0,0.30.0,0.31.0,0.32.0")
    ap.add_argument("--cases", help="engine, start: only these case ids (comma-separated); rows merge into the file")
    ap.add_argument("--seam-releases", default="0.33.0", help="start: vLLM releases driven through the exec seam")
    ap.add_argument("--sglang-releases", default="0.5.19,0.5.20,0.5.21,0.5.22,0.5.23", help="start: SGLang releases")
    args = ap.parse_args()
    matrix = Path(args.matrix_dir)
    releases = args.releases.split(",")
    only = set(args.cases.split(",")) if args.cases else None
    if args.part == "start":
        from benchmarks.version_matrix.start_matrix import start_part  # noqa: PLC0415 - only this part needs it

        report = start_part(matrix, build_models(matrix), _listed(args.releases), _listed(args.seam_releases),
                            _listed(args.sglang_releases), only)
    elif args.part == "engine" and only:
        report = engine_part(matrix, releases, only)
    else:
        parts = {"engine": engine_part, "planner": planner_part, "witness": witness_part}
        report = refresh_dspark(releases) if args.part == "planner-dspark" else parts[args.part](matrix, releases)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.part.split('-')[0]}.json"
    merged = json.loads(path.read_text()) if path.exists() else {}
    for release, rows in report.items():  # a rerun of some cases replaces those rows only
        merged.setdefault(release, {}).update(rows)
    path.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
