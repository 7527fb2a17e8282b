"""resolve_hardware: live NVML, the default profile when no GPU is here (saying why), a profile, or a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark.core.errors import HardwareError, InputError
from dspark.hardware import HardwareSnapshot
from dspark.hardware.nvml import NvmlUnavailable
from dspark.hardware.profiles import get_profile
from dspark.hardware.select import host_snapshot, resolve_hardware
from dspark.hardware.snapshot import save_snapshot
from dspark.hardware.unified import HostMemory


class _Source:
    """A HardwareSource that returns a snapshot or raises an error."""

    def __init__(self, result: HardwareSnapshot | Exception) -> None:
        self.result = result
        self.calls = 0

    def snapshot(self) -> HardwareSnapshot:
        self.calls += 1
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


def test_none_reads_this_machine() -> None:
    live = get_profile("h200")  # any snapshot stands in for a live one
    source = _Source(live)
    assert resolve_hardware(None, nvml_factory=lambda: source) is live
    assert source.calls == 1


def test_no_gpu_falls_back_to_gb10x2_and_says_why() -> None:
    source = _Source(NvmlUnavailable("the NVIDIA kernel driver is not loaded"))
    snap = resolve_hardware(None, nvml_factory=lambda: source)
    assert snap.description == (
        "no NVIDIA GPU found here (the NVIDIA kernel driver is not loaded); planning against built-in profile gb10x2"
    )
    assert (snap.source, snap.nodes, snap.gpus) == ("profile", 2, get_profile("gb10x2").gpus)
    assert snap.notes[0] == get_profile("gb10x2").description


def test_caller_chooses_the_fallback_profile() -> None:
    snap = resolve_hardware(None, default_profile="h200", nvml_factory=lambda: _Source(NvmlUnavailable("x")))
    assert snap.gpus == get_profile("h200").gpus
    assert snap.description.endswith("planning against built-in profile h200")


def test_no_fallback_raises_unavailable() -> None:
    with pytest.raises(NvmlUnavailable, match=r"no NVIDIA GPU found here \(x\)"):
        resolve_hardware(None, default_profile=None, nvml_factory=lambda: _Source(NvmlUnavailable("x")))


def test_a_broken_gpu_is_not_hidden_behind_a_profile() -> None:
    with pytest.raises(HardwareError, match="NOT_SUPPORTED"):
        resolve_hardware(None, nvml_factory=lambda: _Source(HardwareError("GPU 0: NOT_SUPPORTED")))


def test_profile_name_does_not_touch_nvml() -> None:
    source = _Source(AssertionError("NVML must not be read"))
    assert resolve_hardware("rtx5090", nvml_factory=lambda: source) == get_profile("rtx5090")
    assert source.calls == 0


def test_path_to_saved_probe(tmp_path: Path) -> None:
    path = tmp_path / "peer.json"
    save_snapshot(get_profile("b200"), path)
    snap = resolve_hardware(str(path))
    assert (snap.source, snap.gpus) == ("file", get_profile("b200").gpus)


def test_unknown_spec_lists_profiles() -> None:
    with pytest.raises(InputError) as info:
        resolve_hardware("h300")
    message = str(info.value)
    assert "--hardware 'h300' is neither a built-in profile nor an existing file" in message
    assert "gb10, gb10x2, rtx5090, h100-80gb, h200, b200" in message


def test_host_snapshot_reads_the_cpu_flags_a_cpu_engine_branches_on(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 amx_tile amx_int8\n\nprocessor\t: 1\n")
    snap = host_snapshot(lambda: HostMemory(total_bytes=24 << 30, available_bytes=20 << 30), cpuinfo=cpuinfo)
    assert snap.cpu_flags == ("amx_tile", "avx512_bf16", "avx512f")
    (device,) = snap.gpus
    assert (device.total_bytes, device.free_bytes, device.memory_source) == (24 << 30, 20 << 30, "unified")
    missing = host_snapshot(lambda: HostMemory(total_bytes=1, available_bytes=1), cpuinfo=tmp_path / "absent")
    assert missing.cpu_flags == ()
