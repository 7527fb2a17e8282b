"""dspark top: the window between two /metrics reads, from pages prometheus_client itself writes with the
engines' metric names, and the live view in a real terminal (tmux) against a server that changes under it."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

from dspark.bench.top import Buckets, metrics_url, parse_scrape, top_view
from dspark.commands.top import top
from dspark.core.errors import InputError
from dspark.engines import ENGINE_NAMES, engine_spec

ROOT = Path(__file__).resolve().parents[2]
BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)


class EngineMetrics:
    """An engine's /metrics as its own prometheus_client objects write them, under one engine's names."""

    def __init__(self, engine: str) -> None:
        names = engine_spec(engine).metric_names
        self.registry = CollectorRegistry()

        def counter(concept: str) -> Counter:
            return Counter(names[concept].removesuffix("_total"), concept, registry=self.registry)

        self.queries, self.hits = counter("prefix_queries"), counter("prefix_hits")
        self.preemptions, self.generation = counter("preemptions"), counter("generation_tokens")
        # SGLang counts prompt tokens in the same counter its prefix queries come from.
        self.prompt = self.queries if names["prompt_tokens"] == names["prefix_queries"] else counter("prompt_tokens")
        self.running = Gauge(names["running"], "running", registry=self.registry)
        self.waiting = Gauge(names["waiting"], "waiting", registry=self.registry)
        self.kv = Gauge(names["kv_usage"], "kv", registry=self.registry)
        self.ttft = Histogram(names["ttft"], "ttft", buckets=BOUNDS, registry=self.registry)
        self.itl = Histogram(names["itl"], "itl", buckets=BOUNDS, registry=self.registry)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_the_window_is_what_happened_between_the_reads(engine: str) -> None:
    m = EngineMetrics(engine)
    rng = random.Random(7)  # noqa: S311 - reproducible test data
    for _ in range(50):  # before the window: must not show in its percentiles
        m.ttft.observe(4.0)
    m.prompt.inc(1000)
    m.hits.inc(100)
    if m.prompt is not m.queries:
        m.queries.inc(1000)
    before = parse_scrape(m.text())
    ttfts = [rng.uniform(0.02, 0.5) for _ in range(400)]
    for v in ttfts:
        m.ttft.observe(v)
    for _ in range(2000):
        m.itl.observe(rng.uniform(0.005, 0.02))
    m.prompt.inc(6000)
    if m.prompt is not m.queries:
        m.queries.inc(6000)
    m.hits.inc(4500)
    m.generation.inc(3000)
    m.preemptions.inc(2)
    m.running.set(7)
    m.waiting.set(3)
    m.kv.set(0.42)
    view = top_view(before, parse_scrape(m.text()), 2.0, seats=8)
    assert view.engine == engine
    assert (view.running, view.waiting, view.kv_usage, view.seats) == (7, 3, 0.42, 8)
    assert view.prefix_hit_rate == pytest.approx(4500 / 6000)
    assert view.prompt_tps == pytest.approx(3000.0) and view.generation_tps == pytest.approx(1500.0)
    assert (view.preemptions_total, view.preemptions_window) == (2, 2)
    assert view.ttft_s["mean"] == pytest.approx(sum(ttfts) / len(ttfts))
    for q in (0.5, 0.9, 0.99):
        got, true = view.ttft_s[f"p{round(q * 100)}"], _quantile(ttfts, q)
        assert got is not None
        # Interpolated within the bucket holding the true quantile: never outside that bucket.
        upper = next(b for b in BOUNDS if b >= true)
        lower = max([0.0, *(b for b in BOUNDS if b < true)])
        assert lower <= got <= upper, (q, got, true)
    assert 0.005 <= (view.itl_s["p50"] or 0) <= 0.02


def test_quantiles_follow_prometheus_histogram_quantile() -> None:
    # histogram_quantile(0.5) over buckets le=1:10, le=2:30, le=+Inf:40: rank 20 lies in (1, 2], halfway.
    b = Buckets((1.0, 2.0, math.inf), (10.0, 30.0, 40.0), 50.0, 40.0)
    assert b.quantile(0.5) == pytest.approx(1.5)
    assert b.quantile(0.25) == pytest.approx(1.0)
    assert b.quantile(0.99) == 2.0  # in the open bucket: its lower bound
    assert Buckets((1.0, math.inf), (0.0, 0.0), 0.0, 0.0).quantile(0.5) is None
    qs = [b.quantile(q / 100) or 0.0 for q in range(1, 100)]
    assert qs == sorted(qs)


def test_a_restarted_engine_gives_no_negative_rates() -> None:
    m = EngineMetrics("vllm")
    m.generation.inc(5000)
    m.preemptions.inc(4)
    before = parse_scrape(m.text())
    fresh = EngineMetrics("vllm")
    fresh.generation.inc(10)
    view = top_view(before, parse_scrape(fresh.text()), 1.0)
    assert view.generation_tps == 0.0 and view.preemptions_window == 0.0


@pytest.mark.parametrize("text", ["<html>not metrics</html>\n", "vllm:x{le=\"1\" 5\n", "a b c d e\n"])
def test_a_page_that_is_not_prometheus_text_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError, match="not Prometheus text"):
        parse_scrape(text)


def test_a_page_of_neither_engine_shows_nothing_recognised() -> None:
    scrape = parse_scrape("# TYPE up gauge\nup 1\n")
    assert scrape.engine is None and all(v is None for v in scrape.values.values())


@pytest.mark.parametrize("url", ["ftp://h/x", "http://", "http://[::1", "http://h:8000\r\nX: y", "nonsense",
                                 "http://u:pw@h:8000"])
def test_bad_urls_are_input_errors(url: str) -> None:
    with pytest.raises(InputError) as info:
        metrics_url(url)
    assert "pw" not in str(info.value)


def test_metrics_url_appends_the_path() -> None:
    assert metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/metrics") == "http://127.0.0.1:8000/metrics"


@pytest.fixture
def served() -> Iterator[tuple[EngineMetrics, str]]:
    m = EngineMetrics("vllm")
    server, thread = start_http_server(0, addr="127.0.0.1", registry=m.registry)
    yield m, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=5)


def test_once_json_reads_a_live_server(served: tuple[EngineMetrics, str]) -> None:
    m, url = served
    m.running.set(5)
    m.kv.set(0.25)
    out = StringIO()

    def sleep(seconds: float) -> None:  # traffic arrives during the window
        m.generation.inc(400)
        m.ttft.observe(0.03)
        time.sleep(seconds)

    assert top(url, interval=0.3, seats=8, as_json=True, out=out, sleep=sleep) == 0
    view = json.loads(out.getvalue())
    assert view["engine"] == "vllm" and view["running"] == 5 and view["seats"] == 8 and view["kv_usage"] == 0.25
    assert 400 / 2 < view["generation_tokens_per_s"] <= 400 / 0.3
    assert 0.02 <= view["ttft_s"]["p50"] <= 0.05


def test_an_absent_server_is_an_input_error() -> None:
    with pytest.raises(InputError, match="cannot read"):
        top("http://127.0.0.1:9", interval=0.2, once=True)


@pytest.mark.parametrize("interval", [0.0, -1.0, math.nan, math.inf, 1e9])
def test_bad_intervals_are_input_errors(interval: float) -> None:
    with pytest.raises(InputError, match="--interval"):
        top("http://127.0.0.1:9", interval=interval)


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30, check=True).stdout


def test_the_live_view_refreshes_in_place_in_a_terminal(served: tuple[EngineMetrics, str], tmp_path: Path) -> None:
    """In tmux (80 × 24): the view appears, follows the server's gauges as they change, and Ctrl-C ends it."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for the terminal test (apt-get install tmux)", pytrace=False)
    m, url = served
    m.running.set(3)
    session = f"dspark-top-{os.getpid()}-{tmp_path.name}"
    done = tmp_path / "rc"
    command = f"{sys.executable} -m dspark top {url} --interval 0.3 --seats 8; echo $? > {done}"
    _tmux("-L", session, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", "-c", str(ROOT), command)
    try:
        screen = ""
        for _ in range(100):
            screen = _tmux("-L", session, "capture-pane", "-p", "-t", session)
            if "3 of 8" in screen:
                break
            time.sleep(0.1)
        assert "3 of 8" in screen and "KV cache used" in screen, screen
        m.running.set(6)
        for _ in range(100):
            screen = _tmux("-L", session, "capture-pane", "-p", "-t", session)
            if "6 of 8" in screen:
                break
            time.sleep(0.1)
        assert "6 of 8" in screen and "3 of 8" not in screen, screen  # refreshed in place, not appended
        assert screen.count("seats used") == 1
        assert max(len(line) for line in screen.splitlines()) <= 80
        _tmux("-L", session, "send-keys", "-t", session, "C-c")
        for _ in range(100):
            if done.exists() and done.read_text().strip():
                break
            time.sleep(0.1)
        assert done.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "-L", session, "kill-server"], capture_output=True, timeout=30, check=False)


def test_a_huge_metrics_page_is_refused_not_buffered(tmp_path: Path) -> None:
    """A page past the size bound is refused without reading it whole (bounded by bytes, not by the server)."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=b"# x\n" * (5 << 20)))
    out = StringIO()
    with pytest.raises(InputError, match="over 16 MiB"):
        top("http://engine:8000", once=True, interval=0.2, out=out,
            client_factory=lambda: httpx.Client(transport=transport))
