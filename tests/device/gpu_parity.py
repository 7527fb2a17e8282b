"""`dspark bench` against `vllm bench serve` on one live vLLM 0.25.0 server on the GPU (issue 27, bench parity).

Run there after gpu_install.sh (not collected by pytest), with vLLM importable (PYTHONPATH=/tmp/vsite):

    PYTHONPATH=/tmp/vsite python3 tests/device/gpu_parity.py --src /tmp/gsrc --out $OUT --deadline-s 520

One engine: the Qwen3-8B shape of tests/device/configs (dummy weights, 16 seats, CUDA graphs) with a word-level
tokenizer built here (tokenizers + transformers from the image: one token per word; the words `dspark bench
--prompt-kind text` draws from, then "t<N>" up to the model's vocabulary), so both clients send text prompts of
exactly the drawn lengths and the server tokenizes both. `vllm bench serve` runs in this process, as the CLI runs
it (`vllm.benchmarks.serve.add_cli_args` parses the same argv, `main` runs it: no torch import per run);
`dspark bench` is its own process, from SRC, as users run it. Cases, each on the same server, alternating who
goes first (ABAB), both tools given the same seed (the same numpy length draws and arrival times):

  goodput   closed loop, more streams than seats (requests queue), --range-ratio 0.5, --goodput ttft:X tpot:Y;
            the SLOs are read off an untimed vllm run's per-request TTFT/TPOT, at the widest gap between its
            p50-p80 TTFTs and p80-p95 TPOTs (a threshold where no cluster of requests sits on the edge)
  sweep     `dspark bench --profile sweep` (synchronous, throughput, --sweep-points rates), then vllm at its
            points twice, then dspark at the same points again one by one (ABBA per point)
  open      goodput where 2% can be decided: open loop at half the server's measured 16-stream rate (no queueing),
            short requests (128 in / 16 out, ratio 0.5) for ~20 s a run, one seed, rate and burstiness for both (the
            same lengths and arrival times); an untimed vllm run of it sets SLO_SETS at its percentiles (p50, p75,
            p90 of TTFT, TPOT, E2EL), then --open-rounds rounds D V Dn | Dn V D ... (Dn: dspark --no-metrics),
            each tool given REPORTED_SET and
            every set recomputed from its per-request data (vllm --save-detailed; dspark through
            dspark_records.py), the server's /metrics read before and after each run (its own TTFT, ITL, queue
            time: whether a difference is the server's or the client's); open.json has it all

Output: OUT/parity.tar.gz (parity/: every run's JSON, vllm's --save-detailed; runs.jsonl; comparison.json;
engine.log; nvidia-smi.csv; log.txt) and OUT/log.txt. Anywhere: `python3 tests/device/gpu_parity.py --compare
DIR` prints the comparison of a recorded parity/ folder (tests/bench/test_gpu_parity.py checks it in CI).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DSPARK_SITE = os.environ.get("DSPARK_SITE", "/tmp/dsite")
PORT = 8000
DSPARK_PYTHON = [sys.executable]  # dspark's interpreter (--dspark-python)
PREFIX_CACHING = [False]  # --prefix-caching: the engine's default (on), as the first run on 2026-12-02 had it
MODEL_NAME = "qwen3-8b-parity"
SEATS = 16
# (case, workload): requests, streams, input/output length around which --range-ratio draws, seed.
GOODPUT = {"requests": 256, "concurrency": 32, "input_len": 256, "output_len": 64, "range_ratio": 0.5, "seed": 11}
SWEEP = {"requests": 64, "concurrency": SEATS, "input_len": 256, "output_len": 32, "range_ratio": 0.5, "seed": 13,
         "sweep_points": 3}
GOODPUT_ROUNDS = 4  # pairs: D V | V D | D V | V D
# open: goodput where it can be decided (third run): open loop at half the server's measured closed-loop rate (no
# queueing), short requests so that a run of ~20 s holds many, SLOs at several percentiles of a warm vllm run.
OPEN = {"concurrency": 64, "input_len": 128, "output_len": 16, "range_ratio": 0.5, "seed": 11, "burstiness": 1.0,
        "load": 0.5, "run_s": 20.0, "min_requests": 200, "max_requests": 2000, "capacity_requests": 480}
OPEN_ROUNDS = 4
# SLO sets: name -> {SLO: percentile of the SLO run's per-request figure}; REPORTED is the one both tools are given
# on their command lines (each reports it itself); every set is also recomputed from each tool's per-request data.
SLO_SETS = {"ttft-p50": {"ttft": 50}, "ttft-p90": {"ttft": 90}, "tpot-p50": {"tpot": 50}, "tpot-p90": {"tpot": 90},
            "e2el-p50": {"e2el": 50}, "ttft+tpot-p75": {"ttft": 75, "tpot": 75},
            "ttft+tpot-p90": {"ttft": 90, "tpot": 90}}
REPORTED_SET = "ttft+tpot-p90"
# the server-side histograms read from /metrics before and after each open-loop run (vLLM's names)
SERVER_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                     "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                     "vllm:request_decode_time_seconds", "vllm:inter_token_latency_seconds",
                     "vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
RESERVE_S = 25
# the figures compared, (dspark key, vllm key) -> name; dspark's from its JSON's top level and `summary`
FIGURES = {
    "request_throughput": ("request_throughput", "request_throughput"),
    "request_goodput": ("request_goodput", "request_goodput"),
    "output_throughput": ("output_throughput", "output_throughput"),
    "mean_ttft_ms": ("ttft_ms.mean", "mean_ttft_ms"),
    "p50_ttft_ms": ("ttft_ms.p50", "p50_ttft_ms"),
    "p99_ttft_ms": ("ttft_ms.p99", "p99_ttft_ms"),
    "mean_tpot_ms": ("tpot_ms.mean", "mean_tpot_ms"),
    "p50_tpot_ms": ("tpot_ms.p50", "p50_tpot_ms"),
    "p99_tpot_ms": ("tpot_ms.p99", "p99_tpot_ms"),
    "mean_itl_ms": ("itl_ms.mean", "mean_itl_ms"),
    "p50_itl_ms": ("itl_ms.p50", "p50_itl_ms"),
    "p99_itl_ms": ("itl_ms.p99", "p99_itl_ms"),
    "mean_e2el_ms": ("e2e_ms.mean", "mean_e2el_ms"),
    "output_tokens": ("output_tokens", "total_output_tokens"),
    "input_tokens": ("input_tokens", "total_input_tokens"),
}


class Log:
    def __init__(self, path: Path, t0: float) -> None:
        self.fh = path.open("a")
        self.t0 = t0

    def __call__(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self.fh.write(line + "\n")
        self.fh.flush()


# ---- the comparison (pure; also run in CI on the recorded files) -------------------------------------------------

def _dig(obj: dict[str, Any], dotted: str) -> float:
    cur: Any = obj
    for part in dotted.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return float(cur) if isinstance(cur, (int, float)) and not isinstance(cur, bool) else math.nan


def dspark_figures(result: dict[str, Any]) -> dict[str, float]:
    """The figures of one `dspark bench --json` result (one repetition)."""
    out = {name: _dig(result, d) for name, (d, _v) in FIGURES.items() if not name.endswith("_tokens")}
    if math.isnan(out["request_goodput"]):
        out["request_goodput"] = _dig(result, "goodput.request_goodput")
    out["output_tokens"] = float(sum(r["stats"]["output_tokens"] for r in result.get("reps", [])))
    out["input_tokens"] = float(sum(r["stats"]["prompt_tokens_mean"] * r["stats"]["requests"]
                                    for r in result.get("reps", [])))
    out["errors"] = float(sum(r["stats"]["errors"] for r in result.get("reps", [])))
    return out


def vllm_figures(result: dict[str, Any]) -> dict[str, float]:
    """The figures of one `vllm bench serve --save-result` JSON."""
    out = {name: _dig(result, v) for name, (_d, v) in FIGURES.items()}
    out["errors"] = float(result.get("failed", math.nan))
    return out


def _ratio(x: float, y: float) -> float:
    return x / y if y and not (math.isnan(x) or math.isnan(y)) else math.nan


def compare(runs: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """Per case, point and dspark variant: each figure's mean over the rounds both tools ran, their ratio, and each
    round's ratio (the rounds alternate who goes first, so the means cancel a steady drift of the server).

    runs: runs.jsonl's records {case, point, tool, variant, round, file, rc}; folder: where the files are.
    """
    # (case, point) -> tool -> round -> figures
    groups: dict[tuple[str, str], dict[str, dict[int, dict[str, float]]]] = {}
    for r in runs:
        if r.get("rc") not in (0, 1) or not (folder / r["file"]).exists() or not r.get("round"):
            continue
        data = json.loads((folder / r["file"]).read_text())
        if r["tool"] == "dspark" and data.get("kind") == "dspark-bench-sweep":
            for p in data["points"]:
                groups.setdefault((r["case"], p["label"]), {}).setdefault("dspark", {})[r["round"]] = (
                    dspark_figures(p["result"]))
            continue
        tool = "vllm" if r["tool"] == "vllm" else "dspark" + (f" {r['variant']}" if r.get("variant") else "")
        figs = dspark_figures(data) if r["tool"] == "dspark" else vllm_figures(data)
        groups.setdefault((r["case"], r["point"]), {}).setdefault(tool, {})[r["round"]] = figs
    rows: list[dict[str, Any]] = []
    for (case, point), tools in groups.items():
        theirs = tools.get("vllm", {})
        for tool, ours in sorted(tools.items()):
            rounds = sorted(set(ours) & set(theirs))
            if tool == "vllm" or not rounds:
                continue
            for name in (*FIGURES, "errors"):
                xs, ys = [ours[k][name] for k in rounds], [theirs[k][name] for k in rounds]
                if all(math.isnan(v) for v in xs + ys):
                    continue
                mx, my = statistics.fmean(xs), statistics.fmean(ys)
                rows.append({"case": case, "point": point, "tool": tool, "figure": name, "dspark": mx, "vllm": my,
                             "ratio": _ratio(mx, my), "rounds": rounds,
                             "round_ratios": [_ratio(x, y) for x, y in zip(xs, ys, strict=True)]})
    return {"rows": rows}


def compare_folder(folder: Path) -> dict[str, Any]:
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines() if line.strip()]
    return compare(runs, folder)


def table(cmp: dict[str, Any], figures: tuple[str, ...] = tuple(FIGURES)) -> str:
    lines = [f"{'case':8} {'point':18} {'tool':20} {'figure':20} {'dspark':>11} {'vllm':>11} {'ratio':>7}  per round"]
    for r in cmp["rows"]:
        if r["figure"] in figures:
            lines.append(f"{r['case']:8} {r['point'][:18]:18} {r['tool'][:20]:20} {r['figure']:20} {r['dspark']:11.4g} "
                         f"{r['vllm']:11.4g} {r['ratio']:7.4f}  " + ", ".join(f"{v:.4f}" for v in r["round_ratios"]))
    return "\n".join(lines)


# ---- the open-loop goodput case: each tool's per-request figures, every SLO set, the server's own view ----------

def pct(values: list[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default, vLLM's figures)."""
    v = sorted(values)
    if not v:
        return math.nan
    rank = (len(v) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def vllm_requests(result: dict[str, Any]) -> dict[str, Any]:
    """A `vllm bench serve --save-detailed` run's successful requests as vLLM's calculate_metrics sees them (s):
    TTFT; TPOT = (latency − TTFT) / (output tokens − 1), 0 for one token; latency = TTFT + the ITLs (its
    `most_recent_timestamp − st`); and the duration goodput divides by."""
    reqs = []
    for ttft, itl, n, err in zip(result["ttfts"], result["itls"], result["output_lens"],
                                 result.get("errors") or [""] * len(result["ttfts"]), strict=True):
        if err or not n or ttft is None:
            continue
        latency = ttft + sum(itl)
        reqs.append({"ttft": ttft, "tpot": (latency - ttft) / (n - 1) if n > 1 else 0.0, "e2el": latency})
    return {"duration": float(result["duration"]), "sent": len(result["ttfts"]), "requests": reqs}


def dspark_requests(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """dspark_records.py's first pass as dspark's stats see it (dspark.bench.stats: vllm_latency, good_requests)."""
    first = passes[0]
    reqs = []
    for r in first["records"]:
        if r["error"] is not None or r["first_token"] is None:
            continue
        ttft = r["first_token"] - r["start"]
        latency = (r["last_token"] if r["last_token"] is not None else r["end"]) - r["start"]
        n = r["output_tokens"]
        reqs.append({"ttft": ttft, "tpot": (latency - ttft) / (n - 1) if n > 1 else 0.0, "e2el": latency})
    return {"duration": float(first["wall_time_s"]), "sent": len(first["records"]), "requests": reqs}


def goodput_of(run: dict[str, Any], slos_ms: dict[str, float]) -> tuple[int, float]:
    """Requests meeting every SLO (vLLM's rule: each figure at most its SLO) and those per second of the run."""
    good = sum(all(slo / 1e3 >= r[name] for name, slo in slos_ms.items()) for r in run["requests"])
    return good, good / run["duration"] if run["duration"] > 0 else math.nan


def slo_sets_from(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Every SLO_SETS entry in ms, at its percentiles of the run's per-request figures."""
    return {name: {slo: round(pct([r[slo] * 1e3 for r in run["requests"]], q), 3) for slo, q in spec.items()}
            for name, spec in SLO_SETS.items()}


def metric_sums(text: str) -> dict[str, float]:
    """A Prometheus text exposition's samples summed over their labels, by sample name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def server_view(before: str, after: str) -> dict[str, float]:
    """What the server measured over one run, from /metrics before and after: each SERVER_HISTOGRAMS family's
    mean (ms) and count, and its token and preemption counters."""
    b, a = metric_sums(before), metric_sums(after)
    out: dict[str, float] = {}
    for fam in SERVER_HISTOGRAMS:
        n = a.get(fam + "_count", 0.0) - b.get(fam + "_count", 0.0)
        if n > 0:
            short = fam.removeprefix("vllm:").removesuffix("_seconds")
            out[f"server_{short}_mean_ms"] = (a[fam + "_sum"] - b.get(fam + "_sum", 0.0)) / n * 1e3
            out[f"server_{short}_count"] = n
    for name in ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:num_preemptions_total"):
        if name in a:
            out["server_" + name.removeprefix("vllm:")] = a[name] - b.get(name, 0.0)
    return out


def _spread(xs: list[float]) -> dict[str, float]:
    m = statistics.fmean(xs) if xs else math.nan
    return {"mean": m, "range": (max(xs) - min(xs)) / m if xs and m else math.nan,
            "cv": statistics.stdev(xs) / m if len(xs) > 1 and m else math.nan}


def _open_row(r: dict[str, Any], folder: Path, sets: dict[str, dict[str, float]]) -> dict[str, Any]:
    """One timed run of the open case: its figures, each SLO set's goodput and good fraction, the server's view."""
    data = json.loads((folder / r["file"]).read_text())
    if r["tool"] == "vllm":
        reqs, reported = vllm_requests(data), data.get("request_goodput")
    else:
        reqs = dspark_requests(json.loads((folder / r["records"]).read_text()))
        reported = (data.get("summary") or {}).get("request_goodput")
    tool = r["tool"] + (f" {r['variant']}" if r.get("variant") else "")
    row: dict[str, Any] = {"tool": tool, "round": r["round"], "file": r["file"], "sent": reqs["sent"],
                           "completed": len(reqs["requests"]), "duration_s": reqs["duration"],
                           "request_throughput": len(reqs["requests"]) / reqs["duration"],
                           "reported_goodput": reported}
    for fig in ("ttft", "tpot", "e2el"):
        row[f"mean_{fig}_ms"] = statistics.fmean(q[fig] for q in reqs["requests"]) * 1e3
    for name, slos in sets.items():
        good, rate = goodput_of(reqs, slos)
        row[f"goodput:{name}"] = rate
        row[f"fraction:{name}"] = good / max(len(reqs["requests"]), 1)
    if r.get("metrics_before") and r.get("metrics_after"):
        row.update(server_view((folder / r["metrics_before"]).read_text(),
                               (folder / r["metrics_after"]).read_text()))
    if "server_time_to_first_token_mean_ms" in row:
        # what the client adds to the server's own TTFT (the API server's arrival to its first token out)
        row["client_minus_server_ttft_ms"] = row["mean_ttft_ms"] - row["server_time_to_first_token_mean_ms"]
    return row


def open_report(runs: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """The open-loop goodput case: per timed run each SLO set's goodput (recomputed from the tool's per-request
    data; the reported set also as the tool printed it), latencies client- and server-side; per dspark variant
    (as shipped; --no-metrics), SLO set and figure the dspark / vllm ratio of the means over the rounds both ran,
    each round's ratio, and each tool's own run-to-run spread (range / mean, coefficient of variation) beside the
    binomial noise of its good fraction."""
    slo_run = next((r for r in runs if r["case"] == "open" and r["point"] == "slo" and r.get("rc") == 0), None)
    if slo_run is None:
        return {}
    sets = slo_sets_from(vllm_requests(json.loads((folder / slo_run["file"]).read_text())))
    out_runs = [_open_row(r, folder, sets) for r in runs
                if r["case"] == "open" and r.get("round") and r.get("rc") in (0, 1) and (folder / r["file"]).exists()
                and (r["tool"] == "vllm" or (folder / r.get("records", "-")).exists())]
    figures = sorted({k for row in out_runs for k in row if k.startswith(("goodput:", "mean_", "server_", "client_"))
                      } | {"request_throughput", "reported_goodput", "duration_s"})
    tools = sorted({row["tool"] for row in out_runs})
    by = {t: {row["round"]: row for row in out_runs if row["tool"] == t} for t in tools}
    theirs = by.get("vllm", {})
    variants: dict[str, Any] = {}
    for tool in tools:
        rounds = sorted(set(by[tool]) & set(theirs))
        if tool == "vllm" or not rounds:
            continue
        table_rows: dict[str, Any] = {}
        for fig in figures:
            raw = [by[t][k].get(fig) for t in (tool, "vllm") for k in rounds]
            every_raw = [theirs[k].get(fig) for k in sorted(theirs)]
            if any(not isinstance(v, (int, float)) for v in raw + every_raw):
                continue
            nums = [float(v) for v in raw if isinstance(v, (int, float))]
            every_vllm = [float(v) for v in every_raw if isinstance(v, (int, float))]
            xs, ys = nums[:len(rounds)], nums[len(rounds):]
            entry: dict[str, Any] = {"dspark": _spread(xs), "vllm": _spread(ys),
                                     "vllm_all_runs": _spread(every_vllm),
                                     "ratio": _ratio(statistics.fmean(xs), statistics.fmean(ys)),
                                     "round_ratios": [_ratio(x, y) for x, y in zip(xs, ys, strict=True)]}
            if fig.startswith("goodput:"):
                name = fig.split(":", 1)[1]
                p = statistics.fmean(theirs[k][f"fraction:{name}"] for k in rounds)
                n = statistics.fmean(theirs[k]["completed"] for k in rounds)
                entry["vllm_fraction"] = p
                entry["dspark_fraction"] = statistics.fmean(by[tool][k][f"fraction:{name}"] for k in rounds)
                # one run's good fraction's relative standard deviation were requests independent coin flips
                entry["binomial_rel_sd"] = math.sqrt((1 - p) / (p * n)) if p > 0 and n else math.nan
                # the ratio of the round means' standard error from both tools' run-to-run spread: a set decides
                # the 2% goal when this and the binomial sd are both at most 2% (test_gpu_parity's criterion)
                entry["ratio_se"] = (math.hypot(entry["dspark"]["cv"], entry["vllm"]["cv"]) / math.sqrt(len(rounds))
                                     if len(rounds) > 1 else math.nan)
            table_rows[fig] = entry
        variants[tool] = {"rounds": rounds, "figures": table_rows}
    return {"slo_sets_ms": sets, "reported_set": REPORTED_SET, "runs": out_runs, "variants": variants}


def open_table(rep: dict[str, Any]) -> str:
    if not rep.get("variants"):
        return "open: no timed rounds"
    lines = ["open-loop goodput; SLO sets (ms): " + "; ".join(
        f"{k} " + ",".join(f"{s}:{v:g}" for s, v in d.items()) for k, d in rep["slo_sets_ms"].items())]
    for tool, v in rep["variants"].items():
        lines += [f"{tool} against vllm, rounds {v['rounds']} (vllm range/cv: over every vllm run)",
                  f"{'figure':42} {'dspark':>10} {'vllm':>10} {'ratio':>7}  {'vllm range':>10} {'vllm cv':>8} "
                  f"{'dspark cv':>9} {'binom sd':>8} {'s.e.':>7} {'frac':>6}  per round"]
        for fig, e in v["figures"].items():
            lines.append(f"{fig[:42]:42} {e['dspark']['mean']:10.4g} {e['vllm']['mean']:10.4g} {e['ratio']:7.4f}  "
                         f"{e['vllm_all_runs']['range']:10.4f} {e['vllm_all_runs']['cv']:8.4f} "
                         f"{e['dspark']['cv']:9.4f} {e.get('binomial_rel_sd', math.nan):8.4f} "
                         f"{e.get('ratio_se', math.nan):7.4f} "
                         f"{e.get('vllm_fraction', math.nan):6.3f}  "
                         + ", ".join(f"{x:.4f}" for x in e["round_ratios"]))
    return "\n".join(lines)


def open_folder(folder: Path) -> dict[str, Any]:
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines() if line.strip()]
    return open_report(runs, folder)


# ---- on the device ---------------------------------------------------------------------------------------------

def get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except Exception as exc:
        return -1, f"{type(exc).__name__}: {exc}"


def dspark_env(src: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{src}:{DSPARK_SITE}", PYTHONUNBUFFERED="1")


def dspark_words(src: Path) -> list[str]:
    """The words dspark's synthetic text prompts draw from (its own list, read from SRC)."""
    code = "from dspark.bench.prompts import _WORDS; print(' '.join(_WORDS))"
    out = subprocess.run([DSPARK_PYTHON[0], "-c", code], capture_output=True, text=True, env=dspark_env(src),
                         cwd=src, check=True, timeout=60)
    return out.stdout.split()


def build_model(config: Path, out: Path, words: list[str]) -> dict[str, Any]:
    """config.json plus a word-level tokenizer of exactly the model's vocabulary: 3 specials, dspark's words, t<N>."""
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415 - the image's, only here
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    cfg = json.loads(config.read_text())
    vocab_size = int(cfg["vocab_size"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    names = ["<unk>", "<eos>", "<pad>", *dict.fromkeys(words)]
    names += [f"t{i}" for i in range(vocab_size - len(names))]
    vocab = {w: i for i, w in enumerate(names)}
    assert len(vocab) == vocab_size, (len(vocab), vocab_size)
    unk, eos, pad = names[:3]
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=unk, eos_token=eos, pad_token=pad)
    fast.save_pretrained(str(out))
    probe = " ".join([*words[:5], "t7", "t8"])
    ids = fast(probe, add_special_tokens=False)["input_ids"]
    assert len(ids) == 7 and fast.decode(ids) == probe, (ids, fast.decode(ids))
    return {"vocab_size": vocab_size, "dspark_words": len(set(words)), "probe_ids": ids}


def start_engine(model: Path, vsite: str, log_path: Path, extra: list[str], python: str) -> subprocess.Popen[Any]:
    env = dict(os.environ, PYTHONPATH=vsite, PATH=f"{vsite}/bin:{os.environ.get('PATH', '')}",
               VLLM_USE_FLASHINFER_SAMPLER="0", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               PYTHONUNBUFFERED="1", VLLM_CACHE_ROOT="/tmp/vcache")
    # No prefix caching: each tool re-sends its own prompts run after run (one --seed, the same requests), and on
    # 2026-12-02 every run after a tool's first hit the cache at 97%.
    argv = [python, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--served-model-name", MODEL_NAME,
            "--max-num-seqs", str(SEATS), "--max-model-len", "4096", "--load-format", "dummy", "--host", "127.0.0.1",
            "--port", str(PORT), *([] if PREFIX_CACHING[0] else ["--no-enable-prefix-caching"]), *extra]
    fh = log_path.open("w")
    fh.write(" ".join(argv) + "\n")
    fh.flush()
    return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(proc: subprocess.Popen[Any]) -> float:
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


class Runner:
    """Runs both tools against the server and records each run in runs.jsonl."""

    def __init__(self, work: Path, src: Path, model: Path, log: Log, end: float, vllm_cli: bool) -> None:
        self.work, self.src, self.model, self.log, self.end = work, src, model, log, end
        self.url = f"http://127.0.0.1:{PORT}"
        self.vllm_cli = vllm_cli
        self.serve: Any = None
        self.n = 0

    def left(self) -> float:
        return self.end - RESERVE_S - time.monotonic()

    def record(self, rec: dict[str, Any]) -> None:
        with (self.work / "runs.jsonl").open("a") as fh:
            fh.write(json.dumps(rec) + "\n")

    def scrape_after(self, rec: dict[str, Any], name: str, before: str, requests: int) -> None:
        """Record beside run `name` the /metrics read before it and the one after its `requests` finished."""
        rec["metrics_before"] = before
        rec["metrics_after"] = self.scrape(name.removesuffix(".json") + ".metrics-after.txt", requests,
                                           (self.work / before).read_text())

    def scrape(self, name: str, expect: int = 0, before: str = "") -> str:
        """The server's /metrics into `name`; with `expect`, polled (up to 2 s) until the e2e histogram has
        counted that many requests more than in `before` (a request's figures land as it finishes)."""
        fam = "vllm:e2e_request_latency_seconds_count"
        text = ""
        for _ in range(20):
            status, text = get(self.url + "/metrics")
            if status != 200 or not expect:
                break
            seen = metric_sums(text).get(fam, 0.0) - metric_sums(before).get(fam, 0.0)
            if seen >= expect:
                break
            time.sleep(0.1)
        (self.work / name).write_text(text)
        return name

    def dspark(self, case: str, point: str, args: list[str], variant: str = "", rnd: int = 0,
               timeout: float = 240, records: bool = False, metrics: bool = False) -> dict[str, Any] | None:
        self.n += 1
        name = f"{self.n:03d}-dspark-{case}-{point.replace(' ', '_').replace('/', '')}.json"
        rec_name = name.removesuffix(".json") + ".records.json"
        # with records: dspark_records.py runs dspark's CLI in its process and keeps the per-request records
        head = ([DSPARK_PYTHON[0], str(HERE / "dspark_records.py"), str(self.work / rec_name)] if records
                else [DSPARK_PYTHON[0], "-m", "dspark"])
        cmd = [*head, "bench", "--url", self.url, "--served-model", MODEL_NAME,
               "--no-progress", "--json", "--out", str(self.work / name), *args]
        m_before = self.scrape(name.removesuffix(".json") + ".metrics-before.txt") if metrics else ""
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=dspark_env(self.src), cwd=self.src,
                                  timeout=max(min(timeout, self.left()), 5), check=False)
            rc, err = proc.returncode, proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            rc, err = 124, "timed out"
        secs = round(time.monotonic() - t0, 2)
        rec = {"case": case, "point": point, "tool": "dspark", "variant": variant, "round": rnd, "file": name,
               "argv": cmd[1:], "rc": rc, "seconds": secs}
        if records:
            rec["records"] = rec_name
        data = json.loads((self.work / name).read_text()) if (self.work / name).exists() else None
        if metrics:
            self.scrape_after(rec, name, m_before, int((data or {}).get("requests") or 0))
        if rc:
            rec["stderr"] = err
        self.record(rec)
        summary = (data or {}).get("summary") or {}
        self.log(f"dspark {case}/{point}{' ' + variant if variant else ''}: rc {rc} in {secs} s; req/s "
                 f"{summary.get('request_throughput')}, goodput {summary.get('request_goodput')}"
                 + (f"\n{err}" if rc else ""))
        return data

    def vllm_argv(self, args: list[str], name: str = "unused.json", detailed: bool = True) -> list[str]:
        return ["--backend", "vllm", "--base-url", self.url, "--model", MODEL_NAME, "--tokenizer", str(self.model),
                "--dataset-name", "random", "--ignore-eos", "--disable-tqdm", "--save-result",
                *(["--save-detailed"] if detailed else []), "--percentile-metrics", "ttft,tpot,itl,e2el",
                "--metric-percentiles", "50,99", "--result-dir", str(self.work), "--result-filename", name, *args]

    def vllm_prompts(self, args: list[str], path: Path) -> int:
        """vllm bench serve's own requests for `args` (its parser and get_samples, seeded as its main_async seeds,
        the tokenizer as it loads it) written as a `dspark bench --prompts` file: the text and max_tokens of each,
        in its order. Returns how many."""
        import random  # noqa: PLC0415

        import numpy as np  # noqa: PLC0415 - the image's
        from vllm.benchmarks.datasets import get_samples  # noqa: PLC0415 - only on the device
        from vllm.tokenizers import get_tokenizer  # noqa: PLC0415

        add_cli_args, _main, parser_cls = self.serve
        parser = parser_cls()
        add_cli_args(parser)
        a = parser.parse_args(self.vllm_argv(args))
        random.seed(a.seed)
        np.random.seed(a.seed)
        tok = get_tokenizer(a.tokenizer, tokenizer_mode=a.tokenizer_mode, trust_remote_code=a.trust_remote_code)
        reqs = get_samples(a, tok)
        with path.open("w") as fh:
            for q in reqs:
                fh.write(json.dumps({"prompt": q.prompt, "max_tokens": q.expected_output_len}) + "\n")
        return len(reqs)

    def vllm(self, case: str, point: str, args: list[str], rnd: int = 0,
             detailed: bool = True, metrics: bool = False) -> dict[str, Any] | None:
        self.n += 1
        name = f"{self.n:03d}-vllm-{case}-{point.replace(' ', '_').replace('/', '')}.json"
        m_before = self.scrape(name.removesuffix(".json") + ".metrics-before.txt") if metrics else ""
        argv = self.vllm_argv(args, name, detailed)
        t0 = time.monotonic()
        out_log = self.work / (name.removesuffix(".json") + ".log")
        rc = 0
        if self.vllm_cli:
            with out_log.open("w") as fh:
                try:
                    rc = subprocess.run([sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", *argv],
                                        stdout=fh, stderr=subprocess.STDOUT, timeout=max(self.left(), 5),
                                        check=False).returncode
                except subprocess.TimeoutExpired:
                    rc = 124
        else:
            add_cli_args, main, parser_cls = self.serve
            parser = parser_cls()
            add_cli_args(parser)
            buf = io.StringIO()
            try:
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    main(parser.parse_args(argv))
            except BaseException as exc:
                rc = 1
                buf.write(f"\n{type(exc).__name__}: {exc}\n")
            out_log.write_text(buf.getvalue())
        secs = round(time.monotonic() - t0, 2)
        rec = {"case": case, "point": point, "tool": "vllm", "variant": "", "round": rnd, "file": name,
               "argv": ["vllm", "bench", "serve", *argv], "rc": rc, "seconds": secs,
               "mode": "cli" if self.vllm_cli else "in-process add_cli_args + main"}
        data = json.loads((self.work / name).read_text()) if (self.work / name).exists() else None
        if metrics:
            self.scrape_after(rec, name, m_before, int((data or {}).get("completed") or 0))
        if data is not None and "generated_texts" in data:
            # the random words the model generated: most of the file, and no figure reads them
            data["generated_texts"] = None
            (self.work / name).write_text(json.dumps(data))
        if rc:
            rec["stderr"] = out_log.read_text()[-2000:]
        self.record(rec)
        err = str(rec.get("stderr", ""))
        self.log(f"vllm   {case}/{point}: rc {rc} in {secs} s; req/s {(data or {}).get('request_throughput')}, "
                 f"goodput {(data or {}).get('request_goodput')}" + (f"\n{err[-800:]}" if rc else ""))
        return data


def widest_gap(values: list[float], lo_q: float, hi_q: float) -> float:
    """The middle of the widest gap between consecutive sorted values within the [lo_q, hi_q] quantiles."""
    v = sorted(values)
    i0, i1 = int(lo_q * (len(v) - 1)), int(hi_q * (len(v) - 1))
    best = max(range(i0, i1), key=lambda i: v[i + 1] - v[i])
    return (v[best] + v[best + 1]) / 2


def slos_from(detailed: dict[str, Any]) -> dict[str, float]:
    """TTFT and TPOT SLOs (ms) off a vllm --save-detailed run, as vLLM computes each request's TPOT."""
    ttfts, tpots = [], []
    for ttft, itl, n in zip(detailed["ttfts"], detailed["itls"], detailed["output_lens"], strict=True):
        if ttft is None or not n:
            continue
        ttfts.append(ttft * 1e3)
        tpots.append(sum(itl) / (n - 1) * 1e3 if n > 1 else 0.0)
    return {"ttft": round(widest_gap(ttfts, 0.5, 0.8), 2), "tpot": round(widest_gap(tpots, 0.8, 0.95), 3)}


def synth_dspark(w: dict[str, Any]) -> list[str]:
    return ["-n", str(w["requests"]), "-c", str(w["concurrency"]), "--input-len", str(w["input_len"]),
            "--output-len", str(w["output_len"]), "--range-ratio", str(w["range_ratio"]), "--prompt-kind", "text",
            "--seed", str(w["seed"])]


def synth_vllm(w: dict[str, Any]) -> list[str]:
    return ["--num-prompts", str(w["requests"]), "--random-input-len", str(w["input_len"]), "--random-output-len",
            str(w["output_len"]), "--random-range-ratio", str(w["range_ratio"]), "--seed", str(w["seed"])]


def open_vllm(w: dict[str, Any]) -> list[str]:
    return ["--request-rate", repr(w["rate"]), "--burstiness", repr(w["burstiness"]), "--max-concurrency",
            str(w["concurrency"])]


def open_dspark(w: dict[str, Any]) -> list[str]:
    return ["--request-rate", repr(w["rate"]), "--burstiness", repr(w["burstiness"])]


def slo_args(slos: dict[str, float], tool: str) -> list[str]:
    pairs = [f"{k}:{v}" for k, v in slos.items()]
    return [x for pair in pairs for x in ("--goodput", pair)] if tool == "dspark" else ["--goodput", *pairs]


def run_open(r: Runner, rounds: int, variant_b: str = "no-metrics") -> dict[str, Any]:
    """The open-loop goodput case: measure the server's closed-loop rate on the workload's lengths (dspark, 16
    streams: also the warm-up), then open loop at OPEN["load"] of it for ~run_s seconds, both tools with the same
    seed, rate and burstiness (the same lengths and arrival times), max concurrency far above what is in flight;
    a vllm run of it first (untimed: the SLO sets' percentiles, and vllm's warm-up), then `rounds` rounds
    D V Dn | Dn V D ... (D: dspark as shipped, Dn: --no-metrics, or with variant_b "vllm-prompts" dspark sending
    vllm bench serve's own random-dataset prompts through --prompts), the server's /metrics read before and after
    each timed run."""
    w = OPEN
    info: dict[str, Any] = {}
    cap = r.dspark("open", "capacity", [*synth_dspark({**w, "requests": w["capacity_requests"],
                                                       "concurrency": SEATS, "seed": 1}), "--no-metrics"])
    capacity = float(((cap or {}).get("summary") or {}).get("request_throughput") or 0.0)
    if not capacity > 0:
        r.log("open: the capacity run measured no rate")
        return info
    rate = round(w["load"] * capacity, 2)
    # every round must fit what is left (a slow engine start shortens the runs, not the rounds): 2 runs a round
    # and the SLO run, each some 4 s longer than its arrivals (the tool's start, the last requests, /metrics)
    run_s = max(8.0, min(float(w["run_s"]), (r.left() - 10) / (3 * rounds + 1) - 4))
    n = max(w["min_requests"], min(w["max_requests"], int(rate * run_s)))
    wl = {**w, "requests": n, "rate": rate}
    info["open_workload"] = {**wl, "capacity_req_s": capacity}
    r.log(f"open: capacity {capacity:.2f} req/s at {SEATS} streams; open loop at {rate} req/s, {n} requests")
    slo_run = r.vllm("open", "slo", [*synth_vllm(wl), *open_vllm(wl)], metrics=True)
    if slo_run is None:
        return info
    sets = slo_sets_from(vllm_requests(slo_run))
    info["open_slo_sets_ms"] = sets
    r.log(f"open: SLO sets {sets}")
    reported = sets[REPORTED_SET]
    b_args = ["--no-metrics"]
    if variant_b == "vllm-prompts" and r.serve is None:
        r.log("open: vllm's prompts need vllm bench serve in this process (not --vllm-cli): --no-metrics instead")
        variant_b = "no-metrics"
    if variant_b == "vllm-prompts":
        # the same requests as vllm's, text and lengths: does the server run as it ran for vllm's client?
        theirs = r.work / "vllm-prompts.jsonl"
        count = r.vllm_prompts([*synth_vllm(wl), *open_vllm(wl)], theirs)
        info["vllm_prompts"] = {"file": theirs.name, "requests": count}
        b_args = ["--prompts", str(theirs)]
    per_run = n / rate + 4
    for i in range(rounds):
        if r.left() < 3 * per_run:
            r.log(f"open round {i + 1}: not started ({r.left():.0f} s left)")
            break
        # vllm in the middle; dspark as shipped and with --no-metrics (no /metrics sampling during the run: does
        # its sampler move the server?) alternate first and last, so a steady drift cancels over two rounds
        for variant in (("", "vllm", variant_b) if i % 2 == 0 else (variant_b, "vllm", "")):
            if variant == "vllm":
                r.vllm("open", "open-loop", [*synth_vllm(wl), *open_vllm(wl), *slo_args(reported, "vllm")], i + 1,
                       metrics=True)
                continue
            load = synth_dspark(wl)
            if variant == "vllm-prompts":  # the file's prompts and max_tokens instead of synthetic ones
                load = ["-n", str(wl["requests"]), "-c", str(wl["concurrency"]), "--seed", str(wl["seed"]), *b_args]
            elif variant:
                load = [*load, *b_args]
            r.dspark("open", "open-loop", [*load, *open_dspark(wl), *slo_args(reported, "dspark")],
                     variant, rnd=i + 1, records=True, metrics=True)
    return info


def run_cases(r: Runner, cases: list[str], goodput_rounds: int,  # noqa: PLR0912
              open_rounds: int = OPEN_ROUNDS, open_variant: str = "no-metrics") -> dict[str, Any]:
    info: dict[str, Any] = {}
    if "open" in cases:
        info.update(run_open(r, open_rounds, open_variant))
    if "goodput" not in cases and "sweep" not in cases:
        return info
    # Untimed warm-ups of both clients on the whole goodput workload (other seeds): the server's first runs of a
    # shape are slower (2026-12-02: 19.5 and 22.6 req/s in the first two, then 34.7-36.7), which a single short
    # warm-up did not cover.
    r.dspark("warmup", "warmup", [*synth_dspark({**GOODPUT, "seed": 1}), "--no-metrics"])
    if "goodput" in cases:
        w = GOODPUT
        r.vllm("warmup", "warmup", [*synth_vllm({**w, "seed": 2}), "--max-concurrency", str(w["concurrency"])],
               detailed=False)
        # the SLOs off a warm server's run
        slo_run = r.vllm("slo", "slo", [*synth_vllm({**w, "seed": 3}), "--max-concurrency", str(w["concurrency"])])
        if slo_run is None:
            return info
        slos = slos_from(slo_run)
        info["slos_ms"] = slos
        r.log(f"SLOs from the untimed run: {slos}")
        d_slo = ["--goodput", f"ttft:{slos['ttft']}", "--goodput", f"tpot:{slos['tpot']}"]
        v_slo = ["--goodput", f"ttft:{slos['ttft']}", f"tpot:{slos['tpot']}"]
        per_pair = 2 * 12 + 5
        for i in range(goodput_rounds):
            if r.left() < per_pair:
                r.log(f"goodput round {i + 1}: not started ({r.left():.0f} s left)")
                break
            # shipped dspark (reads /metrics) in rounds 1 and 4, --no-metrics in 2 and 3: both against vllm
            variant = "" if i in (0, 3) else "no-metrics"
            extra = ["--no-metrics"] if variant else []
            order = ("dspark", "vllm") if i % 2 == 0 else ("vllm", "dspark")
            for tool in order:
                if tool == "dspark":
                    r.dspark("goodput", "closed-loop", [*synth_dspark(w), *d_slo, *extra], variant, i + 1)
                else:
                    r.vllm("goodput", "closed-loop", [*synth_vllm(w), "--max-concurrency", str(w["concurrency"]),
                                                      *v_slo], i + 1)
    if "sweep" in cases and r.left() > 60:
        w = SWEEP
        sweep = r.dspark("sweep", "sweep", [*synth_dspark(w), "--profile", "sweep", "--sweep-points",
                                            str(w["sweep_points"])], rnd=1, timeout=200)
        points = (sweep or {}).get("points") or []
        info["sweep_points"] = [{"label": p["label"], "target_rate": p["target_rate"],
                                 "concurrency": p["concurrency"]} for p in points]

        def v_args(p: dict[str, Any]) -> list[str]:
            rate = [] if p["target_rate"] is None else ["--request-rate", repr(p["target_rate"]), "--burstiness", "1"]
            return [*synth_vllm(w), "--max-concurrency", str(p["concurrency"]), *rate]

        def d_args(p: dict[str, Any]) -> list[str]:
            rate = [] if p["target_rate"] is None else ["--request-rate", repr(p["target_rate"]), "--burstiness", "1"]
            return [*synth_dspark({**w, "concurrency": p["concurrency"]}), *rate]

        for rnd, tools in ((1, ("vllm",)), (2, ("vllm", "dspark"))):
            for p in points:
                for tool in tools:
                    if r.left() < 15:
                        r.log(f"sweep {p['label']} {tool} round {rnd}: not started ({r.left():.0f} s left)")
                        continue
                    if tool == "vllm":
                        r.vllm("sweep", p["label"], v_args(p), rnd)
                    else:
                        r.dspark("sweep", p["label"], d_args(p), rnd=rnd)
    return info


def device_main(a: argparse.Namespace) -> int:  # noqa: PLR0912
    t0 = time.monotonic()
    end = t0 + a.deadline_s
    work = Path(a.work) / "parity"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    a.out.mkdir(parents=True, exist_ok=True)
    log = Log(a.out / "log.txt", t0)
    smi = None
    if shutil.which("nvidia-smi"):
        query = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used"
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv", "-l", "1"],
                               stdout=(work / "nvidia-smi.csv").open("w"), stderr=subprocess.DEVNULL)
    proc = None
    meta: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                            "goodput_workload": GOODPUT, "sweep_workload": SWEEP, "seats": SEATS,
                            "engine_extra": a.engine_arg, "config": str(a.config),
                            "prefix_caching": PREFIX_CACHING[0], "open_case": OPEN, "slo_sets": SLO_SETS}
    try:
        model = Path(a.work) / "models" / MODEL_NAME
        meta["tokenizer"] = build_model(a.config, model, dspark_words(a.src))
        log(f"model dir {model}: {meta['tokenizer']}")
        proc = start_engine(model, a.vllm_site, work / "engine.log", a.engine_arg, a.engine_python or sys.executable)
        runner = Runner(work, a.src.resolve(), model, log, end, a.vllm_cli)
        if not a.vllm_cli:
            try:  # while the engine starts
                import vllm  # noqa: PLC0415 - only on the device (PYTHONPATH=/tmp/vsite)
                from vllm.benchmarks.serve import add_cli_args, main  # noqa: PLC0415
                from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

                runner.serve = (add_cli_args, main, FlexibleArgumentParser)
                meta["vllm_version"] = vllm.__version__
            except Exception as exc:
                log(f"vllm.benchmarks.serve not importable here ({type(exc).__name__}: {exc}); the CLI per run")
                runner.vllm_cli = True
        log(f"engine started; vllm bench serve {'CLI' if runner.vllm_cli else 'in-process'} {meta.get('vllm_version')}")
        healthy = False
        while time.monotonic() < end - RESERVE_S and proc.poll() is None:
            if get(f"http://127.0.0.1:{PORT}/health", 2)[0] == 200:
                healthy = True
                break
            time.sleep(1)
        meta["seconds_to_healthy"] = round(time.monotonic() - t0, 1)
        log(f"healthy={healthy} after {meta['seconds_to_healthy']} s (rc {proc.poll()})")
        if healthy:
            meta.update(run_cases(runner, a.cases.split(","), a.goodput_rounds, a.open_rounds, a.open_variant))
    finally:
        if proc is not None:
            meta["stop_s"] = stop(proc)
        if smi is not None:
            smi.terminate()
        if (work / "runs.jsonl").exists():
            try:
                cmp = compare_folder(work)
                (work / "comparison.json").write_text(json.dumps(cmp, indent=1) + "\n")
                log("\n" + table(cmp, ("request_throughput", "request_goodput", "output_throughput",
                                       "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "output_tokens",
                                       "input_tokens")))
            except Exception as exc:
                log(f"comparison failed: {type(exc).__name__}: {exc}")
            try:
                rep = open_folder(work)
                if rep:
                    (work / "open.json").write_text(json.dumps(rep, indent=1) + "\n")
                    log("\n" + open_table(rep))
            except Exception as exc:
                log(f"open-loop report failed: {type(exc).__name__}: {exc}")
        meta["seconds"] = round(time.monotonic() - t0, 1)
        (work / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        shutil.copy(a.out / "log.txt", work / "log.txt")
        with tarfile.open(a.out / "parity.tar.gz", "w:gz") as tar:
            tar.add(work, arcname="parity")
        log(f"done in {time.monotonic() - t0:.0f} s")
    return 0


def main() -> int:
    global PORT  # noqa: PLW0603 - one engine a run, on --port
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", type=Path, help="print the comparison of a recorded parity/ folder and exit")
    ap.add_argument("--src", type=Path, default=HERE.parents[1], help="folder holding the dspark package")
    ap.add_argument("--vllm-site", default="/tmp/vsite", help="PYTHONPATH of the engine")
    ap.add_argument("--engine-python", default="", help="the engine's interpreter (default: this one)")
    ap.add_argument("--dspark-python", default=sys.executable, help="dspark's interpreter (default: this one)")
    ap.add_argument("--engine-arg", action="append", default=[], help="one more argument for vllm serve")
    ap.add_argument("--config", type=Path, default=HERE / "configs" / "qwen3-8b.json")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/parity-out")))
    ap.add_argument("--work", default="/tmp/gpu-parity")
    ap.add_argument("--port", type=int, default=PORT, help="the engine's port on 127.0.0.1")
    ap.add_argument("--deadline-s", type=float, default=520)
    ap.add_argument("--cases", default="goodput,sweep", help="goodput, sweep, open (comma-separated)")
    ap.add_argument("--goodput-rounds", type=int, default=GOODPUT_ROUNDS)
    ap.add_argument("--open-rounds", type=int, default=OPEN_ROUNDS, help="rounds of timed runs of the open case")
    ap.add_argument("--open-variant", choices=("no-metrics", "vllm-prompts"), default="no-metrics",
                    help="the open case's second dspark run each round: --no-metrics (as on 2026-12-02), or "
                         "vllm bench serve's own prompts sent through --prompts (needs vllm in this process)")
    ap.add_argument("--open-load", type=float, default=OPEN["load"],
                    help="the open case's rate as a fraction of the measured 16-stream rate")
    ap.add_argument("--prefix-caching", action="store_true",
                    help="leave the engine's prefix caching on (as the 2026-12-02 run did; every run after a tool's "
                         "first then hits the cache)")
    ap.add_argument("--vllm-cli", action="store_true", help="run `vllm bench serve` as its own process each time")
    ap.add_argument("--small", action="store_true", help="a smoke run's workloads (a CPU engine, a fake server)")
    a = ap.parse_args()
    DSPARK_PYTHON[0] = a.dspark_python
    OPEN["load"] = a.open_load
    PREFIX_CACHING[0] = a.prefix_caching
    PORT = a.port
    if a.compare:
        print(table(compare_folder(a.compare)))
        rep = open_folder(a.compare)
        if rep:
            print(open_table(rep))
        return 0
    if a.small:
        GOODPUT.update(requests=24, concurrency=8, input_len=32, output_len=8)
        SWEEP.update(requests=12, concurrency=4, input_len=32, output_len=8, sweep_points=1)
        OPEN.update(input_len=32, output_len=8, run_s=8.0, min_requests=24, capacity_requests=32, concurrency=16)
    return device_main(a)


if __name__ == "__main__":
    sys.exit(main())
