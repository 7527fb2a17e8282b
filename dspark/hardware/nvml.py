"""Live GPU readings through NVML (nvidia-ml-py); the only module that imports pynvml.

NVML is initialised per snapshot and shut down after it, never at import time. Discrete GPUs
report memory through the v2 query (driver reservation apart from used); integrated GPUs (GB10)
take their memory from the host (unified.py).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from dspark.core.errors import HardwareError
from dspark.hardware import GpuInfo, GpuProcess, HardwareSnapshot

if TYPE_CHECKING:
    from dspark.hardware.unified import HostMemory

# NVML error codes (nvml.h); read from the module when it defines them, so a fake needs only what it uses.
_NOT_SUPPORTED = 3
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_ADDRESSING_MODE_ATS = 2  # NVML_DEVICE_ADDRESSING_MODE_ATS: GPU shares the CPU's page tables

# Parts whose GPU memory is the host's memory. The name is the one signal that does not depend on
# driver behaviour: NVML has no "integrated" attribute (CUDA's cudaDevAttrIntegrated is not in NVML).
_UNIFIED_NAMES = r"\bGB10\b|\bJetson\b|\bOrin\b|\bThor\b|\bXavier\b|\bTegra\b"
# A device whose memory is within this fraction of MemTotal is taken to be the host's memory.
_UMA_TOTAL_TOLERANCE = 0.10
_MIB = 1 << 20


class NvmlUnavailable(HardwareError):
    """No NVIDIA GPU to read here (no library, no driver, no device): a caller may fall back to a profile."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"no NVIDIA GPU found here ({reason})")
        self.reason = reason


class _Memory(NamedTuple):
    """One NVML memory reading; bytes."""

    total: int
    free: int
    used: int
    reserved: int
    query: str  # "v2" or "v1"


def _read_host_memory() -> HostMemory:
    """This host's memory (dspark.hardware.unified, loaded once there is a GPU to read)."""
    from dspark.hardware.unified import read_host_memory  # noqa: PLC0415

    return read_host_memory()


def integrated_signal(
    *,
    name: str,
    memory_supported: bool,
    device_total_bytes: int | None,
    host_total_bytes: int,
    addressing_mode: int | None,
) -> str | None:
    """Why this device shares the host's memory, or None when nothing says it does.

    The NOT_SUPPORTED error alone is not proof (ollama #12619 review; docs/hardware.md): it must
    come with an integrated name, ATS addressing, or a device size equal to the host's.
    """
    if re.search(_UNIFIED_NAMES, name, flags=re.IGNORECASE):
        return f"{name} is a unified-memory part"
    near_host = device_total_bytes is not None and _near(device_total_bytes, host_total_bytes)
    if addressing_mode == _ADDRESSING_MODE_ATS and not memory_supported:
        return "NVML memory NOT_SUPPORTED on a device that shares the CPU's page tables (ATS)"
    if addressing_mode == _ADDRESSING_MODE_ATS and near_host:
        return "device memory ≈ host MemTotal on a device that shares the CPU's page tables (ATS)"
    if not memory_supported and near_host:
        return "NVML memory NOT_SUPPORTED and the device's memory size ≈ host MemTotal"
    return None


def _near(a: int, b: int) -> bool:
    """True when a and b differ by at most the UMA tolerance of b."""
    return b > 0 and abs(a - b) <= _UMA_TOTAL_TOLERANCE * b


def _hostname() -> str:
    """This machine's name; socket (its enums cost milliseconds) loads only when there are GPUs to read."""
    import socket  # noqa: PLC0415

    return socket.gethostname()


class NvmlSource:
    """HardwareSource reading every GPU through NVML; pass a fake module in tests."""

    def __init__(
        self,
        pynvml_module: Any | None = None,
        *,
        host_memory: Callable[[], HostMemory] | None = None,
        hostname: Callable[[], str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._module = pynvml_module
        self._host_memory = host_memory or _read_host_memory
        self._hostname = hostname or _hostname
        self._environ = environ

    def snapshot(self) -> HardwareSnapshot:
        """Read every GPU now; NvmlUnavailable when there is no NVIDIA GPU to read."""
        nv = self._module if self._module is not None else _import_pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise _init_error(nv, exc) from None
        try:
            return self._read(nv)
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()

    def _read(self, nv: Any) -> HardwareSnapshot:
        """Read the system and each device; NVML is initialised."""
        count = int(nv.nvmlDeviceGetCount())
        if count == 0:
            raise NvmlUnavailable("NVML is loaded but reports no GPUs")
        environ = os.environ if self._environ is None else self._environ
        indices, visibility_note = visible_indices(environ.get("CUDA_VISIBLE_DEVICES"), count,
                                                   lambda i: _optional_text(nv, "nvmlDeviceGetUUID",
                                                                            nv.nvmlDeviceGetHandleByIndex(i)) or "")
        host = self._host_memory()
        gpus: list[GpuInfo] = []
        notes: list[str] = [visibility_note] if visibility_note else []
        for index in indices:
            gpu, gpu_notes = _read_device(nv, index, host)
            gpus.append(gpu)
            notes.extend(gpu_notes)
        unified = any(g.memory_source == "unified" for g in gpus)
        if sum(g.memory_source == "unified" for g in gpus) > 1:
            notes.append("several GPUs share the host's memory: their free figures overlap; do not add them")
        hostname = self._hostname()
        description = f"live NVML on {hostname}"
        if unified:
            capped = " capped by the cgroup's room" if host.cgroup is not None else ""
            description += f", GPU memory from host MemAvailable{capped}"
        return HardwareSnapshot(
            hostname=hostname,
            gpus=tuple(gpus),
            source="unified" if unified else "nvml",
            description=description,
            driver_version=_optional_text(nv, "nvmlSystemGetDriverVersion"),
            cuda_version=_cuda_version(nv),
            host_memory_total_bytes=host.total_bytes,
            host_memory_available_bytes=host.available_bytes,
            cgroup_limit_bytes=host.cgroup_limit_bytes,
            notes=tuple(notes),
        )


def visible_indices(
    visible: str | None, count: int, uuid_of: Callable[[int], str]
) -> tuple[list[int], str | None]:
    """The NVML indices the engine will use, in CUDA_VISIBLE_DEVICES order, and a note saying so.

    NVML numbers every GPU whatever CUDA_VISIBLE_DEVICES says; CUDA (and so the engine) sees only the
    listed ones, in the order listed, as cuda:0, cuda:1, ... Entries are indices or UUIDs (GPU-..., a unique
    prefix is enough); as in CUDA, the list ends at the first entry that names no GPU (or repeats one).
    Unset: every GPU. Set but empty: no GPU at all (NvmlUnavailable).
    """
    if visible is None:
        return list(range(count)), None
    entries = [e.strip() for e in visible.split(",")] if visible.strip() else []
    chosen: list[int] = []
    uuids: list[str] | None = None
    for entry in entries:
        index: int | None = None
        if re.fullmatch(r"\d+", entry):
            index = int(entry) if int(entry) < count else None
        elif entry.upper().startswith(("GPU-", "MIG-")):
            uuids = uuids if uuids is not None else [uuid_of(i) for i in range(count)]
            matches = [i for i, u in enumerate(uuids) if u and u.upper().startswith(entry.upper())]
            index = matches[0] if len(matches) == 1 else None
        if index is None or index in chosen:
            break
        chosen.append(index)
    if not chosen:
        raise NvmlUnavailable(
            f"CUDA_VISIBLE_DEVICES={visible!r} leaves the engine no GPU (NVML lists {count}: indices 0 to {count - 1})"
        )
    if chosen == list(range(count)):
        return chosen, None
    shown = ", ".join(f"GPU {i} as cuda:{n}" for n, i in enumerate(chosen))
    return chosen, f"CUDA_VISIBLE_DEVICES={visible!r}: planning against {shown} (of {count} NVML lists)"


def _import_pynvml() -> Any:
    """Import pynvml on first use, so importing dspark never touches the driver."""
    try:
        import pynvml  # noqa: PLC0415 - deliberately lazy: no driver access at import time
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed: {exc}") from None
    return pynvml


def _is(nv: Any, exc: BaseException, constant: str, default: int) -> bool:
    """True when exc carries NVML error `constant` (e.g. NVML_ERROR_NOT_SUPPORTED) as its code."""
    return getattr(exc, "value", None) == getattr(nv, constant, default)


def _init_error(nv: Any, exc: BaseException) -> HardwareError:
    """nvmlInit's failure as an error: NvmlUnavailable when there is simply no NVIDIA driver here."""
    if _is(nv, exc, "NVML_ERROR_LIBRARY_NOT_FOUND", _LIBRARY_NOT_FOUND):
        return NvmlUnavailable("libnvidia-ml.so.1, the NVML library, is not installed or not on the path")
    if _is(nv, exc, "NVML_ERROR_DRIVER_NOT_LOADED", _DRIVER_NOT_LOADED):
        return NvmlUnavailable("the NVIDIA kernel driver is not loaded")
    # A driver is present but NVML fails (version mismatch, permissions): planning against a
    # profile would hide a broken GPU host, so this is an error, not a fallback.
    return HardwareError(
        f"NVML failed to initialise: {exc}",
        hint="check `nvidia-smi`; to plan offline pass --hardware PROFILE or a saved probe file",
    )


def _text(value: Any) -> str:
    """NVML strings are bytes in older nvidia-ml-py releases, str in newer ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _optional_text(nv: Any, function: str, *args: Any) -> str | None:
    """A string query that may be unsupported; None then."""
    try:
        return _text(getattr(nv, function)(*args))
    except (nv.NVMLError, AttributeError):
        return None


def _cuda_version(nv: Any) -> str | None:
    """The driver's CUDA version as "13.0" (NVML returns 13000)."""
    try:
        value = int(nv.nvmlSystemGetCudaDriverVersion())
    except (nv.NVMLError, AttributeError):
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _read_device(nv: Any, index: int, host: HostMemory) -> tuple[GpuInfo, list[str]]:
    """One GPU as GpuInfo plus notes about how its memory was read."""
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    name = _text(nv.nvmlDeviceGetName(handle))
    uuid = _optional_text(nv, "nvmlDeviceGetUUID", handle) or ""
    try:
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        capability: tuple[int, int] | None = (int(major), int(minor))
    except (nv.NVMLError, AttributeError):
        capability = None
    memory = _read_memory(nv, handle, index, name)
    addressing = _optional_int(nv, "nvmlDeviceGetAddressingMode", handle)
    device_total = memory.total if memory is not None else _attributes_total(nv, handle)
    signal = integrated_signal(
        name=name,
        memory_supported=memory is not None,
        device_total_bytes=device_total,
        host_total_bytes=host.total_bytes,
        addressing_mode=addressing,
    )
    # Memory figures are filled in below, from NVML or from the host.
    base = GpuInfo(
        index=index,
        name=name,
        uuid=uuid,
        total_bytes=0,
        free_bytes=0,
        used_bytes=0,
        compute_capability=capability,
        processes=_processes(nv, handle),
    )
    if signal is not None:
        return _unified_gpu(base, host, signal, memory)
    label = f"GPU {index} ({name})"
    if memory is None:
        # A discrete GPU that will not report memory: host RAM says nothing about its HBM/GDDR,
        # so guessing would plan against the wrong pool (docs/hardware.md). Refuse instead.
        raise HardwareError(
            f"{label}: NVML answers NOT_SUPPORTED for memory and nothing shows the device is integrated "
            "(unified memory); dspark will not guess its memory from host RAM",
            hint="plan against a built-in profile or a saved probe: --hardware h100-80gb, --hardware FILE",
        )
    notes: list[str] = []
    if memory.query == "v1":
        notes.append(f"{label}: NVML v2 memory query unavailable; driver reservation is counted in used")
    gpu = replace(
        base,
        total_bytes=memory.total,
        free_bytes=memory.free,
        used_bytes=memory.used,
        reserved_bytes=memory.reserved,
        memory_source="nvml",
    )
    return gpu, notes


def _unified_gpu(
    base: GpuInfo, host: HostMemory, signal: str, memory: _Memory | None
) -> tuple[GpuInfo, list[str]]:
    """An integrated GPU whose memory is the host's: MemAvailable, capped by the cgroup room."""
    label = f"GPU {base.index} ({base.name})"
    how = f"host MemAvailable {_gib(host.available_bytes)} of MemTotal {_gib(host.total_bytes)}"
    if host.cgroup is not None:
        cg = host.cgroup
        how += f"; cgroup v{cg.version} {cg.path} limit {_gib(cg.limit_bytes)}, room {_gib(cg.room_bytes)}"
    notes = [f"{label}: integrated ({signal}); memory from {how}"]
    if memory is not None:
        notes.append(
            f"{label}: NVML's own figures (total {_gib(memory.total)}, free {_gib(memory.free)})"
            " are not used on a unified-memory device"
        )
    total, free = host.usable_total_bytes, host.usable_free_bytes
    gpu = replace(
        base,
        total_bytes=total,
        free_bytes=free,
        used_bytes=total - free,
        reserved_bytes=0,
        integrated=True,
        memory_source="unified",
    )
    return gpu, notes


def _gib(n: int) -> str:
    """Bytes as "12.34 GiB" for notes."""
    return f"{n / (1 << 30):.2f} GiB"


def _read_memory(nv: Any, handle: Any, index: int, name: str) -> _Memory | None:
    """Memory by the v2 query (reserved apart from used), else v1; None when NVML answers NOT_SUPPORTED."""
    version = getattr(nv, "nvmlMemory_v2", None)
    if version is not None:
        try:
            m = nv.nvmlDeviceGetMemoryInfo(handle, version=version)
            return _Memory(int(m.total), int(m.free), int(m.used), int(m.reserved), "v2")
        except TypeError:
            pass  # nvidia-ml-py older than the version= argument: v1 below
        except nv.NVMLError as exc:
            if not (
                _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED)
                or _is(nv, exc, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND)
            ):
                raise _device_error(index, name, "memory (v2)", exc) from None
    try:
        m = nv.nvmlDeviceGetMemoryInfo(handle)
    except nv.NVMLError as exc:
        if _is(nv, exc, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED):
            return None
        raise _device_error(index, name, "memory", exc) from None
    return _Memory(int(m.total), int(m.free), int(m.used), 0, "v1")


def _device_error(index: int, name: str, what: str, exc: BaseException) -> HardwareError:
    """A device query that failed for a reason other than NOT_SUPPORTED."""
    return HardwareError(
        f"GPU {index} ({name}): NVML {what} query failed: {exc}",
        hint="check `nvidia-smi`; to plan offline pass --hardware PROFILE or a saved probe file",
    )


def _optional_int(nv: Any, function: str, *args: Any) -> int | None:
    """An integer query that may be absent (older nvidia-ml-py) or unsupported; None then."""
    try:
        return int(getattr(nv, function)(*args))
    except (nv.NVMLError, AttributeError, TypeError, ValueError):
        return None


def _attributes_total(nv: Any, handle: Any) -> int | None:
    """The device's memory size from nvmlDeviceGetAttributes, when the driver answers it."""
    try:
        size_mib = int(nv.nvmlDeviceGetAttributes(handle).memorySizeMB)
    except (nv.NVMLError, AttributeError, TypeError, ValueError):
        return None
    return size_mib * _MIB if size_mib > 0 else None


def _processes(nv: Any, handle: Any) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes holding memory on this GPU, one entry per pid."""
    by_pid: dict[int, GpuProcess] = {}
    for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            found = getattr(nv, function)(handle)
        except (nv.NVMLError, AttributeError):
            continue  # informational only: a driver that will not list processes is not an error
        for proc in found:
            pid = int(proc.pid)
            used = getattr(proc, "usedGpuMemory", None)
            used_bytes = int(used) if used is not None else None
            known = by_pid.get(pid)
            # A process listed by both queries holds one allocation; keep the larger figure.
            if known is not None and (used_bytes is None or (known.used_bytes or 0) >= used_bytes):
                continue
            name = known.name if known is not None else _optional_text(nv, "nvmlSystemGetProcessName", pid) or ""
            by_pid[pid] = GpuProcess(pid=pid, used_bytes=used_bytes, name=name)
    return tuple(by_pid[pid] for pid in sorted(by_pid))
