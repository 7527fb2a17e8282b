"""Predictions per seat count and the recommendation under the sweep's rule."""

from __future__ import annotations

import pytest

from dspark.advise.advice import predict, recommend
from dspark.advise.model import StepCosts, StepShape, Workload
from dspark.bench.decision import DecisionRule

COSTS = StepCosts(fixed_s=0.050, bandwidth_bytes_per_s=1e12, per_token_s=0.001, prefill_per_token_s=0.0)
SHAPE = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0)
LOAD = Workload(clients=16, requests=64, input_len=100, output_len=50)


def test_a_large_fixed_cost_makes_more_seats_worth_it() -> None:
    preds = predict(COSTS, SHAPE, LOAD, [(2, 100_000), (8, 100_000)])
    rec = recommend(preds, DecisionRule(primary="wall_time_s", secondaries=("aggregate_decode_tps",)))
    assert rec.seats == 8
    assert rec.reason.startswith("predicted, not measured: adopt 8 seats: wall_time_s +")
    assert [p.pool_holds_workload for p in preds] == [True, True]
    # Without the engine's counting, tokens over pool tokens, as the engine would report it: after a step, with
    # the requests that finished freed, so the peak is 8 seats × (100 + 49) tokens, one short of 150 each.
    assert preds[1].kv_peak_fraction == pytest.approx(8 * 149 / 100_000)
    assert preds[1].kv_usage_metric == "tokens held / pool tokens"


def test_a_per_stream_regression_keeps_the_baseline_and_says_why() -> None:
    preds = predict(COSTS, SHAPE, LOAD, [(2, 100_000), (16, 100_000)])
    rec = recommend(preds, DecisionRule())  # the default secondaries include per-stream decode
    assert rec.seats == 2
    assert "per_stream_decode_tps worsened" in rec.reason
    assert rec.verdicts[0]["seats"] == 16 and rec.verdicts[0]["adopt"] is False


def test_seats_the_pool_cannot_hold_are_never_recommended() -> None:
    # 8 seats × 150 tokens = 1,200 tokens: a 1,000-token pool would preempt.
    preds = predict(COSTS, SHAPE, LOAD, [(2, 1000), (8, 1000)])
    assert [p.pool_holds_workload for p in preds] == [True, False]
    rec = recommend(preds, DecisionRule(primary="wall_time_s", secondaries=()))
    assert rec.seats == 2
    assert "does not hold every seat's request: the engine would preempt" in rec.verdicts[0]["reasons"][0]
