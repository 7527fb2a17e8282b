"""A sweep of a plan with an API key (issue 26, item 4): the launch check reads vLLM's list-valued --api-key as
planned, and no key reaches stderr, sweep.md, sweep.json or the engine's log."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from dspark.bench.decision import DecisionRule
from dspark.bench.load import LoadOptions
from dspark.bench.sweep import PlannedLaunch, check_launch
from dspark.commands.sweep import sweep
from dspark.runtime.launch import LaunchPlan
from dspark.runtime.supervise import KvPoolLine
from tests.bench.helpers import fake_engine_argv, free_port

POOL = 4096
KEYS = ("sk-sweep-key-one", "sk-sweep-key-two")


def test_a_list_valued_flag_is_compared_as_the_list_it_is() -> None:
    argv = ("vllm", "serve", "/m", "--max-num-seqs", "8", "--api-key", *KEYS, "--port", "8000")
    one_key = argv[:7] + argv[8:]
    for planned, seen in ((argv, [*KEYS]), (one_key, [KEYS[0]])):
        check = check_launch(planned, 8, {"max_num_seqs": 8, "api_key": seen}, KvPoolLine(1000), 1000,
                             seat_arg="max_num_seqs")
        assert check.problems == () and "api_key" in check.confirmed
    check = check_launch(argv, 8, {"max_num_seqs": 8, "api_key": ["sk-other-key"]}, KvPoolLine(1000), 1000,
                         seat_arg="max_num_seqs")
    assert check.problems == ("argv mismatch: api_key: planned and engine values differ (secret: not shown)",)
    assert not any(k in " ".join(check.problems + check.mismatched) for k in (*KEYS, "sk-other-key"))


@pytest.mark.parametrize("keys", [KEYS[:1], KEYS])
def test_a_sweep_with_api_keys_launches_as_planned_and_prints_no_key(
    keys: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def build(seats: int) -> PlannedLaunch:
        argv = fake_engine_argv(free_port(), "--max-num-seqs", str(seats), "--kv-pool-tokens", str(POOL),
                                "--api-key", *keys)
        return PlannedLaunch(plan=LaunchPlan(engine="vllm", argv=argv), expected_pool_tokens=POOL)

    load = LoadOptions(requests=4, concurrency=2, max_tokens=4, input_len=8, reps=1, sample_interval_s=0.05)
    buf = io.StringIO()
    rc = sweep((2,), load, DecisionRule(secondaries=()), build, out_dir=tmp_path, progress=False, out=buf)
    captured = capsys.readouterr()
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert rc == 0, data["settings"][0]["problems"]
    assert "api_key" in data["settings"][0]["launch"]["confirmed"]
    log = (tmp_path / "engine-2-seats.log").read_text()
    assert "non-default args" in log and "'api_key': ['***'" in log
    outputs = {"stdout": buf.getvalue() + captured.out, "stderr": captured.err, "sweep.json": json.dumps(data),
               "sweep.md": (tmp_path / "sweep.md").read_text(), "engine log": log}
    assert {where: [k for k in keys if k in text] for where, text in outputs.items()} == {
        where: [] for where in outputs}
