"""The Ray node probe reads every GPU of its node, though Ray gives a task that claims none CUDA_VISIBLE_DEVICES=''."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dspark.hardware.nvml import NvmlSource, NvmlUnavailable
from dspark.hardware.ray_nodes import probe_environ, probe_here

GIB = 1 << 30


def _two(fakes: SimpleNamespace) -> object:
    devices = [fakes.Device(uuid=f"GPU-{i}", v2=(150 * GIB, 0, (100 + i) * GIB, (50 - i) * GIB),
                            v1=(150 * GIB, (100 + i) * GIB, 0)) for i in range(2)]
    return fakes.Nvml(devices)


def test_rays_empty_list_is_dropped_and_a_nodes_own_list_kept() -> None:
    assert probe_environ({"CUDA_VISIBLE_DEVICES": "", "X": "1"}) == {"X": "1"}
    assert probe_environ({"CUDA_VISIBLE_DEVICES": "1"}) == {"CUDA_VISIBLE_DEVICES": "1"}


def test_every_gpu_is_read_under_rays_empty_list(fakes: SimpleNamespace) -> None:
    answer = probe_here({"CUDA_VISIBLE_DEVICES": ""}, pynvml_module=_two(fakes))
    assert [g["free_bytes"] for g in answer["snapshot"]["gpus"]] == [100 * GIB, 101 * GIB]
    # Read as the engine would see it under that list: no GPU at all, which the probe must not report.
    with pytest.raises(NvmlUnavailable, match="leaves the engine no GPU"):
        NvmlSource(_two(fakes), environ={"CUDA_VISIBLE_DEVICES": ""}).snapshot()


def test_a_list_the_node_set_before_ray_start_is_honoured(fakes: SimpleNamespace) -> None:
    answer = probe_here({"CUDA_VISIBLE_DEVICES": "1"}, pynvml_module=_two(fakes))
    assert [g["index"] for g in answer["snapshot"]["gpus"]] == [1]
