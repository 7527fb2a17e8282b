"""The deployment's seat figures (docs/deployment.md): safe seats, average-context bound, contexts, experts."""

from __future__ import annotations

import pytest

from dspark.capacity.seats import (
    average_context_bound,
    expert_coverage,
    safe_seats_full_window,
    seats_for_typical_context,
    tokens_for_expert_coverage,
)


@pytest.mark.parametrize(("contexts", "safe"), [(6.52, 6), (1.39, 1), (7.0, 7), (0.4, 1), (6.999, 6)])
def test_safe_seats_are_the_floor_of_full_contexts(contexts: float, safe: int) -> None:
    assert safe_seats_full_window(contexts) == safe


def test_deepseek_v4_flash_average_context_at_8_seats() -> None:
    # Pool 181,777 at 8 seats: fits only if requests average <= 22,722 tokens (= floor(181,777 / 8)).
    assert average_context_bound(181_777, 8) == 22_722


@pytest.mark.parametrize(("tokens", "share"), [(1, 0.0195), (40, 0.5457), (117, 0.9005), (116, 0.8985)])
def test_expert_coverage_512_experts_top_10(tokens: int, share: float) -> None:
    assert expert_coverage(512, 10, tokens) == pytest.approx(share, abs=5e-5)


def test_ninety_percent_coverage_needs_117_tokens_about_23_seats_at_5_tokens() -> None:
    tokens = tokens_for_expert_coverage(512, 10, 0.90)
    assert tokens == 117
    assert -(-tokens // 5) == 24  # 23 seats x 5 tokens = 115 is just short; docs/deployment.md says "~23 seats"
    assert expert_coverage(512, 10, 23 * 5) == pytest.approx(0.8966, abs=5e-4)


@pytest.mark.parametrize(
    ("pool", "typical", "reserve", "seats"), [(181_777, 20_000, 0, 9), (181_777, 20_000, 30_000, 7), (100, 200, 0, 0)]
)
def test_seats_for_a_typical_context_with_a_prefix_reserve(pool: int, typical: int, reserve: int, seats: int) -> None:
    assert seats_for_typical_context(pool, typical, reserve) == seats


def test_bad_arguments_are_errors() -> None:
    with pytest.raises(ValueError, match="seats"):
        average_context_bound(100, 0)
    with pytest.raises(ValueError, match="top_k"):
        expert_coverage(8, 9, 1)
