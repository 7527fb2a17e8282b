"""Step-time truth on the GPU machine: the real `vllm serve` under `dspark bench`, per configuration (issue 25).

Run there after gpu_install.sh (not collected by pytest). For each engine of the plan: `dspark start --dry-run
--json` (without vLLM importable) gives the argv, `vllm serve` runs it (config-only model from
tests/device/configs, `--load-format dummy --skip-tokenizer-init`, loopback), the script waits for /health, sends
one small untimed warm-up, then runs each bench point with `dspark bench --json`; before and after each point it
saves the engine's /metrics. The engine is stopped by SIGINT to its process group (SIGKILL after 20 s) and the
GPU must be free before the next engine. Points and engines that cannot finish before the deadline are not
started; `--state` remembers what ran, so the same command line in the next call runs what is left.

    python3 gpu_clock.py --src /tmp/gsrc --vllm-site /tmp/vsite --out $OUT --deadline-s 540 --plan A

An engine with `profile` also runs `dspark profile URL --json` against itself (before or after its points), and
once it is stopped every point of the plan is predicted by `dspark advise --json` (the argv
tests/advise/test_recorded_gpu.py uses), uncalibrated and, where the engine has a profile, with `--calibrate` on it;
the figures side by side go to OUT/summary-TAG.json (plan D: the Done-when "within 5% after a profile of the same
engine" of issue 25, and a dense shape the recorded set does not have). `--after CMD` runs CMD (split as a
shell would, run without one) against the live engine `--after-engine` names once its points are done, with
DSPARK_URL set, bounded by `--after-s` and the deadline (another helper's measurement on the same engine start).

Output (OUT/clock-TAG.tar.gz, plus OUT/points-TAG.jsonl and OUT/log-TAG.txt beside it; TAG: --tag or the plan):
  points.jsonl           one object a point: {"config": {...}, "summary": {...}, "file": "ENGINE/POINT.json"}
  engines.jsonl          one object an engine: argv, env, seconds to healthy, the engine's KV lines, stop time
  ENGINE/POINT.json      {"config": {...}, "bench": <dspark bench --json>}
  ENGINE/POINT.metrics-before.txt / .metrics-after.txt   /metrics text
  ENGINE/engine.log      the engine's stdout and stderr
  ENGINE/prompts.jsonl   the prompts of a --prompts point (token ids)
  ENGINE/profile.json    `dspark profile --json` (and profile.metrics-before/after.txt around it)
  ENGINE/POINT.advise.json / .advise-calibrated.json   `dspark advise --json` for the point
  predictions.jsonl      one object a point: measured, predicted uncalibrated and calibrated, the errors
  ENGINE/after.log       the --after command's output
  nvidia-smi.csv         clocks, power, utilisation every second while the plan ran
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENGINE_VERSION = os.environ.get("DSPARK_GPU_ENGINE_VERSION", "0.25.0")
DSPARK_SITE = os.environ.get("DSPARK_SITE", "/tmp/dsite")
PORT = int(os.environ.get("DSPARK_GPU_PORT", "8000"))  # another port for a smoke run on a shared host
COMMON = ("--load-format", "dummy", "--skip-tokenizer-init")
# vLLM's log with millisecond timestamps (its own format has seconds: %m-%d %H:%M:%S), given to an engine with
# --enable-logging-iteration-details through VLLM_LOGGING_CONFIG_PATH: when each step's line was written, so step
# times can be read from the per-iteration log. Standard-library classes only (logging.config.dictConfig).
# uvicorn's access log too (one line a request when its response starts, as `vllm serve` prints it by default):
# run E's config had only vLLM's logger and no access line; with it the API server does what it does by default,
# and each request's line has its millisecond (run F: a burst's lines 0.1-2 ms apart).
LOGGING_CONFIG: dict[str, Any] = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"ms": {"format": "%(levelname)s %(asctime)s.%(msecs)03d [%(filename)s:%(lineno)d] %(message)s",
                          "datefmt": "%m-%d %H:%M:%S"}},
    "handlers": {"vllm": {"class": "logging.StreamHandler", "formatter": "ms", "level": "INFO",
                          "stream": "ext://sys.stdout"}},
    "loggers": {"vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False},
                "uvicorn.access": {"handlers": ["vllm"], "level": "INFO", "propagate": False}},
}
RESERVE_S = 40  # kept for stopping the last engine, the last predictions and packing the archive
PROFILE_EST_S = 40  # `dspark profile`: six waves and two closed loops (32, 128 streams), ~20 s on the H200
# Engine flags the plan reads (tests/advise/test_recorded_gpu.py's _PLANNED); the rest change nothing dspark models
PLANNED_FLAGS = ("--enforce-eager", "--max-num-batched-tokens", "--kv-cache-dtype", "--no-enable-prefix-caching",
                 "--enable-prefix-caching")
METRICS = ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s", "wall_time_s")
PATTERNS = {
    "model_loading_gib": r"Model loading took ([\d.]+) GiB",
    "available_kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "torch_compile_s": r"torch.compile took ([\d.]+) s in total",
    "graph_capture": r"(Graph capturing finished in .*)$",
    "init_engine": r"(init engine \(profile, create kv cache, warmup model\) took .*)$",
    "attention_backend": r"Using (\S+) (?:attention )?backend",
    "cudagraph_sizes": r"(cudagraph_capture_sizes.{0,300})",
}


@dataclass(frozen=True)
class Point:
    """One `dspark bench` run against the engine."""

    name: str
    input_len: int = 1024
    output_len: int = 256
    concurrency: int = 1
    requests: int = 0  # 0: max(2 x concurrency, 8)
    est_s: float = 30  # not started with less time left
    prompts: str = ""  # "prefix48": 48 prompts of ~4k token ids, re-sent in order (--warm-rerun)

    @property
    def n(self) -> int:
        return self.requests or max(2 * self.concurrency, 8)


@dataclass(frozen=True)
class Engine:
    """One engine start: a model config and the options given to dspark (before --) and vllm (after)."""

    name: str
    model: str
    seats: int
    max_model_len: int = 8192
    dspark: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    start_est_s: float = 120
    points: tuple[Point, ...] = field(default=())
    # untimed warm-up benches before the points, one per concurrency (512 in, 32 out, max(c, 8) requests), or per
    # (concurrency, prompt tokens): the first requests of a shape pay one-time costs (vLLM's Triton fused-MoE
    # kernel compiles per tile config)
    warmup: tuple[int | tuple[int, int], ...] = (4,)
    # `dspark profile URL` against this engine: "first" (after the warm-up, before the points), "last" (after
    # them: the points' time is secured first), "" (none)
    profile: str = ""


def sweep(prefix: str, concurrencies: tuple[int, ...], input_len: int = 1024, output_len: int = 256,
          est: float = 25) -> tuple[Point, ...]:
    return tuple(Point(f"{prefix}-in{input_len}-out{output_len}-c{c}", input_len, output_len, c,
                       est_s=est + (c >= 64) * 15 + (input_len > 2048) * (10 + c / 4)) for c in concurrencies)


PREFIX = (Point("prefix48-in4k-out128-c48", 4096, 128, 48, requests=48, est_s=60, prompts="prefix48"),)
PLANS: dict[str, tuple[Engine, ...]] = {
    "smoke": (  # a run of the harness itself (e.g. against a fake engine), seconds
        Engine("smoke", "qwen3-8b", 4, start_est_s=5,
               points=(Point("s-c2", 64, 8, 2, est_s=5), Point("p-c48", 4096, 4, 48, requests=48, est_s=5,
                                                                 prompts="prefix48"))),
    ),
    "smoke-D": (  # plan D's path (profile first and last, predictions, --after) against a fake engine, seconds
        Engine("smoke-first", "qwen3-8b", 8, start_est_s=5, profile="first",
               points=(Point("s-c2", 64, 8, 2, est_s=5),)),
        Engine("smoke-last", "llama-3.1-8b", 8, start_est_s=5, profile="last",
               points=(Point("s-c4", 64, 8, 4, est_s=5),)),
    ),
    "A": (
        Engine("qwen3-8b-s128", "qwen3-8b", 128, start_est_s=130,
               points=(*sweep("d", (1, 2, 4, 8, 16, 32, 64, 128)), *sweep("d", (1, 8, 32, 128), 4096))),
    ),
    "B": (
        Engine("qwen3-30b-a3b-s128", "qwen3-30b-a3b", 128, start_est_s=150,
               points=sweep("m", (1, 8, 32, 128))),
        Engine("qwen3-8b-s128-eager", "qwen3-8b", 128, flags=("--enforce-eager",), start_est_s=75,
               points=sweep("e", (1, 8, 32), est=35)),
        Engine("qwen3-8b-s8-prefix", "qwen3-8b", 8, start_est_s=120, points=PREFIX),
        Engine("qwen3-8b-s16-prefix", "qwen3-8b", 16, start_est_s=120, points=PREFIX),
    ),
    # issue 25's Done-when "within 5% after a profile of the same engine": A's engine and points again, profiled
    # first; then a dense shape the recorded set does not have (Llama-3.1-8B: 128k vocabulary, 14,336 FFN),
    # predicted from its plan alone (and profiled last, if time is left)
    "D": (
        Engine("qwen3-8b-s128", "qwen3-8b", 128, start_est_s=135, profile="first",
               points=(Point("d-in1024-out256-c1", 1024, 256, 1, requests=4, est_s=8),
                       *sweep("d", (2, 4, 8, 16, 32, 64, 128)),
                       Point("d-in4096-out256-c1", 4096, 256, 1, requests=4, est_s=8),
                       *sweep("d", (8, 32, 128), 4096))),
        # vLLM's own per-iteration log on this one (prompt and decode requests and tokens of every step, and the
        # wait for its output): which step took which prompts, the question of the 8B's 32-stream TTFT gap; one
        # log line a step costs the engine core tens of µs, so not on the 8B whose points A already measured
        Engine("llama-3.1-8b-s128", "llama-3.1-8b", 128, start_est_s=135, profile="last",
               flags=("--enable-logging-iteration-details",),
               points=(Point("l-in1024-out256-c1", 1024, 256, 1, requests=4, est_s=12),
                       *sweep("l", (8, 32, 128)), *sweep("l", (8,), 4096))),
    ),
    # issue 25 after plan D: the profile now ends with two closed-loop benches (32 and 128 streams of 1,024 +
    # 128, dspark.bench.profile.PLAN), and the calibration is judged on held-out waves. The 8B again, profiled
    # first, at the points D's profile fitted worst (8 x 4k, 32, 128); then a MoE no recorded run has
    # (Mixtral-8x7B: 8 experts top-2, 14,336-wide experts, 93 GB of bf16 weights; its start took 109 s in
    # 2026-12-02-rows), warmed at every batch its points form (fused-MoE Triton compiles per tile config:
    # plan B's JIT), profiled first, then four points. Its points are predicted from the plan alone and from its
    # own profile, on the device, before anything is compared.
    # Both with vLLM's per-iteration log (prompt and decode requests and tokens of every step, the wait for its
    # output, a millisecond timestamp): run D's 32-128-stream TTFT gap is in the engine's wait before its queue
    # (TTFT - queue - prefill: 0.05-0.13 s at 1k x 32-128, 0.22 at 4k x 128, against the model's few ms of API
    # server), which the histograms cannot place; ~30 us of engine-core CPU a step, beside a 5-60 ms GPU step.
    "E": (
        Engine("qwen3-8b-s128", "qwen3-8b", 128, start_est_s=130, profile="first",
               flags=("--enable-logging-iteration-details",),
               points=(Point("d-in1024-out256-c1", 1024, 256, 1, requests=4, est_s=8),
                       *sweep("d", (8, 32, 128)), *sweep("d", (8, 32), 4096))),
        Engine("mixtral-8x7b-s128", "mixtral-8x7b-v0.1", 128, start_est_s=140, profile="first",
               flags=("--enable-logging-iteration-details",), warmup=(1, 4, 8, 16, 32, 64, 128),
               # dspark's plan: 24-31 ms a step once the batch covers every expert, 26 GFLOP a prompt token; wall
               # 13 / 18 / 32 / 9 s at 8 / 32 / 128 / 1 streams (est: that + the bench's start + a margin)
               points=(Point("x-in1024-out256-c8", 1024, 256, 8, est_s=17),
                       Point("x-in1024-out256-c32", 1024, 256, 32, est_s=23),
                       Point("x-in1024-out256-c128", 1024, 256, 128, est_s=38),
                       Point("x-in1024-out256-c1", 1024, 256, 1, requests=4, est_s=12),
                       Point("x-in4096-out256-c8", 4096, 256, 8, est_s=20))),
    ),
    # issue 25's generalisation check after plan E: a dense shape and MoE points no clock run has had, each point
    # predicted by `dspark advise` before any engine starts (--predict-first; the committed
    # tests/device/results/2026-12-02-clock-F/predictions-before.jsonl is main's code before the run). The dense
    # one is a Qwen3-14B shape (40 layers of 5,120, 17,408 FFN, 40 query heads over 8 KV: 29.5 GB bf16), with
    # vLLM's per-iteration log (millisecond timestamps): which step took which prompts when 4-128 requests land at
    # once (the first step's race, the wait before the first schedule). Then Mixtral-8x7B at the points run E never
    # reached (128 streams; 4,096-token prompts at 1, 8, 32), without the log (its cost is in the engine-core loop),
    # warmed at every batch its points form, the 4k prompts' 8,192-token chunks included (fused-MoE Triton
    # compiles per tile config: run E's profile paid one for 4 x 2,048). Two calls of the same command line
    # (--state): the first's deadline ends it after the dense engine (dspark's plan: walls 9-20 s a point).
    "F": (
        Engine("qwen3-14b-s128", "qwen3-14b", 128, start_est_s=150,
               flags=("--enable-logging-iteration-details",),
               points=(Point("f-in1024-out256-c1", 1024, 256, 1, requests=4, est_s=14),
                       Point("f-in1024-out256-c8", 1024, 256, 8, est_s=12),
                       Point("f-in1024-out256-c32", 1024, 256, 32, est_s=14),
                       Point("f-in1024-out256-c128", 1024, 256, 128, est_s=30),
                       Point("f-in4096-out256-c8", 4096, 256, 8, est_s=14),
                       Point("f-in4096-out256-c32", 4096, 256, 32, est_s=28),
                       Point("f-in1024-out256-c4", 1024, 256, 4, est_s=10),
                       Point("f-in1024-out256-c16", 1024, 256, 16, est_s=12),
                       Point("f-in1024-out256-c64", 1024, 256, 64, est_s=18))),
        Engine("mixtral-8x7b-s128", "mixtral-8x7b-v0.1", 128, start_est_s=150,
               warmup=(1, 4, 8, 16, 32, 64, 128, (8, 4096)),
               points=(Point("x-in1024-out256-c128", 1024, 256, 128, est_s=40),
                       Point("x-in4096-out256-c8", 4096, 256, 8, est_s=22),
                       Point("x-in4096-out256-c32", 4096, 256, 32, est_s=40),
                       Point("x-in4096-out256-c1", 4096, 256, 1, requests=4, est_s=16),
                       Point("x-in1024-out256-c32", 1024, 256, 32, est_s=23),
                       Point("x-in1024-out256-c8", 1024, 256, 8, est_s=17))),
    ),
    "smoke-F": (  # plan F's path against a fake engine, seconds
        Engine("smoke-dense", "qwen3-14b", 8, start_est_s=5, flags=("--enable-logging-iteration-details",),
               points=(Point("s-c2", 64, 8, 2, est_s=5),)),
        Engine("smoke-moe", "mixtral-8x7b-v0.1", 8, start_est_s=5, warmup=(1, (4, 256)),
               points=(Point("x-c4", 64, 8, 4, est_s=5),)),
    ),
    "smoke-E": (  # plan E's path against a fake engine, seconds
        Engine("smoke-first", "qwen3-8b", 8, start_est_s=5, profile="first",
               points=(Point("s-c2", 64, 8, 2, est_s=5),)),
        Engine("smoke-moe", "mixtral-8x7b-v0.1", 8, start_est_s=5, profile="first", warmup=(1, 4),
               flags=("--enable-logging-iteration-details",),
               points=(Point("x-c4", 64, 8, 4, est_s=5),)),
    ),
    # the MoE again after a warm-up at every concurrency: B's 8-stream point paid a fused-MoE JIT (see its README)
    "C": (
        Engine("qwen3-30b-a3b-s128-wide-warmup", "qwen3-30b-a3b", 128, start_est_s=150,
               warmup=(1, 2, 4, 8, 16, 32, 64, 128),
               points=(*sweep("m", (8, 2, 16, 64)), *sweep("m", (8, 32), 4096), *sweep("m", (1, 32, 128)))),
    ),
}


class Log:
    """Timestamped lines to stdout and OUT/log-PLAN.txt."""

    def __init__(self, path: Path, t0: float) -> None:
        self.fh = path.open("a")
        self.t0 = t0

    def __call__(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self.fh.write(line + "\n")
        self.fh.flush()


def gpu_used_mib() -> int:
    if shutil.which("nvidia-smi") is None:
        return -1
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False).stdout.split()
    return int(out[0]) if out else -1


def wait_gpu_free(limit_mib: int = 1024, seconds: float = 60) -> int:
    end = time.monotonic() + seconds
    used = gpu_used_mib()
    while used > limit_mib and time.monotonic() < end:
        time.sleep(1)
        used = gpu_used_mib()
    return used


def dspark_env(src: Path) -> dict[str, str]:
    """dspark from SRC (its subprocesses also run in SRC: `python -m` puts the working directory first)."""
    return dict(os.environ, PYTHONPATH=f"{src}:{DSPARK_SITE}", PYTHONUNBUFFERED="1")


def model_dir(name: str) -> Path:
    out = Path("/tmp/gpu-models") / name
    out.mkdir(parents=True, exist_ok=True)
    text, config = (HERE / "configs" / f"{name}.json").read_text(), out / "config.json"
    if not config.exists() or config.read_text() != text:  # the predictions read it from threads: write it once
        config.write_text(text)
    return out


def get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except Exception as exc:  # not up yet, or gone
        return -1, f"{type(exc).__name__}: {exc}"


def wait_healthy(proc: subprocess.Popen[Any], until: float) -> bool:
    """Poll /health once a second until 200, the engine's exit, or the time given (monotonic)."""
    while time.monotonic() < until:
        if proc.poll() is not None:
            return False
        if get(f"http://127.0.0.1:{PORT}/health", 2)[0] == 200:
            return True
        time.sleep(1)
    return False


def stop(proc: subprocess.Popen[Any]) -> float:
    """SIGINT to the process group, SIGKILL after 20 s; seconds it took."""
    t0 = time.monotonic()
    for sig, wait in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    return round(time.monotonic() - t0, 1)


def prefix_prompts(path: Path, output_len: int) -> None:
    """48 distinct prompts of 3,584-4,608 random token ids (seeded), one JSON line each."""
    rng = random.Random(25)  # noqa: S311 - reproducible prompts, not secrets
    with path.open("w") as fh:
        for _ in range(48):
            ids = [rng.randrange(10, 32000) for _ in range(rng.randint(3584, 4608))]
            fh.write(json.dumps({"prompt": ids, "max_tokens": output_len}) + "\n")


def config_of(eng: Engine, pt: Point, argv: list[str]) -> dict[str, Any]:
    return {"engine_config": eng.name, "model_config": eng.model, "model_config_file": f"configs/{eng.model}.json",
            "engine": "vllm", "engine_version": ENGINE_VERSION, "argv": argv, "engine_flags": [*COMMON, *eng.flags],
            "dspark_options": [*eng.dspark], "seats": eng.seats, "max_num_seqs": eng.seats,
            "max_model_len": eng.max_model_len, "input_len": pt.input_len, "output_len": pt.output_len,
            "concurrency": pt.concurrency, "requests": pt.n, "enforce_eager": "--enforce-eager" in eng.flags,
            "prompts": pt.prompts or "synthetic", "warm_rerun": bool(pt.prompts), "ignore_eos": True,
            "point": pt.name, "seed": 25 if pt.prompts else zlib.crc32(f"{eng.name}/{pt.name}".encode()),
            "gpu": "NVIDIA H200 (one, SXM)", "load_format": "dummy"}


def run_point(eng: Engine, pt: Point, argv: list[str], src: Path, edir: Path, timeout: float,
              log: Log) -> dict[str, Any]:
    base = f"http://127.0.0.1:{PORT}"
    key = f"{eng.name}/{pt.name}"
    cfg = config_of(eng, pt, argv)
    (edir / f"{pt.name}.metrics-before.txt").write_text(get(base + "/metrics")[1])
    cmd = [sys.executable, "-m", "dspark", "bench", "--url", base, "-c", str(pt.concurrency), "-n", str(pt.n),
           "--max-tokens", str(pt.output_len), "--seats", str(eng.seats), "--no-progress", "--json",
           "--out", str(edir / f"{pt.name}.bench.json")]
    if pt.prompts:
        pfile = edir / "prompts.jsonl"
        if not pfile.exists():
            prefix_prompts(pfile, pt.output_len)
        cmd += ["--prompts", str(pfile), "--warm-rerun"]
    else:
        # a seed of its own per point: the same seed would re-send the last point's prompts (prefix-cache hits)
        cmd += ["--input-len", str(pt.input_len), "--prompt-kind", "ids", "--seed", str(zlib.crc32(key.encode()))]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dspark_env(src), cwd=src,
                              timeout=timeout, check=False)
        rc, stderr = proc.returncode, proc.stderr[-3000:]
    except subprocess.TimeoutExpired:
        rc, stderr = 124, f"timed out after {timeout:.0f} s"
    seconds = round(time.monotonic() - t0, 1)
    (edir / f"{pt.name}.metrics-after.txt").write_text(get(base + "/metrics")[1])
    bfile = edir / f"{pt.name}.bench.json"
    bench: dict[str, Any] = json.loads(bfile.read_text()) if bfile.exists() else {}
    bfile.unlink(missing_ok=True)
    record = {"config": cfg, "bench": bench, "bench_rc": rc, "bench_seconds": seconds}
    if rc != 0:
        record["bench_stderr"] = stderr
    (edir / f"{pt.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    summary = bench.get("summary") or {}
    log(f"  {pt.name}: rc {rc} in {seconds} s; agg {summary.get('aggregate_decode_tps')} tok/s, per-stream "
        f"{summary.get('per_stream_decode_tps')}, ttft {summary.get('ttft_mean_s')} s, tpot "
        f"{summary.get('tpot_mean_ms')} ms, wall {summary.get('wall_time_s')} s, warm hits "
        f"{summary.get('warm_prefix_hit_rate')}" + (f"\n{stderr}" if rc else ""))
    return {"config": cfg, "summary": summary, "bench_rc": rc, "file": f"{eng.name}/{pt.name}.json"}


def warm_up(shape: int | tuple[int, int], src: Path) -> int:
    """One untimed bench (no /metrics) of `shape` concurrent streams (or (streams, prompt tokens)); its exit
    status."""
    concurrency, input_len = shape if isinstance(shape, tuple) else (shape, 512)
    cmd = [sys.executable, "-m", "dspark", "bench", "--url", f"http://127.0.0.1:{PORT}", "-c", str(concurrency),
           "-n", str(max(concurrency, 8)), "--input-len", str(input_len), "--max-tokens", "32", "--prompt-kind", "ids",
           "--no-metrics", "--no-progress", "--json", "--seed", str(99 + concurrency + (input_len != 512) * input_len)]
    return subprocess.run(cmd, capture_output=True, text=True, env=dspark_env(src), cwd=src, timeout=120,
                          check=False).returncode


def run_engine(eng: Engine, src: Path, vsite: Path, out: Path, end: float, done: set[str], state: Path,
               log: Log, hook: After) -> dict[str, Any]:
    edir = out / eng.name
    edir.mkdir(parents=True, exist_ok=True)
    mdir = model_dir(eng.model)
    dry_cmd = [sys.executable, "-m", "dspark", "start", "--model", str(mdir), "--engine", "vllm",
               "--engine-version", ENGINE_VERSION, "--max-num-seqs", str(eng.seats), "--max-model-len",
               str(eng.max_model_len), *eng.dspark, "--dry-run", "--json", "--", *COMMON, *eng.flags]
    dry = subprocess.run(dry_cmd, capture_output=True, text=True, env=dspark_env(src), cwd=src, check=False,
                         timeout=120)
    record: dict[str, Any] = {"engine_config": eng.name, "dspark_dry_run": dry_cmd[2:],
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        plan = json.loads(dry.stdout)
    except json.JSONDecodeError:
        record["error"] = f"dspark start --dry-run rc {dry.returncode}: {dry.stdout[-500:]} {dry.stderr[-1500:]}"
        log(record["error"])
        return record
    argv = plan.get("argv")
    record.update(argv=argv, env=plan.get("env"), verdict=plan.get("verdict"),
                  capacity=plan.get("capacity"))
    if not isinstance(argv, list) or argv[:2] != ["vllm", "serve"]:
        record["error"] = f"no vllm argv: {argv}"
        log(record["error"])
        return record
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (plan.get("env") or {}).items()})
    env.update(PYTHONPATH=str(vsite), PATH=f"{vsite}/bin:{env.get('PATH', '')}", VLLM_USE_FLASHINFER_SAMPLER="0",
               HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", PYTHONUNBUFFERED="1",
               VLLM_CACHE_ROOT="/tmp/vcache")
    if "--enable-logging-iteration-details" in argv:
        config = edir / "logging.json"
        config.write_text(json.dumps(LOGGING_CONFIG))
        env["VLLM_LOGGING_CONFIG_PATH"] = str(config)
    engine_argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", *argv[1:], "--host", "127.0.0.1",
                   "--port", str(PORT)]
    record["engine_argv"] = engine_argv[1:]
    log(f"{eng.name}: {' '.join(argv)}")
    t0 = time.monotonic()
    logf = (edir / "engine.log").open("w")
    proc = subprocess.Popen(engine_argv, stdout=logf, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        healthy = wait_healthy(proc, end - RESERVE_S)
        record["seconds_to_healthy"] = round(time.monotonic() - t0, 1) if healthy else None
        record["exited"] = proc.poll()
        log(f"{eng.name}: healthy={healthy} after {time.monotonic() - t0:.1f} s (rc {proc.poll()})")
        if not healthy:
            return record
        record["warmup_rc"] = [warm_up(c, src) for c in eng.warmup]
        record.update(extras(eng, "first", hook, src, edir, end, log))
        points = []
        for pt in eng.points:
            key = f"{eng.name}/{pt.name}"
            if key in done:
                continue
            left = end - RESERVE_S - time.monotonic()
            if left < pt.est_s:
                log(f"  {pt.name}: not started ({left:.0f} s left, needs ~{pt.est_s:.0f})")
                continue
            points.append(run_point(eng, pt, argv, src, edir, min(left, 300), log))
            with (out / "points.jsonl").open("a") as fh:
                fh.write(json.dumps(points[-1]) + "\n")
            if points[-1]["bench_rc"] in (0, 1) and points[-1]["summary"]:
                done.add(key)
                with state.open("a") as fh:
                    fh.write(key + "\n")
        record["points"] = [p["config"]["point"] for p in points]
        record.update(extras(eng, "last", hook, src, edir, end, log))
    finally:
        record["stop_s"] = stop(proc)
        logf.close()
        record["gpu_used_mib_after"] = wait_gpu_free()
        text = (edir / "engine.log").read_text(errors="replace")
        for k, pat in PATTERNS.items():
            m = re.search(pat, text, re.M)
            if m:
                record[k] = m.group(1)
        log(f"{eng.name}: stopped in {record['stop_s']} s, GPU {record['gpu_used_mib_after']} MiB used")
    return record


def run_profile(eng: Engine, src: Path, edir: Path, end: float, log: Log) -> dict[str, Any]:
    """`dspark profile URL --json --out ENGINE/profile.json` against the live engine (bounded); what it did."""
    left = end - RESERVE_S - time.monotonic()
    if left < PROFILE_EST_S:
        log(f"  profile: not started ({left:.0f} s left, needs ~{PROFILE_EST_S})")
        return {"rc": None, "why": f"{left:.0f} s left"}
    base = f"http://127.0.0.1:{PORT}"
    (edir / "profile.metrics-before.txt").write_text(get(base + "/metrics")[1])
    cmd = [sys.executable, "-m", "dspark", "profile", base, "--json", "--out", str(edir / "profile.json")]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dspark_env(src), cwd=src,
                              timeout=min(120.0, left), check=False)
        rc, stderr = proc.returncode, proc.stderr[-3000:]
    except subprocess.TimeoutExpired:
        rc, stderr = 124, "timed out"
    seconds = round(time.monotonic() - t0, 1)
    (edir / "profile.metrics-after.txt").write_text(get(base + "/metrics")[1])
    log(f"  profile: rc {rc} in {seconds} s" + (f"\n{stderr}" if rc else ""))
    return {"rc": rc, "seconds": seconds, **({"stderr": stderr} if rc else {})}


@dataclass
class After:
    """--after: a command run against the live engine `engine` names ("" the plan's first) once its points are done."""

    cmd: tuple[str, ...] = ()
    engine: str = ""
    seconds: float = 120
    ran: bool = False


def run_after(hook: After, edir: Path, end: float, log: Log) -> dict[str, Any]:
    """Run the --after command (no shell) with DSPARK_URL set, output to ENGINE/after.log; its exit status."""
    hook.ran = True
    left = min(hook.seconds, end - RESERVE_S - time.monotonic())
    if left < 10:
        log(f"  after: not started ({left:.0f} s left)")
        return {"rc": None, "why": f"{left:.0f} s left"}
    env = dict(os.environ, DSPARK_URL=f"http://127.0.0.1:{PORT}", DSPARK_AFTER_OUT=str(edir))
    t0 = time.monotonic()
    with (edir / "after.log").open("w") as fh:
        try:
            rc = subprocess.run(list(hook.cmd), stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=left,
                                check=False).returncode
        except (subprocess.TimeoutExpired, OSError) as exc:
            rc = 124 if isinstance(exc, subprocess.TimeoutExpired) else 127
    seconds = round(time.monotonic() - t0, 1)
    log(f"  after: {' '.join(hook.cmd)}: rc {rc} in {seconds} s")
    return {"cmd": list(hook.cmd), "rc": rc, "seconds": seconds}


def extras(eng: Engine, when: str, hook: After, src: Path, edir: Path, end: float, log: Log) -> dict[str, Any]:
    """The profile (before or after the points, as the engine says) and, after them, the --after command."""
    out: dict[str, Any] = {}
    if eng.profile == when:
        out["profile"] = run_profile(eng, src, edir, end, log)
    if when == "last" and hook.cmd and hook.engine in ("", eng.name) and not hook.ran:
        out["after"] = run_after(hook, edir, end, log)
    return out


def advise_argv(cfg: dict[str, Any], model: Path, profile: Path | None) -> list[str]:
    """`dspark advise --json` for a recorded point: tests/advise/test_recorded_gpu.py's predict(), on the model the
    engine served (so a profile of it matches the plan), --calibrate PROFILE when one is given."""
    clients = int(cfg["concurrency"])
    argv = ["advise", "--model", str(model), "--engine", "vllm", "--hardware", "h200", "--engine-version",
            str(cfg.get("engine_version", ENGINE_VERSION)), "--seats", str(cfg.get("seats", clients)),
            "--clients", str(clients), "--requests", str(cfg.get("requests", max(2 * clients, 8))),
            "--input-len", str(cfg["input_len"]), "--output-len", str(cfg["output_len"]),
            "--simulator", "dspark", "--json"]
    if profile is not None:
        argv += ["--calibrate", str(profile)]
    flags = [f for f in cfg.get("engine_flags") or [] if f in PLANNED_FLAGS]
    return [*argv, "--", *flags, "--max-model-len", str(cfg.get("max_model_len", 8192))]


def predict(cfg: dict[str, Any], src: Path, edir: Path, calibrated: bool) -> dict[str, Any]:
    """One point's prediction (ENGINE/POINT.advise[-calibrated].json); {} when there is none."""
    profile = edir / "profile.json"
    if calibrated and not profile.exists():
        return {}
    argv = advise_argv(cfg, model_dir(cfg["model_config"]), profile if calibrated else None)
    proc = subprocess.run([sys.executable, "-m", "dspark", *argv], capture_output=True, text=True,
                          env=dspark_env(src), cwd=src, timeout=300, check=False)
    name = f"{cfg['point']}.advise{'-calibrated' if calibrated else ''}.json"
    (edir / name).write_text(proc.stdout if proc.stdout.strip() else json.dumps({"rc": proc.returncode,
                                                                              "stderr": proc.stderr[-3000:]}))
    try:
        data = json.loads(proc.stdout)
        first = data["predictions"][0]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        return {"rc": proc.returncode, "stderr": proc.stderr[-1500:]}
    out = {m: first.get("ttft_s" if m == "ttft_mean_s" else m) for m in METRICS}
    out.update(tpot_ms=first.get("decode_step_ms"), queue_mean_s=first.get("queue_mean_s"),
               prefill_mean_s=first.get("prefill_mean_s"), rc=proc.returncode,
               warnings=data.get("warnings") or [], argv=argv)
    return out


def errors(measured: dict[str, Any], predicted: dict[str, Any]) -> dict[str, float | None]:
    """(predicted - measured) / measured per figure."""
    out: dict[str, float | None] = {}
    for m in METRICS:
        a, b = measured.get(m), predicted.get(m)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0:
            out[m] = round((b - a) / a, 4)
        else:
            out[m] = None
    return out


def predict_engine(points: list[dict[str, Any]], src: Path, edir: Path, pool: concurrent.futures.Executor,
                   before: dict[str, dict[str, Any]]) -> list[concurrent.futures.Future[dict[str, Any]]]:
    """Queue the predictions of an engine's points (run while the next engine starts); with the figures predicted
    before the run (BEFORE, by point) beside them, and their errors."""
    def one(point: dict[str, Any]) -> dict[str, Any]:
        cfg, summary = point["config"], point["summary"]
        key = f"{cfg['engine_config']}/{cfg['point']}"
        measured = {m: summary.get(m) for m in (*METRICS, "tpot_mean_ms")}
        uncal, cal = predict(cfg, src, edir, False), predict(cfg, src, edir, True)
        out = {"point": key, "measured": measured, "uncalibrated": uncal, "calibrated": cal,
               "error_uncalibrated": errors(measured, uncal),
               "error_calibrated": errors(measured, cal) if cal else None}
        if key in before:
            out.update(before=before[key], error_before=errors(measured, before[key]))
        return out
    return [pool.submit(one, p) for p in points if p.get("summary") and p.get("bench_rc") in (0, 1)]


def source_digest(src: Path) -> str:
    """sha256 of dspark's Python sources under SRC (path and text, sorted): which code made a prediction."""
    digest = hashlib.sha256()
    for path in sorted((src / "dspark").rglob("*.py")):
        digest.update(path.relative_to(src).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def predict_before(plan: tuple[Engine, ...], src: Path, work: Path, pool: concurrent.futures.Executor,
                   log: Log) -> dict[str, dict[str, Any]]:
    """Every point of the plan predicted uncalibrated before any engine starts (the first contact's figures, by
    the code staged in SRC): OUT-work/predictions-before.jsonl and ENGINE/POINT.advise.json under
    predictions-before/; {ENGINE/POINT: prediction}."""
    digest = source_digest(src)
    jobs = []
    for eng in plan:
        edir = work / "predictions-before" / eng.name
        edir.mkdir(parents=True, exist_ok=True)
        for pt in eng.points:
            cfg = config_of(eng, pt, [])
            jobs.append((f"{eng.name}/{pt.name}", cfg, pool.submit(predict, cfg, src, edir, False)))
    out: dict[str, dict[str, Any]] = {}
    with (work / "predictions-before.jsonl").open("w") as fh:
        for key, cfg, fut in jobs:
            try:
                pred = fut.result(timeout=300)
            except Exception as exc:  # recorded as such; the run goes on
                pred = {"error": f"{type(exc).__name__}: {exc}"}
            out[key] = pred
            fh.write(json.dumps({"point": key, "config": cfg, "predicted": pred, "dspark_source_sha256": digest})
                     + "\n")
    log(f"predicted {len(out)} points before the run (dspark sources sha256 {digest[:12]})")
    return out


def engine_cost(eng: Engine, done: set[str]) -> float:
    todo = [p for p in eng.points if f"{eng.name}/{p.name}" not in done]
    first = PROFILE_EST_S if eng.profile == "first" else 0
    return eng.start_est_s + first + (todo[0].est_s if todo else 0) if todo else 0


def collect(futures: list[concurrent.futures.Future[dict[str, Any]]], pool: concurrent.futures.Executor,
            end: float, work: Path, summary: Path, log: Log) -> None:
    """Wait for the predictions (until 10 s before the deadline), write predictions.jsonl and the summary."""
    predictions = []
    for fut in futures:  # the last engine's few points: seconds on 16 cores
        try:
            predictions.append(fut.result(timeout=max(5.0, end - 10 - time.monotonic())))
        except Exception as exc:  # a prediction that failed or ran late is recorded as such
            predictions.append({"error": f"{type(exc).__name__}: {exc}"})
    pool.shutdown(wait=False, cancel_futures=True)
    if predictions:
        with (work / "predictions.jsonl").open("w") as fh:
            fh.writelines(json.dumps(p) + "\n" for p in predictions)
        data = summarise(predictions)
        summary.write_text(json.dumps(data, indent=1) + "\n")
        shutil.copy(summary, work / summary.name)
        log(f"max |error|: {data['max_abs_error']}")
        for row in data["table"]:
            log(f"  {row}")


def summarise(predictions: list[dict[str, Any]]) -> dict[str, Any]:
    """A small summary: per point the four figures measured / uncalibrated / calibrated, and the largest errors."""
    table = []
    worst: dict[str, float] = {"uncalibrated": 0.0, "calibrated": 0.0, "before": 0.0}
    for p in predictions:
        if "point" not in p:
            continue
        row: dict[str, Any] = {"point": p["point"]}
        for m in METRICS:
            row[m] = [p["measured"].get(m), p["uncalibrated"].get(m), (p["calibrated"] or {}).get(m)]
        if p.get("before"):
            row["before"] = {m: p["before"].get(m) for m in METRICS}
        for kind, so_far in worst.items():
            errs = [abs(e) for e in (p.get(f"error_{kind}") or {}).values() if isinstance(e, (int, float))]
            if errs:
                worst[kind] = max(so_far, *errs)
                row[f"max_error_{kind}"] = round(max(errs), 4)
        table.append(row)
    return {"figures": "[measured, uncalibrated, calibrated] per point; before: predicted before the run",
            "metrics": list(METRICS),
            "max_abs_error": worst, "table": table}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True, help="folder holding the dspark package")
    ap.add_argument("--vllm-site", type=Path, required=True, help="pip --target folder of gpu_install.sh")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--plan", required=True, choices=sorted(PLANS))
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--startup", type=int, default=0, help="first run benchmarks/startup.py -n N (0: not)")
    ap.add_argument("--tag", default="", help="names the output files (default: the plan's name)")
    ap.add_argument("--state", type=Path, default=Path("/tmp/gpu-clock-done.txt"))
    ap.add_argument("--after", default="", help="a command (split as a shell would, run without one) to run "
                    "against the live engine once its points are done; DSPARK_URL holds its URL, DSPARK_AFTER_OUT "
                    "a folder for files")
    ap.add_argument("--after-engine", default="", help="the engine of the plan --after runs against (default: the "
                    "first one started)")
    ap.add_argument("--after-s", type=float, default=120, help="the --after command's time limit")
    ap.add_argument("--no-predict", action="store_true", help="do not run dspark advise for the points")
    ap.add_argument("--predict-first", action="store_true", help="predict every point of the plan before any "
                    "engine starts (predictions-before.jsonl in the archive)")
    ap.add_argument("--predict-only", action="store_true", help="only that: predict the plan's points, start "
                    "nothing (OUT/predictions-before-TAG.jsonl)")
    args = ap.parse_args()
    hook = After(tuple(shlex.split(args.after)), args.after_engine, args.after_s)
    t0 = time.monotonic()
    end = t0 + args.deadline_s
    tag = args.tag or args.plan
    work = Path(f"/tmp/gpu-clock-{tag}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = Log(args.out / f"log-{tag}.txt", t0)
    smi = None
    if shutil.which("nvidia-smi") is not None:
        query = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used"
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv", "-l", "1"],
                               stdout=(work / "nvidia-smi.csv").open("w"), stderr=subprocess.DEVNULL)
    if smi is not None:
        (work / "nvidia-smi-q.txt").write_text(subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True,
                                                              check=False).stdout)
    try:
        if args.startup:  # dspark validate against its import floor, live NVML (docs/testing.md, Start-up cost)
            root = args.src.parent if (args.src.parent / "benchmarks").exists() else Path.cwd()
            r = subprocess.run([sys.executable, str(root / "benchmarks" / "startup.py"), "-n", str(args.startup),
                                "--json"], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=DSPARK_SITE),
                               check=False, timeout=150)
            (work / "startup.json").write_text(r.stdout)
            log(f"startup.py -n {args.startup} --json rc {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-800:]}")
        done = set(args.state.read_text().split()) if args.state.exists() else set()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, min(12, (os.cpu_count() or 2) - 2)))
        futures: list[concurrent.futures.Future[dict[str, Any]]] = []
        before: dict[str, dict[str, Any]] = {}
        if args.predict_first or args.predict_only:
            before = predict_before(PLANS[args.plan], args.src.resolve(), work, pool, log)
            shutil.copy(work / "predictions-before.jsonl", args.out / f"predictions-before-{tag}.jsonl")
        for eng in () if args.predict_only else PLANS[args.plan]:
            cost = engine_cost(eng, done)
            if not cost:
                continue
            left = end - RESERVE_S - time.monotonic()
            if left < cost:
                log(f"{eng.name}: not started ({left:.0f} s left, needs ~{cost:.0f})")
                continue
            record = run_engine(eng, args.src.resolve(), args.vllm_site, work, end, done, args.state, log, hook)
            with (work / "engines.jsonl").open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            if not args.no_predict and (work / "points.jsonl").exists():
                rows = [json.loads(line) for line in (work / "points.jsonl").read_text().splitlines()]
                mine = [r for r in rows if r["config"]["engine_config"] == eng.name]
                futures += predict_engine(mine, args.src.resolve(), work / eng.name, pool, before)
        collect(futures, pool, end, work, args.out / f"summary-{tag}.json", log)
    finally:
        if smi is not None:
            smi.terminate()
        if (work / "points.jsonl").exists():
            shutil.copy(work / "points.jsonl", args.out / f"points-{tag}.jsonl")
        with tarfile.open(args.out / f"clock-{tag}.tar.gz", "w:gz") as tar:
            tar.add(work, arcname=f"clock-{tag}")
    log(f"done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
