"""Memory of a unified-memory GPU (GB10): the host's MemAvailable, less any cgroup limit.

On a unified part the GPU allocates from the same LPDDR as the CPU, NVML answers NOT_SUPPORTED
for memory, and cudaMemGetInfo can mislead; what the engine can really get is what the kernel
would hand out: MemAvailable (never MemFree, which ignores reclaimable page cache; vllm #48140),
capped by the container's cgroup room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

# cgroup v1 writes "no limit" as PAGE_COUNTER_MAX rounded to a page (9223372036854771712 on 4 KiB pages);
# anything this large is no limit at all.
_V1_UNLIMITED = 1 << 60


class VirtualMemory(Protocol):
    """The two fields of psutil.virtual_memory() dspark reads."""

    @property
    def total(self) -> int:
        """MemTotal in bytes."""
        ...

    @property
    def available(self) -> int:
        """MemAvailable in bytes (psutil reads it from /proc/meminfo on Linux)."""
        ...


class CgroupMemory(NamedTuple):
    """The tightest memory limit of this process's cgroup and its ancestors; bytes."""

    version: int  # 1 or 2
    path: str  # the cgroup directory whose limit binds, relative to the cgroup mount
    limit_bytes: int
    usage_bytes: int  # memory.current / usage_in_bytes: includes page cache
    inactive_file_bytes: int = 0  # clean page cache the kernel reclaims before it OOM-kills

    @property
    def working_set_bytes(self) -> int:
        """Usage less inactive file cache (what kubelet and docker stats count as used)."""
        return max(0, self.usage_bytes - self.inactive_file_bytes)

    @property
    def room_bytes(self) -> int:
        """What can still be allocated inside the cgroup: limit − working set."""
        return max(0, self.limit_bytes - self.working_set_bytes)


class HostMemory(NamedTuple):
    """The host's memory as a unified-memory GPU can use it; bytes."""

    total_bytes: int  # MemTotal
    available_bytes: int  # MemAvailable
    cgroup: CgroupMemory | None = None

    @property
    def usable_total_bytes(self) -> int:
        """MemTotal, or the cgroup limit when smaller."""
        if self.cgroup is None:
            return self.total_bytes
        return min(self.total_bytes, self.cgroup.limit_bytes)

    @property
    def usable_free_bytes(self) -> int:
        """MemAvailable, or the cgroup's room when smaller; never above the usable total."""
        free = self.available_bytes
        if self.cgroup is not None:
            free = min(free, self.cgroup.room_bytes)
        return max(0, min(free, self.usable_total_bytes))

    @property
    def cgroup_limit_bytes(self) -> int | None:
        """The binding cgroup limit, if any."""
        return None if self.cgroup is None else self.cgroup.limit_bytes


def read_host_memory(
    *,
    virtual_memory: Callable[[], VirtualMemory] | None = None,
    root: Path = Path("/"),
) -> HostMemory:
    """Read MemTotal/MemAvailable (psutil) and the cgroup limit under `root` (tests pass a fake root)."""
    if virtual_memory is None:
        import psutil  # noqa: PLC0415 - only a unified-memory or CPU plan reads host memory; a GPU plan never does

        virtual_memory = psutil.virtual_memory
    vm = virtual_memory()
    return HostMemory(
        total_bytes=int(vm.total), available_bytes=int(vm.available), cgroup=read_cgroup_memory(root)
    )


def read_cgroup_memory(root: Path = Path("/")) -> CgroupMemory | None:
    """The binding cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes), or None when unlimited."""
    v1_path, v2_path = _own_cgroup_paths(root / "proc/self/cgroup")
    mount = root / "sys/fs/cgroup"
    if (mount / "cgroup.controllers").is_file():
        return _tightest(2, mount, v2_path)
    if (mount / "memory").is_dir():
        return _tightest(1, mount / "memory", v1_path)
    return None


def _own_cgroup_paths(proc_cgroup: Path) -> tuple[str, str]:
    """This process's (v1 memory, v2) cgroup paths from /proc/self/cgroup; "/" when not listed."""
    v1, v2 = "/", "/"
    try:
        text = proc_cgroup.read_text()
    except OSError:
        return v1, v2
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def _ancestors(mount: Path, path: str) -> Iterator[Path]:
    """The cgroup directory of `path` under `mount`, then each parent up to the mount itself.

    Without a cgroup namespace /proc/self/cgroup shows the host's path, which a container's mount
    does not have; then the mount itself is the process's cgroup.
    """
    own = mount / path.strip("/")
    if not own.is_dir():
        own = mount
    current = own
    while True:
        yield current
        if current == mount or mount not in current.parents:
            return
        current = current.parent


def _tightest(version: int, mount: Path, path: str) -> CgroupMemory | None:
    """The limited level with the least room: a parent's limit binds its children too."""
    best: CgroupMemory | None = None
    for directory in _ancestors(mount, path):
        level = _read_level(version, mount, directory)
        if level is not None and (best is None or level.room_bytes < best.room_bytes):
            best = level
    return best


def _read_level(version: int, mount: Path, directory: Path) -> CgroupMemory | None:
    """One cgroup directory's limit, usage and inactive file cache; None when it sets no limit."""
    if version == 2:
        limit_name, usage_name = "memory.max", "memory.current"
    else:
        limit_name, usage_name = "memory.limit_in_bytes", "memory.usage_in_bytes"
    limit = _read_int(directory / limit_name)
    if limit is None or limit >= _V1_UNLIMITED:
        return None
    usage = _read_int(directory / usage_name) or 0
    stat = _read_stat(directory / "memory.stat")
    # v1's total_inactive_file counts the whole subtree, matching usage_in_bytes; v2 files are hierarchical.
    inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    relative = directory.relative_to(mount)
    return CgroupMemory(
        version=version,
        path="/" if relative == Path() else "/" + relative.as_posix(),
        limit_bytes=limit,
        usage_bytes=usage,
        inactive_file_bytes=inactive,
    )


def _read_int(path: Path) -> int | None:
    """An integer file; None when absent, unreadable, or "max" (v2's no-limit)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _read_stat(path: Path) -> dict[str, int]:
    """memory.stat as a dict; empty when absent."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out
