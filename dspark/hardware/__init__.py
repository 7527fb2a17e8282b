"""What the machine offers: one snapshot value, read through one small interface.

Sources: NVML (discrete GPUs), unified memory (GB10: MemAvailable less any cgroup limit),
a saved probe file, or a built-in profile. Tests inject a fake HardwareSource.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

MemorySource = Literal["nvml", "unified", "file", "profile"]


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory."""

    pid: int
    used_bytes: int | None
    name: str = ""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as dspark plans against it; memory figures are bytes."""

    index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    reserved_bytes: int = 0  # driver/firmware reservation (NVML v2), reported apart from used
    compute_capability: tuple[int, int] | None = None
    integrated: bool = False  # unified memory with the host (GB10)
    memory_source: MemorySource = "nvml"
    bandwidth_gbps: float | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class HardwareSnapshot:
    """The GPUs of one node plus how the figures were obtained."""

    hostname: str
    gpus: tuple[GpuInfo, ...]
    source: MemorySource
    description: str  # plain words: "live NVML", "built-in profile gb10x2 (no NVIDIA GPU here)", ...
    driver_version: str | None = None
    cuda_version: str | None = None
    nodes: int = 1  # a profile may describe several identical nodes (gb10x2 = 2 nodes of 1 GPU)
    host_memory_total_bytes: int | None = None
    host_memory_available_bytes: int | None = None
    cgroup_limit_bytes: int | None = None
    cpu_flags: tuple[str, ...] = ()  # the host CPU's ISA flags a CPU engine branches on (amx_tile, avx512_bf16)
    cpu_arch: str | None = None  # platform.machine(): x86_64, aarch64, ...
    notes: tuple[str, ...] = field(default=())
    # What the snapshot is for: "cuda" (GPUs) or "cpu" (a CPU engine's host: its memory and ISA flags).
    platform: Literal["cuda", "cpu"] = "cuda"

    @property
    def unified(self) -> bool:
        """True when GPU memory is the host's memory (integrated device)."""
        return any(g.integrated for g in self.gpus)


class HardwareSource(Protocol):
    """Anything that can produce a snapshot: live NVML, a file, a profile, or a test fake."""

    def snapshot(self) -> HardwareSnapshot:
        """Read the hardware now."""
        ...
