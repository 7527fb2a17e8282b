"""Run GPU-truth rows on the GPU machine: dspark's plan, then the real `vllm serve` on the argv dspark prints.

Run on the GPU machine after gpu_install.sh (not collected by pytest). For each row of gpu_rows.ROWS named:
`dspark validate --json` and `dspark start --dry-run --json` (without vLLM importable, so no engine parser run is
timed in), then `vllm serve` with exactly the argv dspark printed, until the engine prints its KV cache size and
maximum concurrency; then the engine is stopped (SIGINT, then SIGKILL to its process group) and the GPU must be
free again before the next row. The engine's own lines, the exact terms of its KV budget (probe/sitecustomize.py)
and dspark's figures go to OUT/rows.jsonl, one JSON object a row; full logs to OUT/logs.tar.xz.

    python3 gpu_truth.py --src .gpu/src --vllm-site /tmp/vsite --out $OUT --deadline-s 560 [ROW ...]

Rows that could not finish before the deadline are not started (a device command has a hard limit).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from gpu_rows import BY_NAME, COMMON, ROWS, Row  # beside this script, which Python puts first on sys.path

HERE = Path(__file__).resolve().parent
ENGINE_VERSION_PLANNED = os.environ.get("DSPARK_GPU_ENGINE_VERSION", "0.25.0")  # the release that runs there
DSPARK_SITE = os.environ.get("DSPARK_SITE", "/tmp/dsite")  # pydantic for dspark (gpu_install.sh), no vLLM there
ROW_START_S = 150  # a row is not started with less time than this left
ENGINE_TIMEOUT_S = 400
PATTERNS = {
    "model_loading_gib": r"Model loading took ([\d.]+) GiB",
    "available_kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "cudagraph_estimate_gib": r"Estimated CUDA graph memory: ([\d.]+) GiB total",
    "cudagraph_profiling": r"Profiling CUDA graph memory: (.*)$",
    "equivalent_util": r"equivalent to --gpu-memory-utilization=([\d.]+)",
    "torch_compile_s": r"torch.compile takes ([\d.]+) s in total",
    "profile_summary": r"(Memory profiling takes .*)$",
    "attention_backend": r"Using (\S+) (?:attention )?backend",
    "error": r"((?:ValueError|RuntimeError|AssertionError|torch.OutOfMemoryError|ImportError|"
             r"ModuleNotFoundError)[:].*)$",
}


def gpu_used_mib() -> int:
    """nvidia-smi's memory.used of GPU 0, MiB (-1 without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return -1
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) if out else -1


def dspark_json(src: Path, args: list[str]) -> dict[str, Any]:
    """One `python3 -m dspark ... --json` run without vLLM importable; its JSON (or the error)."""
    env = dict(os.environ, PYTHONPATH=f"{src}:{DSPARK_SITE}")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dspark", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=120)
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        data = {"stdout": proc.stdout[-2000:]}
    data["_rc"] = proc.returncode
    data["_seconds"] = round(time.monotonic() - t0, 2)
    if proc.returncode not in (0, 1):
        data["_stderr"] = proc.stderr[-2000:]
    return data


def model_dir(name: str) -> Path:
    """A config-only model directory for one of tests/device/configs (or tests/fixtures/configs)."""
    for base in (HERE / "configs", HERE.parent / "fixtures" / "configs"):
        cfg = base / f"{name}.json"
        if cfg.exists():
            out = Path("/tmp/gpu-models") / name
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text(cfg.read_text())
            return out
    raise SystemExit(f"no config for {name} in tests/device/configs")


def hold(gib: int) -> subprocess.Popen[str]:
    """Another process that holds GIB of GPU memory until killed."""
    code = ("import sys, time, torch\n"
            f"x = torch.empty({gib} << 30, dtype=torch.uint8, device='cuda')\n"
            "print('held', flush=True)\ntime.sleep(900)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "held":
        raise RuntimeError("the process meant to hold GPU memory did not start")
    time.sleep(1)
    return proc


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGINT to the process group, then SIGKILL after 15 s."""
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        return


def wait_gpu_free(limit_mib: int, seconds: float = 60) -> int:
    """Poll until the GPU's used memory is at most limit_mib (or time runs out); the last reading."""
    end = time.monotonic() + seconds
    used = gpu_used_mib()
    while used > limit_mib and time.monotonic() < end:
        time.sleep(1)
        used = gpu_used_mib()
    return used


def run_engine(argv: list[str], env: dict[str, str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Start the engine, read its log until the KV lines (or exit/timeout), stop it; the parsed lines."""
    found: dict[str, Any] = {}
    lines: queue.Queue[str | None] = queue.Queue()
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=max(0.1, timeout_s - (time.monotonic() - t0)))
            except queue.Empty:
                found["timeout"] = True
                break
            if line is None:
                found["exited"] = proc.poll()
                break
            fh.write(line)
            for key, pat in PATTERNS.items():
                m = re.search(pat, line)
                if m and key not in found:
                    found[key] = m.group(1)
            if "max_concurrency" in found:
                found["seconds_to_kv_line"] = round(time.monotonic() - t0, 1)
                break
        stop(proc)
    return found


def run_row(row: Row, src: Path, vllm_site: Path, logs: Path, end: float) -> dict[str, Any]:
    """dspark's figures and the engine's for one row."""
    mdir = model_dir(row.model)
    base = ["--model", str(mdir), "--engine", "vllm", "--engine-version", ENGINE_VERSION_PLANNED, "--json"]
    if os.environ.get("DSPARK_GPU_HARDWARE"):  # a smoke test without a GPU plans for a profile instead
        base += ["--hardware", os.environ["DSPARK_GPU_HARDWARE"]]
    tail = [*row.dspark, "--", *COMMON, *row.flags]
    holder = None
    record: dict[str, Any] = {"row": row.name, "what": row.what, "model": row.model, "flags": [*COMMON, *row.flags],
                              "dspark_options": list(row.dspark), "hold_gib": row.hold_gib,
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    t0 = time.monotonic()
    try:
        holder = hold(row.hold_gib) if row.hold_gib else None
        record["gpu_used_mib_before"] = gpu_used_mib()
        if holder is not None:  # the machine as dspark saw it for this row (the table replans against it)
            record["hardware"] = dspark_json(src, ["probe", "--json"])
        validate = dspark_json(src, ["validate", *base, *tail])
        dry = dspark_json(src, ["start", *base, "--dry-run", *tail])
        record["dspark"] = {k: validate.get(k) for k in ("capacity", "verdict", "engine_version", "_rc", "_seconds",
                                                         "_stderr", "stdout")}
        record["dspark"]["findings"] = [f.get("code") for f in validate.get("findings") or [] if isinstance(f, dict)]
        record["argv"] = dry.get("argv")
        record["dspark_env"] = dry.get("env")
        argv = dry.get("argv")
        if not isinstance(argv, list) or argv[:2] != ["vllm", "serve"]:
            record["error"] = f"dspark start --dry-run gave no vllm argv (rc {dry.get('_rc')})"
            record["dry_run"] = {k: v for k, v in dry.items() if k.startswith("_") or k == "stdout"}
            return record
        probe_file = Path(f"/tmp/gpu-probe-{row.name}.json")
        probe_file.unlink(missing_ok=True)
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (dry.get("env") or {}).items()})
        env.update(dict(row.env))
        env.update(PYTHONPATH=f"{HERE / 'probe'}:{vllm_site}", DSPARK_PROBE_OUT=str(probe_file),
                   VLLM_USE_FLASHINFER_SAMPLER="0", VLLM_LOGGING_LEVEL="DEBUG", HF_HUB_OFFLINE="1",
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", PYTHONUNBUFFERED="1")
        engine_argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", *argv[1:]]
        if "--host" not in engine_argv:  # dspark keeps the port, not the host: listen on loopback only
            engine_argv += ["--host", "127.0.0.1"]
        timeout = min(ENGINE_TIMEOUT_S, end - time.monotonic() - 30)  # leave time to stop it and write
        record["engine"] = run_engine(engine_argv, env, logs / f"{row.name}.log", timeout)
        if probe_file.exists():
            record["probe"] = json.loads(probe_file.read_text())
    except Exception as exc:  # one row's failure is that row's result; the next row still runs
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if holder is not None:
            stop(holder)
        record["gpu_used_mib_after"] = wait_gpu_free(1024)
        record["wall_s"] = round(time.monotonic() - t0, 1)
    return record


def main() -> int:
    """Run the named rows (default: all) within the deadline; append each to OUT/rows.jsonl."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", help=f"row names (default all): {', '.join(BY_NAME)}")
    ap.add_argument("--src", type=Path, required=True, help="folder holding the dspark package")
    ap.add_argument("--vllm-site", type=Path, required=True, help="pip --target folder of gpu_install.sh")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline-s", type=float, default=560)
    ap.add_argument("--state", type=Path, default=Path("/tmp/gpu-rows-done.txt"),
                    help="rows already run on this machine (skipped, so one command line serves every call)")
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = [BY_NAME[n] for n in args.rows] if args.rows else list(ROWS)
    args.out.mkdir(parents=True, exist_ok=True)
    logs = Path("/tmp/gpu-logs")
    logs.mkdir(exist_ok=True)
    if not (args.out / "probe.json").exists():  # a snapshot `--hardware FILE` reads (without this script's keys)
        probe = {k: v for k, v in dspark_json(args.src.resolve(), ["probe", "--json"]).items() if k[0] != "_"}
        (args.out / "probe.json").write_text(json.dumps(probe, indent=1) + "\n")
    done = set(args.state.read_text().split()) if args.state.exists() else set()
    with (args.out / "rows.jsonl").open("a") as fh:
        for row in rows:
            if row.name in done:
                continue
            left = args.deadline_s - (time.monotonic() - t0)
            if left < max(ROW_START_S, row.start_s + 20):  # the row's recorded start and time to stop it
                print(f"{row.name}: not started ({left:.0f} s left)", flush=True)
                continue
            rec = run_row(row, args.src.resolve(), args.vllm_site.resolve(), logs, t0 + args.deadline_s)
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            with args.state.open("a") as st:
                st.write(row.name + "\n")
            eng = rec.get("engine", {})
            cap = (rec.get("dspark") or {}).get("capacity") or {}
            print(f"{row.name}: engine {eng.get('available_kv_gib')} GiB {eng.get('kv_tokens')} tok "
                  f"{eng.get('max_concurrency')}x | dspark {cap.get('kv_budget_bytes')} B {cap.get('kv_pool_tokens')} "
                  f"tok | {rec.get('wall_s')} s {rec.get('error') or eng.get('error') or ''}", flush=True)
    with tarfile.open(args.out / "logs.tar.xz", "w:xz") as tar:
        for log in sorted(logs.glob("*.log")):
            tar.add(log, arcname=log.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
