"""`dspark advise` workload options without an engine: dspark's model runs, says so and what it cannot see;
workload files give the model their lengths; bad workload options are exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.cli import main

ARGS = ["advise", "flash-next-vllm", "--seats", "8,16", "--clients", "32", "--requests", "40", "--json"]


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An engine interpreter that does not exist: the advisor cannot replay through the engine here."""
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(tmp_path / "no-such-python"))


def test_without_the_engine_dspark_model_says_what_it_cannot_see(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGS) == 0
    data = json.loads(capsys.readouterr().out)
    for p in data["predictions"]:
        assert p["simulator"].startswith("dspark model: vllm is not installed here")
        assert p["prefix_cache_hit_rate"] is None and p["preemptions"] is None and p["warm"] is None
    note = next(a for a in data["assumptions"] if a.startswith("dspark model: its own continuous batching"))
    assert "no prefix cache" in note and "no preemption" in note


@pytest.mark.parametrize("extra", [["--warm"], ["--request-rate", "inf"], ["--shared-prefix", "64"],
                                   ["--warm", "--simulator", "dspark"]])
def test_scheduler_options_without_the_scheduler_are_refused(extra: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """--warm, --request-rate and --shared-prefix need the engine's scheduler: exit 2 naming them, not ignored."""
    assert main([*ARGS, *extra]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert extra[0] in error["message"] and "need(s) the engine's own scheduler" in error["message"]
    assert "DSPARK_ENGINE_PYTHON" in error["hint"]


def test_simulator_dspark_is_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--simulator", "dspark"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["simulator"] for p in data["predictions"]} == {"dspark model: asked for (--simulator dspark)"}


def test_simulator_engine_without_the_engine_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([*ARGS, "--simulator", "engine"])
    assert rc != 0
    error = json.loads(capsys.readouterr().out)["error"]
    assert "no-such-python" in error["message"]


def test_a_workload_file_gives_the_model_its_lengths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps({"prompt": list(range(10, 10 + n)), "max_tokens": m}) + "\n"
                            for n, m in ((100, 10), (300, 30))))
    assert main(["advise", "flash-next-vllm", "--seats", "8", "--workload", str(path), "--json"]) == 0
    workload = json.loads(capsys.readouterr().out)["workload"]
    assert (workload["input_len"], workload["output_len"], workload["requests"]) == (200, 20, 2)


@pytest.mark.parametrize(("extra", "message"), [
    (["--shared-prefix", "2048"], "--shared-prefix must be at least 0 and shorter than the prompts"),
    (["--shared-prefix", "-1"], "--shared-prefix must be at least 0"),
])
def test_bad_workload_options_are_exit_2(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--input-len", "2048", *extra]) == 2
    assert message in json.loads(capsys.readouterr().out)["error"]["message"]
