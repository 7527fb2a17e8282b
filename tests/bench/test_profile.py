"""`dspark profile`: the engine's step-time histograms read from real vLLM /metrics text, the client's figures where
an engine exports none, a run against a stepping fake engine, and its JSON read back as calibration points."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dspark.advise.calibrate import points_from_json
from dspark.bench.profile import PROFILE_KIND, ProfilePoint, histogram_means, point_record, run_profile
from dspark.cli import main
from tests.bench.fake_server import FakeConfig, FakeServer

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_histogram_means_are_the_differences_sum_over_count() -> None:
    """vLLM 0.32's own /metrics, idle and after a run: ITL and prefill means over what happened in between."""
    idle = (FIXTURES / "vllm_metrics_idle.txt").read_text()
    warm = (FIXTURES / "vllm_metrics_warm.txt").read_text()
    means = histogram_means(idle, warm)
    assert means["itl"] == pytest.approx(2.7566410339992444 / 360)
    assert means["prefill_time"] == pytest.approx(0.3832606550000719 / 24)
    assert "itl" not in histogram_means(warm, warm)  # nothing observed in between: no figure


def test_a_point_prefers_the_engines_figures_and_says_where_they_come_from() -> None:
    bench = {"summary": {"ttft_mean_s": 0.05}, "itl_ms": {"mean": 7.0}}
    point = ProfilePoint(1, 256, 48)
    engine = point_record(point, bench, {"itl": 0.005, "prefill_time": 0.03})
    assert (engine["itl_mean_s"], engine["prefill_mean_s"], engine["source"]) == (0.005, 0.03, "engine /metrics")
    client = point_record(point, bench, {})
    assert client["itl_mean_s"] == pytest.approx(0.007) and client["source"].startswith("client")
    assert client["prefill_mean_s"] == 0.05  # one stream: its TTFT
    assert "prefill_mean_s" not in point_record(ProfilePoint(4, 256, 48), bench, {})  # four: TTFT is not a prefill


@pytest.fixture
def stepping_fake() -> Iterator[str]:
    """A continuously batched fake engine (4 ms a step + 2 ms per running request) on its own event loop."""
    loop = asyncio.new_event_loop()
    server = FakeServer(FakeConfig(step_fixed_s=0.004, step_per_running_s=0.002, seats=8))
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield server.url
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_a_profile_of_a_stepping_engine_feeds_the_calibration(stepping_fake: str, tmp_path: Path) -> None:
    plan = (ProfilePoint(1, 8, 12), ProfilePoint(4, 8, 12, requests=8))  # a wave, a closed loop
    data = run_profile(stepping_fake, plan=plan)
    assert data["kind"] == PROFILE_KIND and data["model"] == "fake-model"
    one, four = data["points"]
    assert (one["batch"], four["batch"]) == (1, 4)
    assert one["source"].startswith("client")  # the fake exports no step-time histogram
    assert one["itl_mean_s"] < four["itl_mean_s"]  # more running requests, longer steps
    assert four["itl_mean_s"] == pytest.approx(0.004 + 4 * 0.002, rel=0.5)
    assert one["itl_ms"]["p50"] > 0 and one["summary"]["per_stream_decode_tps"] > 0
    points = points_from_json(data, "profile.json")
    # each point's median inter-token gap as a decode step; the closed loop also as the bench it is (simulated);
    # neither the wave's own figures (its intake race) nor its lone prompt's prefill (a burst's clock)
    assert [(p.seats, p.workload is not None, p.step_s is not None, p.prefill_s is not None) for p in points] == [
        (1, False, True, False), (4, True, False, False), (4, False, True, False)]
    assert points[1].workload is not None and (points[1].workload.clients, points[1].workload.requests) == (4, 8)
    assert points[0].step_s == pytest.approx(one["itl_ms"]["p50"] / 1e3)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    assert points_from_json(json.loads(path.read_text()), str(path))[0].source.startswith(f"{path} (batch 1")


def test_a_profile_with_no_step_figure_is_refused() -> None:
    with pytest.raises(ValueError, match="no step figure"):
        points_from_json({"kind": PROFILE_KIND, "points": [{"batch": 1, "input_len": 8, "output_len": 4}]}, "p.json")


def test_profile_command_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "http://127.0.0.1:9", "--json"]) == 2
    assert "cannot reach http://127.0.0.1:9" in json.loads(capsys.readouterr().out)["error"]["message"]
