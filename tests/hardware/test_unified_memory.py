"""Unified memory: MemAvailable (never MemFree) capped by the cgroup's room, from fake /proc and cgroup roots."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dspark.hardware.unified import CgroupMemory, HostMemory, read_cgroup_memory, read_host_memory

GIB = 1 << 30


def test_no_cgroup_filesystem_means_no_limit(tmp_path: Path) -> None:
    assert read_cgroup_memory(tmp_path) is None


def test_v2_container_limit_less_working_set(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
            "sys/fs/cgroup/memory.max": f"{64 * GIB}\n",
            "sys/fs/cgroup/memory.current": f"{20 * GIB}\n",
            "sys/fs/cgroup/memory.stat": f"anon {12 * GIB}\nfile {8 * GIB}\ninactive_file {6 * GIB}\n",
        },
    )
    cg = read_cgroup_memory(root)
    assert cg == CgroupMemory(
        version=2, path="/", limit_bytes=64 * GIB, usage_bytes=20 * GIB, inactive_file_bytes=6 * GIB
    )
    # Reclaimable clean cache is not charged against the room, as MemAvailable does not charge it.
    assert cg.working_set_bytes == 14 * GIB
    assert cg.room_bytes == 50 * GIB


def test_v2_max_is_no_limit(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "sys/fs/cgroup/cgroup.controllers": "memory\n",
            "sys/fs/cgroup/memory.max": "max\n",
            "sys/fs/cgroup/memory.current": f"{3 * GIB}\n",
        },
    )
    assert read_cgroup_memory(root) is None


def test_v2_parent_limit_binds_a_child_without_one(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/machine.slice/job.scope\n",
            "sys/fs/cgroup/cgroup.controllers": "memory\n",
            "sys/fs/cgroup/machine.slice/memory.max": f"{16 * GIB}\n",
            "sys/fs/cgroup/machine.slice/memory.current": f"{10 * GIB}\n",
            "sys/fs/cgroup/machine.slice/job.scope/memory.max": "max\n",
            "sys/fs/cgroup/machine.slice/job.scope/memory.current": f"{2 * GIB}\n",
        },
    )
    cg = read_cgroup_memory(root)
    assert cg is not None
    assert (cg.path, cg.limit_bytes, cg.room_bytes) == ("/machine.slice", 16 * GIB, 6 * GIB)


def test_v2_tightest_level_wins(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/a/b\n",
            "sys/fs/cgroup/cgroup.controllers": "memory\n",
            "sys/fs/cgroup/a/memory.max": f"{100 * GIB}\n",
            "sys/fs/cgroup/a/memory.current": f"{95 * GIB}\n",  # siblings use most of the parent
            "sys/fs/cgroup/a/b/memory.max": f"{40 * GIB}\n",
            "sys/fs/cgroup/a/b/memory.current": f"{1 * GIB}\n",
        },
    )
    cg = read_cgroup_memory(root)
    assert cg is not None
    assert (cg.path, cg.room_bytes) == ("/a", 5 * GIB)


def test_v2_host_path_missing_in_container_mount_reads_the_mount(tmp_path: Path, fakes: SimpleNamespace) -> None:
    # Without a cgroup namespace /proc/self/cgroup names the host's path; the mount is our own cgroup.
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/system.slice/docker-abc.scope\n",
            "sys/fs/cgroup/cgroup.controllers": "memory\n",
            "sys/fs/cgroup/memory.max": f"{8 * GIB}\n",
            "sys/fs/cgroup/memory.current": f"{2 * GIB}\n",
        },
    )
    cg = read_cgroup_memory(root)
    assert cg is not None
    assert (cg.path, cg.room_bytes) == ("/", 6 * GIB)


def test_v1_limit_and_hierarchical_inactive_file(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n",
            "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": f"{32 * GIB}\n",
            "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": f"{12 * GIB}\n",
            "sys/fs/cgroup/memory/docker/abc/memory.stat": (
                f"inactive_file {1 * GIB}\ntotal_inactive_file {4 * GIB}\n"
            ),
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
        },
    )
    cg = read_cgroup_memory(root)
    assert cg is not None
    assert (cg.version, cg.path, cg.limit_bytes, cg.room_bytes) == (1, "/docker/abc", 32 * GIB, 24 * GIB)


def test_v1_unlimited_sentinel_is_no_limit(tmp_path: Path, fakes: SimpleNamespace) -> None:
    root = fakes.tree(
        tmp_path,
        {
            "proc/self/cgroup": "4:memory:/\n",
            "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
            "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{5 * GIB}\n",
        },
    )
    assert read_cgroup_memory(root) is None


def test_read_host_memory_uses_mem_available_not_mem_free(tmp_path: Path, fakes: SimpleNamespace) -> None:
    host = read_host_memory(virtual_memory=fakes.vm(128 * GIB, 100 * GIB, free=3 * GIB), root=tmp_path)
    assert host == HostMemory(total_bytes=128 * GIB, available_bytes=100 * GIB, cgroup=None)
    assert (host.usable_total_bytes, host.usable_free_bytes) == (128 * GIB, 100 * GIB)


@pytest.mark.parametrize(
    ("limit", "usage", "total", "free"),
    [
        (64, 20, 64, 44),  # cgroup room (44) below MemAvailable (100): the room binds
        (200, 10, 128, 100),  # limit above the host: MemTotal and MemAvailable bind
        (110, 5, 110, 100),  # limit below MemTotal but room above MemAvailable
        (64, 70, 64, 0),  # over the limit (swap): nothing left, never negative
    ],
)
def test_usable_figures_take_the_smaller_of_host_and_cgroup(limit: int, usage: int, total: int, free: int) -> None:
    cg = CgroupMemory(version=2, path="/", limit_bytes=limit * GIB, usage_bytes=usage * GIB)
    host = HostMemory(total_bytes=128 * GIB, available_bytes=100 * GIB, cgroup=cg)
    assert (host.usable_total_bytes, host.usable_free_bytes) == (total * GIB, free * GIB)
    assert host.cgroup_limit_bytes == limit * GIB
