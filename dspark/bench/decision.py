"""The decision rule for adopting a seat count, frozen before the runs (docs/deployment.md); pure."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dspark.bench.results import METRICS, SPREAD_SUFFIX
from dspark.bench.stats import relative_change
from dspark.core.constants import MAX_NUM_SEQS_LIMIT
from dspark.core.errors import InputError

# Short names users type for the judged metrics.
ALIASES: dict[str, str] = {
    "wall_time": "wall_time_s",
    "wall": "wall_time_s",
    "aggregate_decode": "aggregate_decode_tps",
    "aggregate": "aggregate_decode_tps",
    "throughput": "aggregate_decode_tps",
    "per_stream_decode": "per_stream_decode_tps",
    "per_stream": "per_stream_decode_tps",
    "ttft": "ttft_mean_s",
    "ttft_mean": "ttft_mean_s",
    "ttft_p50": "ttft_p50_s",
    "ttft_p99": "ttft_p99_s",
    "queue_time": "queue_time_mean_s",
    "warm_wall_time": "warm_wall_time_s",
}
DEFAULT_SECONDARIES = (
    "aggregate_decode_tps",
    "per_stream_decode_tps",
    "ttft_mean_s",
    "wall_time_s",
    "warm_wall_time_s",
)
_EPS = 1e-9  # a change of exactly the threshold passes despite float rounding


def metric_name(name: str) -> str:
    """The registry key for a metric name or alias; InputError for metrics that cannot be judged."""
    key = ALIASES.get(name.strip().replace("-", "_"), name.strip().replace("-", "_"))
    info = METRICS.get(key)
    if info is None or info.better is None:
        judged = sorted({*ALIASES, *(k for k, v in METRICS.items() if v.better)})
        raise InputError(f"unknown or unjudged metric {name!r}; choose one of: {', '.join(judged)}")
    return key


def parse_percent(text: str) -> float:
    """'10%' or '10' -> 0.10; InputError for anything else or a negative value."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%?\s*", text)
    if not m:
        raise InputError(f"{text!r} is not a percentage (write 10% or 10)")
    return float(m.group(1)) / 100


@dataclass(frozen=True)
class DecisionRule:
    """Adopt a candidate only at >= adopt_at improvement on the primary metric with no secondary worse than
    max_regression, and only when every pass was clean (0 errors, 0 preemptions, launch verified)."""

    primary: str = "wall_time_s"
    adopt_at: float = 0.10
    max_regression: float = 0.10
    secondaries: tuple[str, ...] = DEFAULT_SECONDARIES
    require_clean: bool = True

    def describe(self) -> str:
        """The rule in one sentence, as recorded with the results."""
        sec = ", ".join(s for s in self.secondaries if s != self.primary) or "none"
        return (
            f"adopt only at >= +{self.adopt_at:.0%} on {self.primary}, and beyond its between-rep spread, with no "
            f"secondary ({sec}) worse than -{self.max_regression:.0%}"
            + ("; every pass clean (0 errors, 0 preemptions, launch verified)" if self.require_clean else "")
        )


def make_rule(primary: str, adopt_at: str, max_regression: str, secondaries: str | None) -> DecisionRule:
    """A rule from the command-line spellings (aliases, percentages, a comma list or 'none' for secondaries)."""
    key = metric_name(primary)
    if secondaries is None:
        sec = tuple(s for s in DEFAULT_SECONDARIES if s != key)
    elif secondaries.strip().lower() in ("", "none"):
        sec = ()
    else:
        sec = tuple(dict.fromkeys(metric_name(s) for s in secondaries.split(",") if s.strip()))
    return DecisionRule(
        primary=key, adopt_at=parse_percent(adopt_at), max_regression=parse_percent(max_regression), secondaries=sec
    )


def parse_seats(text: str) -> tuple[int, ...]:
    """'8,16' -> (8, 16): distinct positive seat counts, in the order given (the first is the baseline)."""
    shown = text if len(text) <= 80 else f"{text[:40]}… ({len(text):,} characters)"
    if any(len(part.strip()) > 6 for part in text.split(",")):  # 6 digits: above any seat count an engine takes
        raise InputError(f"--seats {shown}: a seat count is at most {MAX_NUM_SEQS_LIMIT}")
    try:
        seats = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InputError(f"--seats takes comma-separated whole numbers, got {shown!r}") from None
    if any(n > MAX_NUM_SEQS_LIMIT for n in seats):
        raise InputError(f"--seats {shown}: a seat count is at most {MAX_NUM_SEQS_LIMIT}")
    if len(seats) < 1 or any(n < 1 for n in seats) or len(set(seats)) != len(seats):
        raise InputError(f"--seats needs distinct positive seat counts, got {text!r}")
    return seats


def improvement(metric: str, base: float, new: float) -> float:
    """The relative change signed so that positive is better (a 20% shorter wall time is +0.20)."""
    change = relative_change(base, new)
    return -change if METRICS[metric].better == "lower" else change


@dataclass(frozen=True)
class Comparison:
    """One metric of a candidate against the baseline."""

    metric: str
    role: str  # "primary" or "secondary"
    baseline: float | None
    candidate: float | None
    improvement: float | None  # positive is better; None when either side was not measured
    passed: bool | None  # None: not measured, so not judged
    noise: float | None = None  # between-rep spread of the two settings, (max − min) / mean, averaged


@dataclass(frozen=True)
class Verdict:
    """The rule applied to one candidate setting."""

    label: str
    adopt: bool
    reasons: tuple[str, ...]
    comparisons: tuple[Comparison, ...]


@dataclass(frozen=True)
class Decision:
    """The outcome: the baseline, each candidate's verdict, and the setting to use."""

    rule: DecisionRule
    rule_text: str
    baseline: str
    verdicts: tuple[Verdict, ...]
    chosen: str | None  # None: the baseline itself was not clean, so nothing can be decided
    summary: str


@dataclass(frozen=True)
class Setting:
    """What the rule needs from one setting: its label, summary means and the reasons it is not clean."""

    label: str
    summary: Mapping[str, float | None]
    problems: tuple[str, ...] = ()


def noise_of(metric: str, base: Setting, cand: Setting) -> float | None:
    """The between-rep noise of a metric on a pair of settings: the mean of their spreads; None if unmeasured."""
    spreads = [s.summary.get(metric + SPREAD_SUFFIX) for s in (base, cand)]
    present = [x for x in spreads if x is not None and not math.isnan(x)]
    return math.fsum(present) / len(present) if len(present) == 2 else None


def _compare(rule: DecisionRule, metric: str, role: str, base: Setting, cand: Setting) -> Comparison:
    b, c = base.summary.get(metric), cand.summary.get(metric)
    if b is None or c is None or math.isnan(b) or math.isnan(c) or b == 0:
        return Comparison(metric, role, b, c, None, None)
    imp = improvement(metric, b, c)
    noise = noise_of(metric, base, cand)
    if role == "primary":
        # An improvement the reps themselves scatter by is not an improvement: it must beat the noise too.
        ok = imp >= rule.adopt_at - _EPS and (noise is None or imp > noise)
    else:
        ok = imp >= -rule.max_regression - _EPS
    return Comparison(metric, role, b, c, imp, ok, noise)


def judge(rule: DecisionRule, base: Setting, cand: Setting) -> Verdict:
    """Apply the rule to one candidate against the baseline."""
    comps = [_compare(rule, rule.primary, "primary", base, cand)]
    comps += [_compare(rule, m, "secondary", base, cand) for m in rule.secondaries if m != rule.primary]
    reasons: list[str] = []
    if rule.require_clean:
        reasons += [f"{base.label}: {p}" for p in base.problems]
        reasons += [f"{cand.label}: {p}" for p in cand.problems]
    primary = comps[0]
    if primary.passed is None:
        reasons.append(f"{rule.primary} was not measured on both settings")
    elif not primary.passed and (primary.improvement or 0.0) < rule.adopt_at - _EPS:
        reasons.append(f"{rule.primary} improved {primary.improvement:+.1%}, below the +{rule.adopt_at:.0%} needed")
    elif not primary.passed:
        reasons.append(f"{rule.primary} improved {primary.improvement:+.1%}, within the between-rep noise "
                       f"(spread {primary.noise:.1%})")
    for c in comps[1:]:
        if c.passed is False:
            reasons.append(f"{c.metric} worsened {c.improvement:+.1%}, beyond the -{rule.max_regression:.0%} allowed")
    return Verdict(label=cand.label, adopt=not reasons, reasons=tuple(reasons), comparisons=tuple(comps))


def decide(rule: DecisionRule, settings: Sequence[Setting]) -> Decision:
    """Judge every setting after the first (the baseline); choose the adoptable one with the best primary gain."""
    if not settings:
        raise InputError("no settings to decide between")
    base = settings[0]
    verdicts = tuple(judge(rule, base, s) for s in settings[1:])
    adoptable = [v for v in verdicts if v.adopt]
    if rule.require_clean and base.problems:
        chosen: str | None = None
        summary = f"no decision: the baseline {base.label} was not clean ({'; '.join(base.problems)})"
    elif adoptable:
        best = max(adoptable, key=lambda v: v.comparisons[0].improvement or 0.0)
        chosen = best.label
        summary = f"adopt {chosen}: {rule.primary} {best.comparisons[0].improvement:+.1%} against {base.label}"
    else:
        chosen = base.label
        summary = f"keep {base.label}: no candidate met the rule"
    return Decision(
        rule=rule, rule_text=rule.describe(), baseline=base.label, verdicts=verdicts, chosen=chosen, summary=summary
    )
