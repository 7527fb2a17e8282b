"""Report rendering (exact text), JSON, the PNG and atomic writes."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from dspark.bench.plot import sweep_png
from dspark.bench.report import bench_text, fmt_change, fmt_value, sweep_text, to_json, write_atomic
from dspark.bench.results import METRICS
from tests.bench.sample_results import design_sweep

EXPECTED_SWEEP = """\
Seat sweep: 2-rep mean per setting; Δ against 8 seats

|                                 | 8 seats | 16 seats |      Δ |
|---------------------------------|---------|----------|--------|
| Aggregate decode, tok/s         |   147.0 |    183.6 |   +25% |
| Per-stream decode, tok/s        |    20.3 |     13.4 |   −34% |
| Time to first token, mean, s    |    71.9 |     40.7 |   −43% |
| Time to first token, p50, s     |    71.9 |     40.7 |   −43% |
| Time to first token, p99, s     |   143.8 |     81.4 |   −43% |
| Queueing time (engine), mean, s |    36.0 |     20.4 |   −43% |
| Wall time, s                    |   348.4 |    278.8 |   −20% |
| KV pool used, peak              |     16% |      31% |  ×1.94 |
| Running requests, peak          |       8 |        8 |        |
| Prefix-cache hit rate           |      0% |       0% |        |
| Warm re-run: prefix hits        |     73% |      11% | −62 pp |
| Warm re-run: wall time, s       |   179.6 |    387.6 |  +116% |
| Errors (sum over reps)          |       0 |        0 |        |
| Preemptions (sum over reps)     |       0 |        0 |        |
| KV pool, tokens (engine log)    | 181,777 |  181,777 |        |
| Launch as planned               |     yes |      yes |        |
| Clean (0 errors, 0 preemptions) |     yes |      yes |        |

Spread over 2 reps ((max − min) / mean), the noise the rule must beat:
  8 seats: aggregate 0.0%, per-stream 0.0%, TTFT 0.0%, wall 0.0%
  16 seats: aggregate 0.0%, per-stream 0.0%, TTFT 0.0%, wall 0.0%

Decision rule (fixed before the runs): adopt only at >= +10% on wall_time_s, and beyond its between-rep spread, \
with no secondary (aggregate_decode_tps, per_stream_decode_tps, ttft_mean_s, warm_wall_time_s) worse than -10%; \
every pass clean (0 errors, 0 preemptions, launch verified)
  16 seats: do not adopt (per_stream_decode_tps worsened -34.0%, beyond the -10% allowed; warm_wall_time_s \
worsened -115.8%, beyond the -10% allowed)
Decision: keep 8 seats: no candidate met the rule
"""


def test_sweep_table_matches_design_layout() -> None:
    assert sweep_text(design_sweep()) == EXPECTED_SWEEP


def test_problems_are_printed_under_the_decision() -> None:
    sw = design_sweep()
    bad = dataclasses.replace(sw.settings[1], problems=("2 preemption(s)",))
    text = sweep_text(dataclasses.replace(sw, settings=(sw.settings[0], bad)))
    assert text.endswith("  problem, 16 seats: 2 preemption(s)\n")
    assert "| Clean (0 errors, 0 preemptions) |     yes |       no |        |" in text


def test_bench_text_columns_and_failures() -> None:
    b = design_sweep().settings[0].bench
    assert b is not None
    lines = bench_text(b).splitlines()
    assert lines[0] == ("m at http://127.0.0.1:8000 (completions; engine –): 100 requests × 512 max tokens, "
                        "32 clients; prompts: x")
    assert lines[1] == "dspark –, started –"  # a result without metadata says so, never a made-up value
    lines = lines[1:]
    assert lines[2] == "|                                 | rep 1 | rep 2 |  mean | warm re-run |"
    assert lines[10] == "| Wall time, s                    | 348.4 | 348.4 | 348.4 |       179.6 |"
    failed = dataclasses.replace(b.reps[0], stats=dataclasses.replace(b.reps[0].stats, errors=2,
                                                                       error_messages=("HTTP 500: boom",)))
    summary = {**b.summary, "errors": 2.0, "preemptions": 3.0}
    text = bench_text(dataclasses.replace(b, reps=(failed, b.reps[1]), summary=summary))
    assert "2 request(s) failed: HTTP 500: boom" in text
    assert "the engine preempted 3 time(s) during the bench" in text


def test_value_and_change_formats() -> None:
    rate, secs, frac, hits, count = (METRICS[k] for k in (
        "aggregate_decode_tps", "ttft_mean_s", "kv_usage_peak", "warm_prefix_hit_rate", "preemptions"))
    assert [fmt_value(secs, v) for v in (348.44, 7.123, 0.0802, 0.00003, None, math.nan)] == [
        "348.4", "7.12", "0.080", "3.0e-05", "–", "–"]
    assert [fmt_value(frac, v) for v in (0.16, 0.003, 0.0)] == ["16%", "<1%", "0%"]
    assert fmt_value(count, 3.0) == "3"
    assert fmt_change(rate, 147.0, 183.6) == "+25%"
    assert fmt_change(secs, 348.4, 278.8) == "−20%"
    assert fmt_change(frac, 0.16, 0.31) == "×1.94"
    assert fmt_change(hits, 0.73, 0.11) == "−62 pp"
    assert fmt_change(count, 0.0, 2.0) == "+2"
    assert fmt_change(rate, None, 1.0) == ""


def test_json_is_strict_and_carries_rule_decision_and_clean_flag() -> None:
    sw = design_sweep()
    data = json.loads(to_json(sw))
    assert data["clean"] is True
    assert data["rule"] == {"primary": "wall_time_s", "adopt_at": 0.1, "max_regression": 0.1,
                            "secondaries": ["aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s",
                                            "warm_wall_time_s"], "require_clean": True}
    assert data["decision"]["chosen"] == "8 seats"
    assert data["settings"][1]["bench"]["summary"]["warm_wall_time_s"] == 387.6
    assert data["settings"][0]["launch"]["kv_pool_tokens"] == 181777
    # nan never reaches the JSON: it becomes null.
    b = sw.settings[0].bench
    assert b is not None
    nan_stats = dataclasses.replace(b.reps[0].stats, ttft_p99_s=math.nan)
    nb = dataclasses.replace(b, reps=(dataclasses.replace(b.reps[0], stats=nan_stats),))
    assert json.loads(to_json(nb))["reps"][0]["stats"]["ttft_p99_s"] is None


def test_png() -> None:
    png = sweep_png(design_sweep())
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 20_000  # three panels, not an empty figure


def test_write_atomic_replaces_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.json"
    write_atomic(target, "first\n")
    write_atomic(target, "second\n")
    assert target.read_text() == "second\n"
    assert os.listdir(target.parent) == ["out.json"]


def test_write_atomic_keeps_the_old_file_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.json"
    target.write_text("old\n")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.json"]


def test_the_prediction_made_before_the_runs_is_shown_beside_the_measurement() -> None:
    pred = {"model": {"fitted": []}, "predictions": [
        {"seats": 8, "aggregate_decode_tps": 160.0, "per_stream_decode_tps": 22.0, "ttft_s": 70.0},
        {"seats": 16, "aggregate_decode_tps": 190.0, "per_stream_decode_tps": 14.0, "ttft_s": 45.0}]}
    text = sweep_text(dataclasses.replace(design_sweep(), prediction=pred))
    assert (
        "Predicted before the runs (dspark advise, uncalibrated) against measured:\n"
        "  8 seats: aggregate tok/s 160 vs 147 (+9%); per-stream tok/s 22 vs 20.3 (+8%); TTFT s 70 vs 71.9 (-3%)\n"
        "  16 seats: aggregate tok/s 190 vs 184 (+3%); per-stream tok/s 14 vs 13.4 (+4%); TTFT s 45 vs 40.7 (+11%)\n"
        "\nDecision rule") in text
    failed = sweep_text(dataclasses.replace(design_sweep(), prediction={"error": "InputError: no model"}))
    assert "\nPrediction before the runs: none (InputError: no model)\n\nDecision rule" in failed


def test_the_engines_scheduler_prediction_shows_its_cache_figures_beside_metrics() -> None:
    """With the engine installed the sweep's prediction is the engine's scheduler's: hits, KV and preemptions too."""
    replayed = {"seats": 8, "aggregate_decode_tps": 160.0, "per_stream_decode_tps": 22.0, "ttft_s": 70.0,
                "simulator": "vllm 0.33.0 scheduler", "prefix_cache_hit_rate": 0.0, "kv_peak_fraction": 0.099,
                "preemptions": 1, "warm": {"prefix_cache_hit_rate": 0.998, "preemptions": 0}}
    model = {"seats": 16, "aggregate_decode_tps": 190.0, "per_stream_decode_tps": 14.0, "ttft_s": 45.0,
             "simulator": "dspark model: vllm is not installed here", "prefix_cache_hit_rate": None}
    pred = {"model": {"fitted": []}, "predictions": [replayed, model]}
    lines = sweep_text(dataclasses.replace(design_sweep(), prediction=pred)).splitlines()
    at = lines.index("  8 seats: aggregate tok/s 160 vs 147 (+9%); per-stream tok/s 22 vs 20.3 (+8%); TTFT s 70 vs "
                     "71.9 (-3%)")
    # Measured: 0% cold hits, 73% on the warm re-run, KV peak 16%, no preemption in 2 reps + the re-run.
    assert lines[at + 1] == ("    vllm 0.33.0 scheduler: prefix hits 0.0% vs 0.0%; warm re-run prefix hits 99.8% vs "
                             "73.0%; KV peak 9.9% vs 16.0%; preemptions 2 vs 0")
    assert lines[at + 2].startswith("  16 seats: aggregate tok/s 190")  # dspark's model: no cache figures
    assert lines[at + 3] == ""


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_write_atomic_gives_the_mode_a_plain_open_would(tmp_path: Path, umask: int, mode: int) -> None:
    """bench.json, sweep.json and advice.png are results for others to read, not mkstemp's private 0600."""
    import os  # noqa: PLC0415

    previous = os.umask(umask)
    try:
        write_atomic(tmp_path / "bench.json", "{}\n")
        write_atomic(tmp_path / "advice.png", b"\x89PNG")
    finally:
        os.umask(previous)
    assert (tmp_path / "bench.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "advice.png").stat().st_mode & 0o777 == mode


def test_write_atomic_keeps_the_mode_of_the_file_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "sweep.json"
    target.write_text("old\n")
    target.chmod(0o640)
    write_atomic(target, "new\n")
    assert target.stat().st_mode & 0o777 == 0o640 and target.read_text() == "new\n"
