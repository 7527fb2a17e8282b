"""Fakes for the hardware probe: a pynvml module object and a psutil virtual_memory result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

GIB = 1 << 30

# Real NVML codes (nvml.h), so the fake raises what the driver would.
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
NO_PERMISSION = 4


class FakeNVMLError(Exception):
    """pynvml.NVMLError: carries the NVML return code as .value."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeDevice:
    """One GPU as the fake NVML answers for it; an Exception value is raised instead of returned."""

    name: str = "NVIDIA H200"
    uuid: str = "GPU-ab330d6b"
    cc: tuple[int, int] | Exception = (9, 0)
    # (total, free, used) for v1; (total, reserved, free, used) for v2; None: v2 absent (FunctionNotFound)
    v1: tuple[int, int, int] | Exception = (150_754_820_096, 150_109_880_320, 644_939_776)
    v2: tuple[int, int, int, int] | Exception | None = (150_754_820_096, 644_939_776, 150_109_880_320, 0)
    addressing: int | Exception = 0
    attributes_mb: int | Exception = field(default_factory=lambda: FakeNVMLError(NOT_SUPPORTED))
    compute: list[tuple[int, int | None]] | Exception = field(default_factory=list)
    graphics: list[tuple[int, int | None]] | Exception = field(default_factory=list)


def _answer(value: Any) -> Any:
    """Return value, or raise it when it is an exception."""
    if isinstance(value, BaseException):
        raise value
    return value


class FakeNvml:
    """A pynvml module object: the functions and constants NvmlSource uses, driven by FakeDevice values."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_DRIVER_NOT_LOADED = DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = FUNCTION_NOT_FOUND
    nvmlMemory_v2 = 0x02000028

    def __init__(
        self,
        devices: list[FakeDevice],
        *,
        init_error: int | None = None,
        driver: str = "580.159.04",
        cuda: int = 13000,
        process_names: dict[int, str] | None = None,
    ) -> None:
        self.devices = devices
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.process_names = process_names or {}
        self.inits = 0
        self.shutdowns = 0
        self.memory_versions: list[int | None] = []

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetName(self, h: FakeDevice) -> bytes:
        return h.name.encode()  # older nvidia-ml-py returns bytes; dspark must decode

    def nvmlDeviceGetUUID(self, h: FakeDevice) -> str:
        return h.uuid

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeDevice) -> tuple[int, int]:
        return _answer(h.cc)  # type: ignore[no-any-return]

    def nvmlDeviceGetMemoryInfo(self, h: FakeDevice, version: int | None = None) -> SimpleNamespace:
        self.memory_versions.append(version)
        if version is None:
            total, free, used = _answer(h.v1)
            return SimpleNamespace(total=total, free=free, used=used)
        if h.v2 is None:
            raise FakeNVMLError(FUNCTION_NOT_FOUND)
        total, reserved, free, used = _answer(h.v2)
        return SimpleNamespace(version=version, total=total, reserved=reserved, free=free, used=used)

    def nvmlDeviceGetAddressingMode(self, h: FakeDevice) -> int:
        return _answer(h.addressing)  # type: ignore[no-any-return]

    def nvmlDeviceGetAttributes(self, h: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(memorySizeMB=_answer(h.attributes_mb))

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeDevice) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in _answer(h.compute)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: FakeDevice) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in _answer(h.graphics)]

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.process_names:
            raise FakeNVMLError(NO_PERMISSION)
        return self.process_names[pid]


def fake_vm(total: int, available: int, free: int | None = None) -> Callable[[], SimpleNamespace]:
    """A psutil.virtual_memory() stand-in; `free` (MemFree) defaults far below available to catch misuse."""
    return lambda: SimpleNamespace(total=total, available=available, free=free if free is not None else GIB)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Create files (path relative to root -> text) under root; returns root."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The fakes above, for tests: fakes.Nvml, fakes.Device, fakes.Error, fakes.vm, fakes.tree and NVML codes."""
    return SimpleNamespace(
        Nvml=FakeNvml,
        Device=FakeDevice,
        Error=FakeNVMLError,
        vm=fake_vm,
        tree=write_tree,
        GIB=GIB,
        NOT_SUPPORTED=NOT_SUPPORTED,
        DRIVER_NOT_LOADED=DRIVER_NOT_LOADED,
        LIBRARY_NOT_FOUND=LIBRARY_NOT_FOUND,
        FUNCTION_NOT_FOUND=FUNCTION_NOT_FOUND,
        GPU_IS_LOST=GPU_IS_LOST,
        LIB_RM_VERSION_MISMATCH=LIB_RM_VERSION_MISMATCH,
    )
