"""launch/: the container entrypoint and the wrappers for people coming from the deployment's shell scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    unset = ("MAX_NUM_SEQS", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if k not in unset and not k.startswith("DSPARK_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # this checkout's dspark
    env.update(extra)
    return env


def _run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "launch" / script), *args], env=_env(**env), capture_output=True,
                          text=True, timeout=300, check=False)


def test_validate_wrapper_prints_the_fallback_line_when_nothing_sets_seats() -> None:
    proc = _run("validate.sh")
    assert proc.returncode == 0, proc.stderr
    # The default recipe leaves seats unset: the computed safe count is 6, what the deployment's pin held.
    assert "MAX_NUM_SEQS not set, using default: 6" in proc.stderr
    bare = _run("validate.sh", "--model", str(ROOT / "tests" / "fixtures" / "model-qwen3-32b"), "--engine", "vllm",
                "--json")
    assert bare.returncode == 0, bare.stderr
    report = json.loads(bare.stdout)
    safe = report["capacity"]["safe_max_num_seqs"]
    assert f"MAX_NUM_SEQS not set, using default: {min(safe, 256)}" in report["notices"]
    assert report["settings"]["max_num_seqs"] == {"value": min(safe, 256), "source": "computed"}
    seated = _run("validate.sh", "--model", str(ROOT / "tests" / "fixtures" / "model-qwen3-32b"), MAX_NUM_SEQS="12")
    assert "MAX_NUM_SEQS not set" not in seated.stderr
    assert "12 (env:MAX_NUM_SEQS)" in seated.stdout


@pytest.mark.engine
def test_start_wrapper_passes_max_num_seqs_through(vllm_python: str) -> None:
    proc = _run("start.sh", "--max-num-seqs", "12", "--dry-run", "--json", DSPARK_ENGINE_PYTHON=vllm_python,
                DSPARK_MASTER_ADDR="10.0.0.1")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["engine_check"]["parsed"]["max_num_seqs"] == 12
    assert plan["settings"]["max_num_seqs"]["source"] == "flag"


@pytest.mark.engine
def test_entrypoint_maps_the_container_environment(vllm_python: str) -> None:
    proc = _run("entrypoint.sh", "--dry-run", "--json", DSPARK_ENGINE_PYTHON=vllm_python, MAX_NUM_SEQS="8",
                NODE_RANK="1", DSPARK_RECIPE="flash-next-vllm", DSPARK_MASTER_ADDR="10.0.0.1")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["recipe"] == "flash-next-vllm"
    assert plan["settings"]["max_num_seqs"] == {"value": 8, "source": "env:MAX_NUM_SEQS"}
    argv = plan["argv"]
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert "--headless" in argv
    assert argv[argv.index("--master-addr") + 1] == "10.0.0.1"
    assert plan["engine_check"]["ok"] is True
