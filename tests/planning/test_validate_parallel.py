"""Parallelism is judged against the GPUs the engine will see: too few is a refusal (exit 1), enough plans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "model-qwen3-32b"


def validate(hardware: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """`dspark validate --model qwen3-32b --engine vllm --hardware HW --json -- FLAGS` in a fresh process."""
    argv = [sys.executable, "-m", "dspark", "validate", "--model", str(FIXTURE), "--engine", "vllm",
            "--hardware", hardware, "--json", "--", "--max-model-len", "32768", *flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("flags", [("--tensor-parallel-size", "2"), ("--data-parallel-size", "2"),
                                   ("--tensor-parallel-size", "2", "--data-parallel-size", "2")])
def test_more_gpus_than_the_node_has_is_refused_with_the_count(flags: tuple[str, ...]) -> None:
    proc = validate("h200", *flags)
    assert proc.returncode == 1, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "refused_error"
    assert "GPU(s) per node" in error["message"] and "has 1" in error["message"]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("hardware", "flags"), [
    ("h200:2", ("--tensor-parallel-size", "2")),
    ("h200:2", ("--data-parallel-size", "2")),
    ("h200:4", ("--tensor-parallel-size", "2", "--data-parallel-size", "2")),
])
def test_enough_gpus_plan_each_replica(hardware: str, flags: tuple[str, ...]) -> None:
    proc = validate(hardware, *flags)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert report["capacity"]["kv_pool_tokens"] > 0
