"""`dspark probe`: one JSON object or a table on stdout, exit 0; bad --hardware exits 2 without a traceback."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from click.testing import CliRunner

from dspark.cli import cli
from dspark.commands.probe import probe
from dspark.hardware import GpuInfo, GpuProcess, HardwareSnapshot
from dspark.hardware.nvml import NvmlUnavailable
from dspark.hardware.profiles import get_profile
from dspark.hardware.select import resolve_hardware

GIB = 1 << 30

SPARK = HardwareSnapshot(
    hostname="spark-1",
    gpus=(
        GpuInfo(
            index=0,
            name="NVIDIA GB10",
            uuid="GPU-x",
            total_bytes=119 * GIB,
            free_bytes=90 * GIB,
            used_bytes=29 * GIB,
            compute_capability=(12, 1),
            integrated=True,
            memory_source="unified",
            processes=(GpuProcess(pid=4242, used_bytes=None, name="python3"),),
        ),
    ),
    source="unified",
    description="live NVML on spark-1, GPU memory from host MemAvailable capped by the cgroup's room",
    driver_version="580.95.05",
    cuda_version="13.0",
    host_memory_total_bytes=119 * GIB,
    host_memory_available_bytes=100 * GIB,
    cgroup_limit_bytes=96 * GIB,
    notes=("GPU 0 (NVIDIA GB10): integrated (NVIDIA GB10 is a unified-memory part)",),
)


class _NoGpu:
    """A HardwareSource for a machine without NVIDIA GPUs."""

    def snapshot(self) -> HardwareSnapshot:
        raise NvmlUnavailable("the NVIDIA kernel driver is not loaded")


def test_json_is_one_object_of_the_snapshot() -> None:
    result = CliRunner().invoke(cli, ["probe", "--json", "--hardware", "h200"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the whole of stdout is one JSON document
    assert data["source"] == "profile"
    assert data["gpus"][0]["total_bytes"] == 150_754_820_096
    assert data["gpus"][0]["reserved_bytes"] == 644_939_776


def test_table_shows_each_gpu_and_the_source_line() -> None:
    out = io.StringIO()
    assert probe(hardware=None, out=out, resolve=lambda _spec: SPARK) == 0
    text = out.getvalue()
    assert "GPUs on spark-1 (memory in GiB)" in text
    row = next(line for line in text.splitlines() if "NVIDIA GB10" in line)
    for cell in ("119.00", "90.00", "29.00", "0.00", "12.1", "unified, integrated"):
        assert cell in row
    assert "GPU 0 processes: 4242 python3 (? GiB)" in text
    assert "driver 580.95.05, CUDA 13.0" in text
    assert "host: MemTotal 119.00 GiB, MemAvailable 100.00 GiB, cgroup limit 96.00 GiB" in text
    assert "source: live NVML on spark-1, GPU memory from host MemAvailable capped by the cgroup's room" in text
    assert "  - GPU 0 (NVIDIA GB10): integrated (NVIDIA GB10 is a unified-memory part)" in text


def test_no_gpu_shows_the_fallback_and_why() -> None:
    out = io.StringIO()
    resolve = partial(resolve_hardware, nvml_factory=_NoGpu)
    assert probe(hardware=None, out=out, resolve=resolve) == 0
    text = out.getvalue()
    assert "no NVIDIA GPU found here (the NVIDIA kernel driver is not loaded); planning against built-in" in text
    assert "nodes: 2, each with the GPUs above" in text


def test_json_written_by_probe_reads_back_as_hardware(tmp_path: Path) -> None:
    runner = CliRunner()
    saved = runner.invoke(cli, ["probe", "--json", "--hardware", "b200"])
    path = tmp_path / "peer.json"
    path.write_text(saved.stdout)
    again = runner.invoke(cli, ["probe", "--json", "--hardware", str(path)])
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    assert data["source"] == "file"
    assert data["gpus"] == json.loads(saved.stdout)["gpus"]


def test_unknown_hardware_exits_2_with_the_valid_profiles() -> None:
    result = CliRunner().invoke(cli, ["probe", "--hardware", "h300"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error: --hardware 'h300' is neither a built-in profile nor an existing file" in result.stderr
    assert "gb10x2" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_file_exits_2_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "peer.json"
    path.write_text('{"gpus": 3}')
    result = CliRunner().invoke(cli, ["probe", "--hardware", str(path)])
    assert result.exit_code == 2
    assert f"error: hardware file {path} is not a dspark hardware snapshot" in result.stderr
    assert "Traceback" not in result.stderr


def test_python_m_dspark_probe_json() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dspark", "probe", "--json", "--hardware", "gb10x2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["nodes"] == 2
    assert data["gpus"][0]["compute_capability"] == [12, 1]
    assert data["gpus"][0]["total_bytes"] == get_profile("gb10x2").gpus[0].total_bytes


@pytest.mark.parametrize("hardware", ["rtx5090:2", "gb10", "h200:8", "b200", "h100-80gb"])
def test_eighty_columns_keep_every_gpu_s_name_and_cell(hardware: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 26 item 24: at 80 columns the name column was cut to "…" (so was the processes column)."""
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    assert probe(hardware=hardware, out=out) == 0
    text = out.getvalue()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    snapshot = resolve_hardware(hardware)
    flat = " ".join(text.split())
    for gpu in snapshot.gpus:
        assert all(word in flat for word in gpu.name.split()), gpu.name
