"""Hand-made results shaped like docs/deployment.md's 8-versus-16-seat experiment, for report and plot tests."""

from __future__ import annotations

from dspark.bench.decision import Setting, decide, make_rule
from dspark.bench.metrics import EngineDelta, Sample
from dspark.bench.results import BenchResult, PassResult, summarize_reps
from dspark.bench.stats import PassStats
from dspark.bench.sweep import LaunchCheck, SettingResult, SweepResult
from dspark.runtime.supervise import StopOutcome


def one_pass(label: str, wall: float, agg: float, per: float, ttft: float, kv: float, hit: float,
             pre: float = 0.0) -> PassResult:
    """A pass with the given means; engine figures included."""
    stats = PassStats(requests=100, errors=0, wall_time_s=wall, output_tokens=int(agg * wall),
                      aggregate_decode_tps=agg, per_stream_decode_tps=per, ttft_mean_s=ttft, ttft_p50_s=ttft,
                      ttft_p99_s=ttft * 2, latency_mean_s=ttft + 20)
    eng = EngineDelta(prefix_queries=1000.0, prefix_hits=1000.0 * hit, prefix_hit_rate=hit, preemptions=pre,
                      generation_tokens=float(int(agg * wall)), kv_usage_peak=kv, running_peak=8.0, running_mean=7.5,
                      queue_time_mean_s=ttft / 2, samples=(Sample(0.0, 0.0, 0.0, 0.0), Sample(1.0, 8.0, 24.0, kv)))
    return PassResult(label=label, stats=stats, engine=eng)

def bench(walls: tuple[float, ...], agg: float, per: float, ttft: float, kv: float, warm_hit: float,
          warm_wall: float) -> BenchResult:
    """A bench with one pass per wall time and a warm re-run."""
    reps = tuple(one_pass(f"rep {i+1}", w, agg, per, ttft, kv, 0.0) for i, w in enumerate(walls))
    warm = one_pass("warm re-run", warm_wall, agg, per, ttft, kv, warm_hit)
    return BenchResult(url="http://127.0.0.1:8000", model="m", endpoint="completions", concurrency=32, requests=100,
                       max_tokens=512, ignore_eos=True, prompt_source="x", reps=reps, warm=warm,
                       summary=summarize_reps(reps, warm))

def setting(seats: int, b: BenchResult, pool: int) -> SettingResult:
    """A clean setting whose launch matched the plan."""
    check = LaunchCheck(confirmed=("max_num_seqs",), mismatched=(), unconfirmed=(), seats_confirmed=True,
                        kv_pool_tokens=pool, expected_pool_tokens=pool, max_concurrency=1.39, problems=())
    return SettingResult(seats=seats, label=f"{seats} seats", argv=("vllm", "serve", "m", "--max-num-seqs", str(seats)),
                         env={}, log_path=None, startup_s=20.0, launch=check, bench=b,
                         stop=StopOutcome(returncode=0, killed=False, seconds=1.0), problems=())

def design_sweep() -> SweepResult:
    """docs/deployment.md's means as a 2-rep sweep, judged on wall time with the default secondaries."""
    s8 = setting(8, bench((348.4, 348.4), 147.0, 20.3, 71.9, 0.16, 0.73, 179.6), 181777)
    s16 = setting(16, bench((278.8, 278.8), 183.6, 13.4, 40.7, 0.31, 0.11, 387.6), 181777)
    rule = make_rule("wall_time", "10%", "10%", None)
    d = decide(rule, [Setting(s.label, s.bench.summary if s.bench else {}, s.problems) for s in (s8, s16)])
    return SweepResult(rule=rule, rule_text=rule.describe(), seats=(8, 16), reps=2, started_at="t0", finished_at="t1",
                       settings=(s8, s16), decision=d)

