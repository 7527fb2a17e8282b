"""The recorded H200 step-time points (tests/device/results/2026-12-02-clock, gpu_clock.py) keep the format the
clock's replanning reads: every point's configuration, the bench's figures, its full record, its engine start and
aiconfigurator's figures where it has data (README.md there describes the files)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "tests/device/results/2026-12-02-clock"
CONFIGS = ROOT / "tests/device/configs"
POINTS = [json.loads(line) for line in (RESULTS / "points.jsonl").read_text().splitlines() if line.strip()]
ENGINES = {e["engine_config"]: e for e in map(json.loads, (RESULTS / "engines.jsonl").read_text().splitlines())}
AIC = json.loads((RESULTS / "aiconfigurator.json").read_text())
CONFIG_KEYS = {"engine_config", "model_config", "engine", "engine_version", "argv", "seats", "max_num_seqs",
               "max_model_len", "input_len", "output_len", "concurrency", "requests", "enforce_eager", "warm_rerun"}
FIGURES = ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s", "tpot_mean_ms", "wall_time_s")
IDS = [f"{p['config']['engine_config']}/{p['config']['point']}" for p in POINTS]


def _table() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_clock_table", ROOT / "tests/device/gpu_clock_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_recorded_set_covers_what_issue_25_asks() -> None:
    cfgs = [p["config"] for p in POINTS]
    dense = [c for c in cfgs if c["model_config"] == "qwen3-8b" and not c["enforce_eager"] and not c["warm_rerun"]]
    assert {c["concurrency"] for c in dense if c["input_len"] == 1024} >= {1, 2, 4, 8, 16, 32, 64, 128}
    assert {c["input_len"] for c in dense} == {1024, 4096}
    assert any(c["model_config"] == "qwen3-30b-a3b" for c in cfgs)
    assert any(c["enforce_eager"] for c in cfgs)
    assert {c["seats"] for c in cfgs if c["warm_rerun"]} == {8, 16}
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("point", POINTS, ids=IDS)
def test_a_point_has_its_configuration_figures_and_record(point: dict[str, Any]) -> None:
    cfg = point["config"]
    assert set(cfg) >= CONFIG_KEYS
    assert (CONFIGS / f"{cfg['model_config']}.json").exists()
    assert cfg["seats"] == cfg["max_num_seqs"] == int(cfg["argv"][cfg["argv"].index("--max-num-seqs") + 1])
    assert cfg["enforce_eager"] == ("--enforce-eager" in cfg["argv"])
    assert point["bench_rc"] == 0 and point["summary"]["errors"] == 0
    for name in FIGURES:
        value = point["summary"][name]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, name
    # aggregate decode is the output tokens over the wall time of the pass
    tokens = cfg["requests"] * cfg["output_len"]
    assert point["summary"]["aggregate_decode_tps"] == pytest.approx(tokens / point["summary"]["wall_time_s"])
    full = json.loads((RESULTS / point["file"]).read_text())
    assert full["config"] == cfg and full["bench"]["summary"] == point["summary"]
    assert full["bench"]["concurrency"] == cfg["concurrency"] and full["bench"]["max_tokens"] == cfg["output_len"]
    assert ENGINES[cfg["engine_config"]]["argv"] == cfg["argv"]
    if cfg["warm_rerun"]:
        assert point["warm"]["engine"]["prefix_hit_rate"] == point["summary"]["warm_prefix_hit_rate"] > 0.99
        assert point["warm"]["wall_time_s"] == point["summary"]["warm_wall_time_s"]


def test_aiconfigurator_has_every_point_once_with_figures_or_a_reason() -> None:
    assert (AIC["system"], AIC["backend"], AIC["backend_version"]) == ("h200_sxm", "vllm", "0.24.0")
    assert [p["point"] for p in AIC["points"]] == IDS
    for p, point in zip(AIC["points"], POINTS, strict=True):
        if p["static"] is None:
            assert p["why"] and point["config"]["enforce_eager"]
            continue
        assert p["inputs"]["batch_size"] == min(point["config"]["concurrency"], point["config"]["seats"])
        assert all(p["static"][k] > 0 for k in FIGURES)


def test_the_table_has_a_row_per_pass_and_the_error_beside_each_figure() -> None:
    table = _table()
    lines = table.rows(RESULTS)
    warm = sum(1 for p in POINTS if p.get("warm"))
    assert len(lines) == 2 + len(POINTS) + warm
    assert table.cell(100.0, 110.0, "{:.0f}") == "100 / 110 (+10%)"
    assert table.cell(2.0, None, "{:.1f}") == "2.0"
    assert table.cell(None, 3.0, "{:.1f}") == "-"
