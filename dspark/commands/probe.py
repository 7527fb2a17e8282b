"""`dspark probe`: show the hardware dspark plans against, as a table or one JSON object."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TextIO

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dspark.hardware import GpuInfo, HardwareSnapshot
from dspark.hardware.select import probe_snapshot, resolve_cpu_host, resolve_hardware
from dspark.hardware.snapshot import dumps_snapshot

_GIB = 1 << 30
_PIPE_WIDTH = 120


def probe(
    *,
    hardware: str | None = None,
    as_json: bool = False,
    platform: str = "cuda",
    out: TextIO | None = None,
    resolve: Callable[[str | None], HardwareSnapshot] = resolve_hardware,
    resolve_cpu: Callable[[str | None], HardwareSnapshot] = resolve_cpu_host,
) -> int:
    """Print the snapshot for `hardware` (None: this machine, else a profile or saved file); returns 0.

    platform cpu: the host a CPU engine plans against (this one, or a saved CPU host), which --json saves.
    """
    stream = out if out is not None else sys.stdout
    # cpu: this host or a saved CPU host, live figures either way; cuda: a profile is never saved as this machine.
    snapshot = resolve_cpu(hardware) if platform == "cpu" else probe_snapshot(hardware, saving=as_json, resolve=resolve)
    if as_json:
        stream.write(dumps_snapshot(snapshot) + "\n")
        return 0
    # Rich sizes a terminal itself; piped output would otherwise be squeezed into 80 columns.
    width = None if stream.isatty() or "COLUMNS" in os.environ else _PIPE_WIDTH
    Console(file=stream, highlight=False, width=width).print(render_snapshot(snapshot))
    return 0


def render_snapshot(snapshot: HardwareSnapshot) -> Group:
    """The snapshot as a rich table of GPUs followed by driver, host and source lines."""
    what = "CPU host" if snapshot.platform == "cpu" else "GPUs on"
    title = f"{what} {snapshot.hostname} (memory in GiB)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    # 80 columns hold every row with its name (the longest NVML name, "NVIDIA GeForce RTX 5090", wraps before it is
    # cut): processes are listed below the table, and "integrated" joins the memory column.
    table.add_column("GPU", justify="right", no_wrap=True)
    table.add_column("name", min_width=11, overflow="fold")
    for header in ("total", "free", "used", "reserved"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("CC", no_wrap=True)
    table.add_column("memory", min_width=7, overflow="fold")
    for gpu in snapshot.gpus:
        table.add_row(
            str(gpu.index),
            gpu.name,
            _gib(gpu.total_bytes),
            _gib(gpu.free_bytes),
            _gib(gpu.used_bytes),
            _gib(gpu.reserved_bytes),
            "" if gpu.compute_capability is None else "{}.{}".format(*gpu.compute_capability),
            gpu.memory_source + (", integrated" if gpu.integrated else ""),
        )
    lines: list[Table | Text] = [table]
    lines.extend(Text(f"GPU {gpu.index} processes: {_processes(gpu)}") for gpu in snapshot.gpus if gpu.processes)
    if snapshot.nodes > 1:
        lines.append(Text(f"nodes: {snapshot.nodes}, each with the GPUs above"))
    if snapshot.driver_version or snapshot.cuda_version:
        lines.append(Text(f"driver {snapshot.driver_version or '?'}, CUDA {snapshot.cuda_version or '?'}"))
    if snapshot.host_memory_total_bytes is not None:
        host = f"host: MemTotal {_gib(snapshot.host_memory_total_bytes)} GiB"
        if snapshot.host_memory_available_bytes is not None:
            host += f", MemAvailable {_gib(snapshot.host_memory_available_bytes)} GiB"
        if snapshot.cgroup_limit_bytes is not None:
            host += f", cgroup limit {_gib(snapshot.cgroup_limit_bytes)} GiB"
        lines.append(Text(host))
    if snapshot.platform == "cpu":
        flags = ", ".join(snapshot.cpu_flags) or "none of amx_tile, amx_bf16, avx512f, avx512_bf16"
        lines.append(Text(f"cpu: {snapshot.cpu_arch or '?'}, flags a CPU engine branches on: {flags}"))
    lines.append(Text(f"source: {snapshot.description}"))
    lines.extend(Text(f"  - {note}") for note in snapshot.notes)
    return Group(*lines)


def _gib(n: int) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / _GIB:.2f}"


def _processes(gpu: GpuInfo) -> str:
    """Processes as "pid name (GiB)", comma-separated."""
    parts = []
    for p in gpu.processes:
        used = "?" if p.used_bytes is None else _gib(p.used_bytes)
        parts.append(f"{p.pid} {p.name or '?'} ({used} GiB)")
    return ", ".join(parts)
