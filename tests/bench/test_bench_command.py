"""`dspark bench` through the real CLI against the fake engine: one JSON object, --out, exit codes."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dspark.advise.workload import load_workload
from dspark.bench.load import client_processes
from dspark.bench.prompts import read_jsonl
from dspark.cli import main
from dspark.core.errors import InputError
from dspark.engines import engine_spec
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import EngineProcess
from tests.bench.fake_server import FakeServer
from tests.bench.helpers import fake_engine_argv, free_port, in_thread


def _serve(*extra: str) -> Iterator[str]:
    port = free_port()
    eng = EngineProcess(LaunchPlan(engine="vllm", argv=fake_engine_argv(port, *extra)),
                        log_format=engine_spec("vllm").log_format)
    eng.start()
    url = f"http://127.0.0.1:{port}"
    eng.wait_healthy(url + "/health", 30)
    yield url
    eng.stop(10)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    yield from _serve()


@pytest.fixture
def failing_server() -> Iterator[str]:
    yield from _serve("--fail-every", "2")


ARGS = ["--requests", "4", "--concurrency", "2", "--max-tokens", "3", "--input-len", "8", "--no-progress",
        "--sample-interval", "0.05"]


def test_json_is_one_object_and_out_file_matches(server: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r" / "bench.json"
    rc = main(["bench", "--url", server, *ARGS, "--reps", "2", "--warm-rerun", "--json", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0
    data = json.loads(stdout)
    assert out.read_text() == stdout
    assert data["clean"] is True
    assert data["model"] == "fake-model"
    assert [p["label"] for p in data["reps"]] + [data["warm"]["label"]] == ["rep 1", "rep 2", "warm re-run"]
    assert data["summary"]["warm_prefix_hit_rate"] == 1.0
    assert data["reps"][0]["stats"]["output_tokens"] == 12
    assert data["prompt_source"] == "synthetic ids, 8 tokens, seed 0"


def test_table_and_jsonl_prompts(server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": [11, 12, 13]}\n\n{"prompt": "hello world"}\n')
    rc = main(["bench", "--url", server + "/v1", *ARGS, "--prompts", str(prompts)])
    text = capsys.readouterr().out
    assert rc == 0
    assert text.splitlines()[0] == (f"fake-model at {server} (completions; fake-engine 0.0-fake): 4 requests × 3 "
                                    "max tokens, 2 clients; "
                                    f"prompts: {prompts} (4 requests)")
    assert "| Aggregate decode, tok/s " in text


@pytest.mark.parametrize("processes", ["1", "2"])
def test_prompts_file_max_tokens_per_line_as_advise_reads_it(server: str, tmp_path: Path, processes: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """bench --prompts takes advise --workload's file: each line asks for its own max_tokens (cycled to
    --requests), a line without one for --max-tokens; advise's reader sees the same requests."""
    prompts = tmp_path / "w.jsonl"
    prompts.write_text("\n".join(json.dumps(line) for line in (
        {"prompt": [11, 12, 13], "max_tokens": 2}, {"prompt": "hello world", "max_tokens": 7}, {"prompt": [14]})))
    rc = main(["bench", "--url", server, *ARGS, "--requests", "5", "--prompts", str(prompts), "--json",
               "--client-processes", processes])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reps"][0]["stats"]["output_tokens"] == 2 + 7 + 3 + 2 + 7  # the fake streams exactly max_tokens
    assert data["metadata"]["max_tokens_per_line"] == {"min": 2, "max": 7, "mean": pytest.approx(21 / 5)}
    assert "max_tokens per line" in data["prompt_source"]
    assert [line.max_tokens for line in read_jsonl(prompts)] == [2, 7, None]  # load_workload's reader
    assert main(["bench", "--url", server, *ARGS, "--requests", "5", "--prompts", str(prompts)]) == 0
    assert " 5 requests × 2-7 (mean 4.2) max tokens, 2 clients;" in capsys.readouterr().out.splitlines()[0]


def test_a_bad_max_tokens_line_is_refused_by_bench_as_by_advise(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": [5]}) + "\n" + json.dumps({"prompt": [6], "max_tokens": 1.5}) + "\n")
    assert main(["bench", "--url", f"http://127.0.0.1:{free_port()}", "--prompts", str(bad)]) == 2
    message = f"{bad}:2: 'max_tokens' must be a positive integer, got 1.5"
    assert f"error: {message}" in capsys.readouterr().err
    with pytest.raises(InputError, match=re.escape(message)):
        load_workload(bad, 3)


def test_chat_endpoint(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", server, *ARGS, "--endpoint", "chat", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["endpoint"] == "chat"


def test_failed_requests_exit_1_and_are_shown(failing_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--url", failing_server, *ARGS])
    text = capsys.readouterr().out
    assert rc == 1
    assert '2 request(s) failed: HTTP 500: {"error": {"message": "injected failure"}}' in text


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["bench", "--url", dead, *ARGS]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot reach {dead}: ConnectError")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["bench", "--url", dead, "--prompts", str(bad)]) == 2
    assert f"error: {bad}:1: not JSON" in capsys.readouterr().err
    assert main(["bench", "--url", dead, "--endpoint", "chat", "--prompt-kind", "ids"]) == 2
    assert "token-id prompts need --endpoint completions" in capsys.readouterr().err
    assert main(["bench", "--url", dead, "--requests", "0"]) == 2
    assert "--requests must be positive" in capsys.readouterr().err


def test_client_processes_rule() -> None:
    assert client_processes(0, 64, cpus=16) == 1
    assert client_processes(0, 65, cpus=16) == 2
    assert client_processes(0, 256, cpus=16) == 4
    assert client_processes(0, 1024, cpus=4) == 4
    assert client_processes(0, 256, cpus=1) == 1
    assert client_processes(3, 8, cpus=1) == 3


def test_json_has_vllm_bench_serve_figures_and_metadata(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", server, *ARGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("tpot_ms", "itl_ms", "e2e_ms", "ttft_ms"):
        assert set(data[key]) == {"mean", "p50", "p90", "p99"}
        assert data[key]["p50"] <= data[key]["p99"]
    stats = data["reps"][0]["stats"]
    # 4 requests over the pass's wall time, 3 output + 8 prompt tokens each.
    assert data["request_throughput"] == pytest.approx(4 / stats["wall_time_s"])
    assert data["total_token_throughput"] == pytest.approx(4 * (3 + 8) / stats["wall_time_s"])
    meta = data["metadata"]
    assert (meta["engine"], meta["engine_version"], meta["mode"]) == ("fake-engine", "0.0-fake", "closed loop")
    assert meta["argv"] and meta["dspark_version"] and meta["started_at"].endswith("+00:00")


def test_open_loop_request_rate_spaces_the_arrivals(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    # 6 requests at 20 req/s: the last arrives ~0.25 s in on average, so the pass cannot be much shorter.
    args = ["--requests", "6", "--concurrency", "6", "--max-tokens", "2", "--input-len", "4", "--no-progress",
            "--request-rate", "20", "--burstiness", "1", "--no-metrics", "--json"]
    assert main(["bench", "--url", server, *args]) == 0
    data = json.loads(capsys.readouterr().out)
    from dspark.bench.load import arrival_schedule  # noqa: PLC0415

    last_arrival = arrival_schedule(6, 20.0, 1.0, 0)[-1]
    assert data["reps"][0]["stats"]["wall_time_s"] >= last_arrival
    assert data["metadata"]["mode"] == "open loop"
    assert data["metadata"]["request_rate"] == 20.0


def test_arrival_schedule_is_poisson_at_burstiness_1() -> None:
    from dspark.bench.load import arrival_schedule  # noqa: PLC0415

    times = arrival_schedule(20_001, 50.0, 1.0, seed=3)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean_gap = sum(gaps) / len(gaps)
    var = sum((g - mean_gap) ** 2 for g in gaps) / len(gaps)
    assert 0.0 < times[0] < times[1]
    assert times[-1] == pytest.approx(20_001 / 50.0)  # vLLM's rescaling: the last arrives at count / rate
    assert mean_gap == pytest.approx(1 / 50, rel=0.03)
    assert var / mean_gap**2 == pytest.approx(1.0, rel=0.06)  # exponential: variance = mean²
    bursty = arrival_schedule(20_001, 50.0, 0.25, seed=3)
    bgaps = [b - a for a, b in itertools.pairwise(bursty)]
    bmean = sum(bgaps) / len(bgaps)
    assert sum((g - bmean) ** 2 for g in bgaps) / len(bgaps) / bmean**2 == pytest.approx(4.0, rel=0.1)


def test_unmeasured_engine_figures_print_a_dash(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--url", server, *ARGS, "--no-metrics"]) == 0
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip()
            for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "|" in line[2:]}
    for label in ("KV pool used, peak", "Preemptions (sum over reps)", "Prefix-cache hit rate",
                  "Queueing time (engine), mean, s", "Running requests, peak"):
        assert rows[label] == "–"
    assert rows["Errors (sum over reps)"] == "0"


def test_seats_given_to_bench_are_recorded_for_calibration(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 16 item 9: without /metrics the bench cannot see the server's seats; --seats N says them.
    assert main(["bench", "--url", server, *ARGS, "--no-metrics", "--seats", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["seats"] == 2 and data["summary"]["running_peak"] is None
    assert main(["bench", "--url", server, *ARGS, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seats"] is None  # not given: not guessed


def test_the_table_shows_mean_p50_p90_p99_as_the_readme_says(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 24: the README promises TTFT/TPOT/ITL/E2E as mean / p50 / p90 / p99; the table showed two."""
    assert main(["bench", "--url", server, *ARGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(line for line in lines if line.startswith("| Latency, ms"))
    assert [c.strip() for c in head.strip("|").split("|")] == ["Latency, ms", "mean", "p50", "p90", "p99"]
    for label in ("Time to first token", "Time per output token", "Inter-token latency", "End-to-end latency"):
        row = next(line for line in lines if line.startswith(f"| {label} "))
        assert len(row.strip("|").split("|")) == 5 and "–" not in row


def test_a_second_run_on_seed_0s_prompts_hints_at_the_warm_cache(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 24: a second bench re-sent seed 0's prompts and read 50% "prefix hits" without a word."""
    with in_thread(FakeServer()) as srv:
        assert main(["bench", "--url", srv.url, *ARGS]) == 0
        assert "hint:" not in capsys.readouterr().out  # a cold cache: nothing to say
        assert main(["bench", "--url", srv.url, *ARGS]) == 0
        again = capsys.readouterr().out
        assert main(["bench", "--url", srv.url, *ARGS, "--seed", "7"]) == 0
        fresh = capsys.readouterr().out
    assert ("hint: rep 1 hit the prefix cache at 100%: the server has seen these synthetic prompts (seed 0) before, "
            "from an earlier bench; pass another --seed (e.g. --seed 1)") in again
    assert "hint:" not in fresh


@pytest.mark.parametrize(("usage", "says"), [
    ('"3"', "completion_tokens is '3', not a token count"), ("-184", "completion_tokens is '-184'"),
    ("10" + "0" * 30, "completion_tokens is '1000"), ("7", "completion_tokens is '7', not a token count within 0..3")])
def test_a_usage_count_that_cannot_be_is_exit_2(usage: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 17: a negative count gave "-184 tok/s"; a string one a traceback."""
    from tests.bench.hostile_server import Behaviour, HostileServer, chunk_event  # noqa: PLC0415

    body = (chunk_event(False) * 3 + b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":'
            + usage.encode() + b"}}\n\ndata: [DONE]\n\n")
    with in_thread(HostileServer()) as srv:
        rc = main(["bench", "--url", srv.add(Behaviour(stream=body)), *ARGS, "--no-metrics"])
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert err.startswith(f"error: the server's usage {says}") and "Traceback" not in err
    assert "tok/s" not in out
