"""vLLM 0.32.0 CUDA-graph capture sizes (VllmConfig._set_cudagraph_sizes), table-tested with exact lists."""

from __future__ import annotations

import pytest

from dspark.engines.vllm.graphs import (
    CaptureSizeError,
    CaptureSizes,
    default_max_capture_size,
    round_for_spec_decode,
    vllm_capture_sizes,
    vllm_graph_plan,
)

H200 = (9, 0)
B200 = (10, 0)
GB10 = (12, 1)

STEP8_TO_248 = list(range(8, 256, 8))  # 8, 16, ..., 248


@pytest.mark.parametrize(
    ("seats", "spec", "cc", "expected"),
    [
        (8, 4, GB10, 80),  # docs/deployment.md: 8 seats x (1 + 4) x 2
        (8, 0, H200, 16),
        (32, 3, H200, 256),  # docs/engines/vllm.md §6
        (64, 3, H200, 512),
        (1024, 0, H200, 512),
        (1024, 0, B200, 1024),  # SM 10.x doubles the ceiling
        (1024, 0, GB10, 512),  # GB10 is SM 12.1, not the B200 family
        (6, 0, None, 12),
    ],
)
def test_default_max_capture_size(seats: int, spec: int, cc: tuple[int, int] | None, expected: int) -> None:
    assert default_max_capture_size(seats, spec, cc) == expected


def sizes(
    seats: int, spec: int = 0, tokens: int = 8192, cc: tuple[int, int] | None = H200, **kw: object
) -> CaptureSizes:
    return vllm_capture_sizes(
        max_num_seqs=seats,
        num_speculative_tokens=spec,
        max_num_batched_tokens=tokens,
        compute_capability=cc,
        **kw,  # type: ignore[arg-type]
    )


def test_reference_lists_without_speculation() -> None:
    """vLLM's _set_cudagraph_sizes lists (docs/engines/vllm.md): 256/1024 seats -> 51 sizes up to 512, 64 -> 19."""
    expected_512 = (1, 2, 4, *STEP8_TO_248, *range(256, 513, 16))
    assert sizes(256) == CaptureSizes(512, expected_512)
    assert len(expected_512) == 51
    assert sizes(1024) == CaptureSizes(512, expected_512)
    assert sizes(64) == CaptureSizes(128, (1, 2, 4, *range(8, 129, 8)))
    assert len(sizes(64).sizes) == 19
    assert sizes(16) == CaptureSizes(32, (1, 2, 4, 8, 16, 24, 32))
    assert sizes(8) == CaptureSizes(16, (1, 2, 4, 8, 16))


def test_seat_count_itself_is_captured() -> None:
    """0.32.0 appends max_num_seqs (the widest uniform decode batch) when it fits: 12 seats -> 12 in the list."""
    assert sizes(12) == CaptureSizes(24, (1, 2, 4, 8, 12, 16, 24))


def test_speculative_decode_sizes_are_appended() -> None:
    """8 seats x 4 spec: grid up to 80 plus every n x 5 for n in (1, 2, 4, 8)."""
    assert sizes(8, 4, cc=GB10) == CaptureSizes(80, (1, 2, 4, 5, 8, 10, 16, 20, 24, 32, 40, 48, 56, 64, 72, 80))


def test_v1_runner_rounds_to_the_decode_query_length() -> None:
    """adjust_cudagraph_sizes_for_spec_decode (V1 runner, FULL decode graphs)."""
    assert round_for_spec_decode(sizes(8, 4, cc=GB10), 4) == CaptureSizes(
        80, (5, 10, 20, 25, 35, 40, 50, 60, 65, 75, 80)
    )
    # docs/engines/vllm.md §6: 32 seats, 3 spec tokens -> max 256, rounded to multiples of 4: [4, 8, 16, ..., 256].
    plain = sizes(32, 3)
    assert plain == CaptureSizes(256, (1, 2, 4, *STEP8_TO_248, 256))
    assert round_for_spec_decode(plain, 3) == CaptureSizes(256, (4, *range(8, 257, 8)))


def test_prefill_budget_caps_and_joins_the_list() -> None:
    """max_num_batched_tokens below the cap becomes the max and is captured itself."""
    assert sizes(512, tokens=300) == CaptureSizes(300, (1, 2, 4, *STEP8_TO_248, 256, 272, 288, 300))
    assert sizes(8, 4, tokens=50, cc=GB10) == CaptureSizes(50, (1, 2, 4, 5, 8, 10, 16, 20, 24, 32, 40, 48, 50))


def test_interactivity_mode_captures_every_size_to_32() -> None:
    assert sizes(16, performance_mode="interactivity") == CaptureSizes(32, tuple(range(1, 33)))


def test_user_sizes_and_max() -> None:
    """User lists are deduplicated, filtered by the prefill budget and sorted; a lone max truncates."""
    assert sizes(8, cudagraph_capture_sizes=[64, 8, 8, 1, 9000]) == CaptureSizes(64, (1, 8, 64))
    assert sizes(8, max_cudagraph_capture_size=20) == CaptureSizes(16, (1, 2, 4, 8, 16))
    with pytest.raises(CaptureSizeError, match=r"max_cudagraph_capture_size\(=20\) should be consistent"):
        sizes(8, max_cudagraph_capture_size=20, cudagraph_capture_sizes=[1, 8])


def test_plan_applies_only_on_cuda_without_eager() -> None:
    common = {
        "max_num_seqs": 8,
        "num_speculative_tokens": 4,
        "max_num_batched_tokens": 8192,
        "compute_capability": GB10,
    }
    cpu = vllm_graph_plan(platform="cpu", enforce_eager=False, **common)  # type: ignore[arg-type]
    assert cpu.on_cuda.max_capture_size == 80
    assert cpu.applied == CaptureSizes(0, ())
    assert cpu.reason == "CPU platform captures no CUDA graphs"
    eager = vllm_graph_plan(platform="cuda", enforce_eager=True, **common)  # type: ignore[arg-type]
    assert (eager.applied, eager.reason) == (CaptureSizes(0, ()), "--enforce-eager disables CUDA graphs")
    cuda = vllm_graph_plan(platform="cuda", enforce_eager=False, **common)  # type: ignore[arg-type]
    assert cuda.applied == cuda.on_cuda and cuda.applied.max_capture_size == 80
    v1 = vllm_graph_plan(platform="cuda", enforce_eager=False, model_runner="v1", **common)  # type: ignore[arg-type]
    assert v1.applied.sizes == (5, 10, 20, 25, 35, 40, 50, 60, 65, 75, 80)


def test_025_default_sizes_are_the_token_grid_only() -> None:
    """0.25/0.26 VllmConfig._set_cudagraph_sizes: no uniform decode batches (0.32 adds max_num_seqs, or n x q)."""
    from dspark.engines.vllm.graphs import vllm_capture_sizes  # noqa: PLC0415

    for seats, spec in ((35, 0), (27, 3), (23, 0), (5, 1)):
        v032 = vllm_capture_sizes(max_num_seqs=seats, num_speculative_tokens=spec, max_num_batched_tokens=8192,
                                  compute_capability=(9, 0))
        v025 = vllm_capture_sizes(max_num_seqs=seats, num_speculative_tokens=spec, max_num_batched_tokens=8192,
                                  compute_capability=(9, 0), add_uniform_decode=False)
        cap = min(seats * (1 + spec) * 2, 512)
        grid = [s for s in (1, 2, 4) if s <= cap] + list(range(8, min(cap + 1, 256), 8))
        assert list(v025.sizes) == grid and v025.max_capture_size == grid[-1]  # truncated to the largest size
        assert set(v025.sizes) <= set(v032.sizes)
    assert 35 in vllm_capture_sizes(max_num_seqs=35, num_speculative_tokens=0, max_num_batched_tokens=8192,
                                    compute_capability=(9, 0)).sizes


def test_025_caps_blackwell_at_512_too() -> None:
    """0.25/0.26: min(seats x (1 + spec) x 2, 512) on every device; 0.32 lets SM 10.x reach 1024."""
    from dspark.engines.vllm.graphs import vllm_capture_sizes  # noqa: PLC0415

    for seats in (304, 400, 512):  # 2 x seats on the 16-step grid
        v032 = vllm_capture_sizes(max_num_seqs=seats, num_speculative_tokens=0, max_num_batched_tokens=8192,
                                  compute_capability=(10, 0))
        v025 = vllm_capture_sizes(max_num_seqs=seats, num_speculative_tokens=0, max_num_batched_tokens=8192,
                                  compute_capability=(10, 0), add_uniform_decode=False, blackwell_ceiling=512)
        assert v025.max_capture_size == 512 and v032.max_capture_size == min(seats * 2, 1024)
