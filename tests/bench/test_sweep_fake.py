"""The sweep end to end against a fake engine (a vLLM look-alike script): launch checks, failures, outputs."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dspark.bench.client import ClientConfig
from dspark.bench.decision import DecisionRule, parse_seats
from dspark.bench.load import LoadOptions
from dspark.bench.prompts import synthetic_token_prompts
from dspark.bench.runner import BenchSpec
from dspark.bench.sweep import (
    PlannedLaunch,
    _served_names,
    base_url_of,
    check_launch,
    planned_flags,
    responder_problems,
    run_setting,
    run_sweep,
)
from dspark.commands.sweep import sweep
from dspark.core.errors import InputError
from dspark.engines import engine_spec
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import EngineProcess, KvPoolLine
from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import FAKE_SERVER, fake_engine_argv, free_port, in_thread

POOL = 4096


def fake_plan(seats: int, *extra: str) -> PlannedLaunch:
    argv = fake_engine_argv(free_port(), "--max-num-seqs", str(seats), "--kv-pool-tokens", str(POOL), *extra)
    return PlannedLaunch(plan=LaunchPlan(engine="vllm", argv=argv), expected_pool_tokens=POOL)


def spec(reps: int = 1, warm: bool = False, max_tokens: int = 4) -> BenchSpec:
    return BenchSpec(
        client=ClientConfig(base_url="", model="", max_tokens=max_tokens, concurrency=2),
        prompts_for_rep=lambda rep: synthetic_token_prompts(4, 8, vocab_size=500, seed=rep),
        prompt_source="synthetic", reps=reps, warm_rerun=warm, sample_interval_s=0.05,
    )


def setting(launch: PlannedLaunch, bench: BenchSpec, seats: int = 2, stop_timeout: float = 10.0):  # type: ignore[no-untyped-def]
    return run_setting(seats, launch, bench, log_path=None, health_timeout_s=60, stop_timeout_s=stop_timeout)


def test_planned_flags_and_url() -> None:
    argv = ("py", "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--max-num-seqs", "8", "--enforce-eager",
            "--no-enable-prefix-caching", "--port=9001", "--speculative-config", '{"method":"mtp"}')
    assert planned_flags(argv) == {"max_num_seqs": "8", "enforce_eager": True, "enable_prefix_caching": False,
                                   "port": "9001", "speculative_config": '{"method":"mtp"}'}
    assert base_url_of(LaunchPlan(engine="vllm", argv=argv)) == "http://127.0.0.1:9001"
    assert base_url_of(LaunchPlan(engine="sglang", argv=("x", "--host", "0.0.0.0"))) == "http://127.0.0.1:30000"


def test_check_launch_against_the_engines_own_words() -> None:
    argv = ("vllm", "serve", "/m", "--max-num-seqs", "8", "--enforce-eager", "--max-model-len", "4096",
            "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}', "--gpu-memory-utilization", "0.9")
    seen = {"max_num_seqs": 8, "enforce_eager": True, "max_model_len": 2048,
            "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}}
    c = check_launch(argv, 8, seen, KvPoolLine(1000), 1000, seat_arg="max_num_seqs")
    assert c.confirmed == ("max_num_seqs", "enforce_eager", "speculative_config")
    assert c.mismatched == ("max_model_len: planned '4096', engine 2048",)
    assert c.unconfirmed == ("gpu_memory_utilization",)  # vLLM omits values at their default
    assert c.seats_confirmed
    assert c.problems == ("argv mismatch: max_model_len: planned '4096', engine 2048",)
    c = check_launch(argv[:5], 8, {}, None, 1000, seat_arg="max_num_seqs")
    assert c.problems == ("the engine's log does not confirm 8 seats", "the engine printed no KV pool line")
    c = check_launch(argv[:5], 8, None, KvPoolLine(999), 1000, seat_arg="max_num_seqs")
    assert c.problems == ("the engine printed no argument line (vLLM `non-default args:`), so its argv is unconfirmed",
                          "KV pool is 999 tokens, the plan predicted 1,000")


def test_sweep_runs_each_setting_and_stops_it(tmp_path: Path) -> None:
    launches: dict[int, PlannedLaunch] = {}

    def build(n: int) -> PlannedLaunch:
        launches[n] = fake_plan(n, "--token-delay", "0.002")
        return launches[n]

    said: list[str] = []
    result = run_sweep((2, 4), build, spec(reps=2, warm=True), DecisionRule(secondaries=()), log_dir=tmp_path,
                       say=said.append)
    assert result.clean, [s.problems for s in result.settings]
    assert [s.label for s in result.settings] == ["2 seats", "4 seats"]
    for s in result.settings:
        assert s.launch is not None and s.launch.seats_confirmed and s.launch.kv_pool_tokens == POOL
        assert s.bench is not None and [p.label for p in s.bench.passes] == ["rep 1", "rep 2", "warm re-run"]
        assert s.bench.summary["warm_prefix_hit_rate"] == 1.0
        assert s.stop is not None and not s.stop.killed and s.stop.returncode == 0
        assert "serving on" in Path(s.log_path or "").read_text()
    assert said[0].startswith("decision rule (fixed before the runs): adopt only at >= +10% on wall_time_s")
    assert result.decision.baseline == "2 seats"
    assert (tmp_path / "engine-4-seats.log").exists()


def test_an_engine_that_reports_other_seats_is_not_benched() -> None:
    s = setting(fake_plan(2, "--report-seats", "99"), spec())
    assert s.bench is None
    assert s.problems == ("the engine's log does not confirm 2 seats",
                          "argv mismatch: max_num_seqs: planned '2', engine 99")
    assert s.stop is not None and s.stop.returncode == 0


def test_a_pool_other_than_predicted_is_a_problem() -> None:
    s = setting(fake_plan(2, "--report-pool", "4000"), spec())
    assert s.problems == ("KV pool is 4,000 tokens, the plan predicted 4,096",)


def test_an_engine_dying_mid_bench_is_reported() -> None:
    s = setting(fake_plan(2, "--token-delay", "0.05", "--die-after", "2"), spec(max_tokens=200))
    assert s.bench is not None
    assert s.bench.summary["errors"] == 4.0
    assert s.problems[0].startswith("4 failed request(s): ")
    assert any(p.startswith("the engine exited with code 1 during the bench") for p in s.problems)


def test_an_engine_crash_under_sweep_is_exit_1_with_its_last_lines(tmp_path: Path) -> None:
    load = LoadOptions(requests=4, concurrency=2, max_tokens=200, input_len=8, reps=1, sample_interval_s=0.05)
    buf = io.StringIO()
    rc = sweep((2,), load, DecisionRule(secondaries=()), lambda n: fake_plan(n, "--token-delay", "0.05",
                                                                            "--die-after", "1.5"),
               out_dir=tmp_path, progress=False, out=buf)
    assert rc == 1  # a failed run, not dspark's internal error (3)
    problems = [line for line in buf.getvalue().splitlines() if line.startswith("  problem, 2 seats: ")]
    assert any("the engine exited with code 1 during the bench" in p for p in problems)
    assert "last log lines:" in buf.getvalue() and "serving on http://" in buf.getvalue()


def test_a_bench_client_crash_is_a_problem_of_its_setting() -> None:
    # Token ids cannot go to the chat endpoint: the sharded client's request builder raises in the child.
    bad = BenchSpec(client=ClientConfig(base_url="", model="", endpoint="chat", max_tokens=4, concurrency=2,
                                        processes=2),
                    prompts_for_rep=lambda rep: synthetic_token_prompts(4, 8, vocab_size=500, seed=rep),
                    prompt_source="synthetic", sample_interval_s=0.05)
    s = setting(fake_plan(2), bad)
    assert any(p.startswith("token-id prompts need the completions endpoint") for p in s.problems)
    assert s.stop is not None and s.stop.returncode == 0  # the engine was still stopped cleanly


def test_an_engine_that_never_starts() -> None:
    plan = LaunchPlan(engine="vllm", argv=fake_engine_argv(free_port(), "--no-such-flag"))
    s = setting(PlannedLaunch(plan, POOL), spec())
    assert len(s.problems) == 1
    assert s.problems[0].startswith("the engine exited with code 2 before it became healthy")
    assert s.launch is None and s.bench is None


def test_preemptions_make_a_setting_unclean_and_unadoptable() -> None:
    result = run_sweep((2, 4), lambda n: fake_plan(n, *(("--preempt-every", "2") if n == 4 else ())), spec(),
                       DecisionRule(secondaries=(), adopt_at=0.0), log_dir=None)
    assert result.settings[0].clean
    assert result.settings[1].problems == ("2 preemption(s)",)
    assert result.decision.chosen == "2 seats"
    assert result.decision.verdicts[0].reasons[0] == "4 seats: 2 preemption(s)"


def test_an_engine_ignoring_sigterm_is_killed_and_leaves_nothing() -> None:
    launch = fake_plan(2, "--ignore-sigterm", "--spawn-worker")
    s = setting(launch, spec(), stop_timeout=1.0)
    assert s.clean
    assert s.stop is not None and s.stop.killed
    assert s.stop.returncode == -9


def test_sweep_command_writes_json_table_and_png(tmp_path: Path) -> None:
    out_dir = tmp_path / "results"
    load = LoadOptions(requests=4, concurrency=2, max_tokens=4, input_len=8, reps=1, warm_rerun=True,
                       sample_interval_s=0.05)
    buf = io.StringIO()
    rc = sweep((2, 4), load, DecisionRule(secondaries=()), fake_plan, out_dir=out_dir, progress=False, out=buf)
    assert rc == 0
    data = json.loads((out_dir / "sweep.json").read_text())
    assert data["clean"] is True and data["seats"] == [2, 4]
    assert (out_dir / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    table = (out_dir / "sweep.md").read_text()
    assert table.startswith("Seat sweep: 1-rep mean per setting; Δ against 2 seats")
    assert buf.getvalue().startswith(table)
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "engine-2-seats.log", "engine-4-seats.log", "sweep.json", "sweep.md", "sweep.png"]


def test_parse_seats() -> None:
    assert parse_seats("8,16") == (8, 16)
    assert parse_seats(" 4 , 2 ") == (4, 2)
    for bad in ("8,8", "0,4", "a", ""):
        with pytest.raises(InputError):
            parse_seats(bad)


def test_no_fake_engine_survives_the_tests() -> None:
    # Every setting above was stopped: no fake engine or worker of one is left running.
    # This checkout's fake engine only: another checkout's tests on the same machine are not ours to judge.
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(FAKE_SERVER) in (p.info["cmdline"] or [])]
    assert left == []


def _on_port(port: int) -> FakeServer:
    return FakeServer(FakeConfig(), port=port)


def test_a_server_already_on_the_port_is_not_benchmarked_as_the_engine() -> None:
    """Issue 26 item 8: a stale server on the port was benchmarked as "launch as planned", exit 0."""
    launch = fake_plan(2)
    port = int(launch.plan.argv[launch.plan.argv.index("--port") + 1])
    with in_thread(_on_port(port)) as stale:
        s = setting(launch, spec())
        served = stale.state.requests
    assert s.bench is None and s.stop is None and s.launch is None  # the engine was never started
    assert len(s.problems) == 1 and s.problems[0].startswith(
        f"something already answers at http://127.0.0.1:{port} before the engine started")
    assert served == 0


def test_a_foreign_server_answering_for_a_starting_engine_is_caught() -> None:
    """The port was free when checked; another server took it while the engine started (it binds only after
    20 s): its /health answer must not pass for the engine's."""
    launch = fake_plan(2, "--startup-delay", "20")
    port = int(launch.plan.argv[launch.plan.argv.index("--port") + 1])
    with contextlib.ExitStack() as stack:

        def say(message: str) -> None:
            if "starting" in message:  # after the port check, just before the engine starts
                stack.enter_context(in_thread(_on_port(port)))

        s = run_setting(2, launch, spec(), log_path=None, health_timeout_s=60, stop_timeout_s=10, say=say)
    assert s.bench is None
    assert len(s.problems) == 1
    assert s.problems[0].startswith(f"the server answering http://127.0.0.1:{port} is not the engine this sweep "
                                    f"started (pid ")
    assert f"port {port} is held by pid {os.getpid()}" in s.problems[0]
    assert s.stop is not None  # the engine it started was stopped


def test_two_sweeps_on_one_port_do_not_measure_each_others_engines() -> None:
    first = fake_plan(2, "--token-delay", "0.01")
    port = int(first.plan.argv[first.plan.argv.index("--port") + 1])
    engine = EngineProcess(first.plan, log_format=engine_spec("vllm").log_format)
    engine.start()
    try:
        engine.wait_healthy(f"http://127.0.0.1:{port}/health", 30)
        second = PlannedLaunch(plan=LaunchPlan(engine="vllm", argv=first.plan.argv), expected_pool_tokens=POOL)
        s = setting(second, spec())
        assert s.bench is None and s.problems[0].startswith("something already answers")
    finally:
        engine.stop(10)


def test_responder_names_the_served_model() -> None:
    with in_thread(FakeServer(FakeConfig(model="other"))) as srv:
        problems = responder_problems(srv.url, os.getpid(), ("mine",))
    assert problems == [f"the server answering {srv.url} does not serve mine (its /v1/models lists other): not "
                        "the engine this sweep started"]
    assert _served_names(("x", "--served-model-name", "a", "b", "--port", "1")) == ("a", "b")
    assert _served_names(("x", "--served-model-name=a")) == ("a",)


def test_a_second_sweep_into_the_same_out_dir_is_refused(tmp_path: Path) -> None:
    """Issue 26 item 12: two sweeps sharing --out-dir interleaved engine logs and overwrote each other's files."""
    out_dir = tmp_path / "results"
    script = ("import sys; from pathlib import Path; from dspark.bench.decision import DecisionRule; "
              "from dspark.bench.load import LoadOptions; from dspark.commands.sweep import sweep; "
              "from tests.bench.test_sweep_fake import fake_plan; "
              "sys.exit(sweep((2,), LoadOptions(requests=4, concurrency=2, max_tokens=60, input_len=8, "
              "sample_interval_s=0.1), DecisionRule(secondaries=()), lambda n: fake_plan(n, '--token-delay', "
              "'0.05'), out_dir=Path(sys.argv[1]), progress=False))")
    root = Path(__file__).resolve().parents[2]
    first = subprocess.Popen([sys.executable, "-c", script, str(out_dir)], cwd=root,
                             env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not (out_dir / "engine-2-seats.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    load = LoadOptions(requests=4, concurrency=2, max_tokens=4, input_len=8, sample_interval_s=0.05)
    started: list[int] = []
    with pytest.raises(InputError, match=rf"--out-dir {out_dir} is in use by another dspark run \(pid {first.pid}\)"):
        sweep((2,), load, DecisionRule(secondaries=()), lambda n: started.append(n) or fake_plan(n),  # type: ignore[func-returns-value]
              out_dir=out_dir, progress=False, out=io.StringIO())
    assert started == []  # refused before any plan or engine
    assert first.wait(120) == 0, first.stderr.read() if first.stderr else ""
    assert json.loads((out_dir / "sweep.json").read_text())["clean"] is True


def test_the_outputs_are_written_as_a_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure drawing sweep.png left a new sweep.json and sweep.md beside the old plot: now none is replaced."""
    import dspark.commands.sweep as command  # noqa: PLC0415

    out_dir = tmp_path / "results"
    load = LoadOptions(requests=4, concurrency=2, max_tokens=4, input_len=8, sample_interval_s=0.05)
    assert sweep((2,), load, DecisionRule(secondaries=()), fake_plan, out_dir=out_dir, progress=False,
                 out=io.StringIO()) == 0
    before = {p.name: p.read_bytes() for p in out_dir.iterdir() if p.name.startswith("sweep.")}

    def broken(_result: object) -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(command, "sweep_png", broken)
    with pytest.raises(OSError, match="No space left"):
        sweep((2,), dataclasses.replace(load, seed=5), DecisionRule(secondaries=()), fake_plan, out_dir=out_dir,
              progress=False, out=io.StringIO())
    assert {p.name: p.read_bytes() for p in out_dir.iterdir() if p.name.startswith("sweep.")} == before


def test_a_peak_on_too_few_samples_is_warned_about_in_the_sweep_table(tmp_path: Path) -> None:
    """Issue 26 item 13: the table said "running peak 1.5" with 4 seats busy, from one sample, and no word."""
    load = LoadOptions(requests=2, concurrency=1, max_tokens=2, input_len=8)  # a pass of a few ms
    buf = io.StringIO()
    assert sweep((2,), load, DecisionRule(secondaries=()), fake_plan, out_dir=tmp_path, progress=False, out=buf) == 0
    assert "  warning, 2 seats: rep 1: its running and KV peaks rest on 0 /metrics sample(s)" in buf.getvalue()
