"""Calibration: which terms the points inform, recovering known costs within bounds, refusing a fit that explains
its points worse than the priors, reading bench and sweep results, a stepping fake server with a known step cost,
and the seed deployment's own figures."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from dspark.advise import calibrate
from dspark.advise.build import _recipe_points
from dspark.advise.calibrate import Measured, fit, fit_warnings, nelder_mead, points_from_json, terms_to_fit
from dspark.advise.inputs import model_inputs
from dspark.advise.model import StepCosts, StepShape, Workload, decode_step_s, simulate
from dspark.perf.gpus import gpu_perf
from dspark.planning.validate import ValidateRequest, validate

MOE = StepShape(dense_weight_bytes=2e9, expert_weight_bytes=20e9, num_experts=512, top_k=10,
                kv_bytes_per_token=10_000.0, state_bytes_per_seat=40e6, speculative_tokens=4, emitted_per_step=3.0)


def test_nelder_mead_finds_a_minimum() -> None:
    x = nelder_mead(lambda v: (v[0] - 3) ** 2 + 10 * (v[1] + 1) ** 2, [0.0, 0.0])
    assert x == pytest.approx([3.0, -1.0], abs=1e-3)


def test_the_points_decide_which_terms_are_fitted() -> None:
    step = [Measured(seats=n, source="s", step_s=0.1) for n in (1, 8, 16)]
    assert terms_to_fit(step[:1]) == ("fixed_s", "bandwidth_bytes_per_s", "kernel_floor_s")
    assert terms_to_fit(step[:2]) == ("fixed_s", "bandwidth_bytes_per_s", "kernel_floor_s", "cpu_per_row_s",
                                      "kv_bandwidth_bytes_per_s", "flops_per_s", "gemm_half_tokens")
    bench = Measured(seats=8, source="b", workload=Workload(32, 100, 2048, 512), ttft_mean_s=70.0)
    assert terms_to_fit([bench]) == ("fixed_s", "bandwidth_bytes_per_s", "kernel_floor_s", "flops_per_s",
                                     "attention_flops_per_s")
    assert terms_to_fit([bench], pinned=("flops_per_s", "attention_flops_per_s")) == (
        "fixed_s", "bandwidth_bytes_per_s", "kernel_floor_s")


def test_a_gpu_engine_with_async_scheduling_fits_what_its_points_separate() -> None:
    """With the CPU beside the GPU (async scheduling) a decode step shows no CPU cost, and a dense model's steps
    read the same weights whatever their rows: they pin the GPU's fixed cost per step (the kernel floor; the
    bandwidth where the shape counts no kernels). A MoE's steps at partial coverage beside a full one read
    different bytes: the bandwidth and how its tokens spread over the experts too; prompt figures pin the GEMM
    rate, eager steps the launch cost."""
    gpu = dataclasses.replace(MOE, num_experts=None, top_k=None, kernels_per_step=600, async_scheduling=True)
    moe = dataclasses.replace(gpu, num_experts=8, top_k=2, speculative_tokens=0)
    step = [Measured(seats=n, source=f"s{n}", step_s=0.01) for n in (1, 4, 64)]
    assert terms_to_fit(step[:1], shape=gpu) == terms_to_fit(step, shape=gpu) == ("kernel_floor_s",)
    assert terms_to_fit(step, shape=dataclasses.replace(gpu, kernels_per_step=0)) == ("bandwidth_bytes_per_s",)
    assert terms_to_fit(step, shape=moe) == ("kernel_floor_s", "bandwidth_bytes_per_s", "routing_spread")
    # 64 rows read every expert and 1 row its two whatever the routing; 4 rows alone: no read to compare with
    assert terms_to_fit([step[0], step[2]], shape=moe) == terms_to_fit(step[1:2], shape=moe) == ("kernel_floor_s",)
    bench = Measured(seats=8, source="b", workload=Workload(32, 100, 2048, 512), prefill_mean_s=0.3)
    assert terms_to_fit([*step, bench], shape=gpu) == ("kernel_floor_s", "flops_per_s")
    # a client's TTFT carries the API server's intake and the wait for the first schedule: not a GEMM rate's
    client = dataclasses.replace(bench, prefill_mean_s=None, ttft_mean_s=1.0)
    assert terms_to_fit([*step, client], shape=gpu) == ("kernel_floor_s",)
    eager = dataclasses.replace(gpu, eager=True)
    assert terms_to_fit(step, pinned=("kernel_floor_s",), shape=eager) == ("launch_s",)


def test_a_rate_tied_to_a_fitted_one_moves_with_it() -> None:
    """The paged-KV and fused-MoE read rates move with the fitted bandwidth, the fused-MoE and attention rates
    with the fitted GEMM rate (the same memory, the same tensor cores), unless fitted themselves; shrinking keeps
    them tied."""
    prior = StepCosts(fixed_s=1e-3, bandwidth_bytes_per_s=4e12, flops_per_s=600e12, attention_flops_per_s=500e12,
                      kv_bandwidth_bytes_per_s=3e12, expert_flops_per_s=400e12, expert_bandwidth_bytes_per_s=4.2e12)
    fitted = dataclasses.replace(prior, bandwidth_bytes_per_s=3.6e12, flops_per_s=660e12)
    tied = calibrate._tied(prior, fitted, ("bandwidth_bytes_per_s", "flops_per_s"))
    assert tied.kv_bandwidth_bytes_per_s == pytest.approx(2.7e12)
    assert tied.expert_bandwidth_bytes_per_s == pytest.approx(3.78e12)
    assert tied.expert_flops_per_s == pytest.approx(440e12) and tied.attention_flops_per_s == pytest.approx(550e12)
    own = calibrate._tied(prior, fitted, ("bandwidth_bytes_per_s", "kv_bandwidth_bytes_per_s"))
    assert own.kv_bandwidth_bytes_per_s == prior.kv_bandwidth_bytes_per_s  # fitted itself: not moved
    assert own.expert_flops_per_s == prior.expert_flops_per_s  # its lead not fitted: not moved
    half = calibrate.shrunk(prior, tied, ("bandwidth_bytes_per_s",), 0.5)
    assert half.kv_bandwidth_bytes_per_s / prior.kv_bandwidth_bytes_per_s == pytest.approx(
        half.bandwidth_bytes_per_s / prior.bandwidth_bytes_per_s) == pytest.approx(0.9 ** 0.5)


def test_a_profile_pins_how_unevenly_a_moe_routes() -> None:
    """A Mixtral-like engine (8 experts, top-2) whose tokens share experts (routing spread 0.6: 4 tokens read 55%
    of the experts, not 68%) and whose memory reads at 0.9 of the prior: its profile's decode steps, fitted
    from even routing, pin both, and the steps at rows it did not measure (2, 8, 24) come within 2%, where even
    routing is up to 12% slow."""
    prior = StepCosts(fixed_s=1.5e-3, bandwidth_bytes_per_s=3.84e12, per_token_s=0.13e-6, flops_per_s=633e12,
                      gemm_half_tokens=48.0, attention_flops_per_s=490e12, kernel_floor_s=2.5e-6,
                      kv_bandwidth_bytes_per_s=3.84e12, expert_flops_per_s=528e12)
    shape = StepShape(dense_weight_bytes=2.95e9, expert_weight_bytes=90.2e9, num_experts=8, top_k=2,
                      kv_bytes_per_token=131_072.0, state_bytes_per_seat=0.0, speculative_tokens=0,
                      emitted_per_step=1.0, dense_flops_per_token=2.7e9, logits_flops_per_row=0.26e9,
                      expert_flops_per_token=22.5e9, attention_flops_per_pair=524_288.0, kernels_per_step=650,
                      graph_sizes=(1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256), async_scheduling=True)
    truth = dataclasses.replace(prior, routing_spread=0.6, bandwidth_bytes_per_s=3.84e12 * 0.9,
                                kv_bandwidth_bytes_per_s=3.84e12 * 0.9)
    plan = ((1, 280), (4, 280), (16, 280), (64, 280), (1, 2072), (4, 2072))  # the profile's waves
    points = [Measured(seats=n, source=f"wave {n}x{c}", step_s=decode_step_s(truth, shape, n, n * c),
                       context_tokens=float(c)) for n, c in plan]
    cal = fit(prior, shape, points)
    assert cal.fitted == ("kernel_floor_s", "bandwidth_bytes_per_s", "routing_spread")
    assert cal.refused is None and cal.held_out is not None
    assert cal.costs.routing_spread == pytest.approx(0.6, abs=0.08)
    assert cal.costs.bandwidth_bytes_per_s == pytest.approx(truth.bandwidth_bytes_per_s, rel=0.03)
    worst = {"prior": 0.0, "fitted": 0.0}
    for rows in (2, 8, 24):
        want = decode_step_s(truth, shape, rows, rows * 600.0)
        for name, costs in (("prior", prior), ("fitted", cal.costs)):
            worst[name] = max(worst[name], abs(decode_step_s(costs, shape, rows, rows * 600.0) / want - 1))
    assert worst["prior"] > 0.08 and worst["fitted"] < 0.02, worst


def test_fit_recovers_the_costs_that_made_the_points() -> None:
    truth = StepCosts(fixed_s=0.030, bandwidth_bytes_per_s=200e9, cpu_per_row_s=0.0004, prefill_per_token_s=0.0005)
    prior = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=180e9, cpu_per_row_s=0.001, prefill_per_token_s=0.0005)
    points = [Measured(seats=n, source="made", step_s=decode_step_s(truth, MOE, n, n * 3000.0),
                       context_tokens=3000.0) for n in (1, 4, 8, 16, 32)]
    # Per row, the CPU's cost and the KV and state reads trade off: the KV rate is pinned (to the bandwidth).
    cal = fit(prior, MOE, points, pinned=("prefill_per_token_s", "kv_bandwidth_bytes_per_s"))
    assert cal.refused is None and {"fixed_s", "bandwidth_bytes_per_s", "cpu_per_row_s"} <= set(cal.fitted)
    assert cal.costs.fixed_s == pytest.approx(truth.fixed_s, rel=0.05)
    assert cal.costs.bandwidth_bytes_per_s == pytest.approx(truth.bandwidth_bytes_per_s, rel=0.05)
    # Per row, the CPU's cost and the state read (40 MB / bandwidth) still trade off: the fit pins their sum.
    assert cal.costs.cpu_per_row_s == pytest.approx(truth.cpu_per_row_s, rel=0.35)
    assert all(abs(r.error) < 5e-3 for r in cal.residuals)
    assert cal.fit_error < cal.prior_error


def test_the_fit_stays_within_physical_bounds() -> None:
    """Steps faster than the weights can be read at the device's peak: the fit stops at the peak (1.25 × the 0.8
    prior) and at ~0 CPU, and says so, instead of a bandwidth above the hardware or a negative cost."""
    prior = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=100e9, cpu_per_row_s=1e-5)
    fast = [Measured(seats=n, source="fast", step_s=0.05, context_tokens=0.0) for n in (1, 8)]  # 22 GB at 100 GB/s
    cal = fit(prior, MOE, fast)
    assert cal.costs.bandwidth_bytes_per_s <= 125e9 * (1 + 1e-9)
    assert cal.costs.fixed_s > 0 and cal.costs.cpu_per_row_s > 0
    assert any("misses" in w for w in fit_warnings(cal, 125e9, "GPU"))


@pytest.mark.parametrize(("prior_fraction", "peak_tflops"), [(0.39, 1979.0), (0.64, 989.0), (0.61, 2250.0)])
def test_a_rate_s_ceiling_is_the_device_peak_the_prior_carries(prior_fraction: float, peak_tflops: float) -> None:
    """Priors at different fractions of their peak (the H200's FP8 GEMMs at 0.39 of theirs, its BF16 at 0.64, the
    B200's BF16 at 0.61) may all be fitted up to the peak itself, whatever the fraction; without a peak (a CPU
    placeholder) the old multiples hold."""
    peak = peak_tflops * 1e12
    prior = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=0.8 * 4.8e12, flops_per_s=prior_fraction * peak,
                      attention_flops_per_s=0.5 * peak, peak_flops_per_s=peak, peak_bandwidth_bytes_per_s=4.8e12)
    assert calibrate.bounds(prior, "flops_per_s")[1] == peak
    assert calibrate.bounds(prior, "attention_flops_per_s")[1] == peak
    assert calibrate.bounds(prior, "bandwidth_bytes_per_s")[1] == calibrate.bounds(
        prior, "kv_bandwidth_bytes_per_s")[1] == 4.8e12
    bare = dataclasses.replace(prior, peak_flops_per_s=math.inf, peak_bandwidth_bytes_per_s=math.inf)
    assert calibrate.bounds(bare, "flops_per_s")[1] == pytest.approx(prior.flops_per_s / 0.72)
    assert calibrate.bounds(bare, "bandwidth_bytes_per_s")[1] == pytest.approx(1.25 * prior.bandwidth_bytes_per_s)


def test_the_priors_carry_the_device_s_peaks() -> None:
    """model_inputs hands the fit the GB10's datasheet figures (273 GB/s; the dense peak of the weights' precision:
    Flash-Next's NVFP4 runs on GB10's FP4 tensor cores, 500 TFLOP/s) as the ceilings, above the priors' own rates."""
    report = _report("flash-next-vllm", 8)
    inputs = model_inputs(report.architecture, report.weights, report.capacity, report.hardware.gpus[0],
                          platform="cuda", tp=2, speculative_tokens=4)
    gb10 = gpu_perf(report.hardware.gpus[0].name)
    assert inputs.prior.peak_bandwidth_bytes_per_s == 273e9 > inputs.prior.bandwidth_bytes_per_s
    assert report.architecture.weight_format == "nvfp4"
    assert inputs.prior.peak_flops_per_s == gb10.fp4_tflops * 1e12 == 500e12
    assert inputs.prior.peak_flops_per_s > inputs.prior.flops_per_s
    assert calibrate.bounds(inputs.prior, "flops_per_s")[1] == inputs.prior.peak_flops_per_s


def test_a_fit_that_explains_its_points_worse_than_the_priors_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the search returns, a fit whose residuals are larger than the priors' is not used: the prior stays,
    and the refusal carries both errors."""
    prior = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=200e9, cpu_per_row_s=1e-4)
    points = [Measured(seats=n, source="p", step_s=decode_step_s(prior, MOE, n, 0.0), context_tokens=0.0)
              for n in (1, 8)]
    worse = dataclasses.replace(prior, fixed_s=0.5)
    monkeypatch.setattr(calibrate, "_fit_terms", lambda *_a, **_k: worse)
    cal = fit(prior, MOE, points)
    assert cal.costs == prior and cal.fitted == ()
    assert cal.refused is not None and "worse than the priors" in cal.refused
    assert f"{cal.prior_error:.3f}" in cal.refused and cal.prior_error < 1e-9
    assert any(w.startswith("calibration refused") for w in fit_warnings(cal, None, "GPU"))
    monkeypatch.undo()
    assert fit(prior, MOE, points).refused is None  # the real search: the priors already explain them, kept


FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def stepping_benches() -> dict[int, dict[str, Any]]:
    """Real `dspark bench --json` results from the stepping fake (a step of 20 ms + 5 ms per running request; 8
    clients, 16 requests of 8 prompt tokens and 12 out) at 1, 2, 4 and 8 seats, recorded on an idle 16-core host by
    benchmarks/stepping_calibration.py --record: timed live on a shared machine, the event loop's jitter moved them
    by 10% and more, so the test reads them instead of timing its own."""
    return {n: json.loads((FIXTURES / f"stepping-{n}-seats.json").read_text()) for n in (1, 2, 4, 8)}


_NO_WEIGHTS = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0)


def test_a_known_step_cost_is_predicted_at_unseen_seat_counts(stepping_benches: dict[int, dict[str, Any]]) -> None:
    """Calibrated on the benches at 1 and 4 seats, the model predicts 2 and 8 seats within 3%."""
    points = points_from_json(stepping_benches[1], "1 seat") + points_from_json(stepping_benches[4], "4 seats")
    assert [p.seats for p in points] == [1, 4]  # as `dspark bench --seats N` recorded them
    assert points[0].workload == Workload(clients=8, requests=16, input_len=8, output_len=12)
    cal = fit(StepCosts(0.002, 1e12, 1e-6, 1e-4, cpu_per_row_s=1e-4), _NO_WEIGHTS, points)
    assert {"fixed_s", "cpu_per_row_s", "prefill_per_token_s"} <= set(cal.fitted)
    assert cal.costs.fixed_s == pytest.approx(0.020, rel=0.05)  # the server's 20 ms a step
    assert cal.costs.cpu_per_row_s == pytest.approx(0.005, rel=0.05)  # and 5 ms per running request
    for seats in (2, 8):
        sim = simulate(cal.costs, _NO_WEIGHTS, points[0].workload, seats)
        measured = stepping_benches[seats]["summary"]
        assert sim.aggregate_decode_tps == pytest.approx(measured["aggregate_decode_tps"], rel=0.03)
        assert sim.per_stream_decode_tps == pytest.approx(measured["per_stream_decode_tps"], rel=0.03)


def test_seats_come_from_the_bench_or_the_engine_never_from_the_clients(
    stepping_benches: dict[int, dict[str, Any]],
) -> None:
    """Issue 16 item 9: a 2-seat server benched with 8 clients behind a proxy (no /metrics, no --seats)."""
    two = stepping_benches[2]
    assert points_from_json(two, "2 seats")[0].seats == 2  # recorded by --seats
    peak_only = {k: v for k, v in two.items() if k != "seats"}
    assert points_from_json(peak_only, "2 seats")[0].seats == 2  # the engine's running-request peak
    blind = {**peak_only, "summary": {**two["summary"], "running_peak": None}}
    with pytest.raises(ValueError, match=r"records neither the server's seats nor the engine's running-request "
                                         r"peak.*dspark bench --seats N.*/metrics"):
        points_from_json(blind, "blind.json")
    # What taking every client for a seat did. The server's per-seat cost is known (5 ms), its fixed cost fitted
    # from this one bench: fitted as 8 seats the model predicts the 4-seat server 30% low, as 2 seats within 2%.
    four = stepping_benches[4]["summary"]["aggregate_decode_tps"]
    known = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=1e12, cpu_per_row_s=0.005, prefill_per_token_s=1e-4)
    errors = {}
    for seats in (8, 2):
        point = points_from_json(blind, "blind.json", seats=seats)[0]
        cal = fit(known, _NO_WEIGHTS, [point], pinned=("cpu_per_row_s",))
        errors[seats] = simulate(cal.costs, _NO_WEIGHTS, point.workload, 4).aggregate_decode_tps / four - 1  # type: ignore[arg-type]
    assert -0.35 < errors[8] < -0.25 and abs(errors[2]) < 0.02, errors


def test_a_sweep_json_gives_one_point_per_clean_setting(stepping_benches: dict[int, dict[str, Any]]) -> None:
    sweep = {"settings": [{"seats": 2, "bench": stepping_benches[2], "problems": []},
                          {"seats": 4, "bench": stepping_benches[4], "problems": ["1 preemption(s)"]}]}
    points = points_from_json(sweep, "sweep.json")
    assert [(p.seats, p.source) for p in points] == [(2, "sweep.json (2 seats)")]
    assert points[0].aggregate_decode_tps == stepping_benches[2]["summary"]["aggregate_decode_tps"]
    with pytest.raises(ValueError, match="neither"):
        points_from_json({"x": 1}, "other.json")


def _report(recipe: str, seats: int) -> Any:
    return validate(ValidateRequest(recipe=recipe, env={}, flags={"max_num_seqs": seats}))


def test_27b_step_at_18_seats_from_its_steps_at_1_and_8() -> None:
    """The deployment's dense 27B on SGLang: steps of 67 ms at 1 seat and 130 at 8 predict 18 seats' 205 ms."""
    report = _report("qwen27b-dflash-sglang", 8)
    steps, _prefill, notes = _recipe_points(report)
    assert notes == [] and {p.seats: p.step_s for p in steps} == {1: 0.067, 8: 0.130, 18: 0.205}
    inputs = model_inputs(report.architecture, report.weights, report.capacity, report.hardware.gpus[0],
                          platform="cuda", tp=2, speculative_tokens=15)
    cal = fit(inputs.prior, inputs.shape, [p for p in steps if p.seats != 18])  # never fitted to the 18-seat step
    predicted = decode_step_s(cal.costs, inputs.shape, 18, 0.0)
    err = predicted / 0.205 - 1
    print(f"27B, 18 seats: predicted {predicted * 1e3:.0f} ms, measured 205 ms ({err:+.1%}); fitted {cal.fitted}")
    assert abs(err) < 0.10


def test_flash_next_16_seats_from_its_8_seat_point() -> None:
    """Flash-Next on vLLM: calibrated on the 8-seat bench only, what the model says for 16 seats against the
    measured 183.6 tok/s aggregate and 13.4 per stream (3-rep means of the deployment)."""
    report = _report("flash-next-vllm", 8)
    obs = {(o.metric, o.seats): o.value for o in report.recipe.observations if o.workload and
           not o.workload.startswith("warm")}
    _steps, prefill, _notes = _recipe_points(report)
    assert prefill is not None and prefill[0] == pytest.approx(0.49e-3)
    inputs = model_inputs(report.architecture, report.weights, report.capacity, report.hardware.gpus[0],
                          platform="cuda", tp=2, speculative_tokens=4, observed_prefill_s=prefill)
    load = Workload(clients=32, requests=100, input_len=2048, output_len=512, max_num_batched_tokens=8192)
    point = Measured(seats=8, source="8 seats", workload=load, aggregate_decode_tps=obs[("decode_tok_s", 8)],
                     per_stream_decode_tps=obs[("stream_decode_tok_s", 8)], ttft_mean_s=obs[("ttft_s", 8)])
    cal = fit(inputs.prior, inputs.shape, [point], pinned=("prefill_per_token_s",))
    # vLLM schedules asynchronously: its CPU per step hides behind GB10's weight reads; the bench pins a cost per
    # step (the kernel floor), its client TTFT nothing (the recipe's measured prompt cost prices the prompts)
    assert inputs.shape.async_scheduling and cal.refused is None and cal.fitted == ("kernel_floor_s",)
    sim = simulate(cal.costs, inputs.shape, load, 16)
    agg_err = sim.aggregate_decode_tps / obs[("decode_tok_s", 16)] - 1
    per_err = sim.per_stream_decode_tps / obs[("stream_decode_tok_s", 16)] - 1
    ttft_err = sim.ttft_mean_s / obs[("ttft_s", 16)] - 1
    wall_err = sim.wall_time_s / obs[("wall_s", 16)] - 1
    print(f"Flash-Next, 16 seats: aggregate {sim.aggregate_decode_tps:.1f} vs 183.6 ({agg_err:+.1%}), per stream "
          f"{sim.per_stream_decode_tps:.1f} vs 13.4 ({per_err:+.1%}), TTFT {sim.ttft_mean_s:.1f} vs 40.7 "
          f"({ttft_err:+.1%}), wall {sim.wall_time_s:.1f} vs 278.8 ({wall_err:+.1%})")
    assert abs(agg_err) < 0.15 and abs(per_err) < 0.15
    assert abs(ttft_err) < 0.25 and abs(wall_err) < 0.15
    assert not math.isclose(sim.aggregate_decode_tps, obs[("decode_tok_s", 8)], rel_tol=0.05)  # it did move


def test_a_zero_running_peak_read_from_metrics_is_not_called_unread(
    stepping_benches: dict[int, dict[str, Any]],
) -> None:
    """Issue 26 item 13: /metrics was read, its samples missed every running request (a pass shorter than the
    sampling): refused, but never with "its /metrics was not read"."""
    peak_zero = {**{k: v for k, v in stepping_benches[2].items() if k != "seats"},
                 "summary": {**stepping_benches[2]["summary"], "running_peak": 0.0}}
    with pytest.raises(ValueError, match=r"/metrics, read, never showed a request running") as info:
        points_from_json(peak_zero, "short.json")
    assert "was not read" not in str(info.value)


def test_a_profile_gives_its_decode_steps_and_its_closed_loops_never_a_waves_figures() -> None:
    """Each point's median gap is a decode step (an old profile without the bench's summary: its mean gap); a
    closed loop (more requests than streams) is read as the bench it is, with the engine's own pooled gaps and
    prefill time; a one-wave point's aggregate, per-stream and prefill figures (its intake: how many requests the
    first step took) and a lone prompt's prefill time (a burst at a higher clock than under load) are not read,
    so a wave whose figures are anything gives the same points."""
    wave = {"batch": 64, "input_len": 256, "output_len": 48, "requests": 64, "itl_mean_s": 0.011,
            "itl_ms": {"mean": 11.0, "p50": 8.0}, "source": "engine /metrics", "prefill_mean_s": 0.2,
            "summary": {"aggregate_decode_tps": 4000.0, "per_stream_decode_tps": 90.0, "ttft_mean_s": 0.3}}
    loop = {"batch": 32, "input_len": 1024, "output_len": 128, "requests": 64, "itl_mean_s": 0.009,
            "itl_ms": {"p50": 6.8}, "source": "engine /metrics", "prefill_mean_s": 0.31,
            "summary": {"aggregate_decode_tps": 2500.0, "per_stream_decode_tps": 110.0, "ttft_mean_s": 0.5}}
    one = {"batch": 1, "input_len": 2048, "output_len": 48, "itl_mean_s": 0.0052, "prefill_mean_s": 0.05}
    points = calibrate.profile_points({"kind": calibrate.PROFILE_KIND, "points": [wave, loop, one]}, "p.json", 4096)
    step, bench, loop_step, old_step = points
    assert (step.seats, step.step_s, step.context_tokens, step.workload) == (64, 0.008, 256 + 24, None)
    assert bench.workload == Workload(clients=32, requests=64, input_len=1024, output_len=128,
                                      max_num_batched_tokens=4096)
    assert (bench.aggregate_decode_tps, bench.per_stream_decode_tps) == (2500.0, 1 / 0.009)
    assert (bench.prefill_mean_s, bench.ttft_mean_s) == (0.31, None)  # the engine's prefill, not the client's TTFT
    assert loop_step.seats == 32 and loop_step.step_s == pytest.approx(0.0068)
    assert (old_step.seats, old_step.step_s, old_step.prefill_s) == (1, 0.0052, None)
    assert not any(p.step_s == 0.011 or p.prefill_s for p in points)
    for raced in (0.5, 2.0):  # whatever the wave's intake did to its figures
        odd = {**wave, "prefill_mean_s": 0.2 * raced, "itl_mean_s": 0.011 * raced,
               "summary": {k: v * raced for k, v in wave["summary"].items()}}  # type: ignore[attr-defined]
        assert calibrate.profile_points({"kind": calibrate.PROFILE_KIND, "points": [odd, loop, one]}, "p.json",
                                        4096) == points
    with pytest.raises(ValueError, match="no step figure"):
        calibrate.profile_points({"kind": calibrate.PROFILE_KIND, "points": [{"batch": 4, "summary": {}}]}, "q")


def test_a_profile_of_a_known_engine_predicts_it_where_the_profile_did_not_go() -> None:
    """An engine that is the model with other costs (a 60% higher floor per kernel: 0.66 ms more a step; GEMMs
    10% slower; twice the CPU per step, hidden behind the GPU): its profile (dspark.bench.profile's plan, each
    point's figures as that engine gives them) fitted from the priors predicts it within 3% at workloads the
    profile never ran (1,024 and 4,096-token prompts, 256 out, 8 to 128 streams), where the priors are 5-20%
    off."""
    from dspark.bench.profile import PLAN  # noqa: PLC0415 - the profile's own plan

    prior = StepCosts(fixed_s=1.5e-3, bandwidth_bytes_per_s=3.84e12, per_token_s=0.6e-6, flops_per_s=633e12,
                      gemm_half_tokens=48.0, attention_flops_per_s=490e12, kernel_floor_s=2.5e-6, launch_s=45e-6,
                      cpu_per_row_s=10e-6, kv_bandwidth_bytes_per_s=3.84e12, arrival_hop_s=2.5e-3,
                      api_per_request_s=0.5e-3, intake_s=0.75e-3)
    shape = StepShape(dense_weight_bytes=16.4e9, expert_weight_bytes=0.0, num_experts=None, top_k=None,
                      kv_bytes_per_token=147_456.0, state_bytes_per_seat=0.0, speculative_tokens=0,
                      emitted_per_step=1.0, dense_flops_per_token=13.9e9, logits_flops_per_row=1.24e9,
                      attention_flops_per_pair=4 * 36 * 32 * 128, activation_bytes_per_token=20 * 4096 * 2 * 36,
                      kernels_per_step=442, graph_sizes=(1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256),
                      async_scheduling=True)
    truth = dataclasses.replace(prior, kernel_floor_s=prior.kernel_floor_s * 1.6,
                                flops_per_s=prior.flops_per_s * 0.9, fixed_s=prior.fixed_s * 2)
    waves = []
    for p in PLAN:
        sim = simulate(truth, shape, Workload(p.batch, p.n, p.input_len, p.output_len), p.batch)
        waves.append({"batch": p.batch, "input_len": p.input_len, "output_len": p.output_len, "requests": p.n,
                      "itl_ms": {"p50": 1e3 * decode_step_s(truth, shape, p.batch,
                                                           p.batch * (p.input_len + p.output_len / 2))},
                      "source": "engine /metrics", "itl_mean_s": 1 / sim.per_stream_decode_tps,
                      "prefill_mean_s": sim.prefill_mean_s,
                      "summary": {"aggregate_decode_tps": sim.aggregate_decode_tps, "ttft_mean_s": sim.ttft_mean_s,
                                  "per_stream_decode_tps": sim.per_stream_decode_tps}})
    cal = fit(prior, shape, calibrate.profile_points({"kind": calibrate.PROFILE_KIND, "points": waves}, "p"))
    # judged on held-out waves (each fold predicted by a fit of the others), the fit beats the priors at full weight
    assert cal.fitted == ("kernel_floor_s", "flops_per_s")  # the CPU hides behind the GPU
    assert cal.refused is None and cal.held_out is not None and cal.held_out.runs == len(PLAN)
    assert cal.held_out.weight == 1.0 and cal.held_out.fit_error < cal.held_out.prior_error
    prior_worst = fitted_worst = 0.0
    for clients, prompt in ((8, 1024), (32, 1024), (128, 1024), (32, 4096)):
        load = Workload(clients, 2 * clients, prompt, 256)
        want, got, before = (simulate(c, shape, load, 128) for c in (truth, cal.costs, prior))
        for name in ("aggregate_decode_tps", "per_stream_decode_tps", "ttft_mean_s", "wall_time_s"):
            fitted_worst = max(fitted_worst, abs(getattr(got, name) / getattr(want, name) - 1))
            prior_worst = max(prior_worst, abs(getattr(before, name) / getattr(want, name) - 1))
    print(f"worst error at unseen workloads: priors {prior_worst:.1%}, fitted on the profile {fitted_worst:.1%}")
    assert prior_worst > 0.05 and fitted_worst < 0.03


def test_a_fit_of_noise_is_judged_on_the_runs_it_did_not_see_and_refused() -> None:
    """The priors are the engine; each run (a source) is off by its own few percent, as waves at a boost clock or a
    first step's race are. Seven coefficients explain six runs better than the priors (its own points), and predict
    each run held out worse: refused with the held-out numbers, the priors kept; with the same figures from two
    runs (no held-out judgement possible) the own-points rule alone applies and the fit is used."""
    prior = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=200e9, cpu_per_row_s=1e-4, flops_per_s=100e12)
    noise = (1.09, 0.93, 1.06, 0.91, 1.08, 0.94)
    seats = (1, 2, 4, 8, 16, 32)
    points = [Measured(seats=n, source=f"run {n}", step_s=decode_step_s(prior, MOE, n, n * 2000.0) * e,
                       context_tokens=2000.0) for n, e in zip(seats, noise, strict=True)]
    cal = fit(prior, MOE, points)
    assert cal.held_out is not None and cal.held_out.runs == 6 and cal.held_out.folds == 4
    assert cal.held_out.full_fit_error > cal.held_out.prior_error  # the unshrunk fit predicts held-out runs worse
    assert cal.refused is not None and "did not see" in cal.refused and cal.costs == prior and cal.fitted == ()
    assert f"{cal.held_out.prior_error:.3f}" in cal.refused and f"{cal.held_out.full_fit_error:.3f}" in cal.refused
    own = fit(prior, MOE, [dataclasses.replace(p, source=f"run {i % 2}") for i, p in enumerate(points)])
    assert own.held_out is None and own.refused is None and own.fit_error < own.prior_error


def test_a_fit_is_shrunk_toward_the_priors_geometrically_within_its_bounds() -> None:
    prior = StepCosts(fixed_s=0.002, bandwidth_bytes_per_s=200e9, cpu_per_row_s=1e-4)
    fitted = dataclasses.replace(prior, fixed_s=0.008, bandwidth_bytes_per_s=50e9)
    half = calibrate.shrunk(prior, fitted, ("fixed_s", "bandwidth_bytes_per_s"), 0.5)
    assert half.fixed_s == pytest.approx(0.004) and half.bandwidth_bytes_per_s == pytest.approx(100e9)
    assert half.cpu_per_row_s == prior.cpu_per_row_s
    assert calibrate.shrunk(prior, fitted, ("fixed_s",), 1.0) == fitted
    assert calibrate.shrunk(prior, fitted, ("fixed_s",), 0.0).fixed_s == pytest.approx(prior.fixed_s)


def test_advise_json_records_the_held_out_judgement(tmp_path: Path) -> None:
    """`advise --json --calibrate PROFILE` says what the held-out judgement found: the runs, folds, the weight and
    both errors. Run D's 8B profile (six waves: their decode steps, 4.1% rms off the priors) predicts its held-out
    waves better after a fit (2.5%): used, its costs in place of the priors'. Run D's Llama profile, whose steps
    the priors already meet (3.7% rms, its fit 4.1% held out): refused, naming the numbers; the priors' costs."""
    import io  # noqa: PLC0415
    from contextlib import redirect_stdout  # noqa: PLC0415

    from dspark.cli import main  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    for engine, config in (("qwen3-8b-s128", "qwen3-8b"), ("llama-3.1-8b-s128", "llama-3.1-8b")):
        profile = root / f"tests/device/results/2026-12-02-clock-D/profiles/{engine}.json"
        model = tmp_path / config
        model.mkdir()
        (model / "config.json").write_text((root / f"tests/device/configs/{config}.json").read_text())
        data = json.loads(profile.read_text())
        data["model"] = config
        (tmp_path / f"{config}.json").write_text(json.dumps(data))
        base = ["advise", "--model", str(model), "--engine", "vllm", "--hardware", "h200", "--engine-version",
                "0.25.0", "--seats", "128", "--clients", "8", "--requests", "16", "--input-len", "1024",
                "--output-len", "256", "--simulator", "dspark", "--json"]
        out = []
        for extra in ([], ["--calibrate", str(tmp_path / f"{config}.json")]):
            buf = io.StringIO()
            with redirect_stdout(buf):
                assert main([*base, *extra, "--", "--max-model-len", "8192"]) == 0
            out.append(json.loads(buf.getvalue()))
        held = out[1]["model"]["calibration_held_out"]
        assert held["runs"] == 6 and held["folds"] == 4 and held["figures"] == 6 and out[0]["model"][
            "calibration_held_out"] is None
        used = held["fit_error"] < held["prior_error"] - calibrate.HELD_OUT_MARGIN
        assert used == (engine == "qwen3-8b-s128"), held
        refused = out[1]["model"]["calibration_refused"]
        same = out[1]["model"]["costs"] == out[0]["model"]["costs"]
        if used:
            assert refused is None and not same
            assert out[1]["predictions"][0]["aggregate_decode_tps"] != out[0]["predictions"][0][
                "aggregate_decode_tps"]
        else:
            assert "did not see" in refused and f"{held['prior_error']:.3f}" in refused and same
