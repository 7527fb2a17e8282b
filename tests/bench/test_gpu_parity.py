"""`dspark bench` against `vllm bench serve` on one vLLM 0.25.0 server on an H200 (issue 27's goal: within 2% for
goodput and the rate sweep's points), re-read from the recorded runs (tests/device/gpu_parity.py wrote them;
docs/bench.md has the table). Every figure is recomputed here from the runs' own JSON files."""

from __future__ import annotations

import importlib.util
import itertools
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




SECOND_RECORD = ROOT / "tests" / "device" / "results" / "2026-12-02-parity-goodput" / "parity.tar.gz"


def test_the_second_runs_slower_dspark_rounds_were_the_servers_steps_not_the_clients_turnaround(
        tmp_path: Path) -> None:
    """The second goodput run (32 closed-loop streams over 16 seats): dspark's request rate was 0.89-0.98 of
    vllm's as paired. Both clients kept the same number of requests at the server (each request's client-side
    latency summed over the run's duration: 30.5-30.8 of 32 for both, the rest the ramp-down), so neither was slow
    to send the next request; the rate followed the server's step time (TPOT), which moved as much between one
    tool's own back-to-back runs as between the tools."""
    with tarfile.open(SECOND_RECORD) as tar:
        tar.extractall(tmp_path, filter="data")
    folder = tmp_path / "parity"
    in_flight: dict[str, list[float]] = {"dspark": [], "vllm": []}
    tpot: dict[str, list[float]] = {"dspark": [], "vllm": []}
    rate: dict[str, list[float]] = {"dspark": [], "vllm": []}
    for r in (json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines()):
        if r["case"] != "goodput":
            continue
        data = json.loads((folder / r["file"]).read_text())
        if r["tool"] == "vllm":
            busy = sum(t + sum(itl) for t, itl in zip(data["ttfts"], data["itls"], strict=True))
            in_flight["vllm"].append(busy / data["duration"])
            tpot["vllm"].append(data["mean_tpot_ms"])
            rate["vllm"].append(data["request_throughput"])
        else:
            s = data["summary"]
            in_flight["dspark"].append(data["requests"] * s["e2e_mean_ms"] / 1e3 / s["wall_time_s"])
            tpot["dspark"].append(s["tpot_mean_ms"])
            rate["dspark"].append(s["request_throughput"])
    assert len(in_flight["dspark"]) == len(in_flight["vllm"]) == 4
    everyone = in_flight["dspark"] + in_flight["vllm"]
    assert max(everyone) / min(everyone) - 1 < 0.01 and 30 < min(everyone) < 32, in_flight
    assert statistics.fmean(rate["dspark"]) < statistics.fmean(rate["vllm"])  # what the second run reported
    # the rate is the server's step time, run by run, whichever tool ran: rate x TPOT the same within 1.5%
    # (230.3 +- 0.6 recorded)
    products = [x * y for t in rate for x, y in zip(rate[t], tpot[t], strict=True)]
    assert max(products) / min(products) - 1 < 0.015, products
    # and one tool's own spread of TPOT is as wide as the gap between the tools' means
    gap = statistics.fmean(tpot["dspark"]) / statistics.fmean(tpot["vllm"]) - 1
    assert max(tpot["vllm"]) / min(tpot["vllm"]) - 1 > gap > 0, (gap, tpot)

# ---- the open-loop goodput case (third run): SLO sets at several percentiles, a server far from queueing ----------

OPEN_RECORD = ROOT / "tests" / "device" / "results" / "2026-12-02-parity-goodput2" / "parity.tar.gz"


def _unpacked(tmp_path_factory: pytest.TempPathFactory, record: Path, name: str) -> Path:
    """A recorded parity.tar.gz unpacked into a fresh folder: its parity/ folder."""
    out = tmp_path_factory.mktemp(name)
    with tarfile.open(record) as tar:
        tar.extractall(out, filter="data")
    return out / "parity"


@pytest.fixture(scope="module")
def open_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpacked(tmp_path_factory, OPEN_RECORD, "parity-open")


@pytest.fixture(scope="module")
def open_report(open_folder: Path) -> dict[str, Any]:
    rep: dict[str, Any] = _harness().open_folder(open_folder)
    return rep


def _open_runs(folder: Path) -> list[dict[str, Any]]:
    return [r for r in (json.loads(line) for line in (folder / "runs.jsonl").read_text().splitlines())
            if r["case"] == "open"]


def test_the_open_case_ran_both_tools_alternating_on_one_vllm_025_server(open_folder: Path) -> None:
    meta = json.loads((open_folder / "meta.json").read_text())
    assert meta["vllm_version"] == "0.25.0" and meta["prefix_caching"] is False
    runs = _open_runs(open_folder)
    assert all(r["rc"] == 0 for r in runs), [(r["file"], r.get("stderr")) for r in runs if r["rc"]]
    timed = [(r["round"], r["tool"] + (f" {r['variant']}" if r["variant"] else "")) for r in runs if r["round"]]
    rounds = sorted({k for k, _ in timed})
    assert len(rounds) >= 4
    # D V Dn | Dn V D | ...: vllm in the middle, dspark as shipped and with --no-metrics alternately first and
    # last, so a steady drift of the server cancels over two rounds
    order = ("dspark", "vllm", "dspark no-metrics")
    assert timed == [(k, t) for k in rounds for t in (order if k % 2 else order[::-1])]
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) % 2 == 0


def test_both_tools_sent_the_same_requests_at_the_same_times(open_folder: Path) -> None:
    """One seed, rate and burstiness: the same lengths token for token (the server counted them) and the same
    arrival times (vLLM's gamma draws, rescaled to N / rate; dspark draws numpy's the same way): each request's
    send, from the first one's, within a few ms in both tools' own records."""
    h = _harness()
    runs = [r for r in _open_runs(open_folder) if r["round"]]
    sends: dict[str, list[float]] = {}
    for r in runs:
        if r["tool"] == "vllm":
            starts = json.loads((open_folder / r["file"]).read_text())["start_times"]
        else:
            starts = [q["start"] for q in json.loads((open_folder / r["records"]).read_text())[0]["records"]]
        offsets = [s - starts[0] for s in starts]
        ref = sends.setdefault(r["tool"], offsets)
        assert len(offsets) == len(ref)
        sends.setdefault("all", offsets)
        gaps = sorted(abs(a - b) for a, b in zip(offsets, sends["all"], strict=True))
        # recorded: median 0.3-0.5 ms, 99th percentile 1.5-1.9 ms, over 387 requests a run
        assert statistics.median(gaps) < 0.001 and gaps[int(0.99 * (len(gaps) - 1))] < 0.005, (r["file"], gaps[-5:])
    rep = h.open_folder(open_folder)
    assert set(rep["variants"]) == {"dspark", "dspark no-metrics"}
    for variant in rep["variants"].values():
        for fig in ("server_prompt_tokens_total", "server_generation_tokens_total",
                    "server_e2e_request_latency_count"):
            e = variant["figures"][fig]
            assert e["dspark"]["range"] == 0 and e["vllm_all_runs"]["range"] == 0 and e["ratio"] == 1.0, (fig, e)
    assert all(row["completed"] == row["sent"] for row in rep["runs"])


def test_each_tools_reported_goodput_is_its_per_request_data_counted_as_vllm_counts(open_report: dict[str, Any]
                                                                                      ) -> None:
    """What each tool printed for the SLOs it was given equals vLLM's rule applied to that tool's own per-request
    figures (vllm's --save-detailed; dspark's records, from the same `summarize` call that printed it), so the
    other SLO sets, recomputed from the same data, are each tool's figure as it would have printed it."""
    for row in open_report["runs"]:
        assert math.isclose(row["reported_goodput"], row[f"goodput:{open_report['reported_set']}"],
                            rel_tol=1e-9), row


def test_the_open_loop_request_rate_agrees_within_two_percent_in_every_round(open_report: dict[str, Any]) -> None:
    """Open loop, the request rate is the arrivals' (N over the last arrival plus the last request's latency):
    recorded 1.001 (as shipped) and 1.007 (--no-metrics), each round within 0.993-1.016."""
    for variant in open_report["variants"].values():
        e = variant["figures"]["request_throughput"]
        assert abs(e["ratio"] - 1) <= GOAL / 2, e
        assert all(abs(x - 1) <= GOAL for x in e["round_ratios"]), e


def test_both_clients_measure_what_the_server_measured(open_report: dict[str, Any]) -> None:
    """Each run's mean TPOT as the client saw it equals the server's own (vLLM's per-request time per output token
    histogram, read before and after the run) within 0.1 ms (recorded: 0.025-0.068 ms below it, both tools), and
    its mean TTFT is the server's plus the client's own path to the first chunk: 2.2-3.5 ms for dspark, 4.3-4.7 ms
    for vllm bench serve, dspark's the smaller in every round."""
    by_round: dict[int, dict[str, float]] = {}
    for row in open_report["runs"]:
        assert abs(row["mean_tpot_ms"] - row["server_request_time_per_output_token_mean_ms"]) < 0.1, row
        offset = row["client_minus_server_ttft_ms"]
        assert 1.0 < offset < 6.0, row
        by_round.setdefault(row["round"], {})[row["tool"]] = offset
    for k, tools in by_round.items():
        assert max(tools["dspark"], tools["dspark no-metrics"]) < tools["vllm"], (k, tools)


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    for rank, i in enumerate(order):
        out[i] = float(rank)
    return out


def test_goodput_follows_the_servers_own_speed_whichever_tool_ran(open_report: dict[str, Any]) -> None:
    """Across all twelve timed runs (both tools) every SLO set's goodput falls as the server's own inter-token
    latency rises (Spearman rank correlation -0.95 to -0.99 recorded): where the two tools' goodputs differ, the
    server ran at another speed. The two runs of different tools at the nearest server speed (ITL 16.2 ms under
    dspark, 16.8 under vllm bench serve) gave 17.07 and 17.06 req/s."""
    runs = open_report["runs"]
    assert len(runs) == 12
    itl = _ranks([r["server_inter_token_latency_mean_ms"] for r in runs])
    for name in open_report["slo_sets_ms"]:
        rho = statistics.correlation(itl, _ranks([r[f"goodput:{name}"] for r in runs]))
        assert rho < -0.9, (name, rho)
    d = min((r for r in runs if r["tool"].startswith("dspark")),
            key=lambda r: abs(r["server_inter_token_latency_mean_ms"] - 16.75))
    v = min((r for r in runs if r["tool"] == "vllm"), key=lambda r: r["server_inter_token_latency_mean_ms"])
    assert abs(d["server_inter_token_latency_mean_ms"] / v["server_inter_token_latency_mean_ms"] - 1) < 0.05
    assert abs(d["reported_goodput"] / v["reported_goodput"] - 1) < GOAL, (d, v)


def test_the_record_cannot_decide_goodput_parity_the_server_moved_too_much(open_report: dict[str, Any]) -> None:
    """What this record says about the 2% goal, honestly: nothing either way. The server (16 seats, open loop at
    half its 16-stream rate, identical requests and arrival times) ran slower under vllm bench serve's runs
    (its own mean ITL 16.8-20.6 ms, against 9.9-18.1 under dspark's) and drifted through the call, so vllm's own
    goodput moved by 9-39% (coefficient of variation over its four runs) on every SLO set, far above the 2% to
    decide, and dspark / vllm came out 1.37-2.38. Where it was steady (the request rate) the tools agree."""
    for variant in open_report["variants"].values():
        for name in open_report["slo_sets_ms"]:
            e = variant["figures"][f"goodput:{name}"]
            assert e["vllm_all_runs"]["cv"] > 2 * GOAL, (name, e)  # no SLO set on which the case is steady
            assert e["ratio"] > 1 + GOAL, (name, e)
    server = [r["server_inter_token_latency_mean_ms"] for r in open_report["runs"]]
    vllm_runs = [r["server_inter_token_latency_mean_ms"] for r in open_report["runs"] if r["tool"] == "vllm"]
    assert min(vllm_runs) > statistics.median(server)  # every vllm run on the slower half of the server's speeds


# ---- the open-loop case again (fourth run): vllm bench serve's own prompts sent by dspark, 0.3 of the capacity ----

FOURTH_RECORD = ROOT / "tests" / "device" / "results" / "2026-12-02-parity-goodput3" / "parity.tar.gz"
PROMPTS = "dspark vllm-prompts"  # dspark sending vllm's random-dataset requests (its get_samples) through --prompts
SYNTHETIC = "dspark"  # dspark's own synthetic text prompts, as shipped
# The SLO sets this record is asked to decide the 2% on, and what it found there (docs/bench.md): a set decides
# when the standard error of the ratio of the round means is at most the goal, from both tools' run-to-run spread
# (sqrt(cv_dspark^2 + cv_vllm^2) / sqrt(rounds)), and one run's binomial noise at vllm's good fraction is too.
DECIDED = {"ttft-p90", "tpot-p90"}
# the sets at the knee: SLOs at the p50/p75 of a run sit in the bulk of the distribution, where a few per cent
# of the server's speed moves many requests across the threshold (vllm's own goodput cv 12-19% over its 4 runs)
KNEE = {"ttft-p50", "tpot-p50", "e2el-p50", "ttft+tpot-p75"}


@pytest.fixture(scope="module")
def fourth_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpacked(tmp_path_factory, FOURTH_RECORD, "parity-open-4")


@pytest.fixture(scope="module")
def fourth_report(fourth_folder: Path) -> dict[str, Any]:
    rep: dict[str, Any] = _harness().open_folder(fourth_folder)
    return rep


def _percentile(values: list[float], q: float) -> float:
    """numpy's default (linear) percentile, as vllm's figures and the SLO sets use it."""
    v = sorted(values)
    rank = (len(v) - 1) * q / 100
    lo = int(rank)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (rank - lo)


def _per_request(folder: Path, run: dict[str, Any]) -> tuple[float, list[dict[str, float]]]:
    """A run's duration and each successful request's TTFT, TPOT and E2EL (s), from the tool's own per-request
    record, counted as vLLM's calculate_metrics counts (written out here, not the harness's code): latency is
    the last token's time from the send (vllm: TTFT plus the ITLs), TPOT = (latency − TTFT) / (output − 1)."""
    out = []
    if run["tool"] == "vllm":
        data = json.loads((folder / run["file"]).read_text())
        for ttft, itl, n, err in zip(data["ttfts"], data["itls"], data["output_lens"], data["errors"], strict=True):
            assert not err and n > 1
            latency = ttft + sum(itl)
            out.append({"ttft": ttft, "tpot": (latency - ttft) / (n - 1), "e2el": latency})
        return float(data["duration"]), out
    (first,) = json.loads((folder / run["records"]).read_text())  # one pass
    for r in first["records"]:
        assert r["error"] is None and r["output_tokens"] > 1
        ttft, latency = r["first_token"] - r["start"], r["last_token"] - r["start"]
        out.append({"ttft": ttft, "tpot": (latency - ttft) / (r["output_tokens"] - 1), "e2el": latency})
    return float(first["wall_time_s"]), out


def _fourth_goodputs(folder: Path) -> tuple[dict[str, dict[str, float]], dict[str, dict[int, dict[str, float]]]]:
    """The SLO sets (ms, at their percentiles of the untimed vllm run) and, per tool and round, each set's goodput
    (req/s) recomputed from the per-request records."""
    h = _harness()
    runs = _open_runs(folder)
    (slo_run,) = [r for r in runs if r["point"] == "slo"]
    _, reqs = _per_request(folder, slo_run)
    sets = {name: {slo: round(_percentile([q[slo] * 1e3 for q in reqs], p), 3) for slo, p in spec.items()}
            for name, spec in h.SLO_SETS.items()}
    out: dict[str, dict[int, dict[str, float]]] = {}
    for r in runs:
        if not r["round"]:
            continue
        duration, reqs = _per_request(folder, r)
        tool = r["tool"] + (f" {r['variant']}" if r["variant"] else "")
        out.setdefault(tool, {})[r["round"]] = {
            name: sum(all(q[slo] * 1e3 <= ms for slo, ms in slos.items()) for q in reqs) / duration
            for name, slos in sets.items()}
    return sets, out


def _cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs)


def test_the_fourth_record_ran_vllms_own_prompts_through_dspark_beside_its_synthetic_ones(fourth_folder: Path
                                                                                          ) -> None:
    meta = json.loads((fourth_folder / "meta.json").read_text())
    assert meta["vllm_version"] == "0.25.0" and meta["prefix_caching"] is False
    assert meta["open_workload"]["load"] == 0.3 and meta["open_workload"]["requests"] == 232
    runs = _open_runs(fourth_folder)
    assert all(r["rc"] == 0 for r in runs)
    timed = [(r["round"], r["tool"] + (f" {r['variant']}" if r["variant"] else "")) for r in runs if r["round"]]
    order = (SYNTHETIC, "vllm", PROMPTS)  # D V P | P V D | D V P | P V D
    assert timed == [(k, t) for k in (1, 2, 3, 4) for t in (order if k % 2 else order[::-1])]
    for r in runs:
        if r["variant"] == "vllm-prompts":  # the file's prompts and max_tokens, nothing synthetic
            assert "--prompts" in r["argv"] and "--input-len" not in r["argv"] and "--prompt-kind" not in r["argv"]


def test_the_three_loads_were_the_same_requests_and_only_the_prompt_text_differs(fourth_folder: Path) -> None:
    """dspark's synthetic prompts and vllm's random-dataset ones: the same token count per request, in the same
    order (each tool's own per-request count: dspark's from the server's usage block, vllm's input_lens), the
    same max_tokens, the same arrival times; what differs is the text. With the word-level tokenizer (3 specials,
    dspark's 93 words, then t<N>) vllm's prompts are runs of consecutive ids from a random offset over the whole
    vocabulary (its RandomDataset: (offset + index + arange(len)) over the allowed ids, decoded, re-encoded), so no
    word of dspark's list; dspark's are its 93 words drawn at random."""
    runs = [r for r in _open_runs(fourth_folder) if r["round"]]
    vllm_data = json.loads((fourth_folder / runs[1]["file"]).read_text())
    lens, outs = vllm_data["input_lens"], vllm_data["output_lens"]
    starts: dict[str, list[float]] = {}
    for r in runs:
        if r["tool"] == "vllm":
            data = json.loads((fourth_folder / r["file"]).read_text())
            assert (data["input_lens"], data["output_lens"]) == (lens, outs)
            s = data["start_times"]
        else:
            (first,) = json.loads((fourth_folder / r["records"]).read_text())
            assert [q["prompt_tokens"] for q in first["records"]] == lens, r["file"]
            assert [q["output_tokens"] for q in first["records"]] == outs, r["file"]
            s = [q["start"] for q in first["records"]]
        offsets = [t - s[0] for t in s]
        ref = starts.setdefault("first", offsets)
        gaps = sorted(abs(a - b) for a, b in zip(offsets, ref, strict=True))
        # recorded: median 0.3-0.6 ms, max 2.4 ms
        assert statistics.median(gaps) < 0.001 and gaps[-1] < 0.005, (r["file"], gaps[-3:])
    lines = [json.loads(line) for line in (fourth_folder / "vllm-prompts.jsonl").read_text().splitlines()]
    assert [len(q["prompt"].split()) for q in lines] == lens and [q["max_tokens"] for q in lines] == outs
    tokenizer = json.loads((fourth_folder / "meta.json").read_text())["tokenizer"]
    specials_and_words = 3 + tokenizer["dspark_words"]  # t0's id
    assert tokenizer["probe_ids"][5] == specials_and_words + 7  # "t7"
    for q in lines:
        ids = [int(w.removeprefix("t")) + specials_and_words for w in q["prompt"].split()]
        assert all(w.startswith("t") for w in q["prompt"].split())
        allowed = tokenizer["vocab_size"] - 3  # every id but the 3 specials, wrapping round
        assert all((b - a) % allowed == 1 for a, b in itertools.pairwise(ids)), ids[:5]  # consecutive


def test_every_slo_sets_goodput_is_recomputed_from_both_tools_records(fourth_folder: Path,
                                                                       fourth_report: dict[str, Any]) -> None:
    """vLLM's rule written out here on each tool's per-request records gives the harness's report, every set and
    run, and what each tool printed for the set it was given (ttft+tpot-p90)."""
    sets, goodputs = _fourth_goodputs(fourth_folder)
    assert sets == fourth_report["slo_sets_ms"]
    assert sets["ttft+tpot-p90"] == {"ttft": 93.785, "tpot": 12.047}  # what both command lines had
    for row in fourth_report["runs"]:
        mine = goodputs[row["tool"]][row["round"]]
        for name in sets:
            assert math.isclose(mine[name], row[f"goodput:{name}"], rel_tol=1e-12), (row["file"], name)
        assert math.isclose(row["reported_goodput"], mine["ttft+tpot-p90"], rel_tol=1e-9), row["file"]


def _decision(goodputs: dict[str, dict[int, dict[str, float]]], tool: str, name: str,
              rounds: tuple[int, ...] = (1, 2, 3, 4)) -> dict[str, float]:
    ours = [goodputs[tool][k][name] for k in rounds]
    theirs = [goodputs["vllm"][k][name] for k in rounds]
    return {"ratio": statistics.fmean(ours) / statistics.fmean(theirs),
            "se": math.hypot(_cv(ours), _cv(theirs)) / math.sqrt(len(rounds)), "vllm_cv": _cv(theirs)}


def test_goodput_with_the_same_prompts_is_within_two_percent_where_the_record_decides_it(
        fourth_folder: Path, fourth_report: dict[str, Any]) -> None:
    """The criterion (stated once, DECIDED): an SLO set decides the 2% when the ratio of the 4-round means has a
    standard error (both tools' run-to-run cv, over the rounds) at most the goal, and one run's binomial noise at
    vllm's good fraction is within it too. Met by TTFT p90 and TPOT p90, and there dspark / vllm is 1.0019 and
    0.9975. The given set (ttft+tpot p90) came out 1.0007 but its standard error is 2.3%: within 2% as measured,
    not decided by this record."""
    _, goodputs = _fourth_goodputs(fourth_folder)
    variant = fourth_report["variants"][PROMPTS]["figures"]
    decided = set()
    for name in fourth_report["slo_sets_ms"]:
        d = _decision(goodputs, PROMPTS, name)
        assert math.isclose(variant[f"goodput:{name}"]["ratio_se"], d["se"], rel_tol=1e-9)  # the harness's table
        if d["se"] <= GOAL and variant[f"goodput:{name}"]["binomial_rel_sd"] <= GOAL:
            decided.add(name)
            assert abs(d["ratio"] - 1) <= GOAL, (name, d)
    assert decided == DECIDED
    given = _decision(goodputs, PROMPTS, "ttft+tpot-p90")
    assert abs(given["ratio"] - 1) < GOAL / 10 and GOAL < given["se"] < 1.25 * GOAL, given
    # the request rate (the arrivals'): within 0.3% in every round
    e = fourth_report["variants"][PROMPTS]["figures"]["request_throughput"]
    assert all(abs(x - 1) < 0.003 for x in e["round_ratios"]), e


def test_the_knee_sets_are_not_decided_vllms_own_goodput_moves_too_much(fourth_folder: Path,
                                                                          fourth_report: dict[str, Any]) -> None:
    """Honestly, what is not met: at SLOs set at a run's p50 or p75 dspark / vllm is 0.91-0.99, and the record
    cannot tell that from 1: vllm's own goodput moved by 12-19% (cv) between its own four runs, 4.4-5.4 times
    one run's binomial noise (2.5-4.3%): the server's own speed moved between runs by a few per cent (its
    mean ITL 5.9-7.1 ms under vllm's runs), and at a threshold in the bulk of the distribution that moves many
    requests across it."""
    _, goodputs = _fourth_goodputs(fourth_folder)
    for name in KNEE:
        d = _decision(goodputs, PROMPTS, name)
        binomial = fourth_report["variants"][PROMPTS]["figures"][f"goodput:{name}"]["binomial_rel_sd"]
        assert d["se"] > 2 * GOAL and d["vllm_cv"] > 0.1 and d["vllm_cv"] > 2.5 * binomial, (name, d, binomial)
        assert 0.9 < d["ratio"] < 1.0, (name, d)
    assert KNEE | DECIDED | {"ttft+tpot-p90"} == set(fourth_report["slo_sets_ms"])


def test_dsparks_own_prompts_trailed_only_in_the_calls_first_timed_run(fourth_folder: Path,
                                                                        fourth_report: dict[str, Any]) -> None:
    """dspark with its synthetic prompts gave 0.961 of vllm's goodput on the given set over the four rounds; all of
    the gap is round 1, whose dspark run was the call's first timed one, on a server still speeding up (its mean
    ITL 7.85 ms, the highest of the call, and the fewest engine steps). Over rounds 2-4 the p90 sets agree within
    0.3% and the server's ITL within 0.5%."""
    _, goodputs = _fourth_goodputs(fourth_folder)
    runs = fourth_report["runs"]
    first = min(runs, key=lambda r: r["file"])
    assert first["tool"] == SYNTHETIC and first["round"] == 1
    assert first["server_inter_token_latency_mean_ms"] == max(r["server_inter_token_latency_mean_ms"] for r in runs)
    assert _decision(goodputs, SYNTHETIC, "ttft+tpot-p90")["ratio"] < 1 - GOAL  # 0.961 over all four rounds
    for name in ("ttft+tpot-p90", "ttft-p90", "tpot-p90"):
        d = _decision(goodputs, SYNTHETIC, name, (2, 3, 4))
        assert abs(d["ratio"] - 1) < 0.005, (name, d)
    itl = {t: statistics.fmean(r["server_inter_token_latency_mean_ms"] for r in runs
                               if r["tool"] == t and r["round"] > 1) for t in (SYNTHETIC, "vllm")}
    assert abs(itl[SYNTHETIC] / itl["vllm"] - 1) < 0.005, itl


def test_the_prompt_text_does_not_explain_the_third_runs_slower_server(
        open_folder: Path, open_report: dict[str, Any], fourth_folder: Path, fourth_report: dict[str, Any]) -> None:
    """The third run's gap (the server slower whenever vllm bench serve drove it, 16.8-20.6 ms ITL against 9.9-18.1)
    had the prompt text as a candidate. At 0.3 load, not the knee, it is not what moves the server: with dspark's
    own prompts (rounds 2-4, past the warm-up) the server ran at vllm's speed, and dspark sending vllm's own
    prompts ran it no faster (5.5% slower: TTFT and prefill 18% longer, within this call's run-to-run spread), so
    making dspark's synthetic text vllm's would not close a gap. vllm's runs here are not the slow ones. Nor is
    the API server's CPU: it spent more of it under dspark's client than under vllm's in both records (its
    process_cpu_seconds_total over each run), while the third run's server was faster under dspark. Nor the prefix
    cache (off: no lookups in any run). What the server got differed by the text alone: 1064 B a request from
    dspark sending vllm's prompts, 1111 B from vllm's client (47 B more fields), ~720 B of dspark's words."""
    h = _harness()
    later = [r for r in fourth_report["runs"] if r["round"] > 1]
    itl = {t: statistics.fmean(r["server_inter_token_latency_mean_ms"] for r in later if r["tool"] == t)
           for t in (SYNTHETIC, PROMPTS, "vllm")}
    assert itl[PROMPTS] > itl["vllm"] and abs(itl[SYNTHETIC] / itl["vllm"] - 1) < GOAL, itl
    every = fourth_report["runs"]
    assert statistics.fmean(r["server_inter_token_latency_mean_ms"] for r in every if r["tool"] == "vllm") < min(
        statistics.fmean(r["server_inter_token_latency_mean_ms"] for r in every if r["tool"] == t)
        for t in (SYNTHETIC, PROMPTS))
    third = open_report["runs"]
    assert min(r["server_inter_token_latency_mean_ms"] for r in third if r["tool"] == "vllm") > 16.5
    cpu: dict[str, dict[str, list[float]]] = {}
    sizes: dict[str, dict[str, set[int]]] = {}
    for label, folder in (("third", open_folder), ("fourth", fourth_folder)):
        for r in _open_runs(folder):
            if r["round"]:
                before = h.metric_sums((folder / r["metrics_before"]).read_text())
                after = h.metric_sums((folder / r["metrics_after"]).read_text())
                used = after["process_cpu_seconds_total"] - before["process_cpu_seconds_total"]
                cpu.setdefault(label, {}).setdefault("vllm" if r["tool"] == "vllm" else "dspark", []).append(used)
                # nor the prefix cache (off: no lookups, no hits); the bodies differ by the text alone (bytes a request)
                assert after["vllm:prefix_cache_queries_total"] == after["vllm:prompt_tokens_cached_total"] == 0.0
                size = (after["http_request_size_bytes_sum"] - before["http_request_size_bytes_sum"]) / (
                    after["http_request_size_bytes_count"] - before["http_request_size_bytes_count"])
                body = "vllm" if r["tool"] == "vllm" else r["variant"] or "synthetic"
                sizes.setdefault(label, {}).setdefault(body, set()).add(round(size))
    # recorded: vllm's 1111 and 1110 B, dspark sending the same prompts 1064 B (vllm's body has 47 B more fields),
    # dspark's synthetic text 724 and 718 B
    assert sizes["fourth"]["vllm"] == {1111} and sizes["fourth"]["vllm-prompts"] == {1064}, sizes
    assert max(sizes["fourth"]["synthetic"] | sizes["third"]["synthetic"] | sizes["third"]["no-metrics"]) < 730
    for label, tools in cpu.items():
        assert len(tools["vllm"]) == 4 and len(tools["dspark"]) == 8
        assert statistics.fmean(tools["dspark"]) > statistics.fmean(tools["vllm"]), (label, tools)
