"""Snapshots as JSON: exact round trip, saved files read back as source "file", bad files named with the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.core.errors import InputError
from dspark.hardware import GpuInfo, GpuProcess, HardwareSnapshot
from dspark.hardware.profiles import get_profile, profile_names
from dspark.hardware.snapshot import (
    FORMAT,
    dumps_snapshot,
    load_snapshot,
    save_snapshot,
    snapshot_from_dict,
    snapshot_to_dict,
)

GIB = 1 << 30

LIVE = HardwareSnapshot(
    hostname="spark-2",
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
            processes=(GpuProcess(pid=7, used_bytes=None, name="python3"), GpuProcess(pid=9, used_bytes=GIB)),
        ),
    ),
    source="unified",
    description="live NVML on spark-2, GPU memory from host MemAvailable",
    driver_version="580.95.05",
    cuda_version="13.0",
    host_memory_total_bytes=119 * GIB,
    host_memory_available_bytes=90 * GIB,
    cgroup_limit_bytes=None,
    notes=("GPU 0 (NVIDIA GB10): integrated",),
)


@pytest.mark.parametrize("snap", [LIVE, *(get_profile(n) for n in profile_names())])
def test_dict_round_trip_is_exact(snap: HardwareSnapshot) -> None:
    data = json.loads(dumps_snapshot(snap))
    assert data["format"] == FORMAT
    assert snapshot_from_dict(data) == snap


def test_dict_shape() -> None:
    data = snapshot_to_dict(LIVE)
    assert list(data) == [
        "format",
        "hostname",
        "gpus",
        "source",
        "description",
        "driver_version",
        "cuda_version",
        "nodes",
        "host_memory_total_bytes",
        "host_memory_available_bytes",
        "cgroup_limit_bytes",
        "cpu_flags",
        "cpu_arch",
        "notes",
        "platform",
    ]
    gpu = data["gpus"][0]
    assert gpu["compute_capability"] == [12, 1]
    assert gpu["processes"] == [
        {"pid": 7, "used_bytes": None, "name": "python3"},
        {"pid": 9, "used_bytes": GIB, "name": ""},
    ]
    assert (gpu["total_bytes"], gpu["free_bytes"], gpu["reserved_bytes"]) == (119 * GIB, 90 * GIB, 0)


def test_saved_file_loads_as_source_file(tmp_path: Path) -> None:
    path = tmp_path / "peer.json"
    save_snapshot(LIVE, path)
    loaded = load_snapshot(path)
    assert loaded.gpus == LIVE.gpus  # per-GPU memory_source ("unified") is kept
    assert loaded.source == "file"
    assert loaded.description == f"saved probe {path} (live NVML on spark-2, GPU memory from host MemAvailable)"
    assert loaded.hostname == "spark-2"


def test_a_file_without_format_key_is_read(tmp_path: Path) -> None:
    data = snapshot_to_dict(LIVE)
    del data["format"]
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(data))
    assert load_snapshot(path).gpus == LIVE.gpus


def _bad(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_snapshot(path)
    message = str(info.value)
    assert str(path) in message
    return message


def _with(**changes: object) -> str:
    data = snapshot_to_dict(LIVE)
    for key, value in changes.items():
        if key.startswith("gpu_"):
            data["gpus"][0][key[4:]] = value
        else:
            data[key] = value
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64 levels"),
        ('{"nodes": NaN}', "NaN is not a number JSON allows"),
        ("[1, 2]", "not a dspark hardware snapshot: expected a JSON object, got list"),
        (_with(format="other/9"), "format is 'other/9', this dspark reads 'dspark.hardware-snapshot/1'"),
        (_with(gpu_total_bytes="lots"), "gpus.0.total_bytes: Input should be a valid integer"),
        (_with(gpu_memory_source="guess"), "gpus.0.memory_source: Input should be 'nvml', 'unified', 'file' or"),
        (_with(gpu_totl_bytes=1), "unknown key gpus.0.totl_bytes"),
        (_with(hostnam="x"), "unknown key hostnam"),
        (_with(gpu_free_bytes=200 * GIB), f"gpus.0.free_bytes {200 * GIB} exceeds total_bytes {119 * GIB}"),
        (_with(gpu_used_bytes=-1), "gpus.0.used_bytes is negative"),
        (_with(gpus=[]), "gpus is empty"),
        (_with(nodes=0), "nodes is 0, must be from 1 to 1024"),
    ],
)
def test_bad_files_name_the_file_and_problem(tmp_path: Path, text: str, problem: str) -> None:
    assert problem in _bad(tmp_path, text)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope\.json: hardware file not found"):
        load_snapshot(tmp_path / "nope.json")


def test_a_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "probe.json"
    path.write_bytes(b'{"nodes": "\xff\xfe"}')
    with pytest.raises(InputError, match=r"probe\.json: is not UTF-8 text"):
        load_snapshot(path)
