"""`dspark bench` against `vllm bench serve` on one vLLM 0.25.0 server on an H200 (issue 27's goal: within 2% for
goodput and the rate sweep's points), re-read from the recorded runs (tests/device/gpu_parity.py wrote them;
docs/bench.md has the table). Every figure is recomputed here from the runs' own JSON files."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "device" / "results" / "2026-12-02-parity" / "parity.tar.gz"
GOAL = 0.02  # the issue's: within 2%
# The figures the goal is about: goodput, and each sweep point's throughputs; the requests sent must be the same.
GOODPUT_FIGURES = ("request_goodput", "request_throughput", "output_throughput")
SWEEP_FIGURES = ("request_throughput", "output_throughput")
SAME_WORK = ("output_tokens", "input_tokens", "errors")


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_parity", ROOT / "tests" / "device" / "gpu_parity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("parity")
    with tarfile.open(RECORD) as tar:
        tar.extractall(out, filter="data")
    yield out / "parity"


@pytest.fixture(scope="module")
def rows(folder: Path) -> list[dict[str, Any]]:
    cmp: dict[str, Any] = _harness().compare_folder(folder)
    return list(cmp["rows"])


def _row(rows: list[dict[str, Any]], case: str, point: str, tool: str, figure: str) -> dict[str, Any]:
    (row,) = [r for r in rows if (r["case"], r["point"], r["tool"], r["figure"]) == (case, point, tool, figure)]
    return row


def test_the_record_is_the_h200_run_of_both_tools_on_one_vllm_025_server(folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["vllm_version"] == "0.25.0"
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    assert all(r["rc"] == 0 for r in runs), [(r["file"], r.get("stderr")) for r in runs if r["rc"]]
    assert {r["tool"] for r in runs} == {"dspark", "vllm"}
    # dspark drew the lengths with numpy as vLLM does (the same --seed: the same requests)
    for r in runs:
        if r["tool"] == "dspark":
            data = json.loads((folder / r["file"]).read_text())
            results = [p["result"] for p in data["points"]] if data.get("kind") == "dspark-bench-sweep" else [data]
            assert all(x["metadata"]["length_rng"].startswith("numpy") for x in results)


def test_both_tools_sent_the_same_requests(rows: list[dict[str, Any]]) -> None:
    same = [r for r in rows if r["figure"] in SAME_WORK]
    assert len(same) >= 3 * 6
    for r in same:
        assert r["dspark"] == r["vllm"], r  # token for token, and no errors on either side


def _goodput_runs(folder: Path) -> list[dict[str, Any]]:
    """The timed goodput runs, in the order run, each with its tool, round and request rate."""
    h = _harness()
    out = []
    for r in (json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()):
        if r["case"] == "goodput":
            data = json.loads((folder / r["file"]).read_text())
            figs = h.dspark_figures(data) if r["tool"] == "dspark" else h.vllm_figures(data)
            fraction = (data["summary"]["goodput_fraction"] if r["tool"] == "dspark"
                        else data["request_goodput"] / data["request_throughput"])
            out.append({**r, **figs, "fraction": fraction})
    return out


def steady_rounds(runs: list[dict[str, Any]], tolerance: float = 0.05) -> list[int]:
    """Rounds in which the server ran as it did for the rest: each tool's request rate there within `tolerance`
    of the median of that tool's runs (the first runs of a shape on a fresh server are slower)."""
    median = {t: statistics.median(r["request_throughput"] for r in runs if r["tool"] == t)
              for t in ("dspark", "vllm")}
    rounds = sorted({r["round"] for r in runs})
    return [k for k in rounds if all(abs(r["request_throughput"] / median[r["tool"]] - 1) <= tolerance
                                     for r in runs if r["round"] == k)]


def test_goodput_agrees_within_two_percent_where_the_server_was_steady(folder: Path) -> None:
    runs = _goodput_runs(folder)
    steady = steady_rounds(runs)
    # Round 1 ran on a server still warming up (each tool's first run of these prompts: no prefix-cache hits yet,
    # and the first runs of the shape): both tools' rates there are far below their other runs.
    assert steady == [2, 3, 4]
    for figure in GOODPUT_FIGURES:
        ours = [r[figure] for r in runs if r["tool"] == "dspark" and r["round"] in steady]
        theirs = [r[figure] for r in runs if r["tool"] == "vllm" and r["round"] in steady]
        assert len(ours) == len(theirs) == 3
        ratio = statistics.fmean(ours) / statistics.fmean(theirs)
        assert abs(ratio - 1) <= GOAL, (figure, ratio, ours, theirs)
    # What this record can and cannot show: SLOs read off the untimed (cold) run are met by every request of a
    # warm server, by both tools, so there goodput is the request rate; a run that separates requests is a
    # second call's (docs/bench.md).
    assert all(r["fraction"] == 1.0 for r in runs if r["round"] in steady)


def test_every_sweep_point_is_within_two_percent(rows: list[dict[str, Any]]) -> None:
    points = {r["point"] for r in rows if r["case"] == "sweep"}
    assert {"synchronous", "throughput"} <= points and len(points) == 5
    for point in points:
        for figure in SWEEP_FIGURES:
            row = _row(rows, "sweep", point, "dspark", figure)
            assert row["rounds"] == [1, 2], row  # dspark's sweep, vllm, vllm, dspark at the point
            assert abs(row["ratio"] - 1) <= GOAL, row


def test_vllms_goodput_is_its_own_arithmetic_on_its_requests(folder: Path) -> None:
    """The recorded vllm figure is what calculate_metrics gives for its per-request data (--save-detailed), so the
    comparison is against vLLM's own counting, recomputed here: a request is good when TTFT and TPOT each meet
    their SLO, goodput is the good ones per second of the benchmark's duration."""
    meta = json.loads((folder / "meta.json").read_text())
    slos = meta["slos_ms"]
    runs = [json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()]
    checked = 0
    for r in runs:
        if r["tool"] != "vllm" or r["case"] != "goodput":
            continue
        data = json.loads((folder / r["file"]).read_text())
        good = 0
        for ttft, itl, n in zip(data["ttfts"], data["itls"], data["output_lens"], strict=True):
            tpot = sum(itl) / (n - 1) if n > 1 else 0.0
            good += ttft * 1e3 <= slos["ttft"] and tpot * 1e3 <= slos["tpot"]
        assert math.isclose(good / data["duration"], data["request_goodput"], rel_tol=1e-9)
        checked += 1
    assert checked >= 4


def test_the_sweep_points_agree_in_each_round_too(rows: list[dict[str, Any]]) -> None:
    """The 2% is not one lucky mean: each round's own ratio of every sweep point's throughputs is within twice the goal
    (the sweep's rounds: dspark's sweep then vllm at its points, then vllm and dspark at each point)."""
    checked = 0
    for r in rows:
        if r["case"] == "sweep" and r["figure"] in SWEEP_FIGURES:
            assert all(abs(x - 1) <= 2 * GOAL for x in r["round_ratios"]), r
            checked += 1
    assert checked == 10
