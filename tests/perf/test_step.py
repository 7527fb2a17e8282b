"""The step-time model, term by term: physically sensible directions, the roofline's two sides, graph padding,
the eager launch gap, async scheduling's overlap, and the engine-side replay running the very same file."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from dspark.perf.step import StepCosts, StepShape, cost_table, cpu_seconds, step_seconds, step_terms
from dspark_inside import frontend, step_cost
from dspark_inside.replay import Arrivals

ROOT = Path(__file__).resolve().parents[2]

# An 8B dense shape on an H200-like device (figures rounded): 15 GB of weights, 147 kB of KV per token.
H200ISH = StepCosts(fixed_s=1.5e-3, bandwidth_bytes_per_s=3.84e12, per_token_s=0.6e-6, flops_per_s=790e12,
                    gemm_half_tokens=48.0, attention_flops_per_s=495e12, kernel_floor_s=2.5e-6, launch_s=12e-6,
                    cpu_per_row_s=10e-6)
DENSE = StepShape(dense_weight_bytes=15.1e9, expert_weight_bytes=0.0, num_experts=None, top_k=None,
                  kv_bytes_per_token=147_456.0, state_bytes_per_seat=0.0, speculative_tokens=0, emitted_per_step=1.0,
                  dense_flops_per_token=15.1e9, attention_flops_per_pair=4 * 36 * 32 * 128,
                  activation_bytes_per_token=20 * 4096 * 2 * 36, kernels_per_step=442,
                  graph_sizes=(1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512), async_scheduling=True)
MOE = StepShape(dense_weight_bytes=1e9, expert_weight_bytes=30e9, num_experts=128, top_k=8,
                kv_bytes_per_token=50_000.0, state_bytes_per_seat=0.0, speculative_tokens=0, emitted_per_step=1.0,
                dense_flops_per_token=2e9, expert_flops_per_token=4e9, attention_flops_per_pair=100_000.0,
                kernels_per_step=600, graph_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), async_scheduling=True)


def _t(shape: StepShape, rows: int, context: float, prefill: int = 0, costs: StepCosts = H200ISH,
       pairs: float | None = None) -> float:
    return step_seconds(cost_table(costs, shape), rows, context, prefill, pairs)


@pytest.mark.parametrize("shape", [DENSE, MOE], ids=["dense", "moe"])
def test_more_rows_context_or_prompt_is_never_cheaper(shape: StepShape) -> None:
    """With the prompt chunks' (query, key) pairs given, as dspark's simulation gives them."""
    rng = random.Random(7)  # noqa: S311 - reproducible inputs, not secrets
    for _ in range(300):
        rows, ctx, prefill = rng.randint(0, 300), rng.uniform(0, 2e6), rng.choice([0, rng.randint(1, 8192)])
        pairs = prefill * (rng.uniform(0, 30_000) + prefill / 2)
        base = _t(shape, rows, ctx, prefill, pairs=pairs)
        assert _t(shape, rows + 1, ctx, prefill, pairs=pairs) >= base - 1e-15
        assert _t(shape, rows, ctx + 1000, prefill, pairs=pairs) >= base - 1e-15
        grown = (prefill + 64) * (pairs / prefill + 32) if prefill else 64 * 32
        assert _t(shape, rows, ctx, prefill + 64, pairs=grown) >= base - 1e-15


def test_decode_at_one_row_is_the_weights_read_plus_the_kernels() -> None:
    terms = step_terms(cost_table(H200ISH, DENSE), 1, 1024.0, 0)
    assert terms["gemm"] == pytest.approx(15.1e9 / 3.84e12)  # memory-bound: the weights once
    assert terms["kernels"] == pytest.approx(442 * 2.5e-6)
    assert terms["cpu"] == 0.0  # async scheduling: the CPU's 1.5 ms hides behind a ~5 ms step
    assert 4.5e-3 < sum(terms.values()) < 5.5e-3


def test_the_roofline_takes_the_larger_side_not_the_sum() -> None:
    """GEMM time is max(weights read, FLOPs / rate): decode rows up to ~100 ride the weights read for free."""
    table = cost_table(H200ISH, DENSE)
    at = {n: step_terms(table, n, 0.0, 0)["gemm"] for n in (1, 16, 64, 512)}
    assert at[1] == at[16] == at[64]  # memory-bound: the same bytes whatever the rows
    flops_512 = 15.1e9 * 512 / (790e12 * 512 / (512 + 48))
    assert at[512] == pytest.approx(flops_512) and at[512] > at[1]  # compute-bound past the crossover


def test_a_weight_bound_gemm_adds_its_unhidden_tensor_core_share() -> None:
    """gemm_unhidden u: the memory side is weights ÷ bandwidth + u × dense FLOPs ÷ the full GEMM rate (lm_head for
    the sampled rows included), so a weight-bound step grows with its rows; a compute-bound one is untouched, and
    the routed experts' fused-MoE GEMMs get none of it."""
    u = 0.176
    costs = dataclasses.replace(H200ISH, gemm_unhidden=u)
    shape = dataclasses.replace(DENSE, logits_flops_per_row=2 * 151_936 * 4096)
    for rows in (1, 16, 64):
        gemm = step_terms(cost_table(costs, shape), rows, 0.0, 0)["gemm"]
        flops = 15.1e9 * rows + 2 * 151_936 * 4096 * rows
        assert gemm == pytest.approx(15.1e9 / 3.84e12 + u * flops / 790e12)
    assert step_terms(cost_table(costs, shape), 64, 0.0, 0)["gemm"] > step_terms(
        cost_table(H200ISH, shape), 64, 0.0, 0)["gemm"]
    # 8,192 prompt tokens: compute-bound, the same as without it
    assert step_terms(cost_table(costs, shape), 0, 0.0, 8192)["gemm"] == pytest.approx(
        step_terms(cost_table(H200ISH, shape), 0, 0.0, 8192)["gemm"])
    moe = dataclasses.replace(MOE, dense_flops_per_token=0.0)
    assert step_terms(cost_table(costs, moe), 4, 0.0, 0)["gemm"] == step_terms(cost_table(H200ISH, moe), 4, 0.0, 0)[
        "gemm"]


def test_compute_bound_prefill_scales_with_its_tokens() -> None:
    """A long prompt chunk is compute-bound: doubling its tokens nearly doubles its GEMM time, and its causal
    attention grows faster than linearly."""
    table = cost_table(H200ISH, DENSE)
    a, b = step_terms(table, 0, 0.0, 4096), step_terms(table, 0, 0.0, 8192)
    assert b["gemm"] / a["gemm"] == pytest.approx(2.0, rel=0.01)
    assert b["attention"] / a["attention"] == pytest.approx(4.0, rel=0.01)
    # ~124 TFLOP of GEMMs for 8,192 tokens at ~790 TFLOP/s (~157 ms), ~20 TFLOP of causal attention at ~495 (~40),
    # ~48 GB of activations (~13): ~211 ms
    assert 0.19 < step_seconds(table, 0, 0.0, 8192) < 0.23


def test_a_prompt_chunk_after_a_prefix_attends_to_it() -> None:
    table = cost_table(H200ISH, DENSE)
    alone = step_terms(table, 0, 0.0, 2048, pairs=2048 * 1024)["attention"]
    after = step_terms(table, 0, 30_000.0, 2048, pairs=2048 * (30_000 + 1024))["attention"]
    assert after > 10 * alone


def test_graph_padding_charges_the_padded_rows() -> None:
    """vLLM runs 129 tokens in the 256-token graph: compute-bound GEMMs cost as 256 rows; eager steps do not pad."""
    fast_mem = StepCosts(**{**H200ISH.__dict__, "bandwidth_bytes_per_s": 1e15})  # make the GEMMs compute-bound
    table = cost_table(fast_mem, DENSE)
    assert step_terms(table, 129, 0.0, 0)["gemm"] == pytest.approx(step_terms(table, 256, 0.0, 0)["gemm"])
    assert step_terms(table, 129, 0.0, 0)["gemm"] > step_terms(table, 128, 0.0, 0)["gemm"] * 1.5
    eager = cost_table(fast_mem, StepShape(**{**DENSE.__dict__, "eager": True}))
    assert step_terms(eager, 129, 0.0, 0)["gemm"] < step_terms(table, 129, 0.0, 0)["gemm"]
    # Past the largest captured size nothing is padded.
    assert step_terms(table, 600, 0.0, 0)["gemm"] < step_terms(table, 601, 0.0, 0)["gemm"]


def test_eager_adds_the_launch_gap_where_the_gpu_outruns_the_cpu() -> None:
    eager = StepShape(**{**DENSE.__dict__, "eager": True, "graph_sizes": ()})
    tiny = StepShape(**{**eager.__dict__, "dense_weight_bytes": 1e9, "dense_flops_per_token": 1e9})
    graphed_tiny = StepShape(**{**tiny.__dict__, "eager": False})
    for rows in (1, 8, 64):
        assert _t(eager, rows, rows * 1000.0) >= _t(DENSE, rows, rows * 1000.0) - 1e-12
    # A small model: 442 launches × 12 µs ≈ 5.3 ms, after the CPU's 1.5 ms + 10 µs of scheduling on the same
    # thread, against ~1.4 ms of GPU work: the CPU sets the pace.
    assert _t(tiny, 1, 1000.0) == pytest.approx(442 * 12e-6 + 1.5e-3 + 10e-6, rel=0.01)
    assert _t(tiny, 1, 1000.0) > 2 * _t(graphed_tiny, 1, 1000.0)
    # Without async scheduling the CPU's time comes first, then the launches race the GPU.
    sync = StepShape(**{**tiny.__dict__, "async_scheduling": False})
    assert _t(sync, 1, 1000.0) == pytest.approx(1.5e-3 + 10e-6 + 442 * 12e-6, rel=0.01)
    big = StepShape(**{**eager.__dict__, "async_scheduling": False})
    assert _t(big, 64, 64_000.0) == pytest.approx(_t(StepShape(**{**DENSE.__dict__, "async_scheduling": False}),
                                                     64, 64_000.0), rel=1e-9)  # GPU-bound: launches hidden


def test_async_scheduling_hides_the_cpu_behind_the_gpu() -> None:
    sync = StepShape(**{**DENSE.__dict__, "async_scheduling": False})
    gpu = _t(DENSE, 8, 8000.0)
    assert _t(sync, 8, 8000.0) == pytest.approx(gpu + 1.5e-3 + 8 * 10e-6)
    slow_cpu = StepCosts(**{**H200ISH.__dict__, "fixed_s": 0.05})
    assert _t(DENSE, 8, 8000.0, costs=slow_cpu) == pytest.approx(0.05 + 8 * 10e-6)  # CPU-bound: the CPU's time


def test_moe_reads_more_experts_as_tokens_grow() -> None:
    table = cost_table(H200ISH, MOE)
    reads = [step_terms(table, n, 0.0, 0)["gemm"] for n in (1, 4, 16, 64)]
    assert reads == sorted(reads) and reads[0] < reads[-1] / 5
    coverage_1 = 1 - (1 - 8 / 128) ** 1
    assert reads[0] == pytest.approx((1e9 + 30e9 * coverage_1) / 3.84e12)


def test_experts_read_at_the_small_tile_rate_only_up_to_its_tokens_per_expert() -> None:
    """A kernel whose smallest token tile reads faster (expert_small_tile_tokens, tokens × top-k ÷ experts): at 16
    rows (1 per expert) the experts it touches at that rate, at 256 rows (16 per expert) at the curve's again."""
    reads = dataclasses.replace(MOE, dense_weight_bytes=0.0, dense_flops_per_token=0.0, expert_flops_per_token=0.0)
    curve = dataclasses.replace(H200ISH, expert_bandwidth_bytes_per_s=3e12)
    tiled = dataclasses.replace(curve, expert_small_tile_bandwidth_bytes_per_s=6e12, expert_small_tile_tokens=8.0)
    for rows, faster in ((1, True), (16, True), (128, True), (129, False), (256, False)):
        covered = 30e9 * (1 - (1 - 8 / 128) ** rows)
        got = step_terms(cost_table(tiled, reads), rows, 0.0, 0)["gemm"]
        assert got == pytest.approx(covered / (6e12 if faster else 3e12)), rows
        assert step_terms(cost_table(curve, reads), rows, 0.0, 0)["gemm"] == pytest.approx(covered / 3e12)
    no_rate = dataclasses.replace(curve, expert_small_tile_tokens=8.0)  # a tile without a rate of its own: the curve's
    assert step_terms(cost_table(no_rate, reads), 16, 0.0, 0) == step_terms(cost_table(curve, reads), 16, 0.0, 0)


def test_tokens_that_share_experts_read_fewer_of_them() -> None:
    """The routing spread s: a step of T tokens reads 1 − (1 − k/E)^(1 + (T − 1)·s) of the experts. s = 1 is even,
    independent top-k routing (the formula without it); below 1 fewer experts at the same T, never fewer than one
    token's k; one token reads its k experts whatever s is."""
    reads = dataclasses.replace(MOE, dense_flops_per_token=0.0, expert_flops_per_token=0.0)  # the reads alone

    def experts(spread: float, n: int) -> float:
        table = cost_table(dataclasses.replace(H200ISH, routing_spread=spread), reads)
        return (step_terms(table, n, 0.0, 0)["gemm"] * 3.84e12 - 1e9) / 30e9

    for n in (1, 4, 16, 64):
        assert experts(1.0, n) == pytest.approx(1 - (1 - 8 / 128) ** n)
        assert experts(0.5, n) == pytest.approx(1 - (1 - 8 / 128) ** (1 + (n - 1) * 0.5))
        assert 8 / 128 - 1e-12 <= experts(0.05, n) <= experts(0.5, n) <= experts(1.0, n)
    assert experts(0.2, 1) == pytest.approx(8 / 128) and experts(0.5, 16) < experts(1.0, 16) - 0.2
    dense = cost_table(dataclasses.replace(H200ISH, routing_spread=0.3), DENSE)
    assert step_terms(dense, 16, 0.0, 0) == step_terms(cost_table(H200ISH, DENSE), 16, 0.0, 0)  # no experts: no effect


def test_tensor_parallel_all_reduces_cost_latency_and_bytes() -> None:
    tp2 = StepShape(**{**DENSE.__dict__, "tp": 2, "allreduces_per_step": 72, "allreduce_bytes_per_token": 8192.0,
                       "link_bytes_per_s": 25e9, "collective_latency_s": 40e-6})
    terms = step_terms(cost_table(H200ISH, tp2), 8, 0.0, 0)
    assert terms["collectives"] == pytest.approx(72 * (40e-6 + 8192 * 8 * 1.0 / 25e9))
    assert "collectives" not in step_terms(cost_table(H200ISH, DENSE), 8, 0.0, 0)


def test_dspark_and_the_engine_side_replay_run_one_file() -> None:
    """dspark.perf.step's terms are dspark_inside.step_cost's (imported as dspark._inside_root.dspark_inside.
    step_cost), the module both replay drivers import: one source, no copy to hold equal."""
    source = Path(step_cost.__file__).resolve()
    for fn in (step_terms, step_seconds, cpu_seconds):
        assert Path(fn.__code__.co_filename).resolve() == source, fn
        assert fn.__module__ == "dspark._inside_root.dspark_inside.step_cost"
    # By file, not identity: other tests re-import dspark_inside afresh (new module objects, the same file).
    drivers = [importlib.import_module(f"dspark_inside.{engine}.replay_scheduler") for engine in ("vllm", "sglang")]
    for fn in (*(d.step_seconds for d in drivers), drivers[0].cpu_seconds):
        assert Path(fn.__code__.co_filename).resolve() == source and fn.__module__ == "dspark_inside.step_cost", fn


def test_the_step_cost_module_imports_only_the_standard_library() -> None:
    """It runs in the engine's interpreter (no dspark there) and in dspark's (no dspark_inside on the path)."""
    tree = ast.parse(Path(step_cost.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))  # no relative one


def test_dspark_importing_the_step_model_leaves_its_sys_path_alone() -> None:
    """dspark_inside's __init__ drops the working directory from sys.path in the engine's interpreter; imported
    from dspark's side (as dspark._inside_root.dspark_inside) it must not: `python -c` starts with '' first."""
    code = ("import sys; before = list(sys.path); import dspark.perf.step; "
            "assert 'dspark_inside' not in sys.modules; print(sys.path == before and sys.path[0] == '')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr


def test_the_engine_side_api_server_is_the_advisors() -> None:
    """The replay's arrivals go through the same API server as the advisor's model: one file,
    dspark_inside/frontend.py, imported by dspark.advise.model (as dspark._inside_root.dspark_inside.frontend) and by
    the replay (as dspark_inside.frontend), importing only the standard library; requests sent together reach the
    engine core a hop after the send, one after another, `serial` seconds each."""
    import dspark.advise.model as advisor  # noqa: PLC0415
    import dspark_inside.replay as engine_side  # noqa: PLC0415

    source = Path(frontend.__file__).resolve()
    for cls, module in ((vars(advisor)["Frontend"], "dspark._inside_root.dspark_inside.frontend"),
                        (vars(engine_side)["Frontend"], "dspark_inside.frontend")):
        assert Path(cls.arrival.__code__.co_filename).resolve() == source and cls.__module__ == module, cls
    tree = ast.parse(source.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
    assert imported <= {"__future__"}, imported
    api = frontend.Frontend(2.5e-3, 0.5e-3)
    assert [api.arrival(0.0) for _ in range(3)] == pytest.approx([2.5e-3, 3.0e-3, 3.5e-3])
    assert api.arrival(1.0) == pytest.approx(1.0025)  # sent after the others were taken: a hop, no queue
    assert frontend.Frontend(1e-3, 4e-3).serial == 1e-3  # the serial part of a request is within its hop


def test_replay_arrivals_reach_the_engine_through_the_api_server() -> None:
    """Four requests sent at once reach the engine core 2.5 ms, 3.0, 3.5 and 4.0 ms after the send; each is due
    only then, and remembers its client's send (what TTFT counts from); a finished one's successor likewise."""
    cost = cost_table(H200ISH, DENSE) | {"arrival_hop_s": 2.5e-3, "api_per_request_s": 0.5e-3, "intake_s": 0.75e-3}
    arrivals = Arrivals({"clients": 4}, 6, cost)
    assert (arrivals.hop, arrivals.intake) == (2.5e-3, 0.75e-3)
    assert arrivals.next_at() == pytest.approx(2.5e-3)
    assert list(arrivals.due(2.4e-3)) == []
    assert list(arrivals.due(3.25e-3)) == [0, 1]  # what an idle engine woken 0.75 ms after the first has
    assert list(arrivals.due(1.0)) == [2, 3] and arrivals.due_at == dict.fromkeys(range(4), 0.0)
    arrivals.finished(2.0)
    assert arrivals.next_at() == pytest.approx(2.0 + 2.5e-3) and list(arrivals.due(2.0025)) == [4]
    assert arrivals.due_at[4] == 2.0
    # open loop: sent at their times, taken in send order (then file order); without a cost, as sent
    plain = Arrivals({"times": [0.3, 0.1, 0.1]}, 3)
    assert list(plain.due(0.1)) == [1, 2] and plain.hop == 0.0


def test_a_steps_tokens_reach_their_clients_through_the_api_servers_queue() -> None:
    """The API server streams every step's outputs (65 µs a token here, 2 ms a request that ends) in turn with what
    it had: a step's tokens reach their clients a hop after it is through them, so a busy step delays the next
    step's; a stretch of steps whose outputs take less than a step leaves only the last one's work."""
    api = frontend.Frontend(2.5e-3, 0.5e-3, 65e-6, 2e-3)
    assert api.returned(1.0, 1) == pytest.approx(1.0 + 65e-6 + 2.5e-3)
    # 128 tokens and 8 finishes: 8.3 + 16 ms of work; the next step's outputs, 12 ms later, wait behind it
    first = api.returned(2.0, 128, 8)
    assert first == pytest.approx(2.0 + 128 * 65e-6 + 8 * 2e-3 + 2.5e-3)
    assert api.returned(2.012, 120) == pytest.approx(first + 120 * 65e-6)
    # a stretch of 10 steps of 10 ms, 32 tokens each (2.1 ms of work a step): the last step's work after its end
    assert api.returned(3.0, 32, 1, steps=10, dt=0.010) == pytest.approx(3.0 + 32 * 65e-6 + 2e-3 + 2.5e-3)
    # outputs that take longer than a step pile up: 10 steps of 1 ms, 32 tokens each
    busy = frontend.Frontend(0.0, 0.0, 65e-6)
    assert busy.returned(4.0, 32, steps=10, dt=0.001) == pytest.approx(4.0 - 0.009 + 10 * 32 * 65e-6)
    # a request the client sends after its last token queues behind the outputs the API server is on
    late = frontend.Frontend(2.5e-3, 0.5e-3, 65e-6, 2e-3)
    seen = late.returned(5.0, 64, 1)
    late.returned(seen - 1e-3, 64)  # the next step's outputs came in before the client's new request
    assert late.arrival(seen) == pytest.approx(seen - 1e-3 + 64 * 65e-6 + 0.5e-3 + 2.0e-3)
    # with no per-token or per-finish cost, a hop as before
    assert frontend.Frontend(2.5e-3, 0.5e-3).returned(6.0, 100, 10) == pytest.approx(6.0025)


def test_replay_arrivals_send_a_successor_once_its_client_has_the_last_token() -> None:
    """Arrivals.stepped: the replay's step goes through the same queue; each finished request's client sends its
    next request when the step's tokens reach it, and that request reaches the engine core a hop later. Open loop,
    the outputs queue on their own (the schedule's intake was worked out up front)."""
    cost = cost_table(H200ISH, DENSE) | {"arrival_hop_s": 2.5e-3, "api_per_request_s": 0.5e-3,
                                         "api_per_token_s": 65e-6, "api_per_finish_s": 2e-3}
    arrivals = Arrivals({"clients": 2}, 3, cost)
    assert list(arrivals.due(1.0)) == [0, 1]
    seen = arrivals.stepped(2.0, 2, 1)
    assert seen == pytest.approx(2.0 + 2 * 65e-6 + 2e-3 + 2.5e-3)
    assert arrivals.next_at() == pytest.approx(seen + 2.5e-3) and arrivals.due_at == {0: 0.0, 1: 0.0}
    assert list(arrivals.due(seen + 2.5e-3)) == [2] and arrivals.due_at[2] == pytest.approx(seen)
    assert arrivals.stepped(3.0, 1, 1) == pytest.approx(3.0 + 65e-6 + 2e-3 + 2.5e-3)  # all sent: none follows
    assert not arrivals.pending
    late = Arrivals({"times": [0.0, 50.0]}, 2, cost)  # the intake of the send at 50 s is worked out up front
    assert late.stepped(1.0, 1, 0) == pytest.approx(1.0 + 65e-6 + 2.5e-3)
    assert list(late.due(1.0)) == [0] and late.next_at() == pytest.approx(50.0025)


def test_the_fused_moe_kernel_prices_the_experts_compute_not_their_reading() -> None:
    """The expert GEMMs at the fused-MoE kernel's own rate: a long prompt (compute-bound) costs more at half the
    rate, a one-row decode step (reading the experts it touches) nothing more."""
    slow = StepCosts(**{**H200ISH.__dict__, "expert_flops_per_s": H200ISH.flops_per_s / 2})
    prompt, decode = (0, 0.0, 8192), (1, 1024.0, 0)
    fast_terms, slow_terms = step_terms(cost_table(H200ISH, MOE), *prompt), step_terms(cost_table(slow, MOE), *prompt)
    per_expert = 8192 * 8 / 128
    expert = 4e9 * 8192 / (H200ISH.flops_per_s * per_expert / (per_expert + 48.0))  # at flops_per_s
    assert slow_terms["gemm"] - fast_terms["gemm"] == pytest.approx(expert)  # twice as long at half the rate
    assert step_seconds(cost_table(slow, MOE), *decode) == step_seconds(cost_table(H200ISH, MOE), *decode)


def test_a_step_without_a_graph_pays_its_host_side_launches_and_the_cpu_path_says_so() -> None:
    """launches_per_step (an MoE layer's host-side ops beyond its kernels) counts only where no graph is captured:
    a 1,024-token prompt above the largest size (512), not a 64-row decode step."""
    heavy = StepShape(**{**MOE.__dict__, "launches_per_step": 1800})
    table, plain = cost_table(H200ISH, heavy), cost_table(H200ISH, MOE)
    assert cpu_seconds(table, 0, 1024) == pytest.approx(1.5e-3 + 10e-6 + 1800 * 12e-6)
    assert cpu_seconds(plain, 0, 1024) == pytest.approx(1.5e-3 + 10e-6 + 600 * 12e-6)
    assert cpu_seconds(table, 64, 0) == cpu_seconds(plain, 64, 0) == pytest.approx(1.5e-3 + 64 * 10e-6)
    assert step_seconds(table, 64, 64 * 1024.0, 0) == step_seconds(plain, 64, 64 * 1024.0, 0)
    # Async scheduling: the step is the longer of the GPU's work and the CPU's path.
    gpu = math.fsum(v for k, v in step_terms(table, 0, 0.0, 1024).items() if k not in ("cpu", "launch_gap"))
    assert step_seconds(table, 0, 0.0, 1024) == pytest.approx(max(gpu, cpu_seconds(table, 0, 1024)))
