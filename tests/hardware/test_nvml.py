"""NvmlSource against a fake pynvml module: H200 (v2, v1), GB10 (NOT_SUPPORTED, unified), absent NVML, processes."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from dspark.core.errors import ExitCode, HardwareError
from dspark.hardware import GpuProcess
from dspark.hardware.nvml import NvmlSource, NvmlUnavailable, integrated_signal
from dspark.hardware.unified import HostMemory, read_host_memory

GIB = 1 << 30
H200_TOTAL, H200_RESERVED, H200_FREE = 150_754_820_096, 644_939_776, 150_109_880_320


def _host(total: int = 2048 * GIB, available: int = 2000 * GIB) -> HostMemory:
    return HostMemory(total_bytes=total, available_bytes=available)


def _source(module: object, host: HostMemory | None = None) -> NvmlSource:
    return NvmlSource(module, host_memory=lambda: host or _host(), hostname=lambda: "node-a")


def test_h200_v2_reports_reserved_apart_from_used(fakes: SimpleNamespace) -> None:
    nv = fakes.Nvml([fakes.Device()])
    snap = _source(nv).snapshot()
    (gpu,) = snap.gpus
    # docs/hardware.md: v2 on the H200 is total 150,754,820,096, free 150,109,880,320, used 0, reserved 644,939,776.
    assert (gpu.total_bytes, gpu.free_bytes, gpu.used_bytes, gpu.reserved_bytes) == (
        H200_TOTAL,
        H200_FREE,
        0,
        H200_RESERVED,
    )
    assert (gpu.name, gpu.uuid, gpu.compute_capability) == ("NVIDIA H200", "GPU-ab330d6b", (9, 0))
    assert (gpu.integrated, gpu.memory_source) == (False, "nvml")
    assert (snap.source, snap.hostname, snap.description) == ("nvml", "node-a", "live NVML on node-a")
    assert (snap.driver_version, snap.cuda_version) == ("580.159.04", "13.0")
    assert snap.notes == ()
    assert nv.memory_versions == [nv.nvmlMemory_v2]  # v1 not asked once v2 answered
    assert (nv.inits, nv.shutdowns) == (1, 1)


@pytest.mark.parametrize("v2", ["absent-constant", "function-not-found", "old-signature"])
def test_h200_falls_back_to_v1_with_reserved_in_used(fakes: SimpleNamespace, v2: str) -> None:
    dev = fakes.Device(v2=None if v2 == "function-not-found" else fakes.Device().v2)
    nv = fakes.Nvml([dev])
    if v2 == "absent-constant":
        nv.nvmlMemory_v2 = None  # an nvidia-ml-py without the v2 struct version
    elif v2 == "old-signature":
        v1_only = nv.nvmlDeviceGetMemoryInfo

        def no_version_kwarg(handle: object, **kwargs: object) -> object:
            if kwargs:
                raise TypeError("nvmlDeviceGetMemoryInfo() got an unexpected keyword argument 'version'")
            return v1_only(handle)

        nv.nvmlDeviceGetMemoryInfo = no_version_kwarg
    (gpu,) = _source(nv).snapshot().gpus
    assert (gpu.total_bytes, gpu.free_bytes, gpu.used_bytes, gpu.reserved_bytes) == (
        H200_TOTAL,
        H200_FREE,
        H200_RESERVED,
        0,
    )
    assert gpu.memory_source == "nvml"


def test_v1_fallback_is_noted(fakes: SimpleNamespace) -> None:
    snap = _source(fakes.Nvml([fakes.Device(v2=None)])).snapshot()
    assert snap.notes == (
        "GPU 0 (NVIDIA H200): NVML v2 memory query unavailable; driver reservation is counted in used",
    )


def _gb10(fakes: SimpleNamespace, **kw: object) -> object:
    ns = fakes.Error(fakes.NOT_SUPPORTED)
    defaults: dict[str, object] = {
        "name": "NVIDIA GB10",
        "uuid": "GPU-gb10",
        "cc": (12, 1),
        "v1": ns,
        "v2": ns,
        "addressing": 2,
        "compute": [(4242, None)],  # on GB10 per-process memory may be unavailable
    }
    defaults.update(kw)
    return fakes.Device(**defaults)


def test_gb10_not_supported_uses_mem_available_less_cgroup_room(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/cgroup.controllers": "memory\n",
            "sys/fs/cgroup/memory.max": f"{96 * GIB}\n",
            "sys/fs/cgroup/memory.current": f"{30 * GIB}\n",
            "sys/fs/cgroup/memory.stat": f"inactive_file {4 * GIB}\n",
        },
    )
    host = partial(read_host_memory, virtual_memory=fakes.vm(119 * GIB, 100 * GIB, free=2 * GIB), root=root)
    nv = fakes.Nvml([_gb10(fakes)], process_names={4242: "python3"})
    snap = NvmlSource(nv, host_memory=host, hostname=lambda: "spark-1").snapshot()
    (gpu,) = snap.gpus
    # total: the cgroup limit (96) < MemTotal (119); free: room 96 − (30 − 4) = 70 < MemAvailable 100.
    assert (gpu.total_bytes, gpu.free_bytes, gpu.used_bytes, gpu.reserved_bytes) == (
        96 * GIB,
        70 * GIB,
        26 * GIB,
        0,
    )
    assert (gpu.integrated, gpu.memory_source, gpu.compute_capability) == (True, "unified", (12, 1))
    assert gpu.processes == (GpuProcess(pid=4242, used_bytes=None, name="python3"),)
    assert snap.source == "unified"
    assert snap.unified
    assert snap.description == "live NVML on spark-1, GPU memory from host MemAvailable capped by the cgroup's room"
    assert (snap.host_memory_total_bytes, snap.host_memory_available_bytes, snap.cgroup_limit_bytes) == (
        119 * GIB,
        100 * GIB,
        96 * GIB,
    )
    assert snap.notes[0].startswith("GPU 0 (NVIDIA GB10): integrated (NVIDIA GB10 is a unified-memory part)")
    assert "cgroup v2 / limit 96.00 GiB, room 70.00 GiB" in snap.notes[0]
    assert (nv.inits, nv.shutdowns) == (1, 1)


def test_gb10_without_cgroup_uses_mem_available(fakes: SimpleNamespace) -> None:
    host = _host(total=119 * GIB, available=101 * GIB)
    (gpu,) = _source(fakes.Nvml([_gb10(fakes)]), host).snapshot().gpus
    assert (gpu.total_bytes, gpu.free_bytes, gpu.used_bytes) == (119 * GIB, 101 * GIB, 18 * GIB)


def test_gb10_whose_driver_answers_memory_still_uses_the_host(fakes: SimpleNamespace) -> None:
    # Driver-dependent (nvitop #208): some GB10 drivers answer; their free ignores reclaimable cache.
    dev = _gb10(fakes, v1=(119 * GIB, 5 * GIB, 114 * GIB), v2=None)
    snap = _source(fakes.Nvml([dev]), _host(119 * GIB, 90 * GIB)).snapshot()
    assert (snap.gpus[0].free_bytes, snap.gpus[0].memory_source) == (90 * GIB, "unified")
    assert any("NVML's own figures (total 119.00 GiB, free 5.00 GiB) are not used" in n for n in snap.notes)


def test_unknown_ats_part_with_not_supported_memory_is_unified(fakes: SimpleNamespace) -> None:
    dev = _gb10(fakes, name="NVIDIA Future SoC")
    snap = _source(fakes.Nvml([dev]), _host(119 * GIB, 90 * GIB)).snapshot()
    assert snap.gpus[0].integrated
    assert "shares the CPU's page tables (ATS)" in snap.notes[0]


def test_discrete_gpu_with_not_supported_memory_is_an_error_not_a_guess(fakes: SimpleNamespace) -> None:
    ns = fakes.Error(fakes.NOT_SUPPORTED)
    nv = fakes.Nvml([fakes.Device(name="NVIDIA H100 80GB HBM3", v1=ns, v2=ns, addressing=0)])
    with pytest.raises(HardwareError) as info:
        _source(nv).snapshot()
    assert not isinstance(info.value, NvmlUnavailable)  # a GPU is here: no silent fallback to a profile
    assert info.value.exit_code == ExitCode.USAGE
    assert "GPU 0 (NVIDIA H100 80GB HBM3): NVML answers NOT_SUPPORTED for memory" in str(info.value)
    assert "--hardware" in str(info.value)
    assert nv.shutdowns == 1  # NVML shut down on the error path too


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (12, "libnvidia-ml.so.1, the NVML library, is not installed or not on the path"),
        (9, "the NVIDIA kernel driver is not loaded"),
    ],
)
def test_absent_nvml_is_unavailable_with_a_reason(fakes: SimpleNamespace, code: int, reason: str) -> None:
    nv = fakes.Nvml([], init_error=code)
    with pytest.raises(NvmlUnavailable) as info:
        _source(nv).snapshot()
    assert info.value.reason == reason
    assert str(info.value) == f"no NVIDIA GPU found here ({reason})"
    assert nv.shutdowns == 0  # nothing to shut down when init failed


def test_broken_driver_is_an_error_not_a_fallback(fakes: SimpleNamespace) -> None:
    nv = fakes.Nvml([fakes.Device()], init_error=fakes.LIB_RM_VERSION_MISMATCH)
    with pytest.raises(HardwareError) as info:
        _source(nv).snapshot()
    assert not isinstance(info.value, NvmlUnavailable)
    assert "NVML failed to initialise" in str(info.value)


def test_no_devices_is_unavailable(fakes: SimpleNamespace) -> None:
    nv = fakes.Nvml([])
    with pytest.raises(NvmlUnavailable, match="NVML is loaded but reports no GPUs"):
        _source(nv).snapshot()
    assert (nv.inits, nv.shutdowns) == (1, 1)


def test_pynvml_not_installed_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(NvmlUnavailable, match="nvidia-ml-py is not installed"):
        NvmlSource().snapshot()


def test_failing_memory_query_names_the_gpu(fakes: SimpleNamespace) -> None:
    lost = fakes.Error(fakes.GPU_IS_LOST)
    nv = fakes.Nvml([fakes.Device(), fakes.Device(name="NVIDIA H200", v2=lost, v1=lost)])
    with pytest.raises(HardwareError, match=r"GPU 1 \(NVIDIA H200\): NVML memory \(v2\) query failed"):
        _source(nv).snapshot()


def test_processes_merge_compute_and_graphics_by_pid(fakes: SimpleNamespace) -> None:
    dev = fakes.Device(
        compute=[(300, 2 * GIB), (100, 40 * GIB)],
        graphics=[(100, 40 * GIB), (200, None), (300, 3 * GIB)],
    )
    nv = fakes.Nvml([dev], process_names={100: "vllm", 300: "Xorg"})
    (gpu,) = _source(nv).snapshot().gpus
    assert gpu.processes == (
        GpuProcess(pid=100, used_bytes=40 * GIB, name="vllm"),
        GpuProcess(pid=200, used_bytes=None, name=""),  # name lookup refused (NO_PERMISSION)
        GpuProcess(pid=300, used_bytes=3 * GIB, name="Xorg"),  # the larger of its two figures
    )


def test_process_listing_not_supported_is_not_an_error(fakes: SimpleNamespace) -> None:
    ns = fakes.Error(fakes.NOT_SUPPORTED)
    (gpu,) = _source(fakes.Nvml([fakes.Device(compute=ns, graphics=ns)])).snapshot().gpus
    assert gpu.processes == ()


def test_optional_queries_unsupported_leave_fields_empty(fakes: SimpleNamespace) -> None:
    nv = fakes.Nvml([fakes.Device(cc=fakes.Error(fakes.NOT_SUPPORTED))])

    def not_supported() -> int:
        raise fakes.Error(fakes.NOT_SUPPORTED)

    nv.nvmlSystemGetCudaDriverVersion = not_supported
    snap = _source(nv).snapshot()
    assert snap.gpus[0].compute_capability is None
    assert snap.cuda_version is None


def test_two_unified_gpus_warn_that_free_overlaps(fakes: SimpleNamespace) -> None:
    snap = _source(fakes.Nvml([_gb10(fakes), _gb10(fakes)]), _host(119 * GIB, 90 * GIB)).snapshot()
    assert len(snap.gpus) == 2
    assert "their free figures overlap" in snap.notes[-1]


HOST = 128 * GIB
ATS = "a device that shares the CPU's page tables (ATS)"


@pytest.mark.parametrize(
    ("name", "supported", "device_total", "mode", "expected"),
    [
        ("NVIDIA GB10", True, 80 * GIB, 0, "NVIDIA GB10 is a unified-memory part"),
        ("NVIDIA GB100", False, None, 0, None),  # not GB10: the name match is a whole word
        ("NVIDIA X", False, None, 2, f"NVML memory NOT_SUPPORTED on {ATS}"),
        ("NVIDIA X", True, 125 * GIB, 2, f"device memory ≈ host MemTotal on {ATS}"),
        ("NVIDIA X", False, 126 * GIB, 0, "NVML memory NOT_SUPPORTED and the device's memory size ≈ host MemTotal"),
        ("NVIDIA GH200 480GB", True, 96 * GIB, 2, None),  # coherent but its own HBM: not unified
        ("NVIDIA GeForce RTX 5090", True, 125 * GIB, 0, None),  # a 32 GB card in a 32 GB box is still discrete
        ("NVIDIA X", False, None, None, None),  # NOT_SUPPORTED alone proves nothing
    ],
)
def test_integrated_signal(
    name: str, supported: bool, device_total: int | None, mode: int | None, expected: str | None
) -> None:
    got = integrated_signal(
        name=name,
        memory_supported=supported,
        device_total_bytes=device_total,
        host_total_bytes=HOST,
        addressing_mode=mode,
    )
    assert got == expected
