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
    assert "engine CPU per step: " in text and "(fitted to 1 measured point(s))" in text
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
    assert "neither a `dspark bench --json` result, a sweep.json nor a `dspark profile` JSON" in capsys.readouterr().err


def test_a_json_failure_is_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--seats", "8,8", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 2
    assert "--seats needs distinct positive seat counts" in data["error"]["message"]


def test_flash_next_kv_peak_next_to_the_deployments(capsys: pytest.CaptureFixture[str]) -> None:
    """What the block count says for the seed's 8 and 16 seats beside the /metrics peaks it recorded (16%, 31%).

    Not fitted: the rule is vLLM's; the gap is printed and bounded so a change to either side shows. The seed's
    pool is uncertain (docs/version-matrix.md: its 6.52 full contexts need ~3,090 blocks, the 28 GB pin gives
    3,651); the smaller pool is printed too.
    """
    from dspark.advise.kv_usage import counting_for  # noqa: PLC0415
    from dspark.planning.validate import ValidateRequest, validate  # noqa: PLC0415

    assert main(["advise", "flash-next-vllm", "--seats", "8,16", "--clients", "32", "--requests", "100",
                 "--input-len", "2048", "--output-len", "512", "--json"]) == 0
    preds = {p["seats"]: p for p in json.loads(capsys.readouterr().out)["predictions"]}
    report = validate(ValidateRequest(recipe="flash-next-vllm", flags={"max_num_seqs": 8}))
    assert report.recipe is not None
    observed = {o.seats: o.value for o in report.recipe.observations if o.metric == "kv_usage_peak"}
    counting = counting_for(report.capacity)
    usable = counting.pools[0].size
    per_seat = counting.per_request(2048 + 511)["blocks"]
    lines = []
    for seats in (8, 16):
        pred = preds[seats]["kv_peak_fraction"]
        implied = observed[seats] * usable / seats
        lines.append(f"{seats} seats: predicted {pred:.3f} ({pred * usable / 3090:.3f} with a 3,090-block pool) vs "
                     f"observed {observed[seats]:.2f} (x{observed[seats] / pred:.1f}); the observation means "
                     f"{implied:.0f} blocks per seat, the rule holds {per_seat} at 2,559 tokens")
        # The known gap: 3-4x below the deployment's figure (see docs/advise.md for what would explain it).
        assert 3.0 < observed[seats] / pred < 4.0
    with capsys.disabled():
        print("\nFlash-Next KV peak, vLLM's block count vs the deployment's /metrics:\n  " + "\n  ".join(lines))
    # The seat scaling is the engine's: twice the seats, twice the blocks (observed ×1.94).
    ratio = preds[16]["kv_peak_fraction"] / preds[8]["kv_peak_fraction"]
    assert ratio == pytest.approx(observed[16] / observed[8], rel=0.10)


def test_the_kv_peak_says_how_it_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--prefix-hit-rate", "0.5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(p["kv_usage_metric"] == "vllm:kv_cache_usage_perc" for p in data["predictions"])
    assert any("BlockPool.get_usage" in a for a in data["assumptions"])
    assert any("cached prefix as its own" in a for a in data["assumptions"])
    assert main([*ARGS, "--json"]) == 0
    assert not any("cached prefix as its own" in a for a in json.loads(capsys.readouterr().out)["assumptions"])


# --- issue 16 item 9: the engine's seat cap, calibrations that do not fit the plan, seats a bench records -------

def _bench(**summary: object) -> dict[str, object]:
    """A `dspark bench --json` result of the seed's 8-seat setting (32 clients, 2,048 prompt tokens, 512 out)."""
    return {"concurrency": 32, "requests": 100, "max_tokens": 512, "prompt_source": "synthetic ids, 2048 tokens",
            "model": "flash-next", "metadata": {"engine": "vllm"},
            "reps": [{"stats": {"requests": 100, "errors": 0, "output_tokens": 51200, "prompt_tokens_mean": 2048}}],
            "summary": {"aggregate_decode_tps": 147.0, "per_stream_decode_tps": 20.3, "ttft_mean_s": 71.9,
                        "running_peak": 8, **summary}}


def _write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_advise_predicts_the_seats_the_engine_runs_not_the_ones_asked(capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang runs the 27B at most 22 seats on the GB10 pair (validate: seats-capped-by-engine): 32 asked is 22 run.
    assert main(["advise", "qwen27b-dflash-sglang", "--seats", "8,16,32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["seats"] for p in data["predictions"]] == [8, 16, 22]
    assert [p["seats_asked"] for p in data["predictions"]] == [8, 16, 32]
    assert any(a.startswith("32 seats asked: sglang runs at most 22") for a in data["assumptions"])
    assert data["recommendation"]["seats"] in (8, 16, 22)
    assert main(["advise", "qwen27b-dflash-sglang", "--seats", "8,16,32"]) == 0
    assert "| 22 (32 asked) |" in capsys.readouterr().out


@pytest.mark.parametrize(("change", "named"), [
    ({"model": "some-other-model"}, "model 'some-other-model'"),
    ({"metadata": {"engine": "sglang"}}, "engine 'sglang'"),
])
def test_a_calibration_from_another_model_or_engine_is_refused(
    change: dict[str, object], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "bench.json", {**_bench(), **change})
    assert main([*ARGS, "--calibrate", path]) == 2
    err = capsys.readouterr().err
    assert f"--calibrate {path}" in err and named in err and "this plan" in err


def test_a_fit_that_misses_its_points_or_leaves_physics_is_warned(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # Three seat counts fit the bandwidth too; figures no GB10 pair reaches (1,000x the seed's) would need a
    # bandwidth far above the GB10's 273 GB/s, which the fit's bounds do not allow, and a TTFT that falls as seats
    # rise cannot be met by any one set of costs: the fit says it misses them.
    files = [_write(tmp_path, f"{n}.json", _bench(running_peak=n, aggregate_decode_tps=147_000.0 * n / 8,
                                                  per_stream_decode_tps=20_300.0, ttft_mean_s=ttft))
             for n, ttft in ((6, 0.5), (8, 70.0), (16, 0.1))]
    assert main([*ARGS, *(a for f in files for a in ("--calibrate", f)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    warnings = data["warnings"]
    assert not any("above the NVIDIA GB10's peak" in w for w in warnings)
    bandwidth = next(t for t in data["model"]["terms"] if t.startswith("achieved memory bandwidth: "))
    assert float(bandwidth.split(": ")[1].split(" GB/s")[0]) <= 273.0
    assert any(w.startswith("the fit misses ") and "beyond ±25%" in w for w in warnings)


def test_a_fit_that_asks_for_a_negative_cost_is_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each stream decodes at the seed's 20.3 tokens/s at 6, 8 and 16 seats: a seat added costs the step nothing,
    # or less than nothing, which no engine does. The fit's bounds keep every cost positive, so it cannot follow
    # them and says that it misses them.
    files = [_write(tmp_path, f"{n}.json", _bench(running_peak=n, aggregate_decode_tps=20.3 * n,
                                                  per_stream_decode_tps=20.3)) for n in (6, 8, 16)]
    assert main([*ARGS, *(a for f in files for a in ("--calibrate", f)), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any(w.startswith("the fit misses ") for w in data.get("warnings", []))
    per_row = next(t for t in data["model"]["terms"] if t.startswith("engine CPU per request in a step: "))
    assert float(per_row.split(": ")[1].split(" µs")[0]) > 0


def test_a_bench_without_seats_or_a_running_peak_is_refused_naming_both_fixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blind = _bench()
    del blind["summary"]["running_peak"]  # type: ignore[attr-defined]  # no /metrics (behind a proxy)
    assert main([*ARGS, "--calibrate", _write(tmp_path, "blind.json", blind)]) == 2
    err = capsys.readouterr().err
    assert "records neither the server's seats" in err
    assert "dspark bench --seats N" in err and "/metrics" in err
    assert main([*ARGS, "--calibrate", _write(tmp_path, "seats.json", {**blind, "seats": 8}), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["calibration_seats"] == [8]
