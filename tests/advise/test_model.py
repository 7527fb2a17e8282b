"""The step cost and the closed-loop simulation, against figures worked out by hand.

These costs have no compute limit (no FLOP rates) and no async scheduling: a step is the weights and KV read, the
sampler per verified token (and the prompt's last token), a measured cost per prompt token, and the CPU's fixed
cost after it. dspark.perf's own tests check the roofline terms."""

from __future__ import annotations

import pytest

from dspark.advise.model import StepCosts, StepShape, Workload, decode_step_s, simulate

# 10 ms fixed, 1 GB/s, 1 ms per decode token, 0.1 ms per prompt token.
COSTS = StepCosts(fixed_s=0.010, bandwidth_bytes_per_s=1e9, per_token_s=0.001, prefill_per_token_s=0.0001)
DENSE = StepShape(dense_weight_bytes=20e6, expert_weight_bytes=0.0, num_experts=None, top_k=None,
                  kv_bytes_per_token=1000.0, state_bytes_per_seat=0.0, speculative_tokens=0, emitted_per_step=1.0)


def test_dense_step_is_fixed_plus_bytes_over_bandwidth_plus_tokens() -> None:
    # 10 ms + (20 MB + 4 seats × 500 tokens × 1 kB) / 1 GB/s + 4 tokens × 1 ms = 10 + 22 + 4 = 36 ms.
    assert decode_step_s(COSTS, DENSE, 4, 2000) == pytest.approx(0.036)
    # 200 prompt tokens in the same step add 20 ms, and the sampling of the prompt's first output token 1 ms.
    assert decode_step_s(COSTS, DENSE, 4, 2000, prefill_tokens=200) == pytest.approx(0.057)


def test_moe_reads_the_experts_the_step_touches() -> None:
    moe = StepShape(dense_weight_bytes=0.0, expert_weight_bytes=100e6, num_experts=512, top_k=10,
                    kv_bytes_per_token=0.0, state_bytes_per_seat=0.0, speculative_tokens=4, emitted_per_step=3.0)
    # 8 seats × 5 tokens = 40 tokens touch 1 − (1 − 10/512)^40 = 54.6% of the experts: 54.6 MB at 1 GB/s.
    coverage = 1 - (1 - 10 / 512) ** 40
    expected = 0.010 + 100e6 * coverage / 1e9 + 40 * 0.001
    assert decode_step_s(COSTS, moe, 8, 0) == pytest.approx(expected)
    assert 0.54 < coverage < 0.56


def test_one_client_one_seat() -> None:
    # A 100-token prompt in one step (10 + 20 + 10 + 1 = 41 ms with no seat decoding: 20 MB of weights still read,
    # its first token sampled), then 9 decode steps of 10 + 20 + 1 ms each (no KV bytes in this shape).
    shape = StepShape(20e6, 0.0, None, None, 0.0, 0.0, 0, 1.0)
    sim = simulate(COSTS, shape, Workload(clients=1, requests=3, input_len=100, output_len=10), seats=1)
    first = 0.010 + 0.020 + 100 * 0.0001 + 0.001
    decode = 9 * (0.010 + 0.020 + 0.001)
    assert sim.ttft_mean_s == pytest.approx(first)
    assert sim.wall_time_s == pytest.approx(3 * (first + decode))
    assert sim.per_stream_decode_tps == pytest.approx(9 / decode)
    assert sim.aggregate_decode_tps == pytest.approx(30 / sim.wall_time_s)
    assert sim.kv_peak_tokens == 110


def test_clients_queue_for_seats() -> None:
    # 4 clients, 2 seats, no prompt cost. A request takes one prompt step, which carries no decode row (10 ms + 1 ms
    # of the sampler, which a step with prompt tokens runs once whatever its chunks), then 4 decode steps of 10 + 2
    # rows × 1 ms = 12 ms: 11 + 48 = 59 ms. The first two hold the seats from 0 (first token at 11 ms); the other two
    # wait for them (59 ms) and get theirs 11 ms later: mean TTFT = (11 + 11 + 70 + 70) / 4 = 40.5 ms; wall 118 ms.
    shape = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0)
    costs = StepCosts(0.010, 1e9, 0.001, 0.0)
    sim = simulate(costs, shape, Workload(clients=4, requests=4, input_len=1, output_len=5), seats=2)
    assert sim.ttft_mean_s == pytest.approx((0.011 + 0.011 + 0.070 + 0.070) / 4)
    assert sim.wall_time_s == pytest.approx(2 * (0.011 + 4 * 0.012))


def test_long_prompts_are_chunked_by_the_batch_budget() -> None:
    # 10,000 prompt tokens through a 4,096-token budget: 3 steps before the first token.
    shape = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0)
    costs = StepCosts(0.010, 1e9, 0.0, 0.0)
    sim = simulate(costs, shape, Workload(1, 1, 10_000, 2, max_num_batched_tokens=4096), seats=1)
    assert sim.ttft_mean_s == pytest.approx(0.030)
    assert sim.wall_time_s == pytest.approx(0.040)


def test_more_seats_more_throughput_less_per_stream() -> None:
    load = Workload(clients=16, requests=64, input_len=200, output_len=64)
    sims = [simulate(COSTS, DENSE, load, s) for s in (1, 4, 16)]
    agg = [s.aggregate_decode_tps for s in sims]
    per = [s.per_stream_decode_tps for s in sims]
    assert agg[0] < agg[1] < agg[2]
    assert per[0] > per[1] > per[2]
    assert sims[0].ttft_mean_s > sims[2].ttft_mean_s  # the queue drains through more seats


def test_bad_workloads_are_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        simulate(COSTS, DENSE, Workload(1, 1, 10, 0), seats=1)


def test_async_scheduling_fixes_a_step_before_the_one_it_follows_ends() -> None:
    """vLLM's batch queue of 2: step k is scheduled when step k - 2 returns (and step k - 1 is launched), so a request
    that reaches the engine core while step k - 1 runs waits for step k + 1. Two clients; the API server takes 5 ms
    a request, so A reaches the engine core at 5 ms, B at 10. A's prompt runs alone (10 ms of weights + 100 × 0.1 ms:
    20 ms, ending at 25); step 2 was fixed at 5 ms (right after step 1's launch, no CPU cost here): A's decode
    only, 10 ms. B's prompt goes in step 3 with A's last decode (20 ms): its first token at 55 ms, 60 at the client.
    Without async scheduling step 2 is fixed when step 1 ends and takes B: first token at 45 ms, 50 at the client."""
    shape = StepShape(10e6, 0.0, None, None, 0.0, 0.0, 0, 1.0, async_scheduling=True)
    costs = StepCosts(0.0, 1e9, 0.0, 0.0001, arrival_hop_s=0.005, api_per_request_s=0.005)
    load = Workload(clients=2, requests=2, input_len=100, output_len=3)
    sim = simulate(costs, shape, load, seats=2)
    assert sim.ttft_mean_s == pytest.approx((0.030 + 0.060) / 2)
    assert sim.queue_mean_s == pytest.approx((0.0 + 0.015) / 2)  # B: at the engine core at 10 ms, scheduled at 25
    assert sim.prefill_mean_s == pytest.approx((0.020 + 0.030) / 2)
    assert sim.wall_time_s == pytest.approx(0.075)  # B's two decodes after its first token: 55 + 2 × 10 ms
    sync = simulate(costs, StepShape(10e6, 0.0, None, None, 0.0, 0.0, 0, 1.0), load, seats=2)
    assert sync.ttft_mean_s == pytest.approx((0.030 + 0.050) / 2)


def test_requests_sent_together_reach_the_engine_one_after_another() -> None:
    """Eight clients at once, 1 ms of the API server each: the idle engine's first step holds the first request
    only (the next is 1 ms behind), the second step the seven that came while the first was readied and launched
    (its CPU path: 10 ms here)."""
    shape = StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0, async_scheduling=True)
    costs = StepCosts(0.010, 1e9, 0.0, 0.0001, arrival_hop_s=0.001, api_per_request_s=0.001)
    sim = simulate(costs, shape, Workload(clients=8, requests=8, input_len=100, output_len=1), seats=8)
    # Step 1 (A alone): max(10 ms prompt, 10 ms CPU) from 1 ms to 11 ms. Step 2, fixed at 1 + 10 = 11 ms with the
    # other seven (arrived at 2-8 ms): 700 × 0.1 = 70 ms, ending at 81 ms. A's first token is taken once step 2 is
    # launched (11 + 10 ms: the batch queue is filled first). Client TTFTs: 22 ms, and 82 ms for seven.
    assert sim.ttft_mean_s == pytest.approx((0.022 + 7 * 0.082) / 8)


def test_a_first_token_is_taken_once_the_next_step_is_launched() -> None:
    """With a batch queue the engine core schedules and launches the next step before it takes a step's output
    (EngineCore.step_with_batch_queue), so where that launch is longer than the step (eager: 100 kernels × 0.5 ms
    from the CPU) the first token waits for it. One client, 100 prompt tokens (10 ms of GPU), two tokens out: the
    prompt step is launch-bound, 1 + 50 ms, ending at 51 ms; the decode step is scheduled then and launched by
    102 ms, and only then is the first token taken: TTFT 102 ms (its prefill 102 ms), not 51. Without async
    scheduling the output is taken as the step ends (51 ms), then the decode step is scheduled."""
    costs = StepCosts(0.001, 1e9, 0.0, 0.0001, launch_s=0.0005)
    load = Workload(clients=1, requests=1, input_len=100, output_len=2)
    queued = simulate(costs, StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0, kernels_per_step=100, eager=True,
                                       async_scheduling=True), load, seats=1)
    assert queued.ttft_mean_s == pytest.approx(0.102)
    assert queued.prefill_mean_s == pytest.approx(0.102)
    assert queued.wall_time_s == pytest.approx(0.102)
    sync = simulate(costs, StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0, kernels_per_step=100, eager=True),
                    load, seats=1)
    assert sync.ttft_mean_s == pytest.approx(0.051)
    assert sync.wall_time_s == pytest.approx(0.102)
    # A step launched under a CUDA graph (the decode here, 1 token within the captured size 8) adds only its own
    # CPU path (1 ms): the first token at 52 ms.
    graphed = simulate(costs, StepShape(0.0, 0.0, None, None, 0.0, 0.0, 0, 1.0, kernels_per_step=100,
                                        graph_sizes=(8,), async_scheduling=True), load, seats=1)
    assert graphed.ttft_mean_s == pytest.approx(0.052)


def test_a_closed_loop_client_sends_its_next_request_once_the_api_server_streamed_it_the_last_token() -> None:
    """The API server streams each step's tokens (1 ms a token here) and ends each finished request (9 ms) in turn,
    and the client has them a hop (1 ms) after it is through: a finished request's successor is sent only then, and
    its TTFT counts from that send. Two clients, then a third request: A and B's prompts (30 ms from 1 ms), their
    first tokens at the clients at 31 + 2 + 1 = 34 ms; three decode steps of 10 ms end both at 61 ms, their last
    tokens reach the clients at 61 + 2 × 1 + 2 × 9 + 1 = 82 ms, when C is sent; it reaches the engine core at
    83 ms (a hop), its prompt runs to 103 ms and its first token is at the client at 105: TTFT 23 ms."""
    shape = StepShape(10e6, 0.0, None, None, 0.0, 0.0, 0, 1.0, async_scheduling=True)
    load = Workload(clients=2, requests=3, input_len=100, output_len=4)
    busy = StepCosts(0.0, 1e9, 0.0, 0.0001, arrival_hop_s=0.001, api_per_token_s=0.001, api_per_finish_s=0.009)
    sim = simulate(busy, shape, load, seats=2)
    assert sim.ttft_mean_s == pytest.approx((0.034 + 0.034 + 0.023) / 3)
    assert sim.wall_time_s == pytest.approx(0.133)  # C's three decode steps after 103 ms
    # Without the API server's work the round trip is two hops: C sent at 62 ms, the pass 20 ms shorter.
    idle = simulate(StepCosts(0.0, 1e9, 0.0, 0.0001, arrival_hop_s=0.001), shape, load, seats=2)
    assert idle.ttft_mean_s == pytest.approx((0.032 + 0.032 + 0.022) / 3)
    assert idle.wall_time_s == pytest.approx(0.113)
