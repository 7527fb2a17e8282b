"""Replan recorded GPU measurements: every bench the device harness recorded on the H200 (vLLM 0.25.0, configs of
tests/device/configs, dummy weights) beside what `dspark advise` predicts for it, uncalibrated.

Each recorded file (tests/device/results/2026-12-02-clock/**/*.json, or the folder DSPARK_CLOCK_RESULTS names)
is {"config": {...}, "bench": <dspark bench --json>} as tests/device/gpu_clock.py writes it, or a bench JSON with
its "config" beside the bench's own keys. config: model_config (a name in tests/device/configs), seats,
input_len, output_len, concurrency, requests, engine_flags, max_model_len, and prompts ("prefix48": the harness's
48 seeded prompts). Each point must land within 10% on aggregate decode, per-stream decode, TTFT mean (or within
20 ms where TTFT is under 200 ms) and wall time, but for the known gaps (KNOWN_GAPS: each with its reason and a
looser bound, still asserted; an entry goes only when its point passes the strict 10%); the table is printed
either way, a figure beyond 10% marked *.

Without the recorded files, the figures measured there are the target: a Qwen3-8B shape, 1,024 + 256 tokens,
2 × streams requests, TPOT 5.2 ms at 1 stream and 18.9 ms at 128 (the issue's 14 ms did not say how many
requests it sent).
"""

from __future__ import annotations

import io
import itertools
import json
import os
import random
import re
import sys
import tarfile
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from dspark.cli import main
from dspark.perf.step import StepCosts, StepShape, cost_table, step_seconds

ROOT = Path(__file__).resolve().parents[2]
# Every recorded clock run (tests/device/results/*-clock*), or the folders DSPARK_CLOCK_RESULTS names (os.pathsep)
RESULTS_DIRS: tuple[Path, ...] = (
    tuple(Path(f) for f in os.environ["DSPARK_CLOCK_RESULTS"].split(os.pathsep)) if os.environ.get(
        "DSPARK_CLOCK_RESULTS") else tuple(sorted((ROOT / "tests" / "device" / "results").glob("*-clock*"))))
CONFIGS = ROOT / "tests" / "device" / "configs"
METRICS = ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s", "wall_time_s")
# Engine flags the plan reads; the rest (dummy weights, no tokenizer) change nothing dspark models.
_PLANNED = ("--enforce-eager", "--max-model-len", "--max-num-batched-tokens", "--kv-cache-dtype",
            "--no-enable-prefix-caching", "--enable-prefix-caching")


def point_name(folder: Path, path: Path) -> str:
    """FOLDER/ENGINE/POINT of a recorded point's file (points/ENGINE/POINT.json under the folder)."""
    return f"{folder.name}/{path.relative_to(folder).as_posix().removeprefix('points/').removesuffix('.json')}"


def recorded() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(FOLDER/ENGINE/POINT, config, bench) of every recorded point with a clean bench."""
    out = []
    for folder in RESULTS_DIRS:
        for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or "config" not in data:
                continue
            bench = data.get("bench", data)
            if not bench.get("summary") or data.get("bench_rc", 0):
                continue
            out.append((point_name(folder, path), data["config"], bench))
    return out


def _engine_flags(config: dict[str, Any]) -> list[str]:
    flags = [str(f) for f in config.get("engine_flags") or []]
    kept: list[str] = []
    for i, flag in enumerate(flags):
        name = flag.split("=", 1)[0]
        if name in _PLANNED:
            kept.append(flag)
            if "=" not in flag and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
                kept.append(flags[i + 1])
    if config.get("max_model_len") and "--max-model-len" not in kept:
        kept += ["--max-model-len", str(config["max_model_len"])]
    return kept


def _prefix_prompts(path: Path, output_len: int) -> None:
    """tests/device/gpu_clock.py's prefix48: 48 prompts of 3,584-4,608 seeded token ids."""
    rng = random.Random(25)  # noqa: S311 - the harness's own seed
    with path.open("w") as fh:
        for _ in range(48):
            ids = [rng.randrange(10, 32000) for _ in range(rng.randint(3584, 4608))]
            fh.write(json.dumps({"prompt": ids, "max_tokens": output_len}) + "\n")


def predict(config: dict[str, Any], tmp: Path, calibrate: Path | None = None) -> dict[str, Any]:
    """`dspark advise --json` for the recorded point, on the H200 profile, dspark's own batching; uncalibrated, or
    with `--calibrate` on a recorded `dspark profile` of the same engine."""
    model = tmp / str(config.get("model_config", "qwen3-8b"))
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / f"{config.get('model_config', 'qwen3-8b')}.json").read_text())
    clients = int(config["concurrency"])
    args = ["advise", "--model", str(model), "--engine", "vllm", "--hardware", "h200", "--engine-version",
            str(config.get("engine_version", "0.25.0")), "--seats", str(config.get("seats", clients)),
            "--clients", str(clients), "--requests", str(config.get("requests", max(2 * clients, 8))),
            "--input-len", str(config["input_len"]), "--output-len", str(config["output_len"]),
            "--simulator", "dspark", "--json"]
    if str(config.get("prompts", "synthetic")).startswith("prefix"):
        prompts = tmp / "prefix48.jsonl"
        _prefix_prompts(prompts, int(config["output_len"]))
        args += ["--workload", str(prompts)]
    if calibrate is not None:
        args += ["--calibrate", str(calibrate)]
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main([*args, "--", *_engine_flags(config)])
    data = json.loads(buf.getvalue())
    assert rc == 0, data
    prediction: dict[str, Any] = data["predictions"][0]
    prediction["ttft_mean_s"] = prediction["ttft_s"]
    prediction["warnings"] = data.get("warnings") or []
    return prediction


# What the model does not follow yet, each with its own looser bound (still asserted, so a regression shows) and the
# reason; every other (point, metric) is held to 10%. (point substring, metric or "*", bound, why)
KNOWN_GAPS: tuple[tuple[str, str, float, str], ...] = (
    ("qwen3-30b-a3b-s128/m-in1024-out256-c8", "*", 0.90,
     "a one-time fused-MoE Triton JIT during the run (the harness's README; re-measured as -wide-warmup)"),
    ("qwen3-30b-a3b-s128/m-in1024-out256-c32", "ttft_mean_s", 0.65,
     "the first MoE run's JIT again: the same point after a warm-up at every concurrency measured 0.371 s, not 0.809"),
    ("qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c64", "*", 0.30,
     "the GPU sat idle about 2 s mid-run (nvidia-smi.csv: 42%, 0%, 0%, 73% utilisation as the second wave's prompts "
     "came): a fused-MoE Triton compile for a batch the one-wave warm-up never formed, not a steady cost"),
    ("qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c128", "*", 0.22,
     "the same 2 s of idle GPU mid-run (0% in two samples); run B's same point, without it, is within 2% on "
     "aggregate and wall"),
    ("qwen3-30b-a3b-s128/m-in1024-out256-c128", "ttft_mean_s", 0.18,
     "the MoE's 128-stream TTFT: its requests wait longer before their first schedule than the model's (queue plus "
     "input wait 0.570 s), its prefill within 7% (0.255 against 0.240 s). Not the clock: its first wave's prompt "
     "stretch sampled 1,650-1,710 MHz (run C's: 1,710-1,785), its second 1,485-1,545: at or above the dense models' "
     "~1,450-1,500 at the cap, so its prompt steps' GPU time is if anything shorter than priced. FlashAttention-3's "
     "rate by the keys a query attends to (aiconfigurator's H200 table: 0.32 of peak at 1k prompts, 0.54 at 4k, the "
     "model's flat 0.62) prices its 1k prompts' attention (a larger share of its step than the 8B's) slower: -13.6%, "
     "tried with the clock at 0.82 (docs/advise.md) and not kept"),
    ("2026-12-02-clock/qwen3-8b-s128/d-in1024-out256-c32", "ttft_mean_s", 0.14,
     "run A's 32-stream TTFT: its requests waited 0.217 s before their first schedule (queue plus input wait) "
     "against run D's 0.172 and E's 0.136 for the same argv, the model 0.142; their prefill matches (0.333 against "
     "0.337 s): D is -1.1% and E +5.5% (run-to-run, not the shape); nor the first step's count: with eight first "
     "(as run F's log has at 32 streams) the model gives -12.3%"),
    ("qwen3-8b-s128/d-in4096-out256-c8", "ttft_mean_s", 0.14,
     "the second wave's successors race one decode step: two requests end a step, their round trip (the API "
     "server's streaming, 7-8 ms to the access log at 8 streams in run F) against the 6-ms step after: in run E's "
     "per-iteration log they missed it and went into the prompt step after (one decode row and two 4k prompts, as "
     "the model has them: E +3.2%); runs A and D's shorter prefill (0.374 / 0.368 s against E's 0.404, prompt "
     "steps alike) says theirs made it (the model's earlier, hop-only round trip: +3% / +5%). The model's 8,192-"
     "token steps of two 4k prompts are also 215 ms against the 198-209 E logged (the step's cost): not the "
     "clock, whose samples in these prompt steps read 1,515-1,650 MHz in A, D and E alike, but the power limiter's "
     "lag: a 4k wave's first prompt steps after decode ran 199 ms (E, median of 9), the steady ones of 32 x 4k 207, "
     "the model 215 for both (test_the_prompt_steps_beside_the_clock), which a step's price without the steps before "
     "it cannot hold"),
    ("qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c2", "ttft_mean_s", 0.85,
     "the first step's race the other way: the engine took both requests of each wave in one step "
     "(vllm:iteration_tokens_total), the model the first alone, and MoE prompt steps are launch-bound (~85 ms of "
     "CPU for ~30 of GPU), so the second waits a whole step, and the first's first token too (taken once the next "
     "step is launched, dspark.advise.model._Pipeline): +79%; at the logged two the model gives 0.091 s (-4.8%; "
     "LOGGED_FIRST_STEP), the 8B's two-stream points, one run taking both and one alone, within 20 ms either way; "
     "the expected value over the logged outcomes (+24% here) was not taken: it puts three other points beyond their "
     "bounds"),
    ("clock-E/qwen3-8b-s128/d-in1024-out256-c8", "ttft_mean_s", 0.12,
     "run E's per-iteration log costs the engine-core loop: its one-stream TTFT is 15 ms above run D's (0.047 s "
     "against 0.032) and this point 0.200 s against D's 0.181 for the same argv; the steps are as modelled (each "
     "wave's first step holds one request, then seven, in the log and the model): 19.6 ms under uncalibrated, "
     "within the 20, and 20.8 under calibrated (CALIBRATED_GAPS)"),
    ("clock-F/qwen3-14b-s128/f-in1024-out256-c32", "ttft_mean_s", 0.19,
     "a one-time stall at the engine's first 8,192-token prompt steps (no warm-up or profile had formed one: plan F "
     "profiles nothing; GPU memory used grew 544 MiB at that instant, nvidia-smi.csv): the burst's first step was "
     "logged 713 ms after its first request's access-log line against 395 at 128 streams, and its loop ran 360-380 "
     "ms a step without waiting on the GPU; rebuilt from the log's steps with the 128-stream point's start the "
     "point is 0.903 s (model now 0.894, -1.0%), with its own 1.064 (measured 1.091). First contact, predicted before "
     "the run: -19.4%"),
    ("qwen3-8b-s128-eager/e-in1024-out256-c32", "*", 0.25,
     "eager steps at 1-8 streams run slow in stretches of seconds, whole requests at a time (nvidia-smi.csv of "
     "clock-B: 15-21% GPU utilisation for 5-10 s, 26-41% between; gaps p50 18.4 ms, p90 33.4 at one stream), not "
     "at 32 (p50 17.4, p90 18.9): the undisturbed eager step is ~17.5 ms at 1-32 streams (the median gaps), and the "
     "one launch cost, fitted to the one-stream mean with its slow stretches, is too slow at 32"),
)


def _bound(name: str, metric: str) -> tuple[float, str]:
    """The error a (point, metric) is held to (the widest known gap that applies), and why when it is not 10%."""
    matching = [(bound, why) for point, which, bound, why in KNOWN_GAPS if point in name and which in ("*", metric)]
    return max(matching, default=(0.10, ""))


def _error(metric: str, predicted: float, measured: float) -> float:
    """Relative error; TTFT under 200 ms counts as within 10% when within 20 ms."""
    if metric == "ttft_mean_s" and measured < 0.2:
        return 0.0 if abs(predicted - measured) <= 0.020 else (predicted - measured) / measured
    return (predicted - measured) / measured


def test_recorded_gpu_points_are_replanned_within_10_percent(tmp_path: Path) -> None:
    points = recorded()
    if not points:
        _issue_targets(tmp_path)
        return
    rows: list[str] = []
    misses: list[str] = []
    gaps: list[str] = []
    for name, config, bench in points:
        pred = predict(config, tmp_path)
        summary = bench["summary"]
        cells = []
        for metric in METRICS:
            measured = summary.get(metric)
            if not isinstance(measured, (int, float)) or measured <= 0:
                cells.append("–")
                continue
            err = _error(metric, float(pred[metric]), float(measured))
            bound, why = _bound(name, metric)
            cells.append(f"{measured:,.4g} / {pred[metric]:,.4g} ({err:+.0%})" + ("*" if abs(err) > 0.10 else ""))
            if abs(err) > 0.10:
                (misses if abs(err) > bound else gaps).append(
                    f"{name} {metric}: measured {measured:.4g}, predicted {pred[metric]:.4g} ({err:+.1%})"
                    + (f", within its known gap of {bound:.0%}: {why}" if abs(err) <= bound else ""))
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    print("\n| point | " + " | ".join(f"{m} measured / predicted" for m in METRICS) + " |")
    print("|---|" + "---|" * len(METRICS))
    print("\n".join(rows))
    print(f"\n{len(gaps)} figure(s) beyond 10% within a known gap (*):\n" + "\n".join(gaps))
    assert not misses, "\n".join(misses)


def _issue_targets(tmp_path: Path) -> None:
    """No recorded files here: the H200 TPOT figures (1,024 + 256, 2 × streams requests, as the harness sends)."""
    tpot = {}
    for streams in (1, 8, 32, 128):
        config = {"model_config": "qwen3-8b", "seats": 128, "concurrency": streams, "input_len": 1024,
                  "output_len": 256, "requests": max(2 * streams, 8), "max_model_len": 8192}
        pred = predict(config, tmp_path)
        tpot[streams] = 1e3 / pred["per_stream_decode_tps"]
    print("\nH200, Qwen3-8B shape, TPOT predicted (ms): "
          + ", ".join(f"{n} streams {t:.2f}" for n, t in tpot.items()) + "; measured 5.2 at 1, 18.9 at 128")
    assert tpot[1] == pytest.approx(5.2, rel=0.10)
    assert tpot[1] < tpot[8] < tpot[32] < tpot[128]
    # At 128 streams each request's 1,024-token prompt (~14 TFLOP, ~20 ms) lands in the decode steps of the streams
    # already running. The issue's 14 ms did not record its request count; the device harness's run (256
    # requests, 2026-12-02) measured 18.92 ms mean TPOT.
    assert tpot[128] == pytest.approx(18.9, rel=0.10)


# Where aiconfigurator 0.12 (its H200 kernel tables for vLLM 0.24, static mode: tests/device/aiconfigurator_points.py)
# is closer to the measurement than dspark uncalibrated by more than half a point and dspark is beyond 5%: each with
# dspark's bound there (still asserted) and the reason. (point substring, metric, bound on dspark's error, why)
AIC_CLOSER: tuple[tuple[str, str, float, str], ...] = (
    ("2026-12-02-clock/qwen3-30b-a3b-s128/m-in1024-out256-c32", "ttft_mean_s", 0.65,
     "the first MoE run's Triton JIT in the measurement (KNOWN_GAPS): both miss by half (dspark -57%, aiconfigurator "
     "-52%); the same point after a warm-up at every concurrency, 0.371 s, dspark -5%, aiconfigurator +5%"),
    ("qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c2", "ttft_mean_s", 0.85,
     "the first step's race (KNOWN_GAPS): the engine took both requests of each wave in one step, the model the "
     "first alone, so the second waits for the first's launch-bound MoE prompt step (dspark +79%); aiconfigurator "
     "prices one prompt with no intake at all (-59%)"),
    ("qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c64", "ttft_mean_s", 0.30,
     "the 2 s of idle GPU mid-run (KNOWN_GAPS) lengthen the measured TTFT (dspark -24%); aiconfigurator's static "
     "batch overprices it (+21%)"),
)


AIC_CLOSER_ORIGINAL = AIC_CLOSER


def _aic_static() -> dict[str, dict[str, Any]]:
    """FOLDER/ENGINE/POINT -> aiconfigurator's static-mode figures, from each results folder's aiconfigurator.json."""
    out: dict[str, dict[str, Any]] = {}
    for folder in RESULTS_DIRS:
        doc = folder / "aiconfigurator.json"
        if doc.is_file():
            for point in json.loads(doc.read_text())["points"]:
                if point.get("static"):
                    out[f"{folder.name}/{point['point']}"] = point["static"]
    return out


def _aic_comparison(tmp_path: Path) -> tuple[list[str], list[str], list[str], int]:
    """(table rows, figures where aiconfigurator is closer, those not allowed, figures compared)."""
    aic = _aic_static()
    rows: list[str] = []
    closer: list[str] = []
    misses: list[str] = []
    figures = 0
    for name, config, bench in recorded():
        if name not in aic:
            continue
        pred = predict(config, tmp_path)
        cells = []
        for metric in METRICS:
            measured = float(bench["summary"][metric])
            ours = _error(metric, float(pred[metric]), measured)
            theirs = _error(metric, float(aic[name][metric]), measured)
            figures += 1
            cells.append(f"{measured:,.4g} / {pred[metric]:,.4g} ({ours:+.0%}) / aic {theirs:+.0%}")
            if abs(ours) <= abs(theirs) + 0.005:
                continue
            closer.append(f"{name} {metric}: dspark {ours:+.1%}, aiconfigurator {theirs:+.1%}")
            if abs(ours) <= 0.05:
                continue
            listed = [bound for point, which, bound, _ in AIC_CLOSER if point in name and which == metric]
            if not listed or abs(ours) > listed[0]:
                misses.append(closer[-1] + (f", beyond its listed bound {listed[0]:.0%}" if listed else ""))
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows, closer, misses, figures


def test_never_worse_than_aiconfigurator_where_it_has_data(tmp_path: Path) -> None:
    """Issue 25: dspark uncalibrated is never further from the measurement than aiconfigurator on the points where
    aiconfigurator has data, but where dspark is within 5% (the calibrated goal; counted and printed) and the
    AIC_CLOSER entries (each bounded). Prints the side-by-side table: measured / dspark (error) / aiconfigurator."""
    rows, closer, misses, figures = _aic_comparison(tmp_path)
    if not figures:
        return  # results folders without aiconfigurator's figures (DSPARK_CLOCK_RESULTS)
    print("\n| point | " + " | ".join(f"{m}: measured / dspark / aiconfigurator" for m in METRICS) + " |")
    print("|---|" + "---|" * len(METRICS))
    print("\n".join(rows))
    print(f"\naiconfigurator closer by more than half a point on {len(closer)} of {figures} figures:\n"
          + "\n".join(closer))
    assert figures >= 200, figures  # runs A, D, E and F: every point but the eager ones (no eager mode there)
    assert not misses, "\n".join(misses)


def test_a_figure_aiconfigurator_gets_closer_beyond_5_percent_fails_unless_listed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AIC_CLOSER every listed figure is a miss, and a listed bound tighter than the error is one too."""
    if not _aic_static():
        return  # DSPARK_CLOCK_RESULTS names folders without aiconfigurator's figures
    monkeypatch.setattr(sys.modules[__name__], "AIC_CLOSER", ())
    _, _, misses, _ = _aic_comparison(tmp_path)
    assert len(misses) == len(AIC_CLOSER_ORIGINAL) and all("beyond" not in m for m in misses)
    tight = tuple((point, metric, 0.01, why) for point, metric, _, why in AIC_CLOSER_ORIGINAL)
    monkeypatch.setattr(sys.modules[__name__], "AIC_CLOSER", tight)
    _, _, misses, _ = _aic_comparison(tmp_path)
    assert len(misses) == len(AIC_CLOSER_ORIGINAL) and all("beyond its listed bound 1%" in m for m in misses)


def test_the_replanning_reads_the_harness_records_and_catches_a_miss(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A record in gpu_clock.py's layout is read and replanned; 5% off passes, 30% off is named as a miss."""
    config = {"model_config": "qwen3-8b", "seats": 128, "concurrency": 8, "input_len": 1024, "output_len": 256,
              "requests": 16, "max_model_len": 8192, "engine_flags": ["--load-format", "dummy",
                                                                      "--skip-tokenizer-init"]}
    pred = predict(config, tmp_path)
    results = tmp_path / "run-clock" / "points" / "qwen3-8b-s128"
    results.mkdir(parents=True)
    monkeypatch.setattr(__import__(__name__, fromlist=["RESULTS_DIRS"]), "RESULTS_DIRS", (tmp_path / "run-clock",))
    for scale, ok in ((1.05, True), (1.3, False)):
        summary = {m: pred[m] * scale for m in METRICS}
        (results / "d-c8.json").write_text(json.dumps({"config": config, "bench": {"summary": summary},
                                                       "bench_rc": 0}))
        assert [name for name, _, _ in recorded()] == ["run-clock/qwen3-8b-s128/d-c8"]
        if ok:
            test_recorded_gpu_points_are_replanned_within_10_percent(tmp_path)
        else:
            with pytest.raises(AssertionError, match=r"d-c8 aggregate_decode_tps"):
                test_recorded_gpu_points_are_replanned_within_10_percent(tmp_path)


# The engine's own histograms in each archive's /metrics snapshots (before and after every point).
_HISTOGRAMS = ("request_queue_time_seconds", "request_prefill_time_seconds", "time_to_first_token_seconds")
_SAMPLE = re.compile(r"^vllm:(\w+)_(sum|count)\{[^}]*\} (\S+)$", re.MULTILINE)
# Points whose engine time a one-time Triton JIT set (KNOWN_GAPS), those whose snapshots span two passes, and run
# D's 4 streams, whose waves went into one step each (the first step's race, KNOWN_GAPS): its prefill is one
# 4,096-token step (0.096 s), the model's two steps of two (0.067).
_NOT_STEADY = ("qwen3-30b-a3b-s128/m-in1024-out256-c8", "qwen3-30b-a3b-s128/m-in1024-out256-c32",
               "wide-warmup/m-in1024-out256-c64", "wide-warmup/m-in1024-out256-c128", "prefix48",
               "clock-D/qwen3-8b-s128/d-in1024-out256-c4",
               # the first step's race the other way: both of each wave in one step, the model the first alone
               "wide-warmup/m-in1024-out256-c2",
               # run F's first 8,192-token prompt steps stalled the engine core ~0.3 s (KNOWN_GAPS)
               "clock-F/qwen3-14b-s128/f-in1024-out256-c32")


# Where the model's requests wait less than the engine's before their first schedule: at 32 streams run A's and
# Llama's waves (KNOWN_GAPS; engine 0.216 / 0.219 s, model 0.142), and at 8-16 streams the first step's race: each
# wave's first step holds one request, the rest wait for the next, which the engine fixed only once that
# 1,024-token step (no CUDA graph above 256 tokens) was launched from the CPU: engine 0.030-0.076 s, the model
# (its CPU path of that step, 21 ms) 0.009-0.019; their TTFT is within 10% (E's 8 streams: KNOWN_GAPS).
_WAIT_GAPS = {"qwen3-8b-s128/d-in1024-out256-c16": 0.85, "qwen3-8b-s128/d-in1024-out256-c32": 0.45,
              "llama-3.1-8b-s128/l-in1024-out256-c32": 0.45,
              "qwen3-8b-s128-eager/e-in1024-out256-c32": 0.35,
              "clock-E/qwen3-8b-s128/d-in1024-out256-c8": 0.80, "llama-3.1-8b-s128/l-in1024-out256-c8": 0.80,
              "clock-F/qwen3-14b-s128/f-in1024-out256-c8": 0.80, "clock-F/qwen3-14b-s128/f-in1024-out256-c16": 0.80}
# Where the model's prefill is off beyond 20%: Mixtral's prompt steps (run E; KNOWN_GAPS): 0.869 s against 0.692;
# and 16 streams, where run F's first step held four requests, then eight (its log), the model one, then eight:
# its first wave's prefill a step longer, its wait shorter (F's TTFT +6.9%; given four, +0.5%).
_PREFILL_GAPS = {"clock-E/mixtral-8x7b-s128/x-in1024-out256-c32": 0.30, "qwen3-8b-s128/d-in1024-out256-c16": 0.25,
                 "clock-F/qwen3-14b-s128/f-in1024-out256-c16": 0.25}


def snapshots() -> dict[str, dict[str, str]]:
    """FOLDER/ENGINE/POINT -> {"before": /metrics text, "after": ...}, from the clock-*.tar.gz archives."""
    out: dict[str, dict[str, str]] = {}
    for folder in RESULTS_DIRS:
        for archive in sorted(folder.glob("clock-*.tar.gz")) if folder.is_dir() else []:
            with tarfile.open(archive) as tar:
                for member in tar.getmembers():
                    m = re.search(r"([^/]+/[^/]+)\.metrics-(before|after)\.txt$", member.name)
                    handle = tar.extractfile(member) if m else None
                    if m and handle is not None:
                        out.setdefault(f"{folder.name}/{m.group(1)}", {})[m.group(2)] = handle.read().decode()
    return out


def engine_split() -> dict[str, dict[str, float]]:
    """FOLDER/ENGINE/POINT -> the mean of each histogram over the point (after - before), from the clock-*.tar.gz."""
    out: dict[str, dict[str, float]] = {}
    for point, pair in snapshots().items():
        if set(pair) != {"before", "after"}:
            continue
        values = [{(name, kind): float(v) for name, kind, v in _SAMPLE.findall(pair[when])} for when in
                  ("before", "after")]
        means = {}
        for name in _HISTOGRAMS:
            count = values[1].get((name, "count"), 0.0) - values[0].get((name, "count"), 0.0)
            if count > 0:
                means[name] = (values[1][(name, "sum")] - values[0].get((name, "sum"), 0.0)) / count
        out[point] = means
    return out


def test_ttft_splits_as_the_engine_splits_it(tmp_path: Path) -> None:
    """The model's prefill (first scheduled to first token) against vLLM's request_prefill_time_seconds, and its
    wait before the first schedule against the engine's queue time plus the wait before the scheduler has the
    request (time_to_first_token - queue - prefill), at every steady point: within 20% (or 20 ms)."""
    split = engine_split()
    points = [(name, config) for name, config, _ in recorded()]
    if not any(f.is_dir() and list(f.glob("clock-*.tar.gz")) for f in RESULTS_DIRS):
        return  # results folders without the archives (DSPARK_CLOCK_RESULTS): nothing to split
    assert split and points
    rows, misses = [], []
    for point, config in points:
        engine = split.get(point, {})
        if "request_prefill_time_seconds" not in engine:
            continue
        pred = predict(config, tmp_path)
        prefill = engine["request_prefill_time_seconds"]
        wait = engine["time_to_first_token_seconds"] - prefill
        queue = engine["request_queue_time_seconds"]
        rows.append(f"| {point} | {queue:.3f} + {wait - queue:.3f} / {pred['queue_mean_s']:.3f} | {prefill:.3f} / "
                    f"{pred['prefill_mean_s']:.3f} |")
        if any(p in point for p in _NOT_STEADY):
            continue
        for what, measured, predicted in (("prefill", prefill, pred["prefill_mean_s"]),
                                          ("wait", wait, pred["queue_mean_s"])):
            gaps = _WAIT_GAPS if what == "wait" else _PREFILL_GAPS
            bound = next((b for k, b in gaps.items() if k in point), 0.20)
            if abs(predicted - measured) > max(bound * measured, 0.020):
                misses.append(f"{point} {what}: engine {measured:.3f} s, model {predicted:.3f} s")
    print("\n| point | queue + input wait: engine / model | prefill: engine / model |\n|---|---|---|")
    print("\n".join(rows))
    assert rows and not misses, "\n".join(misses)


# The first step of an idle engine: how many requests of a burst it takes (docs/advise.md, "When a step's batch is
# fixed, and when a request reaches it"). vllm:iteration_tokens_total counts a step's tokens as its finished prompts'
# lengths plus the tokens it sampled, so at 1,024-token prompts and 2-8 streams (2 x streams requests, 8 at most
# four streams: every prompt in one step of the 8,192-token budget) a prompt step's bucket says how many prompts it
# held: a prompts beside r decode rows are 1,025 a + r tokens. Each entry: the first step's count in each wave that
# started from an idle engine, read back by test_the_first_steps_counts_are_the_logged_ones. The buckets tell 1,
# 2-3, 4-7 and 8 apart (2 stands for 2-3, 4 for 4-7; run F's per-iteration log has exactly 2 at 4 streams), and not
# a wave split a | N - a from N - a | a: where the order shows (runs E and F's per-iteration logs: 1 | 7 at 8 streams)
# the smaller came first, as the mechanism has it (the API server hands the first request over ahead of the rest).
LOGGED_FIRST_STEP: dict[str, tuple[int, ...]] = {
    "2026-12-02-clock/qwen3-8b-s128/d-in1024-out256-c2": (2, 2, 2, 2),
    "2026-12-02-clock/qwen3-8b-s128/d-in1024-out256-c4": (2, 2),
    "2026-12-02-clock/qwen3-8b-s128/d-in1024-out256-c8": (2, 2),
    "2026-12-02-clock/qwen3-30b-a3b-s128/m-in1024-out256-c8": (2, 2),
    "2026-12-02-clock/qwen3-8b-s128-eager/e-in1024-out256-c8": (2, 2),
    "2026-12-02-clock/qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c2": (2, 2, 2, 2),
    "2026-12-02-clock/qwen3-30b-a3b-s128-wide-warmup/m-in1024-out256-c8": (1, 1),
    "2026-12-02-clock-D/qwen3-8b-s128/d-in1024-out256-c2": (1, 1, 1, 1),
    "2026-12-02-clock-D/qwen3-8b-s128/d-in1024-out256-c4": (4, 4),
    "2026-12-02-clock-D/qwen3-8b-s128/d-in1024-out256-c8": (8, 2),
    "2026-12-02-clock-D/llama-3.1-8b-s128/l-in1024-out256-c8": (4, 2),
    "2026-12-02-clock-E/qwen3-8b-s128/d-in1024-out256-c8": (1, 1),
    "2026-12-02-clock-E/mixtral-8x7b-s128/x-in1024-out256-c8": (2, 1),
    "2026-12-02-clock-F/qwen3-14b-s128/f-in1024-out256-c4": (2, 2),
    "2026-12-02-clock-F/qwen3-14b-s128/f-in1024-out256-c8": (1, 1),
    "2026-12-02-clock-F/mixtral-8x7b-s128/x-in1024-out256-c8": (1, 1),
}
_ITERATION_BUCKET = re.compile(r'^vllm:iteration_tokens_total_bucket\{[^}]*le="([0-9.]+)"[^}]*\} (\S+)$', re.MULTILINE)


def prompt_steps(pair: dict[str, str]) -> dict[float, int]:
    """A point's steps of more than 1,024 tokens per iteration_tokens_total bucket (its upper bound), after - before."""
    before, after = ({float(le): float(n) for le, n in _ITERATION_BUCKET.findall(pair[k])} for k in ("before", "after"))
    cumulative = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    steps = {le: round(n - prev) for (le, n), (_, prev) in zip(cumulative[1:], cumulative, strict=False)}
    return {le: n for le, n in steps.items() if le > 1024 and n}


def expected_prompt_steps(streams: int, waves: tuple[int, ...], bounds: list[float]) -> dict[float, int]:
    """The prompt steps' buckets of waves of `streams` 1,024-token prompts whose first step holds waves[i] of them:
    a prompts (1,025 a tokens), then the rest beside the first's a decode rows."""
    out: dict[float, int] = {}
    for first in waves:
        for tokens in (1025 * first, 1025 * (streams - first) + first) if first < streams else (1025 * first,):
            le = min(b for b in bounds if b >= tokens)
            out[le] = out.get(le, 0) + 1
    return out


def test_the_first_steps_counts_are_the_logged_ones() -> None:
    """LOGGED_FIRST_STEP is what each point's iteration_tokens_total says, and a miscount would not pass: a first
    count whose wave lands in other buckets (1; 2-3; 4-7; 8, up to the mirror N - a) would fail."""
    pairs = snapshots()
    if not any(name in pairs for name in LOGGED_FIRST_STEP):
        return  # results folders without the archives (DSPARK_CLOCK_RESULTS)
    bounds = [1024.0 * 2 ** i for i in range(1, 6)]
    for name, waves in LOGGED_FIRST_STEP.items():
        streams = int(name.rsplit("-c", 1)[1])
        assert prompt_steps(pairs[name]) == expected_prompt_steps(streams, waves, bounds), name
        wave = expected_prompt_steps(streams, waves[:1], bounds)
        for other in range(1, streams + 1):  # a first count whose wave lands otherwise (not 2 for 3, nor N - a)
            if expected_prompt_steps(streams, (other,), bounds) != wave:
                assert expected_prompt_steps(streams, (other, *waves[1:]), bounds) != prompt_steps(pairs[name]), name


def test_at_the_logged_first_step_counts_the_ttft_is_within_10_percent(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The first step's count is a race (docs/advise.md): the model takes the first request of a burst alone, the
    engine took one, two, four or all. Replanned at each point's logged count (the intake window that takes that
    many of the API server's 0.5-ms handoffs, for every wave alike), the TTFT of every 2-8-stream point whose waves
    agree is within 10% (or 20 ms), but for the first MoE run's Triton JIT (KNOWN_GAPS); the model given the count
    is right, so what is left at these points is the race. Prints both errors."""
    from dspark.advise import inputs  # noqa: PLC0415 - the intake window, set per point

    points = {name: (config, bench) for name, config, bench in recorded()}
    if not any(name in points for name in LOGGED_FIRST_STEP):
        return
    rows, misses = [], []
    for name, waves in LOGGED_FIRST_STEP.items():
        if len(set(waves)) > 1 or "qwen3-30b-a3b-s128/m-in1024" in name:
            continue  # waves that differ; the JIT point
        config, bench = points[name]
        measured = float(bench["summary"]["ttft_mean_s"])
        alone = float(predict(config, tmp_path)["ttft_mean_s"])
        monkeypatch.setattr(inputs, "INTAKE_S", (waves[0] - 1) * inputs.API_PER_REQUEST_S + inputs.INTAKE_S)
        pred = float(predict(config, tmp_path)["ttft_mean_s"])
        monkeypatch.undo()
        logged = _error("ttft_mean_s", pred, measured)
        rows.append(f"| {name} | {waves[0]} | {measured:.4f} | {alone:.4f} ({alone / measured - 1:+.1%}) | "
                    f"{pred:.4f} ({pred / measured - 1:+.1%}) |")
        if abs(logged) > 0.10:
            misses.append(f"{name}: at its logged first step of {waves[0]} the TTFT is {logged:+.1%}")
    print("\n| point | first step (logged) | TTFT measured | the model (one first) | at the logged count |\n"
          "|---|---|---|---|---|\n" + "\n".join(rows))
    assert len(rows) >= 10 and not misses, "\n".join(misses)


# Run F's 14B logged both ends of each burst (docs/advise.md's table): uvicorn's access-log line of each request,
# written just before its handoff to the engine core, and vLLM's per-iteration line of each step, millisecond stamps.
# (streams, prompt tokens) -> (the access-log lines' first ms after the first, truncated; the first step's requests).
LOGGED_BURSTS: dict[tuple[int, int], tuple[tuple[int, ...], int]] = {
    (4, 1024): ((0, 1, 1, 1), 2), (8, 1024): ((0, 2, 2, 3), 1), (16, 1024): ((0, 2, 2, 3), 4),
    (32, 1024): ((0, 1, 1, 2), 8), (64, 1024): ((0, 2, 3, 3), 1), (128, 1024): ((0, 0, 1, 1), 8),
    (8, 4096): ((0, 1, 2, 2), 2), (32, 4096): ((0, 2, 3, 3), 1),
}
_LOG_LINE = re.compile(r"^\((?:APIServer|EngineCore) pid=\d+\) INFO \d\d-\d\d (\d\d):(\d\d):(\d\d)\.(\d{3}) "
                       r"\[[^]]*\] (.*)$")
_ITERATION = re.compile(r"Iteration\(\d+\): (\d+) context requests, (\d+) context tokens")


def logged_bursts(log: str) -> dict[tuple[int, int], tuple[tuple[int, ...], int]]:
    """Each burst an idle engine took (its first POST over 150 ms after the last step's line): (requests sent before
    its first step's line, prompt tokens) -> (its first four access-log lines' ms after the first, the first step's
    requests)."""
    events: list[tuple[int, str]] = []
    for line in log.splitlines():
        m = _LOG_LINE.match(line)
        if m:
            h, mi, sec, ms = (int(g) for g in m.groups()[:4])
            events.append((((h * 60 + mi) * 60 + sec) * 1000 + ms, m.group(5)))
    out: dict[tuple[int, int], tuple[tuple[int, ...], int]] = {}
    last_step, posts = -10**9, list[int]()
    for at, text in events:
        step = _ITERATION.search(text)
        if "POST /v1/completions" in text and (posts or at - last_step > 150):
            posts.append(at)
        elif step:
            if posts:
                requests, tokens = int(step.group(1)), int(step.group(2))
                out[(len(posts), tokens // max(requests, 1))] = (tuple(p - posts[0] for p in posts[:4]), requests)
                posts = []
            last_step = at
    return out


def test_run_fs_bursts_are_the_documented_race() -> None:
    """The docs' table of run F's bursts, read back from its 14B's engine log: the first step held one where the second
    handoff came 2 ms after the first (but at 16 streams), two or more where it came within 1 ms."""
    archive = next((f / "clock-F1.tar.gz" for f in RESULTS_DIRS if (f / "clock-F1.tar.gz").is_file()), None)
    if archive is None:
        return  # DSPARK_CLOCK_RESULTS names other folders
    with tarfile.open(archive) as tar:
        handle = tar.extractfile("clock-F1/qwen3-14b-s128/engine.log")
        assert handle is not None
        bursts = logged_bursts(handle.read().decode())
    assert {key: bursts.get(key) for key in LOGGED_BURSTS} == LOGGED_BURSTS
    late = {key: first for key, ((_, second, *_), first) in LOGGED_BURSTS.items() if second >= 2}
    assert all(first >= 2 for key, ((_, second, *_), first) in LOGGED_BURSTS.items() if second <= 1)
    assert sorted(late.values()) == [1, 1, 1, 4] and late[(16, 1024)] == 4


# How far the wrong way a calibrated figure may move from its uncalibrated error. A fit the profile's held-out runs
# accept moves every figure: on the H200 the kernel floor it fits (0.12-0.19 ms a step above the priors at 1-16
# rows, every context) brings 1-8 streams within 2% and moves 16-64 streams and 4k prompts up to 2.9 points slower.
_NO_WORSE = 0.03

# Where a fit moves a figure further than _NO_WORSE, each with its own bound (still asserted) and the reason:
# (point substring, metric, how far the wrong way, why); such a figure is left out of the counts of figures within
# 5% and 10% (its bound holds it instead). Run F's Mixtral 32 x 4k point, which run E's Mixtral fit (bandwidth
# x1.07) moved from +1.4% / +1.2% / -1.4% to +4.5% / +5.1% / -4.5%, is no longer one: since the fused-MoE kernel's
# own expert read rate (dspark.perf.moe.expert_read_fraction) the priors predict run E's Mixtral profile as well as
# a fit of it (held-out rms log error 0.025 against 0.027) and its fit is refused.
CALIBRATED_GAPS: tuple[tuple[str, str, float, str], ...] = (
    ("clock-E/qwen3-8b-s128/d-in1024-out256-c8", "ttft_mean_s", 0.105,
     "a TTFT at the 20-ms band's edge: the fit's GEMM rate (x1.01, at half weight) shortens it 1.2 ms, from 19.6 ms "
     "under the measured 0.1997 s (within the band) to 20.8 under (-10.4%); the gap is the wait before the first "
     "schedule with E's per-iteration log on (KNOWN_GAPS), not the fit"),
)


def _no_worse(name: str, metric: str) -> float:
    """How far the wrong way a calibrated (point, metric) may move: _NO_WORSE, or its CALIBRATED_GAPS bound."""
    return max([b for point, m, b, _ in CALIBRATED_GAPS if point in name and m == metric], default=_NO_WORSE)


def recorded_profile(name: str, tmp: Path) -> Path | None:
    """The recorded `dspark profile` of the point's engine (FOLDER/profiles/ENGINE.json; for a folder without
    profiles, another folder's profile of the engine of the same name: the same argv started again on another H200,
    e.g. run A's 8B and run D's), as --calibrate takes it for the replanned model: its served name, the engine's
    model path there, becomes the path's tail."""
    folder, engine = name.split("/")[:2]
    own = [f / "profiles" / f"{engine}.json" for f in RESULTS_DIRS if f.name == folder]
    others = [f / "profiles" / f"{engine}.json" for f in RESULTS_DIRS if f.name != folder]
    source = next((p for p in (*own, *others) if p.exists()), None)
    if source is None:
        return None
    data = json.loads(source.read_text())
    data["model"] = str(data.get("model") or "").rstrip("/").rsplit("/", 1)[-1]
    out = tmp / f"{source.parent.parent.name}-{engine}-profile.json"
    out.write_text(json.dumps(data))
    return out


def _compare(points: list[tuple[str, dict[str, Any], dict[str, Any]]], tmp: Path,
             calibrated: Any) -> tuple[list[str], list[str], dict[str, int]]:
    """Each point's four figures uncalibrated and calibrated (calibrated(name, config) -> prediction or None):
    the table's rows, the misses (calibrated worse than uncalibrated beyond _NO_WORSE, or beyond 5% and beyond the
    uncalibrated bound of test_recorded_gpu_points_are_replanned_within_10_percent), and counts within 5% / 10%."""
    rows, misses = [], []
    counts = dict.fromkeys(("figures", "uncal5", "uncal10", "cal5", "cal10"), 0)
    for name, config, bench in points:
        cal = calibrated(name, config)
        if cal is None:
            continue
        uncal = predict(config, tmp)
        cells = []
        for metric in METRICS:
            measured = float(bench["summary"][metric])
            eu = _error(metric, float(uncal[metric]), measured)
            ec = _error(metric, float(cal[metric]), measured)
            if _no_worse(name, metric) == _NO_WORSE:  # a calibrated gap is held to its own bound, not counted
                counts["figures"] += 1
                counts["uncal5"] += abs(eu) <= 0.05
                counts["uncal10"] += abs(eu) <= 0.10
                counts["cal5"] += abs(ec) <= 0.05
                counts["cal10"] += abs(ec) <= 0.10
            cells.append(f"{measured:,.4g} / {cal[metric]:,.4g} ({ec:+.1%}; uncal {eu:+.1%})"
                         + ("*" if abs(ec) > 0.05 else ""))
            if abs(ec) > abs(eu) + _no_worse(name, metric):
                misses.append(f"{name} {metric}: calibrated {ec:+.1%}, worse than uncalibrated {eu:+.1%}")
            elif abs(ec) > max(0.05, _bound(name, metric)[0]):
                misses.append(f"{name} {metric}: calibrated {ec:+.1%}, beyond 5% and its uncalibrated bound")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows, misses, counts


def test_calibrated_on_a_profile_of_the_same_engine_is_never_worse_than_uncalibrated(tmp_path: Path) -> None:
    """Issue 25's "calibration that cannot make things worse", on every recorded point of an engine with a recorded
    `dspark profile` (runs D and E's engines; run A's 8B with run D's profile of the same argv), each profile
    fitted alone (never to the points scored) and judged on its own held-out runs: more figures within 5% than
    uncalibrated and no fewer within 10%, no figure more than 3 points further from the measurement than
    uncalibrated, and none beyond 5% unless the uncalibrated model has it as a known gap. Run D's 8B and E's two
    engines' fits are used (held-out rms log error 0.025 / 0.037 / 0.035 against the priors' 0.041 / 0.048 /
    0.057), run D's Llama's refused (its steps already at the priors). Run F's Mixtral points, which no profile
    saw, are calibrated on run E's profile of the same argv: in all 166 of 176 figures within 5% (147
    uncalibrated), 172 within 10% (169; counts printed); one point moved the wrong way beyond _NO_WORSE. Since the
    fused-MoE kernel's expert read rate, the unhidden GEMM share, the 0.9 KV rate and the first token after the
    next launch (dspark.perf, dspark.advise.model): D's 8B and E's 8B fits used (0.013 / 0.037 against the priors'
    0.031 / 0.047), Mixtral's refused (the priors predict it as well); 165 of 175 counted figures within 5% (154
    uncalibrated), 172 within 10% (172); one TTFT at the 20-ms band's edge moves the wrong way (CALIBRATED_GAPS)."""
    profiles: dict[str, Path | None] = {}

    def calibrated(name: str, config: dict[str, Any]) -> dict[str, Any] | None:
        engine = "/".join(name.split("/")[:2])
        if engine not in profiles:
            profiles[engine] = recorded_profile(name, tmp_path)
        profile = profiles[engine]
        return None if profile is None else predict(config, tmp_path, calibrate=profile)

    rows, misses, counts = _compare(recorded(), tmp_path, calibrated)
    if not rows:
        return  # no recorded profile (DSPARK_CLOCK_RESULTS names folders without one)
    print("\n| point (calibrated) | " + " | ".join(f"{m} measured / calibrated" for m in METRICS) + " |")
    print("|---|" + "---|" * len(METRICS))
    print("\n".join(rows))
    print(f"\nwithin 5% / 10% of {counts['figures']} figures: uncalibrated {counts['uncal5']} / {counts['uncal10']}, "
          f"calibrated {counts['cal5']} / {counts['cal10']}")
    assert counts["cal5"] > counts["uncal5"] and counts["cal10"] >= counts["uncal10"], counts
    assert not misses, "\n".join(misses)


def test_a_profile_with_two_steady_benches_is_judged_on_what_it_did_not_see(tmp_path: Path) -> None:
    """What the profile's two closed-loop points are for (dspark.bench.profile.PLAN), tried with run D's profile
    of each engine plus that engine's own 32- and 128-stream benches standing in for them (1,024 + 256; their
    client TTFT is not fitted to: it carries the wait before the first schedule): the fit of the eight runs is
    judged on held-out folds; whatever it decides, the engine's other points are no more than 3 points further
    from the measurement than uncalibrated. Never fitted to the points it is scored on."""
    if not any(f.name == "2026-12-02-clock-D" for f in RESULTS_DIRS):
        return  # DSPARK_CLOCK_RESULTS names other folders
    points = [(n, c, b) for n, c, b in recorded() if n.startswith("2026-12-02-clock-D/")]
    steady = ("in1024-out256-c32", "in1024-out256-c128")
    files: dict[str, list[Path]] = {}
    for name, _, data in points:
        engine = name.split("/")[1]
        if engine not in files:
            profile = recorded_profile(name, tmp_path)
            assert profile is not None
            files[engine] = [profile]
        if name.endswith(steady):
            path = tmp_path / f"{name.replace('/', '-')}.json"
            path.write_text(json.dumps({**data, "model": str(data["model"]).rstrip("/").rsplit("/", 1)[-1]}))
            files[engine].append(path)
    assert all(len(f) == 3 for f in files.values())

    def calibrated(name: str, config: dict[str, Any]) -> dict[str, Any] | None:
        return None if name.endswith(steady) else predict_calibrated(config, tmp_path, files[name.split("/")[1]])

    rows, misses, counts = _compare(points, tmp_path, calibrated)
    print("\n" + "\n".join(rows))
    print(f"\nwithin 5% / 10% of {counts['figures']} figures: uncalibrated {counts['uncal5']} / {counts['uncal10']}, "
          f"calibrated {counts['cal5']} / {counts['cal10']}")
    assert len(rows) == 13 and not misses, "\n".join(misses)


def predict_calibrated(config: dict[str, Any], tmp: Path, files: list[Path]) -> dict[str, Any]:
    """predict() with several --calibrate files."""
    model = tmp / str(config["model_config"])
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / f"{config['model_config']}.json").read_text())
    clients = int(config["concurrency"])
    args = ["advise", "--model", str(model), "--engine", "vllm", "--hardware", "h200", "--engine-version",
            str(config.get("engine_version", "0.25.0")), "--seats", str(config.get("seats", clients)),
            "--clients", str(clients), "--requests", str(config.get("requests", max(2 * clients, 8))),
            "--input-len", str(config["input_len"]), "--output-len", str(config["output_len"]),
            "--simulator", "dspark", "--json"]
    for f in files:
        args += ["--calibrate", str(f)]
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main([*args, "--", *_engine_flags(config)])
    data = json.loads(buf.getvalue())
    assert rc == 0, data
    prediction: dict[str, Any] = data["predictions"][0]
    prediction["ttft_mean_s"] = prediction["ttft_s"]
    return prediction


# Run E's per-iteration log (vLLM 0.25's enable_logging_iteration_details: each step's prompt and decode requests and
# tokens, stamped to the millisecond when the engine core writes it, once the next step is launched): between two
# back-to-back prompt steps the stamps are one GPU-bound step apart. nvidia-smi.csv: one sample a second.
_ITERATION_LINE = re.compile(r"INFO (\d\d-\d\d) (\d\d):(\d\d):(\d\d\.\d+) \[core\.py:\d+\] Iteration\(\d+\): "
                             r"(\d+) context requests, (\d+) context tokens, (\d+) generation requests")


def logged_prompt_steps(log: str) -> list[tuple[float, int, int, int, float]]:
    """(seconds of the day at the step's line, prompt requests, prompt tokens, decode rows, ms to the next line) of
    every step of 8,000 or more prompt tokens followed by another prompt step of 4,000 or more."""
    lines = [(int(h) * 3600 + int(m) * 60 + float(s), int(reqs), int(tokens), int(rows))
             for _day, h, m, s, reqs, tokens, rows in _ITERATION_LINE.findall(log)]
    return [(t, reqs, tokens, rows, (nxt[0] - t) * 1e3)
            for (t, reqs, tokens, rows), nxt in itertools.pairwise(lines) if tokens >= 8000 and nxt[2] >= 4000]


def smi_samples(csv: str) -> list[tuple[float, int, float, int]]:
    """(seconds of the day, SM clock MHz, power W, utilisation %) of each nvidia-smi.csv sample."""
    out = []
    for line in csv.splitlines()[1:]:
        stamp, sm, _mem, power, _temp, util, *_ = (cell.strip() for cell in line.split(","))
        h, m, s = stamp.split()[1].split(":")
        out.append((int(h) * 3600 + int(m) * 60 + float(s), int(sm.split()[0]), float(power.split()[0]),
                    int(util.split()[0])))
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _h200_8b_step_ms(tmp: Path, rows: int, context: float, prefill: int, pairs: float) -> float:
    """The model's price of one step for the Qwen3-8B shape on the H200 (the costs and shape advise --json reports)."""
    model = tmp / "qwen3-8b"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text((CONFIGS / "qwen3-8b.json").read_text())
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["advise", "--model", str(model), "--engine", "vllm", "--hardware", "h200", "--engine-version",
                   "0.25.0", "--seats", "128", "--clients", "8", "--requests", "8", "--input-len", "1024",
                   "--output-len", "8", "--simulator", "dspark", "--json", "--", "--max-model-len", "8192"])
    assert rc == 0
    data = json.loads(buf.getvalue())["model"]
    shape = dict(data["shape"], graph_sizes=tuple(data["shape"]["graph_sizes"]), notes=())
    table = cost_table(StepCosts(**data["costs"]), StepShape(**shape))
    return step_seconds(table, rows, context, prefill, pairs) * 1e3


def test_the_prompt_steps_beside_the_clock(tmp_path: Path) -> None:
    """Issue 25's prompt-step cost on the H200, from run E's 8B engine (per-iteration log) and every run's
    nvidia-smi.csv: the clock follows the 700 W cap (busy samples under 600 W at the boost clock, those at the cap
    about 1,500 MHz); the 1-s samples do not resolve the clock a step ran at (the steady steps' times do not follow
    them), so no point's own samples price its steps; a wave's first prompt steps after decode run faster than the
    steady ones (the limiter's lag); and the model's steady 1k-prompt step is within 3% of the log, its 4k-prompt
    step within 5% (the model's flat attention rate over-prices the 4k prompts' relative to the 1k's)."""
    archive = next((f / "clock-E.tar.gz" for f in RESULTS_DIRS if (f / "clock-E.tar.gz").is_file()), None)
    if archive is None:
        return  # DSPARK_CLOCK_RESULTS names other folders
    with tarfile.open(archive) as tar:
        log, csv = (tar.extractfile(name) for name in ("clock-E/qwen3-8b-s128/engine.log", "clock-E/nvidia-smi.csv"))
        assert log is not None and csv is not None
        steps, samples = logged_prompt_steps(log.read().decode()), smi_samples(csv.read().decode())
    # Eight 1,024-token prompts (and a chunk) beside 80-112 decode rows: 128 x 1k's steady steps (a lone 37-47 ms
    # line is the next step's launch written early; 340-400 ms, two steps in one gap).
    steady_1k = [(t, ms) for t, reqs, _, rows, ms in steps if reqs == 9 and rows >= 80 and 150 < ms < 230]
    # Three prompts' chunks (4,096-token prompts) beside 20-30 rows: 32 x 4k's steady steps; the first prompt steps of
    # a 4k wave after decode steps (at most 4 rows: 8 x 4k's, and 32 x 4k's start).
    steady_4k = [ms for _, reqs, _, rows, ms in steps if reqs == 3 and 20 <= rows <= 30 and ms < 230]
    burst_4k = [ms for _, reqs, tokens, rows, ms in steps if reqs in (2, 3) and rows <= 4 and tokens >= 8180]
    assert len(steady_1k) >= 30 and len(steady_4k) >= 15 and len(burst_4k) >= 7
    logged = {"1k": _median([ms for _, ms in steady_1k]), "4k": _median(steady_4k), "4k burst": _median(burst_4k)}
    assert logged["4k burst"] < 0.97 * logged["4k"]
    # The 1-s clock samples against the steps beside them: no relation (a step is ~0.2 s; the limiter moves faster).
    nearest = [min(samples, key=lambda s: abs(s[0] - t))[1] for t, _ in steady_1k]
    times = [ms for _, ms in steady_1k]
    mc, mt = sum(nearest) / len(nearest), sum(times) / len(times)
    cov = sum((c - mc) * (t - mt) for c, t in zip(nearest, times, strict=True))
    var = (sum((c - mc) ** 2 for c in nearest) * sum((t - mt) ** 2 for t in times)) ** 0.5
    assert max(nearest) - min(nearest) >= 150 and abs(cov / var) < 0.3
    # Every run's samples: busy under 600 W at the boost clock (1,980 MHz), at the cap some 1,500 MHz.
    busy: list[tuple[float, int, float, int]] = []
    for folder in RESULTS_DIRS:
        for path in sorted(folder.glob("clock-*.tar.gz")):
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member) if member.name.endswith("nvidia-smi.csv") else None
                    busy += [s for s in smi_samples(handle.read().decode()) if s[3] >= 99] if handle else []
    low = [float(mhz) for _, mhz, watts, _ in busy if watts < 600]
    capped = [float(mhz) for _, mhz, watts, _ in busy if watts >= 680]
    assert len(low) >= 100 and len(capped) >= 100
    assert _median(low) >= 1950 and 1450 <= _median(capped) <= 1600
    # The model's price of those steps (mean keys a prompt query attends to: 512 for 1k prompts, 2,048 for 4k).
    priced = {"1k": _h200_8b_step_ms(tmp_path, 96, 96 * 1152.0, 8096, 8096 * 512.0),
              "4k": _h200_8b_step_ms(tmp_path, 25, 25 * 4200.0, 8167, 8167 * 2048.0),
              "4k burst": _h200_8b_step_ms(tmp_path, 2, 2 * 4100.0, 8190, 8190 * 2048.0)}
    print("\nrun E's 8B prompt steps, logged median / the model (ms): " + ", ".join(
        f"{k} {logged[k]:.1f} / {priced[k]:.1f} ({priced[k] / logged[k] - 1:+.1%})" for k in logged)
        + f"; busy clock median {_median(low):.0f} MHz under 600 W, {_median(capped):.0f} at the cap")
    assert abs(priced["1k"] / logged["1k"] - 1) <= 0.03
    assert 0 <= priced["4k"] / logged["4k"] - 1 <= 0.05
