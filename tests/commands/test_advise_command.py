"""`dspark advise` through the real CLI: the table, one JSON object, the plot, calibration files, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.cli import main

ARGS = ["advise", "flash-next-vllm", "--seats", "6,8,16", "--clients", "32", "--input-len", "2048",
        "--output-len", "512"]


def test_json_has_predictions_and_a_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    preds = data["predictions"]
    assert [p["seats"] for p in preds] == [6, 8, 16]
    for key in ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_s", "kv_peak_fraction", "wall_time_s",
                "expert_coverage", "pool_holds_workload"):
        assert all(key in p for p in preds)
    assert preds[0]["aggregate_decode_tps"] < preds[2]["aggregate_decode_tps"]
    assert preds[0]["per_stream_decode_tps"] > preds[2]["per_stream_decode_tps"]
    assert data["recommendation"]["seats"] in (6, 8, 16)
    assert data["recommendation"]["reason"].startswith("predicted, not measured: ")
    # The deployment's own prefill figure is used, and said to be an observation; nothing was fitted.
    assert data["model"]["fitted"] == []
    assert any("prefill cost per prompt token: 0.4900 ms (prior: recipe observation" in t
               for t in data["model"]["terms"])
    assert any(a.startswith("uncalibrated") for a in data["assumptions"])


def test_table_plot_and_calibration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = {"concurrency": 32, "requests": 100, "max_tokens": 512, "prompt_source": "synthetic ids, 2048 tokens",
             "reps": [{"stats": {"requests": 100, "errors": 0, "output_tokens": 51200, "prompt_tokens_mean": 2048}}],
             "summary": {"aggregate_decode_tps": 147.0, "per_stream_decode_tps": 20.3, "ttft_mean_s": 71.9,
                         "running_peak": 8}}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(bench))
    plot = tmp_path / "advice.png"
    assert main([*ARGS, "--calibrate", str(path), "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "| seats | aggregate tok/s |" in text
    assert "fixed cost per step: " in text and "(fitted to 1 measured point(s))" in text
    assert "fit: aggregate_decode_tps at 8 seats: measured 147" in text
    assert "\nrecommendation: " in text
    assert plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("extra", "message"), [
    (["--calibrate", "missing.json"], "--calibrate missing.json: cannot read it as JSON"),
    (["--seats", "8,8"], "--seats needs distinct positive seat counts"),
    (["--clients", "0"], "--clients must be positive"),
    (["--prefix-hit-rate", "1.5"], "--prefix-hit-rate must be within [0, 1)"),
    (["--max-num-seqs", "8"], "use --seats, not --max-num-seqs"),
])
def test_bad_input_is_exit_2(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_json_that_is_not_a_result_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    assert main([*ARGS, "--calibrate", str(path)]) == 2
    assert "neither a `dspark bench --json` result nor a sweep.json" in capsys.readouterr().err


def test_a_json_failure_is_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--seats", "8,8", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 2
    assert "--seats needs distinct positive seat counts" in data["error"]["message"]
