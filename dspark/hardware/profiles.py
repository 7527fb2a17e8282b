"""Built-in hardware profiles for planning offline (no GPU here, or planning for another machine).

Totals are what the engines see (NVML / torch totals), not the nominal marketing figure. A
profile describes an idle machine: free = total less any measured driver reservation.
"""

from __future__ import annotations

from typing import NamedTuple

from dspark.core.errors import InputError
from dspark.hardware import GpuInfo, HardwareSnapshot

_MIB = 1 << 20
_GIB = 1 << 30

class _Spec(NamedTuple):
    """One GPU model's planning figures."""

    gpu_name: str
    total_bytes: int
    bandwidth_gbps: float
    compute_capability: tuple[int, int]
    summary: str
    source: str  # where the total comes from
    reserved_bytes: int = 0
    integrated: bool = False
    nodes: int = 1
    gpus_per_node: int = 1
    max_gpus_per_node: int = 64  # "PROFILE:N" above this describes no machine that exists
    one_node: str = ""  # the machine, for the message when N exceeds max_gpus_per_node


def _gb10(summary: str, nodes: int) -> _Spec:
    """A DGX Spark: 128 GB nominal LPDDR5X shared with the CPU; vLLM/torch see 121.69 GiB (docs/hardware.md)."""
    return _Spec(
        gpu_name="NVIDIA GB10",
        total_bytes=round(121.69 * _GIB),
        bandwidth_gbps=273.0,
        compute_capability=(12, 1),
        summary=summary,
        source="121.69 GiB visible to vLLM/torch on a DGX Spark (128 GB nominal, unified with the CPU)",
        integrated=True,
        nodes=nodes,
        max_gpus_per_node=1,
        one_node="a DGX Spark holds one GB10",
    )


_SPECS: dict[str, _Spec] = {
    "gb10": _gb10("1 × DGX Spark (GB10, 128 GB unified, 273 GB/s)", nodes=1),
    "gb10x2": _gb10("2 nodes × 1 DGX Spark (GB10, 128 GB unified each, 273 GB/s), linked for TP=2", nodes=2),
    "rtx5090": _Spec(
        gpu_name="NVIDIA GeForce RTX 5090",
        total_bytes=32_607 * _MIB,
        bandwidth_gbps=1792.0,
        compute_capability=(12, 0),
        summary="1 × RTX 5090 (32 GB GDDR7, 1,792 GB/s)",
        source="32,607 MiB, the total nvidia-smi reports for an RTX 5090 (32 GB nominal)",
    ),
    "h100-80gb": _Spec(
        gpu_name="NVIDIA H100 80GB HBM3",
        total_bytes=81_559 * _MIB,
        bandwidth_gbps=3350.0,
        compute_capability=(9, 0),
        summary="1 × H100 SXM 80GB (HBM3, 3.35 TB/s)",
        source="81,559 MiB, the total nvidia-smi reports for an H100 80GB HBM3",
    ),
    "h200": _Spec(
        gpu_name="NVIDIA H200",
        total_bytes=150_754_820_096,
        reserved_bytes=644_939_776,
        bandwidth_gbps=4800.0,
        compute_capability=(9, 0),
        summary="1 × H200 (141 GB HBM3e, 4.8 TB/s)",
        source="measured: NVML v2 total 150,754,820,096 B, reserved 644,939,776 B (driver 580.159.04)",
    ),
    "b200": _Spec(
        gpu_name="NVIDIA B200",
        total_bytes=183_359 * _MIB,
        bandwidth_gbps=8000.0,
        compute_capability=(10, 0),
        summary="1 × B200 (180 GB usable HBM3e, 8 TB/s)",
        source="183,359 MiB (≈179 GiB, HGX B200's '180 GB'), the total nvidia-smi reports for a B200",
    ),
}

DEFAULT_PROFILE = "gb10x2"  # the deployment dspark was born on (docs/hardware.md)
MAX_GPUS_PER_NODE = 64  # "PROFILE:N": far above the 8 of an HGX board


def bandwidth_gbps_for(gpu_name: str) -> float | None:
    """The memory bandwidth (GB/s) of the profile whose GPU is `gpu_name` (as NVML names it), or None."""
    wanted = gpu_name.strip().lower()
    for spec in _SPECS.values():
        if spec.gpu_name.lower() == wanted or spec.gpu_name.lower().removeprefix("nvidia ") in wanted:
            return spec.bandwidth_gbps
    return None


def profile_names() -> tuple[str, ...]:
    """The built-in profile names, in a stable order (each also as NAME:N for N GPUs per node)."""
    return tuple(_SPECS)


def _parse(name: str) -> tuple[_Spec, int] | None:
    """(spec, GPUs per node) for "h200" or "h200:8"; None when the base name is not a profile."""
    base, colon, count = name.partition(":")
    spec = _SPECS.get(base)
    if spec is None:
        return None
    if not colon:
        return spec, spec.gpus_per_node
    if not count.isdigit() or not 1 <= int(count) <= MAX_GPUS_PER_NODE:
        raise InputError(
            f"hardware profile {name!r}: the GPU count after ':' must be a whole number from 1 to "
            f"{MAX_GPUS_PER_NODE}",
            hint=f"e.g. {base}:8 for a node of 8 GPUs",
        )
    if int(count) > spec.max_gpus_per_node:
        raise InputError(
            f"hardware profile {name!r}: {spec.one_node}, so at most {base}:{spec.max_gpus_per_node}",
            hint="for several machines give the nodes instead (--nnodes, or the gb10x2 profile for a linked pair)",
        )
    return spec, int(count)


def is_profile(name: str) -> bool:
    """True when `name` names a built-in profile, alone or as NAME:N."""
    return name.partition(":")[0] in _SPECS


def get_profile(name: str) -> HardwareSnapshot:
    """The snapshot of built-in profile `name` ("h200", or "h200:8" for 8 GPUs per node); InputError otherwise."""
    parsed = _parse(name)
    if parsed is None:
        raise InputError(
            f"unknown hardware profile {name!r}",
            hint=f"built-in profiles: {', '.join(profile_names())} (NAME:N for N GPUs per node, e.g. h200:8); "
            "or a file saved by `dspark probe --json`",
        )
    spec, per_node = parsed
    free = spec.total_bytes - spec.reserved_bytes
    gpus = tuple(
        GpuInfo(
            index=i,
            name=spec.gpu_name,
            uuid="",
            total_bytes=spec.total_bytes,
            free_bytes=free,
            used_bytes=0,
            reserved_bytes=spec.reserved_bytes,
            compute_capability=spec.compute_capability,
            integrated=spec.integrated,
            memory_source="profile",
            bandwidth_gbps=spec.bandwidth_gbps,
        )
        for i in range(per_node)
    )
    idle = "free = total" + (" less the measured driver reservation" if spec.reserved_bytes else "")
    notes = [f"total: {spec.source}", f"{idle}: an idle machine; run `dspark probe` there for live figures"]
    if not spec.reserved_bytes and not spec.integrated:
        notes.append("driver reservation not known for this GPU (615 MiB on an H200): counted as free here")
    if spec.integrated:
        notes.append(
            "unified memory: the OS, page cache and other processes share this pool, so a live probe "
            "(MemAvailable) reports less free than this profile"
        )
    return HardwareSnapshot(
        hostname=f"profile:{name}",
        gpus=gpus,
        source="profile",
        description=f"built-in profile {name}: {spec.summary.replace('1 × ', f'{per_node} × ', 1)}; {idle} "
        "(an idle machine)",
        nodes=spec.nodes,
        notes=tuple(notes),
    )
