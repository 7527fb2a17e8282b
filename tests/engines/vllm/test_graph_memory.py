"""vLLM 0.25's CUDA-graph estimate (graph_memory.py): the descriptors per mode and the runner's arithmetic."""

from __future__ import annotations

import random

import pytest

from dspark.engines.vllm.graph_memory import MIN_PER_GRAPH, capture_descriptors, profile_cudagraph_memory

SIZES = (1, 2, 4, 8, 16, 24, 32, 40)


def test_each_mode_captures_what_the_dispatcher_keys() -> None:
    both = dict(capture_descriptors(SIZES, "full_and_piecewise", 23, 1))
    assert both == {"PIECEWISE": (40, 32, 24, 16, 8, 4, 2, 1), "FULL": (16, 8, 4, 2, 1)}
    assert capture_descriptors(SIZES, "PIECEWISE", 23, 1) == (("PIECEWISE", (40, 32, 24, 16, 8, 4, 2, 1)),)
    assert capture_descriptors(SIZES, "FULL", 23, 1) == (("FULL", (40, 32, 24, 16, 8, 4, 2, 1)),)
    assert capture_descriptors(SIZES, "FULL_DECODE_ONLY", 23, 1) == (("FULL", (16, 8, 4, 2, 1)),)
    assert capture_descriptors(SIZES, "NONE", 23, 1) == ()
    # Speculative decoding: decode batches are q tokens a request, from q up to q x seats.
    assert dict(capture_descriptors((4, 8, 16, 24, 32), "FULL_AND_PIECEWISE", 5, 4))["FULL"] == (16, 8, 4)


@pytest.mark.parametrize("seed", range(20))
def test_the_estimate_is_the_largest_first_capture_plus_one_graph_per_extra_descriptor(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - generated test inputs, not secrets
    sizes = sorted(rng.sample(range(1, 513), rng.randint(1, 40)))
    seats, spec = rng.randint(1, 256), rng.choice((0, 0, 1, 3))
    est = profile_cudagraph_memory(sizes=sizes, cudagraph_mode="FULL_AND_PIECEWISE", max_num_seqs=seats,
                                   num_speculative_tokens=spec, layers=rng.randint(1, 96),
                                   hidden_size=rng.choice((1024, 4096, 7168)), is_hybrid=rng.random() < 0.5,
                                   is_moe=True)
    assert est.modes[0].mode == "PIECEWISE" and est.modes[0].sizes == tuple(reversed(sizes))
    for m in est.modes:
        assert m.per_graph >= MIN_PER_GRAPH and m.first_capture > m.per_graph
    assert est.bytes == max(m.first_capture for m in est.modes) + sum(
        m.per_graph * (len(m.sizes) - 1) for m in est.modes)
    # One more capture size never lowers it.
    bigger = profile_cudagraph_memory(sizes=[*sizes, 513], cudagraph_mode="FULL_AND_PIECEWISE", max_num_seqs=seats,
                                      num_speculative_tokens=spec, layers=8, hidden_size=1024, is_hybrid=False,
                                      is_moe=True)
    fewer = profile_cudagraph_memory(sizes=sizes, cudagraph_mode="FULL_AND_PIECEWISE", max_num_seqs=seats,
                                     num_speculative_tokens=spec, layers=8, hidden_size=1024, is_hybrid=False,
                                     is_moe=True)
    assert bigger.bytes > fewer.bytes


def test_a_dense_model_says_it_takes_the_moe_figures() -> None:
    dense = profile_cudagraph_memory(sizes=SIZES, cudagraph_mode="FULL_AND_PIECEWISE", max_num_seqs=23,
                                     num_speculative_tokens=0, layers=48, hidden_size=2048, is_hybrid=False,
                                     is_moe=False)
    assert "not measured" in dense.assumption and dense.graph_class == "moe"
    assert profile_cudagraph_memory(sizes=(), cudagraph_mode="FULL_AND_PIECEWISE", max_num_seqs=23,
                                    num_speculative_tokens=0, layers=48, hidden_size=2048, is_hybrid=False,
                                    is_moe=True).bytes == 0
