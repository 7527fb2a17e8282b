"""CUDA_VISIBLE_DEVICES: plan against the GPUs the engine will see, in its order; '' means none (fake NVML)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dspark.hardware.nvml import NvmlSource, NvmlUnavailable, visible_indices
from dspark.hardware.unified import HostMemory

GIB = 1 << 30
UUIDS = ["GPU-aaaa1111", "GPU-bbbb2222", "GPU-cccc3333", "GPU-dddd4444"]


def _four(fakes: SimpleNamespace) -> object:
    # Four GPUs told apart by free memory, so the order a snapshot lists them in is visible.
    devices = []
    for i, uuid in enumerate(UUIDS):
        free = (100 + i) * GIB
        devices.append(fakes.Device(uuid=uuid, v2=(150 * GIB, 0, free, 150 * GIB - free), v1=(150 * GIB, free, 0)))
    return fakes.Nvml(devices)


def _snapshot(nv: object, visible: str | None) -> object:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    host = HostMemory(total_bytes=2048 * GIB, available_bytes=2000 * GIB)
    return NvmlSource(nv, host_memory=lambda: host, hostname=lambda: "n", environ=env).snapshot()


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("2", [2]),
        ("3,1", [3, 1]),
        (" 1 , 0 ", [1, 0]),
        ("GPU-cccc3333,GPU-aaaa1111", [2, 0]),
        ("GPU-dddd", [3]),  # a unique UUID prefix is enough, as for CUDA
        ("1,7,0", [1]),  # CUDA stops at the first entry that names no GPU
        ("0,0,1", [0]),  # a repeat ends the list too
        ("2,GPU-bbbb2222", [2, 1]),
    ],
)
def test_visible_gpus_in_the_order_given(fakes: SimpleNamespace, visible: str | None, expected: list[int]) -> None:
    snap = _snapshot(_four(fakes), visible)
    assert [g.index for g in snap.gpus] == expected  # type: ignore[attr-defined]
    assert [g.free_bytes for g in snap.gpus] == [(100 + i) * GIB for i in expected]  # type: ignore[attr-defined]


@pytest.mark.parametrize("visible", ["", " ", "7", "-1", "GPU-zzzz", "nope"])
def test_no_visible_gpu_is_no_gpu(fakes: SimpleNamespace, visible: str) -> None:
    with pytest.raises(NvmlUnavailable, match="leaves the engine no GPU"):
        _snapshot(_four(fakes), visible)


def test_a_subset_is_noted(fakes: SimpleNamespace) -> None:
    snap = _snapshot(_four(fakes), "3,1")
    assert any("GPU 3 as cuda:0, GPU 1 as cuda:1" in n for n in snap.notes)  # type: ignore[attr-defined]


def test_an_ambiguous_uuid_prefix_names_no_gpu() -> None:
    with pytest.raises(NvmlUnavailable):
        visible_indices("GPU-a", 2, lambda i: ["GPU-a1", "GPU-a2"][i])
    assert visible_indices("GPU-a2", 2, lambda i: ["GPU-a1", "GPU-a2"][i]) == ([1], "CUDA_VISIBLE_DEVICES='GPU-a2': "
                                                                              "planning against GPU 1 as cuda:0 "
                                                                              "(of 2 NVML lists)")
