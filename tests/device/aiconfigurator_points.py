"""aiconfigurator's predictions for the recorded GPU-clock points (run here, in a scratch venv; not dspark's).

Never imported by dspark, and aiconfigurator is no dependency of it.

For each point of a results folder's points.jsonl (gpu_clock.py's output), aiconfigurator 0.12's static-mode
estimate (its per-op H200 tables for vLLM 0.24.0, no run) at batch size = the point's concurrency (capped at the
engine's seats), isl = the prompts' mean length, osl = the output length; and its "agg" mode (a steady-state
average) beside it. A warm re-run point is also estimated with `prefix` = the tokens its warm pass hit, per
prompt. Points aiconfigurator has no model for (`--enforce-eager`: it has no eager mode) are recorded with the
reason and no figures.

    python3 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    HF_HUB_OFFLINE=1 /tmp/aic/bin/python tests/device/aiconfigurator_points.py tests/device/results/2026-12-02-clock

Writes RESULTS/aiconfigurator.json: {"tool", "version", "system", "backend", "backend_version", "points": [...]},
each point {"point": "ENGINE/POINT", "inputs": {...}, "static": {...} | null, "agg": {...} | null, "why": ...};
figures in dspark bench's units: aggregate_decode_tps (tokens/s), per_stream_decode_tps (tokens/s/user),
ttft_mean_s, tpot_mean_ms, request_latency_s, and wall_time_s = ceil(requests / batch) x request latency (one
closed-loop round after another: aiconfigurator has no scheduler, this is the arithmetic a user would do).
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import logging
import math
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

MODELS = {"qwen3-8b": "Qwen/Qwen3-8B", "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",  # configs/NAME.json -> its HF id
          "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",  # aiconfigurator's own spelling (in its model_configs)
          "mixtral-8x7b-v0.1": "mistralai/Mixtral-8x7B-v0.1",
          "qwen3-14b": "Qwen/Qwen3-14B"}  # not among aiconfigurator's configs: the shape's own (tests/device/configs)
MOE = {"qwen3-30b-a3b", "mixtral-8x7b-v0.1"}
SYSTEM, BACKEND, BACKEND_VERSION = "h200_sxm", "vllm", "0.24.0"


def figures(raw: dict[str, Any], requests: int, batch: int) -> dict[str, float]:
    """aiconfigurator's row in dspark bench's units."""
    latency_s = float(raw["request_latency"]) / 1000
    return {"aggregate_decode_tps": float(raw["tokens/s"]), "per_stream_decode_tps": float(raw["tokens/s/user"]),
            "ttft_mean_s": float(raw["ttft"]) / 1000, "tpot_mean_ms": float(raw["tpot"]),
            "request_latency_s": latency_s, "wall_time_s": math.ceil(requests / batch) * latency_s,
            "memory_gib": float(raw["memory"])}


def model_path(model: str) -> str:
    """The HF id aiconfigurator knows, or (an id it has a cached config.json of but not in its default list, e.g.
    Mixtral-8x7B: it would try to download it) a local folder holding that cached config.json."""
    hf = MODELS[model]
    common = importlib.import_module("aiconfigurator_core.sdk.common")
    if hf in common.DefaultHFModels:
        return hf
    cached = importlib.resources.files("aiconfigurator_core") / "model_configs" / f"{hf.replace('/', '--')}_config.json"
    if not cached.is_file():  # a shape aiconfigurator has no config of: the one the engine served
        cached = Path(__file__).resolve().parent / "configs" / f"{model}.json"
    folder = Path(tempfile.gettempdir()) / "aic-models" / hf.replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(cached.read_text())
    return str(folder)


def estimate(cli_estimate: Any, model: str, mode: str, **kw: Any) -> dict[str, Any]:
    extra = {"moe_tp_size": 1, "moe_ep_size": 1} if model in MOE else {}
    r = cli_estimate(model_path(model), SYSTEM, mode=mode, backend_name=BACKEND, backend_version=BACKEND_VERSION,
                     tp_size=1, **extra, **kw)
    return {k: v for k, v in r.raw.items() if isinstance(v, (int, float, str))}


def main() -> int:
    results = Path(sys.argv[1])
    logging.disable(logging.WARNING)
    cli_estimate = importlib.import_module("aiconfigurator.cli.api").cli_estimate  # the scratch venv's

    out: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for line in (results / "points.jsonl").read_text().splitlines():
        p = json.loads(line)
        cfg = p["config"]
        key = f"{cfg['engine_config']}/{cfg['point']}"
        batch = min(cfg["concurrency"], cfg["seats"])
        isl = round(p.get("prompt_tokens_mean") or cfg["input_len"])
        inputs = {"model": MODELS.get(cfg["model_config"]), "batch_size": batch, "isl": isl, "osl": cfg["output_len"],
                  "requests": cfg["requests"]}
        row: dict[str, Any] = {"point": key, "inputs": inputs, "static": None, "agg": None}
        if cfg["model_config"] not in MODELS:
            row["why"] = "no such model in aiconfigurator's model_configs"
        elif cfg["enforce_eager"]:
            row["why"] = "aiconfigurator has no eager mode (it models CUDA-graph steps only)"
        else:
            kw = {"isl": isl, "osl": cfg["output_len"], "batch_size": batch}
            static = estimate(cli_estimate, cfg["model_config"], "static", **kw)
            agg = estimate(cli_estimate, cfg["model_config"], "agg", **kw)
            row["static"] = figures(static, cfg["requests"], batch)
            row["agg"] = figures(agg, cfg["requests"], batch)
            row["static_raw"], row["agg_raw"] = static, agg
            warm = p.get("warm")
            if warm:  # the warm re-run: the prompts' cached prefix, as the engine's /metrics counted it
                prefix = int(isl * warm["engine"]["prefix_hit_rate"])
                inputs["warm_prefix"] = prefix
                row["warm_static"] = figures(estimate(cli_estimate, cfg["model_config"], "static", prefix=prefix,
                                                      **kw), cfg["requests"], batch)
        out.append(row)
        print(f"{key}: {row['static'] and {k: round(v, 4) for k, v in row['static'].items()}} {row.get('why', '')}",
              file=sys.stderr)
    doc = {"tool": "aiconfigurator", "version": version("aiconfigurator"),
           "core_version": version("aiconfigurator-core"), "system": SYSTEM, "backend": BACKEND,
           "backend_version": BACKEND_VERSION, "database_mode": "SILICON",
           "seconds": round(time.monotonic() - t0, 1), "points": out}
    (results / "aiconfigurator.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
