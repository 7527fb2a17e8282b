"""Peers of a native multi-node sweep (dspark.bench.peers): ssh's argv, the peer's printed plan, its stop, and a
peer lost mid-setting, against a fake ssh (tests/bench/fake_ssh.py) that runs the remote line here as sshd would."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from dspark.bench.decision import DecisionRule
from dspark.bench.peers import (
    PeerPlan,
    PeerSetup,
    SshOptions,
    check_env,
    check_host,
    check_ssh_option,
    exec_argv,
    peer_launch_problems,
)
from dspark.bench.sweep import PlannedLaunch, peer_plans, run_setting, run_sweep
from dspark.core.errors import InputError
from dspark.engines.serve_config import ServeConfig
from dspark.planning.start import StartRequest
from dspark.planning.validate import ValidateRequest
from dspark.runtime.launch import LaunchPlan
from tests.bench.helpers import fake_engine_argv, free_port
from tests.bench.test_sweep_fake import POOL, spec

FAKE_SSH = Path(__file__).with_name("fake_ssh.py")
EXPECTED: dict[str, str | bool] = {"max_num_seqs": "2", "node_rank": "1", "headless": True}


def test_ssh_argv_is_a_list_with_batch_mode_and_the_remote_line_quoted() -> None:
    ssh = SshOptions(config=Path("/etc/cfg"), options=("Port=2222",))
    argv = ssh.argv("spark-b", ["dspark", "start", "a b.yaml", "--x", "$(reboot)"])
    assert argv[:4] == ["ssh", "-o", "BatchMode=yes", "-T"]
    assert argv[4:8] == ["-F", "/etc/cfg", "-o", "Port=2222"] and argv[8] == "spark-b"
    assert shlex.split(argv[9]) == ["dspark", "start", "a b.yaml", "--x", "$(reboot)"]  # nothing the shell expands


@pytest.mark.parametrize("host", ["", "-oProxyCommand=x", "a b", "a\nb", "\x1b[2J"])
def test_a_host_that_is_not_a_destination_is_exit_2(host: str) -> None:
    with pytest.raises(InputError) as err:
        check_host(host)
    assert err.value.exit_code == 2 and "--peer" in err.value.message


def test_ssh_options_and_env_must_be_assignments() -> None:
    assert check_ssh_option("Port=22") == "Port=22" and check_env("A_1=x=y") == "A_1=x=y"
    for bad in ("Port", "=1", "Pro xy=1"):
        with pytest.raises(InputError, match="--peer-ssh-option"):
            check_ssh_option(bad)
    for bad in ("A", "1A=x", "A-B=x", "=x"):
        with pytest.raises(InputError, match="--peer-env"):
            check_env(bad)


def test_the_peer_command_forwards_the_plan_and_sets_rank_and_seats() -> None:
    setup = PeerSetup(hosts=("b",), env=("K=V",), dspark="/opt/dspark")
    cmd = setup.command("r.yaml", 1, 8, ["--platform", "cpu"], ["--enforce-eager"])
    assert cmd == ("env", "K=V", "/opt/dspark", "start", "r.yaml", "--platform", "cpu", "--node-rank", "1",
                   "--max-num-seqs", "8", "--", "--enforce-eager")


def test_exec_line_and_launch_problems() -> None:
    assert exec_argv("exec: A=1 B='x y' vllm serve M --max-num-seqs 2") == ("vllm", "serve", "M", "--max-num-seqs",
                                                                           "2")
    assert exec_argv("engine parser accepted") is None and exec_argv("exec: 'unclosed") is None
    plan = PeerPlan(host="b", rank=1, ssh=SshOptions(), command=(), expected=EXPECTED)
    assert peer_launch_problems(plan, ("vllm", "serve", "--max-num-seqs", "2", "--node-rank", "1", "--headless")) == []
    wrong = peer_launch_problems(plan, ("vllm", "serve", "--max-num-seqs", "4", "--node-rank", "1"))
    assert wrong == ["peer b (rank 1): its engine argv has --max-num-seqs 4, planned 2",
                     "peer b (rank 1): its engine argv lacks --headless"]
    assert "printed no plan" in peer_launch_problems(plan, None)[0]


def _peer(mark: str, printed: str, then: str = "time.sleep(120)") -> PeerPlan:
    """A peer whose `dspark start` prints `printed` as its exec line, then runs `then`; marked in its argv."""
    code = f"import sys, time; print('exec: ' + {printed!r}, flush=True); {then}"
    return PeerPlan(host="peer-b", rank=1, ssh=SshOptions(program=str(FAKE_SSH)),
                    command=(sys.executable, "-c", code, mark), expected=EXPECTED)


def _launch(seats: int, peer: PeerPlan, *extra: str) -> PlannedLaunch:
    argv = fake_engine_argv(free_port(), "--max-num-seqs", str(seats), "--kv-pool-tokens", str(POOL), *extra)
    return PlannedLaunch(plan=LaunchPlan(engine="vllm", argv=argv), expected_pool_tokens=POOL, peers=(peer,))


def _running(mark: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(mark in a for a in p.info["cmdline"] or ()):
            out.append(p.pid)
    return out


@pytest.fixture
def ssh_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    FAKE_SSH.chmod(0o755)
    log = tmp_path / "ssh-calls.log"
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    return log


WORKER = "vllm serve M --max-num-seqs 2 --nnodes 2 --node-rank 1 --headless"


def test_a_peer_is_started_verified_logged_and_stopped(tmp_path: Path, ssh_on_path: Path) -> None:
    mark = uuid.uuid4().hex
    log = tmp_path / "engine-2-seats.log"
    r = run_setting(2, _launch(2, _peer(mark, WORKER)), spec(), log_path=log, health_timeout_s=60,
                    stop_timeout_s=10)
    assert r.clean, r.problems
    (peer,) = r.peers
    assert peer.argv is not None and "--headless" in peer.argv and peer.problems == ()
    assert peer.stop == "stopped (SIGTERM)" and peer.log_path is not None
    peer_log = Path(peer.log_path)
    assert peer_log.parent == tmp_path / "logs" and f"exec: {WORKER}" in peer_log.read_text()
    assert "dspark-peer: pgid" in peer_log.read_text()
    calls = ssh_on_path.read_text().splitlines()
    assert len(calls) == 2 and "BatchMode=yes" in calls[0] and "kill -TERM -" in calls[1]  # start, then stop
    assert _running(mark) == []


def test_a_peer_that_printed_other_seats_is_not_benched(tmp_path: Path, ssh_on_path: Path) -> None:
    mark = uuid.uuid4().hex
    r = run_setting(2, _launch(2, _peer(mark, WORKER.replace("seqs 2", "seqs 4"))), spec(), log_path=None,
                    health_timeout_s=60, stop_timeout_s=10)
    assert not r.clean and r.bench is None and r.peer_lost is None
    assert r.problems == ("peer peer-b (rank 1): its engine argv has --max-num-seqs 4, planned 2",)
    assert _running(mark) == []


def test_a_peer_that_never_prints_its_plan_is_unconfirmed(ssh_on_path: Path) -> None:
    mark = uuid.uuid4().hex
    plan = PeerPlan(host="peer-b", rank=1, ssh=SshOptions(program=str(FAKE_SSH)),
                    command=(sys.executable, "-c", "import time; time.sleep(120)", mark), expected=EXPECTED)
    r = run_setting(2, _launch(2, plan), spec(), log_path=None, health_timeout_s=60, stop_timeout_s=10)
    assert not r.clean and "printed no plan" in r.problems[0] and r.peers[0].stop == "stopped (SIGTERM)"
    assert _running(mark) == []


def test_a_peer_dying_mid_bench_marks_the_setting_and_stops_the_sweep(tmp_path: Path, ssh_on_path: Path) -> None:
    mark = uuid.uuid4().hex
    peer = _peer(mark, WORKER, then="time.sleep(2.5); sys.exit(3)")
    result = run_sweep([2, 4], lambda n: _launch(n, peer, "--token-delay", "0.3"), spec(max_tokens=40),
                       DecisionRule(primary="wall_time_s"), log_dir=tmp_path, health_timeout_s=60,
                       stop_timeout_s=10)
    assert [s.seats for s in result.settings] == [2]
    (s,) = result.settings
    assert s.stop is not None  # the head was stopped by the sweep when its peer went, not left to time out
    assert s.peer_lost is not None and s.peer_lost.startswith("peer peer-b (rank 1) exited with code 3")
    assert s.problems[0] == s.peer_lost and not s.clean
    assert result.partial and not result.interrupted and not result.clean and result.decision.chosen is None
    assert "stopped at 2 seats: peer peer-b (rank 1) exited with code 3" in (result.partial_reason or "")
    assert s.peers[0].returncode == 3 and s.peers[0].stop == "had exited"
    assert not (tmp_path / "engine-4-seats.log").exists()
    assert _running(mark) == []


def _result(nodes: int, runtime: str = "native") -> Any:
    """A stand-in for planning.start.StartResult: what peer_plans reads (settings, the vLLM adapter, the plan)."""
    from dspark.engines import engine_spec  # noqa: PLC0415

    serve = ServeConfig(engine="vllm", model="/m", max_num_seqs=8, tensor_parallel_size=2, nnodes=nodes,
                        master_addr="10.0.0.1", master_port=29500, port=8000, distributed_runtime=runtime)
    spec_ = engine_spec("vllm")
    report = SimpleNamespace(settings=SimpleNamespace(nnodes=SimpleNamespace(value=nodes, source="recipe"),
                                                      distributed_runtime=SimpleNamespace(value=runtime)),
                             spec=spec_, serve=serve)
    return SimpleNamespace(report=report, plan=spec_.adapter().build_plan(serve, None))


def _request(**flags: object) -> StartRequest:
    return StartRequest(validate=ValidateRequest(flags={"max_num_seqs": 8, **flags}, recipe="pair.yaml",
                                                 engine_flags=("--enforce-eager",)))


def test_peer_plans_expect_the_ranks_own_flags_and_forward_the_sweeps() -> None:
    setup = PeerSetup(hosts=("spark-b",), env=("DSPARK_ENGINE_PYTHON=/opt/vllm/bin/python",))
    (plan,) = peer_plans(_request(master_addr="10.0.0.1", platform="cpu"), _result(2), 8, setup)
    assert plan.host == "spark-b" and plan.rank == 1
    assert dict(plan.expected) == {"max_num_seqs": "8", "node_rank": "1", "headless": True}
    assert plan.command == ("env", "DSPARK_ENGINE_PYTHON=/opt/vllm/bin/python", "dspark", "start", "pair.yaml",
                            "--master-addr", "10.0.0.1", "--platform", "cpu", "--node-rank", "1", "--max-num-seqs",
                            "8", "--", "--enforce-eager")


@pytest.mark.parametrize(("nodes", "runtime", "hosts", "says"), [
    (2, "native", (), "the plan spans 2 nodes (nnodes from recipe) but 0 --peer given"),
    (2, "native", ("b", "c"), "but 2 --peer given"),
    (1, "native", ("b",), "runs on one node"),
    (2, "ray", ("b",), "runs on Ray"),
])
def test_peers_that_do_not_match_the_plan_are_exit_2(nodes: int, runtime: str, hosts: tuple[str, ...],
                                                      says: str) -> None:
    with pytest.raises(InputError) as err:
        peer_plans(_request(), _result(nodes, runtime), 8, PeerSetup(hosts=hosts) if hosts else None)
    assert err.value.exit_code == 2 and says in err.value.message


def test_one_node_and_ray_plans_have_no_peers() -> None:
    assert peer_plans(_request(), _result(1), 8, None) == ()
    assert peer_plans(_request(), _result(2, "ray"), 8, None) == ()


def test_a_head_deaf_to_sigterm_is_killed_once_its_peer_is_gone(tmp_path: Path, ssh_on_path: Path) -> None:
    mark = uuid.uuid4().hex
    peer = _peer(mark, WORKER, then="time.sleep(1); sys.exit(4)")
    # The head ignores SIGTERM; its bench would take 50 s.
    r = run_setting(2, _launch(2, peer, "--ignore-sigterm", "--token-delay", "0.5"), spec(max_tokens=100),
                    log_path=None, health_timeout_s=120, stop_timeout_s=2)
    assert r.peer_lost is not None and r.problems[0] == r.peer_lost and r.stop is not None
    assert r.stop.returncode == -9  # SIGKILL, after stop_timeout_s of SIGTERM
    assert _running(mark) == []


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--peer", "-oProxyCommand=touch /tmp/x", "is not a host name"),
    ("--peer-ssh-option", "ProxyCommand", "is not an ssh option Name=value"),
    ("--peer-env", "1=x", "not NAME=VALUE"),
    ("--peer-ssh-option", "Port=22", "no --peer given"),
])
def test_the_sweep_command_refuses_bad_peer_options_before_planning(
        flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    from dspark.cli import main  # noqa: PLC0415

    extra = [] if flag == "--peer" or "no --peer" in says else ["--peer", "spark-b"]
    rc = main(["sweep", "--seats", "2,4", *extra, flag, value, "--out-dir", "/nonexistent/never-made"])
    assert rc == 2
    assert says in capsys.readouterr().err


def test_a_secret_in_the_peers_environment_stays_out_of_its_log(tmp_path: Path, ssh_on_path: Path) -> None:
    mark = uuid.uuid4().hex
    token = "hf_" + uuid.uuid4().hex
    base = _peer(mark, WORKER, then="print(sys.argv[-1], flush=True); time.sleep(120)")
    code = base.command[2]
    peer = dataclasses.replace(base, command=("env", f"HF_TOKEN={token}", sys.executable, "-c", code, token))
    r = run_setting(2, _launch(2, peer), spec(), log_path=tmp_path / "engine-2-seats.log", health_timeout_s=60,
                    stop_timeout_s=10)
    assert r.clean, r.problems
    text = Path(r.peers[0].log_path or "").read_text()
    assert token not in text and "***" in text
