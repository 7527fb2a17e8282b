"""The decision rule on docs/deployment.md's 8-versus-16-seat means, and at its thresholds."""

from __future__ import annotations

import pytest

from dspark.bench.decision import (
    DecisionRule,
    Setting,
    decide,
    improvement,
    make_rule,
    metric_name,
    parse_percent,
)
from dspark.core.errors import InputError

EIGHT = Setting("8 seats", {"aggregate_decode_tps": 147.0, "per_stream_decode_tps": 20.3, "ttft_mean_s": 71.9,
                            "wall_time_s": 348.4, "warm_wall_time_s": 179.6})
SIXTEEN = Setting("16 seats", {"aggregate_decode_tps": 183.6, "per_stream_decode_tps": 13.4, "ttft_mean_s": 40.7,
                               "wall_time_s": 278.8, "warm_wall_time_s": 387.6})


def test_improvement_is_signed_so_positive_is_better() -> None:
    assert improvement("wall_time_s", 348.4, 278.8) == pytest.approx(0.19977, abs=1e-5)
    assert improvement("aggregate_decode_tps", 147.0, 183.6) == pytest.approx(0.24898, abs=1e-5)
    assert improvement("per_stream_decode_tps", 20.3, 13.4) == pytest.approx(-0.33990, abs=1e-5)


def test_design_table_with_default_secondaries_keeps_eight_seats() -> None:
    rule = make_rule("wall_time", "10%", "10%", None)
    d = decide(rule, [EIGHT, SIXTEEN])
    assert d.chosen == "8 seats"
    (v,) = d.verdicts
    assert not v.adopt
    assert v.reasons == (
        "per_stream_decode_tps worsened -34.0%, beyond the -10% allowed",
        "warm_wall_time_s worsened -115.8%, beyond the -10% allowed",
    )
    assert v.comparisons[0].metric == "wall_time_s" and v.comparisons[0].passed is True
    assert d.summary == "keep 8 seats: no candidate met the rule"


def test_design_table_judged_on_throughput_and_ttft_adopts_sixteen() -> None:
    rule = make_rule("wall_time", "10%", "10%", "aggregate,ttft")
    d = decide(rule, [EIGHT, SIXTEEN])
    assert d.chosen == "16 seats"
    assert d.summary == "adopt 16 seats: wall_time_s +20.0% against 8 seats"
    assert rule.describe() == (
        "adopt only at >= +10% on wall_time_s, and beyond its between-rep spread, with no secondary "
        "(aggregate_decode_tps, ttft_mean_s) worse than -10%; every pass clean (0 errors, 0 preemptions, launch "
        "verified)"
    )


def test_thresholds_are_inclusive() -> None:
    rule = DecisionRule(primary="wall_time_s", adopt_at=0.10, max_regression=0.10,
                        secondaries=("aggregate_decode_tps",))
    base = Setting("a", {"wall_time_s": 100.0, "aggregate_decode_tps": 100.0})
    exactly = Setting("b", {"wall_time_s": 90.0, "aggregate_decode_tps": 90.0})
    short = Setting("c", {"wall_time_s": 90.1, "aggregate_decode_tps": 100.0})
    over = Setting("d", {"wall_time_s": 80.0, "aggregate_decode_tps": 89.9})
    d = decide(rule, [base, exactly, short, over])
    assert [v.adopt for v in d.verdicts] == [True, False, False]
    assert d.verdicts[1].reasons == ("wall_time_s improved +9.9%, below the +10% needed",)
    assert d.verdicts[2].reasons == ("aggregate_decode_tps worsened -10.1%, beyond the -10% allowed",)
    assert d.chosen == "b"


def test_best_adoptable_candidate_wins() -> None:
    rule = DecisionRule(secondaries=())
    base = Setting("4", {"wall_time_s": 100.0})
    d = decide(rule, [base, Setting("8", {"wall_time_s": 85.0}), Setting("16", {"wall_time_s": 70.0})])
    assert d.chosen == "16"


def test_unclean_settings_are_never_adopted() -> None:
    rule = DecisionRule(secondaries=())
    base = Setting("8", {"wall_time_s": 100.0})
    cand = Setting("16", {"wall_time_s": 50.0}, problems=("3 preemption(s)",))
    d = decide(rule, [base, cand])
    assert d.verdicts[0].reasons == ("16: 3 preemption(s)",)
    assert d.chosen == "8"
    broken_base = Setting("8", {"wall_time_s": 100.0}, problems=("1 failed request(s): HTTP 500",))
    d = decide(rule, [broken_base, Setting("16", {"wall_time_s": 50.0})])
    assert d.chosen is None
    assert d.summary == "no decision: the baseline 8 was not clean (1 failed request(s): HTTP 500)"


def test_unmeasured_primary_blocks_adoption() -> None:
    rule = DecisionRule(primary="warm_wall_time_s", secondaries=())
    d = decide(rule, [Setting("8", {"warm_wall_time_s": None}), Setting("16", {"warm_wall_time_s": 10.0})])
    assert d.verdicts[0].reasons == ("warm_wall_time_s was not measured on both settings",)


def test_rule_spellings() -> None:
    assert parse_percent("10%") == 0.10
    assert parse_percent("7.5") == 0.075
    with pytest.raises(InputError, match="not a percentage"):
        parse_percent("-5%")
    assert metric_name("ttft") == "ttft_mean_s"
    assert metric_name("per-stream-decode") == "per_stream_decode_tps"
    with pytest.raises(InputError, match="unknown or unjudged metric 'kv_usage_peak'"):
        metric_name("kv_usage_peak")
    assert make_rule("aggregate", "5", "20%", "none").secondaries == ()
    assert make_rule("wall_time", "10%", "10%", None).secondaries == (
        "aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s", "warm_wall_time_s")


def test_an_improvement_within_the_between_rep_noise_is_not_adopted() -> None:
    rule = DecisionRule(primary="wall_time_s", adopt_at=0.10, max_regression=0.10, secondaries=())
    # 20% shorter, but each setting's reps scatter by 25% of their mean: not distinguishable from noise.
    base = Setting("8 seats", {"wall_time_s": 348.4, "wall_time_s_spread": 0.25})
    noisy = Setting("16 seats", {"wall_time_s": 278.8, "wall_time_s_spread": 0.25})
    d = decide(rule, [base, noisy])
    assert d.chosen == "8 seats"
    assert d.verdicts[0].reasons == ("wall_time_s improved +20.0%, within the between-rep noise (spread 25.0%)",)
    assert d.verdicts[0].comparisons[0].noise == 0.25
    # The same means with reps that agree within 5%: adopted.
    quiet = decide(rule, [Setting("8 seats", {"wall_time_s": 348.4, "wall_time_s_spread": 0.05}),
                          Setting("16 seats", {"wall_time_s": 278.8, "wall_time_s_spread": 0.05})])
    assert quiet.chosen == "16 seats"


def test_spread_is_max_minus_min_over_the_mean() -> None:
    from dspark.bench.results import spread  # noqa: PLC0415

    assert spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)
    assert spread([100.0]) is None  # one rep: the noise is not measured
    assert spread([100.0, None]) is None
