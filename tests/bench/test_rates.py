"""`dspark bench --profile sweep` (guidellm's request-rate sweep) and the new workload options through the CLI,
against the fake server."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dspark.bench.load import LoadOptions, bench_spec
from dspark.bench.rates import RatePoint, RateSweep, run_rate_sweep, sweep_json, sweep_rates, sweep_table_text
from dspark.bench.results import BenchResult
from dspark.cli import main
from dspark.core.errors import InputError
from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import in_thread

URL = "http://127.0.0.1:9"


def test_rates_lie_evenly_strictly_between_the_ends() -> None:
    assert sweep_rates(1.0, 5.0, 3) == pytest.approx([2.0, 3.0, 4.0])
    assert sweep_rates(5.0, 1.0, 1) == pytest.approx([3.0])  # a throughput below the synchronous rate
    rates = sweep_rates(0.7, 9.1, 10)
    assert len(rates) == 10 and 0.7 < rates[0] < rates[-1] < 9.1
    gaps = {round(b - a, 9) for a, b in itertools.pairwise(rates)}
    assert len(gaps) == 1
    assert sweep_rates(1.0, float("nan"), 3) == [] and sweep_rates(1.0, 2.0, 0) == []


def _result(rate: float, partial: bool = False) -> BenchResult:
    return BenchResult(url=URL, model="m", endpoint="completions", concurrency=1, requests=1, max_tokens=1,
                       ignore_eos=True, prompt_source="s", reps=(), warm=None,
                       summary={"request_throughput": rate, "errors": 0.0}, request_throughput=rate,
                       partial=partial, partial_reason="interrupted by SIGINT" if partial else None)


def test_the_sweep_runs_sync_then_throughput_then_the_rates_between() -> None:
    seen: list[tuple[str, int, float | None]] = []
    measured = {"synchronous": 2.0, "throughput": 10.0}

    def run_one(load: LoadOptions, label: str) -> BenchResult:
        seen.append((label, load.concurrency, load.request_rate))
        return _result(measured.get(label, load.request_rate or 0.0))

    sweep = run_rate_sweep(LoadOptions(concurrency=6, requests=3), URL, 3, run_one)
    assert [(s[1], s[2]) for s in seen] == [(1, None), (6, None), (6, 4.0), (6, 6.0), (6, 8.0)]
    assert [p.mode for p in sweep.points] == ["synchronous", "throughput", "rate", "rate", "rate"]
    assert sweep.clean and not sweep.partial
    data = sweep_json(sweep)
    assert data["kind"] == "dspark-bench-sweep" and [p["target_rate"] for p in data["points"]] == \
        [None, None, 4.0, 6.0, 8.0]
    assert data["points"][2]["result"]["request_throughput"] == 4.0


def test_every_point_sends_fresh_prompts_of_the_same_lengths_and_arrivals() -> None:
    """The earlier points' prompts are in the server's prefix cache: re-sent, a point would measure the cache."""
    specs = []

    def run_one(load: LoadOptions, label: str) -> BenchResult:
        specs.append(bench_spec(load, URL))
        return _result({"synchronous": 2.0, "throughput": 10.0}.get(label, load.request_rate or 0.0))

    load = LoadOptions(concurrency=4, requests=6, input_len=40, output_len=12, range_ratio=0.5, prompt_kind="text",
                       seed=13, reps=2)
    run_rate_sweep(load, URL, 2, run_one)
    assert len(specs) == 4
    prompts = [[tuple(p) if isinstance(p, list) else p for p in s.prompts_for_rep(r)] for s in specs for r in (0, 1)]
    assert len({tuple(ps) for ps in prompts}) == len(prompts)  # no pass of any point re-sends another's
    lengths = {tuple(len(str(p).split()) for p in ps) for ps in prompts}
    assert len(lengths) == 1  # the same drawn lengths at every point and rep (one token a word)
    assert {s.client.max_tokens_each for s in specs} == {specs[0].client.max_tokens_each}
    # The open-loop points' arrivals: the same draws, scaled to each rate (the last request at N/rate)
    scaled = []
    for s in specs[2:]:
        assert s.schedule_for_rep is not None
        scaled.append([t * s.metadata["request_rate"] for t in s.schedule_for_rep(0)])
    assert scaled[0] == pytest.approx(scaled[1]) and scaled[0][-1] == pytest.approx(6)


def test_an_interrupted_point_ends_the_sweep_partial() -> None:
    def run_one(load: LoadOptions, label: str) -> BenchResult:
        return _result(3.0, partial=label == "throughput")

    sweep = run_rate_sweep(LoadOptions(), URL, 5, run_one)
    assert sweep.partial and len(sweep.points) == 2 and "SIGINT" in (sweep.partial_reason or "")
    assert "PARTIAL" in sweep_table_text(sweep)


def test_no_completed_request_leaves_no_rates() -> None:
    sweep = run_rate_sweep(LoadOptions(), URL, 2, lambda load, label: _result(0.0))
    assert sweep.partial and "no rates" in (sweep.partial_reason or "") and len(sweep.points) == 2


@pytest.mark.parametrize(("load", "points", "message"), [
    (LoadOptions(request_rate=3.0), 3, "leave out --request-rate"),
    (LoadOptions(), 0, "--sweep-points"),
    (LoadOptions(), 51, "--sweep-points"),
    (LoadOptions(requests=0), 3, "--requests"),
])
def test_bad_sweeps_are_refused_before_any_request(load: LoadOptions, points: int, message: str) -> None:
    def run_one(load: LoadOptions, label: str) -> BenchResult:
        raise AssertionError("no point may run")

    with pytest.raises(InputError, match=message):
        run_rate_sweep(load, URL, points, run_one)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with in_thread(FakeServer(FakeConfig(token_delay=0.002))) as srv:
        yield srv.url


ARGS = ["--requests", "8", "--concurrency", "4", "--input-len", "8", "--max-tokens", "4", "--no-progress",
        "--no-metrics"]


def test_sweep_profile_against_the_fake_server(server: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    rc = main(["bench", "--url", server, *ARGS, "--profile", "sweep", "--sweep-points", "2", "--goodput",
               "e2el:10000", "--json", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    data = json.loads(text)
    assert out.read_text() == text
    points = data["points"]
    assert [p["mode"] for p in points] == ["synchronous", "throughput", "rate", "rate"]
    assert [p["concurrency"] for p in points] == [1, 4, 4, 4]
    sync, thr = points[0]["result"]["request_throughput"], points[1]["result"]["request_throughput"]
    lo, hi = sorted((sync, thr))
    assert all(lo < p["target_rate"] < hi for p in points[2:])
    for p in points:  # each point as `dspark bench --json` reports it
        r = p["result"]
        assert r["summary"]["errors"] == 0 and r["reps"][0]["stats"]["requests"] == 8
        assert r["goodput"]["fraction"] == 1.0 and r["summary"]["request_goodput"] == pytest.approx(
            r["request_throughput"])
        assert r["metadata"]["sweep_point"] == p["label"]
    assert [p["result"]["metadata"]["mode"] for p in points] == ["closed loop", "closed loop", "open loop",
                                                                 "open loop"]
    assert main(["bench", "--url", server, *ARGS, "--profile", "sweep", "--sweep-points", "1"]) == 0
    table = capsys.readouterr().out
    assert "synchronous (c=1)" in table and "throughput (c=4)" in table and "| closed loop |" in table


def test_range_ratio_and_goodput_through_the_cli(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--url", server, *ARGS, "--output-len", "6", "--range-ratio", "0.5", "--goodput",
               "ttft:10000,tpot:0", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["max_tokens"] == 6 and data["metadata"]["range_ratio"] == 0.5
    assert 3 <= data["metadata"]["output_lengths"]["min"] <= data["metadata"]["output_lengths"]["max"] <= 9
    assert data["goodput"]["slos_ms"] == {"ttft": 10000.0, "tpot": 0.0}
    assert data["goodput"]["fraction"] == 0.0  # no request of more than one token has a TPOT of 0
    assert main(["bench", "--url", server, *ARGS, "--goodput", "ttft:10000"]) == 0
    table = capsys.readouterr().out
    assert "Requests meeting every SLO" in table and "Goodput (ttft ≤ 10000 ms" in table
    assert main(["bench", "--url", server, *ARGS]) == 0
    assert "SLO" not in capsys.readouterr().out  # no --goodput: no goodput rows


def test_sharegpt_dataset_through_the_cli(server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([{"conversations": [{"from": "human", "value": f"question {i}"},
                                                {"from": "gpt", "value": "answer"}]} for i in range(3)]))
    assert main(["bench", "--url", server, *ARGS, "--dataset", str(f), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prompt_source"].startswith(f"ShareGPT {f}") and "no tokenizer" in data["prompt_source"]
    assert data["reps"][0]["stats"]["output_tokens"] == 8 * 4  # --max-tokens without a tokenizer's reply length
    f.write_text('{"conversations": []}')
    assert main(["bench", "--url", server, *ARGS, "--dataset", str(f)]) == 2
    assert "JSON list of conversations" in capsys.readouterr().err


def test_an_unclean_point_makes_the_sweep_exit_1() -> None:
    failing = dataclasses.replace(_result(1.0), summary={"request_throughput": 1.0, "errors": 2.0})
    sweep = RateSweep((RatePoint("synchronous", "synchronous", None, 1, failing),))
    assert not sweep.clean
    assert "2 request(s) failed" in sweep_table_text(sweep)
