"""Which hardware to plan against: this machine (NVML), a saved probe file, or a built-in profile."""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dspark.core.errors import InputError, RefusedError
from dspark.core.files import exists_for_reading
from dspark.hardware import GpuInfo, HardwareSnapshot, HardwareSource
from dspark.hardware.nvml import NvmlSource, NvmlUnavailable
from dspark.hardware.profiles import DEFAULT_PROFILE, get_profile, is_profile, profile_names
from dspark.hardware.snapshot import load_snapshot

if TYPE_CHECKING:
    from dspark.hardware.unified import HostMemory


def resolve_hardware(
    spec: str | None,
    *,
    default_profile: str | None = DEFAULT_PROFILE,
    nvml_factory: Callable[[], HardwareSource] = NvmlSource,
    origin: str = "--hardware",
) -> HardwareSnapshot:
    """The snapshot to plan against.

    spec None: this machine through NVML (unified memory for integrated GPUs); with no NVIDIA GPU
    here, `default_profile` with the reason in its description, or NvmlUnavailable when it is None.
    spec a profile name: that profile. Otherwise a path to a file saved by `dspark probe --json`.
    origin names where spec came from in messages: the flag, or the environment variable (DSPARK_HARDWARE).
    """
    if spec is None:
        try:
            return nvml_factory().snapshot()
        except NvmlUnavailable as exc:
            if default_profile is None:
                raise
            return _fallback(default_profile, exc.reason)
    if is_profile(spec):
        return get_profile(spec)
    if ":" in spec and not exists_for_reading(Path(spec).expanduser()):
        return get_profile(spec)  # "h200:x" / "nope:8": the profile's own error names the part that is wrong
    path = Path(spec).expanduser()
    if exists_for_reading(path):
        return load_snapshot(path)  # a FIFO, a directory or a name too long: the reader names it
    shown = f"{origin} {spec!r}" if origin.startswith("-") else f"{origin}={spec!r}"
    raise InputError(
        f"{shown} is neither a built-in profile nor an existing file",
        hint=f"built-in profiles: {', '.join(profile_names())} (NAME:N for N GPUs per node, e.g. h200:8); "
        "or a file saved by `dspark probe --json`",
    )


def probe_snapshot(
    spec: str | None, *, saving: bool, resolve: Callable[[str | None], HardwareSnapshot] = resolve_hardware
) -> HardwareSnapshot:
    """What `dspark probe` shows for `spec`; RefusedError when saving it (--json) would record a built-in
    profile, standing in for missing GPUs, as this machine's figures."""
    snapshot = resolve(spec)
    if saving and spec is None and snapshot.source == "profile":
        # A saved probe stands for the machine it was taken on (`--hardware peer.json`): a built-in profile
        # written out here would later read as measured figures of this machine.
        raise RefusedError(
            f"nothing to probe: {snapshot.description}; `probe --json` saves live figures of this machine",
            hint="run it on the machine with the GPUs; to plan with a profile, name it where you plan "
            f"(--hardware {snapshot.hostname.removeprefix('profile:')}), or see its figures with "
            "`dspark probe --hardware PROFILE`; for a CPU engine's host, `dspark probe --platform cpu --json`",
        )
    return snapshot


def _fallback(profile: str, reason: str) -> HardwareSnapshot:
    """The default profile, saying plainly that it stands in for missing GPUs and why."""
    snapshot = get_profile(profile)
    return dataclasses.replace(
        snapshot,
        description=f"no NVIDIA GPU found here ({reason}); planning against built-in profile {profile}",
        notes=(snapshot.description, *snapshot.notes),
    )


# The flags vLLM's CPU platform branches on (AMX attention / MLA backends, the GDN state dtype reset).
_CPU_FLAGS_OF_INTEREST = frozenset({"amx_tile", "amx_bf16", "avx512f", "avx512_bf16"})


def read_cpu_flags(cpuinfo: Path | None = None) -> tuple[str, ...]:
    """The ISA flags of interest: this CPU's as its engine's torch reads them (CPUID, hardware/cpuid.py), else
    /proc/cpuinfo's; a given cpuinfo file's first `flags` line instead (empty where there is none)."""
    if cpuinfo is None:
        from dspark.hardware.cpuid import x86_isa_flags  # noqa: PLC0415 - ctypes: only a CPU plan asks

        flags = x86_isa_flags()
        if flags is not None:
            return flags
        cpuinfo = Path("/proc/cpuinfo")
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return ()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return tuple(sorted(set(value.split()) & _CPU_FLAGS_OF_INTEREST))
    return ()


def read_host_memory() -> HostMemory:
    """This host's memory (dspark.hardware.unified, loaded only for a plan that reads it)."""
    from dspark.hardware.unified import read_host_memory as read  # noqa: PLC0415

    return read()


def host_snapshot(
    read: Callable[[], HostMemory] | None = None, cpuinfo: Path | None = None
) -> HardwareSnapshot:
    """This host's memory as the one device of a CPU engine (vLLM's CPU build keeps its KV cache there), and its
    CPU's ISA flags; read: the reader of that memory (read_host_memory unless given); cpuinfo: a saved
    /proc/cpuinfo to read the flags from instead of this CPU."""
    import socket  # noqa: PLC0415 - its enums cost milliseconds; only a CPU plan names this host

    host = (read or read_host_memory)()
    name = socket.gethostname()
    device = GpuInfo(
        index=0,
        name="CPU (host memory)",
        uuid="host",
        total_bytes=host.usable_total_bytes,
        free_bytes=host.usable_free_bytes,
        used_bytes=host.usable_total_bytes - host.usable_free_bytes,
        memory_source="unified",
    )
    return HardwareSnapshot(
        hostname=name,
        gpus=(device,),
        source="unified",
        description=f"host {name}'s memory (MemAvailable, less any cgroup limit): the CPU engine's KV cache lives "
        "there",
        host_memory_total_bytes=host.total_bytes,
        host_memory_available_bytes=host.available_bytes,
        cgroup_limit_bytes=host.cgroup.limit_bytes if host.cgroup else None,
        cpu_flags=read_cpu_flags(cpuinfo),
        cpu_arch=platform.machine(),
        platform="cpu",
    )


def resolve_cpu_host(spec: str | None, *, origin: str = "--hardware",
                     read: Callable[[], HostMemory] | None = None) -> HardwareSnapshot:
    """The host a CPU engine plans against: this one (spec None), or a CPU host saved by `probe --platform cpu`."""
    if spec is None:
        return host_snapshot(read)
    shown = f"{origin} {spec!r}" if origin.startswith("-") else f"{origin}={spec!r}"
    hint = ("save the CPU host with `dspark probe --platform cpu --json > host.json` on it and give that file, "
            "or leave the hardware out to plan against this host")
    path = Path(spec).expanduser()
    if is_profile(spec) or not exists_for_reading(path):
        # Never silently dropped: the built-in profiles are GPUs; a CPU host is this one or a saved one.
        raise InputError(f"{shown} does not apply with platform cpu: it is not a saved CPU host", hint=hint)
    saved = load_snapshot(path)
    if saved.platform != "cpu":
        raise InputError(f"{shown} does not apply with platform cpu: it is a GPU snapshot ({saved.description})",
                         hint=hint)
    return saved
