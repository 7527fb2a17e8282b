"""Built-in profiles: the figures the engines see, idle free memory, and a clear error for unknown names."""

from __future__ import annotations

import pytest

from dspark.core.errors import ExitCode, InputError
from dspark.hardware.profiles import DEFAULT_PROFILE, get_profile, is_profile, profile_names

MIB, GIB = 1 << 20, 1 << 30


@pytest.mark.parametrize(
    "row",
    [
        ("gb10", "NVIDIA GB10", round(121.69 * GIB), 0, (12, 1), 273.0, True, 1),
        ("gb10x2", "NVIDIA GB10", round(121.69 * GIB), 0, (12, 1), 273.0, True, 2),
        ("rtx5090", "NVIDIA GeForce RTX 5090", 32_607 * MIB, 0, (12, 0), 1792.0, False, 1),
        ("h100-80gb", "NVIDIA H100 80GB HBM3", 81_559 * MIB, 0, (9, 0), 3350.0, False, 1),
        ("h200", "NVIDIA H200", 150_754_820_096, 644_939_776, (9, 0), 4800.0, False, 1),
        ("b200", "NVIDIA B200", 183_359 * MIB, 0, (10, 0), 8000.0, False, 1),
    ],
)
def test_profile_figures(row: tuple[str, str, int, int, tuple[int, int], float, bool, int]) -> None:
    name, gpu, total, reserved, cc, bandwidth, integrated, nodes = row
    snap = get_profile(name)
    (g,) = snap.gpus
    assert (g.name, g.total_bytes, g.reserved_bytes, g.compute_capability) == (gpu, total, reserved, cc)
    assert (g.bandwidth_gbps, g.integrated, snap.nodes) == (bandwidth, integrated, nodes)
    # An idle machine: free is the total less any measured reservation, nothing used.
    assert (g.free_bytes, g.used_bytes) == (total - reserved, 0)
    assert (snap.source, g.memory_source) == ("profile", "profile")
    assert snap.description.startswith(f"built-in profile {name}: ")
    assert "free = total" in snap.description
    assert snap.unified is integrated


def test_h200_profile_matches_the_measured_machine() -> None:
    (g,) = get_profile("h200").gpus
    assert g.free_bytes == 150_109_880_320  # what NVML v2 reported free on the idle H200 (docs/hardware.md)


def test_names_and_default() -> None:
    assert profile_names() == ("gb10", "gb10x2", "rtx5090", "h100-80gb", "h200", "b200")
    assert DEFAULT_PROFILE == "gb10x2"
    assert is_profile("h200")
    assert not is_profile("H200")


def test_unknown_profile_lists_the_valid_ones() -> None:
    with pytest.raises(InputError) as info:
        get_profile("a100")
    assert info.value.exit_code == ExitCode.USAGE
    assert "unknown hardware profile 'a100'" in str(info.value)
    assert "gb10, gb10x2, rtx5090, h100-80gb, h200, b200" in str(info.value)


@pytest.mark.parametrize("name", ["h100-80gb:8", "h200:8", "b200:8", "rtx5090:4", "gb10:1"])
def test_any_profile_takes_a_gpu_count(name: str) -> None:
    base, _, count = name.partition(":")
    snap = get_profile(name)
    single = get_profile(base).gpus[0]
    assert len(snap.gpus) == int(count)
    assert [g.index for g in snap.gpus] == list(range(int(count)))
    assert all(g.total_bytes == single.total_bytes and g.free_bytes == single.free_bytes for g in snap.gpus)
    assert f"{count} × " in snap.description


@pytest.mark.parametrize("name", ["h200:0", "h200:x", "h200:65", "h200:", "h200:-1"])
def test_bad_gpu_counts_are_refused(name: str) -> None:
    with pytest.raises(InputError, match="GPU count after ':'"):
        get_profile(name)


def test_unknown_base_with_a_count_names_the_profiles() -> None:
    with pytest.raises(InputError, match="unknown hardware profile 'nope:8'"):
        get_profile("nope:8")
