"""The step-time model's arithmetic: what one step costs, term by term, from the flat cost table; stdlib only.

The one copy of it. dspark.perf.step builds the table (StepCosts, StepShape -> cost_table) and documents each
term; the advisor's model evaluates these functions through it, and the scheduler replay, in the engine's
interpreter, imports them here as dspark_inside.step_cost. dspark's side imports this very file as
dspark._inside_root.dspark_inside.step_cost (a folder of the dspark package: it ships in the wheel), so this
module imports nothing but the standard library: nothing of dspark, nothing of dspark_inside.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any


def _rate(cost: Mapping[str, Any], key: str) -> float:
    value = float(cost.get(key) or 0.0)
    return value if value > 0 else math.inf


def _linear(cost: Mapping[str, Any], gemm_tokens: float, sampled: float, experts: float, top_k: float
            ) -> tuple[float, float]:
    """(the linear layers' compute seconds, the unhidden part of their dense GEMMs' tensor-core time): the lm_head
    for the sampled positions, the dense GEMMs and the routed experts' for gemm_tokens (padded) tokens, each at the
    rate its token count reaches; a weight-bound GEMM adds gemm_unhidden of its FLOPs at the full rate to its
    weight stream (dspark.perf.step)."""
    half = max(float(cost.get("gemm_half_tokens") or 0.0), 1e-9)
    flops = _rate(cost, "flops_per_s")
    dense = float(cost.get("logits_flops_per_row") or 0.0) * sampled
    compute = dense / (flops * sampled / (sampled + half))
    if gemm_tokens > 0:
        compute += float(cost.get("dense_flops_per_token") or 0.0) * gemm_tokens / (
            flops * gemm_tokens / (gemm_tokens + half))
        dense += float(cost.get("dense_flops_per_token") or 0.0) * gemm_tokens
        if experts and top_k:
            per_expert = max(gemm_tokens * top_k / experts, 1.0)
            expert_rate = float(cost.get("expert_flops_per_s") or 0.0) or flops  # the fused-MoE kernel's own
            compute += float(cost.get("expert_flops_per_token") or 0.0) * gemm_tokens / (
                expert_rate * per_expert / (per_expert + half))
    return compute, float(cost.get("gemm_unhidden") or 0.0) * dense / flops


def step_terms(cost: Mapping[str, Any], rows: int, context: float, prefill: int,
               pairs: float | None = None) -> dict[str, float]:
    """Seconds of each op class of one step (dspark.perf.step's docstring); `pairs`: prompt (query, key) pairs.

    rows: decode rows; context: tokens of context the step reads (decode rows' and prompt chunks' prefixes);
    prefill: prompt tokens computed; pairs None: estimated from the step (a chunk against itself, plus the whole
    context as its prefix when no row decodes).
    """
    q = float(cost.get("query_len") or 1.0)
    tokens = rows * q + prefill
    if tokens <= 0:
        return {}
    sizes: Sequence[int] = cost.get("graph_sizes") or ()
    eager = bool(cost.get("eager"))
    padded = float(tokens)
    if sizes and not eager and tokens <= sizes[-1]:
        padded = float(sizes[bisect.bisect_left(sizes, math.ceil(tokens))])
    bw = _rate(cost, "bandwidth_bytes_per_s")
    experts, top_k = float(cost.get("num_experts") or 0), float(cost.get("top_k") or 0)
    spread = float(cost.get("routing_spread") or 1.0)  # tokens after the first that route independently
    coverage = 1.0 - (1.0 - top_k / experts) ** (1.0 + max(tokens - 1.0, 0.0) * spread) if experts and top_k else 1.0
    observed = float(cost.get("prefill_per_token_s") or 0.0) if cost.get("prefill_observed") else 0.0
    gemm_tokens = padded - prefill if observed else padded  # a measured prompt cost replaces its compute
    sampled = rows * q + (1 if prefill else 0)  # the logits: every verified position, a prompt's last token
    expert_bw = float(cost.get("expert_bandwidth_bytes_per_s") or 0.0) or bw  # the fused-MoE kernel's own reads
    small_tile = float(cost.get("expert_small_tile_tokens") or 0.0)  # tokens per expert of its smallest tile
    if experts and top_k and small_tile and tokens * top_k / experts <= small_tile:
        expert_bw = float(cost.get("expert_small_tile_bandwidth_bytes_per_s") or 0.0) or expert_bw
    weights = (float(cost.get("dense_weight_bytes") or 0.0) / bw
               + float(cost.get("expert_weight_bytes") or 0.0) * coverage / expert_bw)
    compute, unhidden = _linear(cost, gemm_tokens, sampled, experts, top_k)
    weights += unhidden
    if pairs is None:
        pairs = prefill * prefill / 2.0 + (prefill * context if rows == 0 else 0.0)
    per_pair = float(cost.get("attention_flops_per_pair") or 0.0)
    attn_flops = per_pair * (q * context * (1 if rows else 0) + pairs)
    kv_bw = float(cost.get("kv_bandwidth_bytes_per_s") or 0.0) or bw
    kv = (float(cost.get("kv_bytes_per_token") or 0.0) * context
          + float(cost.get("state_bytes_per_seat") or 0.0) * rows) / kv_bw
    terms = {
        "gemm": max(weights, compute),
        "attention": max(kv, attn_flops / _rate(cost, "attention_flops_per_s")),
        "elementwise": float(cost.get("activation_bytes_per_token") or 0.0) * tokens / bw,
        "kernels": float(cost.get("kernels_per_step") or 0.0) * float(cost.get("kernel_floor_s") or 0.0),
        "sampler": float(cost.get("per_token_s") or 0.0) * sampled,
        "prefill_observed": observed * prefill,
    }
    tp = float(cost.get("tp") or 1.0)
    if tp > 1:
        ring = 2.0 * (tp - 1.0) / tp
        terms["collectives"] = float(cost.get("allreduces_per_step") or 0.0) * (
            float(cost.get("collective_latency_s") or 0.0)
            + float(cost.get("allreduce_bytes_per_token") or 0.0) * tokens * ring / _rate(cost, "link_bytes_per_s"))
    gpu = math.fsum(terms.values())
    # Without a captured graph (eager, or a batch above the largest captured size) each kernel is launched alone.
    ungraphed = eager or bool(sizes and tokens > sizes[-1])
    launches = float(cost.get("launches_per_step") or cost.get("kernels_per_step") or 0.0)
    launch = launches * float(cost.get("launch_s") or 0.0) if ungraphed else 0.0
    cpu = float(cost.get("fixed_s") or 0.0) + float(cost.get("cpu_per_row_s") or 0.0) * (rows + (1 if prefill else 0))
    if cost.get("async_scheduling"):
        # The CPU schedules the next step while the GPU runs this one; without graphs it also launches this
        # step's kernels one by one, so its path is both: the step is the longer of the two paths.
        terms["cpu"] = max(0.0, cpu - gpu)
        terms["launch_gap"] = max(0.0, cpu + launch - gpu) - terms["cpu"]
    else:
        # Schedule and prepare, then launch: the GPU runs the kernels as they come (the slower of the two).
        terms["cpu"] = cpu
        terms["launch_gap"] = max(0.0, launch - gpu)
    return terms


def cpu_seconds(cost: Mapping[str, Any], rows: int, prefill: int) -> float:
    """The engine's CPU path of one step, as step_terms prices it: schedule, prepare the inputs and, without a
    captured graph, launch each kernel. The engine core schedules the next step only after this (one thread)."""
    tokens = rows * float(cost.get("query_len") or 1.0) + prefill
    sizes: Sequence[int] = cost.get("graph_sizes") or ()
    ungraphed = bool(cost.get("eager")) or bool(sizes and tokens > sizes[-1])
    launches = float(cost.get("launches_per_step") or cost.get("kernels_per_step") or 0.0)
    launch = launches * float(cost.get("launch_s") or 0.0) if ungraphed else 0.0
    return (float(cost.get("fixed_s") or 0.0) + float(cost.get("cpu_per_row_s") or 0.0) * (rows + (1 if prefill else 0))
            + launch)


def step_seconds(cost: Mapping[str, Any], rows: int, context: float, prefill: int,
                 pairs: float | None = None) -> float:
    """Seconds of one step: the sum of step_terms."""
    return math.fsum(step_terms(cost, rows, context, prefill, pairs).values())
