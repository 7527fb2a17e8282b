"""SGLang 0.5.23's KV-pool sizing, reproduced exactly (pure: no I/O, no SGLang or torch import).

What SGLang computes at start-up, in the order it computes it (file / function of sglang 0.5.23):
1. Server-argument resolution (arg_groups/pipeline.py run_resolution_pipeline):
   handle_gpu_memory_settings (arg_groups/memory_hook.py) picks chunked_prefill_size and the decode
   CUDA-graph max_bs from nvidia-smi's memory.total (MiB), caps that max_bs at an explicit
   --max-running-requests, lists the decode batch sizes (cuda_graph_hook.generate_decode_cuda_graph_
   batch_sizes) and sets the default mem_fraction_static = round((gpu - reserved) / gpu, 3). Later the
   speculative hook (speculative_hook._handle_eagle_family, ...) sets --max-running-requests to 48 and
   picks (steps, topk, draft tokens); _mamba_radix_cache_resolution (overrides.py) picks the hybrid
   state-cache strategy.
2. Free memory before the weights (distributed/bootstrap.measure_pre_model_load_memory) and after them
   (kv_cache_configurator._profile_available_bytes): utils/common.get_available_gpu_memory, in GiB; with
   more than one rank it goes through a float32 all-reduce (MIN), which rounds the bytes to float32.
3. KVCacheConfigurator._profile_available_bytes: rest = after - before * (1 - mem_fraction_static);
   hybrid models take their linear-state pool out of it (_handle_max_mamba_cache).
4. DefaultPoolConfigurator.calculate_pool_sizes: tokens = bytes // cell_size, floored to the page size;
   _apply_token_constraints: min with --max-total-tokens.
5. resolve_max_num_reqs: the running-request limit, capped by the state slots on hybrid models.
6. CUDA graphs are captured for the decode batch sizes <= max_running_requests
   (runner/base_cuda_graph_runner.get_batch_sizes_to_capture).
Modules: sizing_types (constants, values), server_defaults (step 1, and step 4's cell sizes), this one (2-6).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from typing import Literal

from dspark.engines.sglang.options import SglangOptions
from dspark.engines.sglang.server_args import ResolvedArgs, SizingRun, resolve_args
from dspark.engines.sglang.server_defaults import (
    captured_batch_sizes,
    dsa_indexer_cell_size,
    full_attention_layers,
    linear_state_bytes,
    mha_cell_size,
    mla_cell_size,
)
from dspark.engines.sglang.sizing_types import (
    DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    EAGLE_FAMILY,
    ENGINE_VERSION,
    GIB,
    MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO,
    MAMBA_EXTRA_BUFFER_ARCHS,
    MAMBA_RADIX_CACHE_ARCHS,
    MIB,
    MambaPool,
    SglangCapacity,
    SglangRefusal,
)
from dspark.model.architecture import (
    AttentionLayer,
    Drafter,
    Layer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    dtype_bytes,
)

# --------------------------------------------------------------------------------------------------
# Free-memory readings and the pool
# --------------------------------------------------------------------------------------------------


def float32(value: int) -> float:
    """A byte count as the float32 tensor SGLang all-reduces it through (round to nearest, ties to even)."""
    return float(struct.unpack("f", struct.pack("f", float(value)))[0])


def available_gib(free_bytes: int, world_size: int) -> float:
    """get_available_gpu_memory(distributed=world_size > 1): free bytes / 2**30, via float32 when distributed."""
    value = float32(free_bytes) if world_size > 1 else float(free_bytes)
    return value / GIB


def resolve_max_num_reqs(
    token_capacity: int, context_len: int, requested: int | None, mamba_cap: int | None
) -> int:
    """KVCacheConfigurator.resolve_max_num_reqs (one DP worker)."""
    estimated = int(token_capacity / context_len * 512)
    estimated = max(min(estimated, 4096), 2048)
    if requested is not None:
        max_num_reqs = min(max(1, requested), token_capacity // 2)
    else:
        max_num_reqs = min(estimated, token_capacity // 2)
    if mamba_cap is not None:
        max_num_reqs = min(max_num_reqs, mamba_cap)
    return max_num_reqs



def _mamba_strategy(arch: ModelArchitecture, o: SglangOptions, page_size: int) -> tuple[str, bool]:
    """(strategy, overlap on): overrides._mamba_radix_cache_resolution."""
    overlap = not o.disable_overlap_schedule
    if o.disable_radix_cache:
        return "disabled", overlap
    strategy = o.mamba_radix_cache_strategy or "auto"
    if strategy == "auto" and arch.architecture in MAMBA_RADIX_CACHE_ARCHS:
        if (overlap or page_size > 1) and arch.architecture in MAMBA_EXTRA_BUFFER_ARCHS:
            return "extra_buffer", overlap
        return "no_buffer", False  # no_buffer forces disable_overlap_schedule
    return strategy, overlap


def mamba_ratio(strategy: str, overlap: bool) -> int:
    """_calculate_mamba_ratio: 1 without the radix cache, else 3 + tracking slots (2 with overlap, 1 lazy)."""
    if strategy == "disabled":
        return 1
    extra = 0
    if strategy == "extra_buffer_lazy":
        extra = 1
    elif strategy == "extra_buffer":
        extra = 2 if overlap else 1
    return MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO + extra


def _handle_max_mamba_cache(
    rest_gib: float, state: _State, o: SglangOptions, a: ResolvedArgs
) -> tuple[float, MambaPool]:
    """KVCacheConfigurator._handle_max_mamba_cache (no PP, DP attention or ReplaySSM): rest GiB after the pool."""
    per_req, ratio = state.per_req, state.ratio
    d = a.draft_tokens if a.algorithm is not None else None
    mrr = a.requested_mrr if a.requested_mrr is not None else 1
    intermediate_reqs = 0
    branch: Literal["max_mamba_cache_size", "disable_radix_cache", "auto"]
    if o.max_mamba_cache_size is not None:
        branch, k = "max_mamba_cache_size", o.max_mamba_cache_size
        if d is not None:
            intermediate_reqs = min(max(1, mrr), k // ratio) + 1
            rest_gib = rest_gib - (per_req * intermediate_reqs * d / GIB)
    elif o.disable_radix_cache and a.requested_mrr is not None:
        branch, k = "disable_radix_cache", max(1, a.requested_mrr)
        if d is not None:
            intermediate_reqs = k + 1
            rest_gib = rest_gib - (per_req * intermediate_reqs * d / GIB)
    else:
        branch = "auto"
        r = o.mamba_full_memory_ratio if o.mamba_full_memory_ratio is not None else DEFAULT_MAMBA_FULL_MEMORY_RATIO
        budget_bytes = rest_gib * r / (1 + r) * GIB
        if d is not None:
            # Joint solve: K slots + (capped requests + 1) * D intermediate states fit the mamba budget.
            k = int((budget_bytes - per_req * (1 + d) - 0) // (per_req * (1 + d / ratio) + 0))
            intermediate_reqs = min(max(1, mrr), k // ratio) + 1
            rest_gib = rest_gib - (per_req * intermediate_reqs * d / GIB)
        else:
            k = int((budget_bytes - 0 - per_req) // per_req)
    pool = MambaPool(
        per_req_bytes=per_req, conv_bytes=state.conv, ssm_bytes=state.ssm, conv_dtype="bfloat16",
        ssm_dtype=state.ssm_dtype, strategy=state.strategy, ratio=ratio, branch=branch, max_mamba_cache_size=k,
        state_bytes=(k + 1) * per_req, intermediate_requests=intermediate_reqs,
        intermediate_bytes=per_req * intermediate_reqs * (d or 0), slot_cap=k // ratio,
    )
    if k <= 0:
        return rest_gib, pool
    return rest_gib - ((k + 1) * (per_req + 0) + 0) / GIB, pool  # +1: the pool's padding slot


def _draft_cell(first: Layer, cell: int, n: int, draft_layers: int, a: ResolvedArgs, drafter: Drafter | None) -> int:
    """The cell with the draft's share: EAGLE scaling, or DFLASH's own draft KV (pool_configurator.py)."""
    if a.algorithm in EAGLE_FAMILY:
        if isinstance(first, MLALayer) and first.index_head_dim is not None:
            target_indexer = dsa_indexer_cell_size(first, n)
            draft_kv = int((cell - target_indexer) * draft_layers / n)
            return cell + draft_kv + dsa_indexer_cell_size(first, draft_layers)
        return cell + int(cell * draft_layers / n)
    # DFLASH: scale_kv_cell_size_per_token_for_dflash, with dflash_draft_cell_size_per_token when resolvable.
    attention = [layer for layer in (drafter.layers if drafter else ()) if isinstance(layer, AttentionLayer)]
    if attention and drafter is not None:
        d = attention[0]
        elem = a.kv_elem if a.kv_explicit else dtype_bytes(drafter.dtype or a.kv_dtype)
        return cell + max(1, d.num_kv_heads // a.tp) * (d.head_dim + d.v_dim) * draft_layers * elem
    return (cell * (n + draft_layers) + n - 1) // n


def _cell_size(arch: ModelArchitecture, a: ResolvedArgs, drafter: Drafter | None, run: SizingRun) -> tuple[int, int]:
    """(cell_size, full-attention layers): DefaultPoolConfigurator.__init__ + _compute_cell_size."""
    full = full_attention_layers(arch)
    if not full:
        raise ValueError("the model has no attention layer: SGLang's KV pool would be empty")
    first = full[0]
    if any(isinstance(layer, AttentionLayer) and layer.sliding_window is not None for layer in full):
        run.notes.append(
            "sliding-window layers: SGLang sizes a separate SWA pool (HybridSWAPoolConfigurator), not modelled; "
            "every layer is counted as full attention"
        )
    n = len(full)
    if isinstance(first, MLALayer):
        cell = mla_cell_size(first, n, a.kv_dtype, a.kv_elem, raw_layout=a.sm100)
    elif isinstance(first, AttentionLayer):
        cell = mha_cell_size(first, n, a.tp, a.kv_elem)
    else:  # pragma: no cover - full_attention_layers drops linear layers
        raise TypeError(type(first).__name__)
    if a.draft_layers is None or a.draft_layers <= 0:
        return cell, n
    return _draft_cell(first, cell, n, a.draft_layers, a, drafter), n


@dataclass(frozen=True)
class _State:
    """The hybrid model's per-request linear state and its radix-cache strategy."""

    per_req: int
    conv: int
    ssm: int
    ssm_dtype: str
    strategy: str
    ratio: int


def _state(arch: ModelArchitecture, o: SglangOptions, a: ResolvedArgs, run: SizingRun) -> _State | None:
    """The linear state per request (configs/mamba_utils.mamba_cache_per_req) and slots per request."""
    linear = [layer for layer in arch.layers if isinstance(layer, LinearStateLayer)]
    if not linear:
        return None
    ssm_dtype = o.mamba_ssm_dtype or linear[0].ssm_dtype or "float32"  # mamba2_state_dtype: env > config > fp32
    conv, ssm = linear_state_bytes(linear[0], a.tp, ssm_dtype=ssm_dtype)
    strategy, overlap = _mamba_strategy(arch, o, a.page_size)
    if arch.architecture not in MAMBA_RADIX_CACHE_ARCHS and not o.disable_radix_cache:
        run.notes.append(f"{arch.architecture}: SGLang's hybrid-cache strategy for it is not modelled (3 slots)")
    n = len(linear)
    return _State(per_req=(conv + ssm) * n, conv=conv * n, ssm=ssm * n, ssm_dtype=ssm_dtype, strategy=strategy,
                  ratio=mamba_ratio(strategy, overlap))


def _pool(
    o: SglangOptions, a: ResolvedArgs, state: _State | None, cell: int, free_before: int, free_after: int,
    run: SizingRun,
) -> dict[str, object]:
    """_profile_available_bytes -> calculate_pool_sizes -> _apply_token_constraints -> resolve_max_num_reqs."""
    world = a.tp * a.pp
    pre = available_gib(free_before, world)
    avail = available_gib(max(free_after, 0), world)
    rest = avail - pre * (1 - a.fraction) - a.mm_reservation_gib
    out: dict[str, object] = {"pre_model_load_gib": pre, "available_gib": avail,
                              "footprint_bytes": int(pre * a.fraction * GIB)}
    mamba: MambaPool | None = None
    if state is not None:
        rest, mamba = _handle_max_mamba_cache(rest, state, o, a)
        out["mamba"] = mamba
        if mamba.max_mamba_cache_size <= 0:
            run.fatal(
                "sglang-mamba-cache-too-small",
                "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
                f"max_mamba_cache_size={mamba.max_mamba_cache_size} (total_rest_memory={rest:.2f} GB, "
                f"mamba_cache_per_req={state.per_req / MIB:.2f} MB). Try: (1) reduce --max-running-requests, (2) "
                "increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs "
                "with more memory.",
            )
    out["rest_memory_gib"] = rest
    if not run.stopped and rest <= 0:
        minimum = 1 - avail / pre
        run.fatal(
            "sglang-weights-leave-no-kv",
            f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={a.fraction}. "
            f"Raise --mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} (minimum viable = 1 - "
            f"available/pre = {minimum:.4f}). If using speculative decoding, draft weights are now counted.",
        )
    if run.stopped:
        return out
    budget = int(rest * GIB)
    profiled = budget // cell // a.page_size * a.page_size
    out.update(kv_budget_bytes=budget, profiled_tokens=profiled)
    if profiled <= 0:
        run.fatal("sglang-not-enough-memory", "Not enough memory. Please try to increase --mem-fraction-static.")
        return out
    tokens = profiled
    if o.max_total_tokens is not None and o.max_total_tokens < profiled:
        tokens = o.max_total_tokens // a.page_size * a.page_size
    elif o.max_total_tokens is not None and o.max_total_tokens > profiled:
        run.notes.append(f"max_total_tokens={o.max_total_tokens} is larger than the profiled value {profiled}. "
                         "Use the profiled value instead.")
    if tokens <= 0:
        run.fatal("sglang-not-enough-memory", "Not enough memory. Please try to increase --mem-fraction-static.")
        return out
    out.update(max_total_num_tokens=tokens, pinned=tokens != profiled)
    _seats(out, tokens, a, mamba, run)
    return out


def _seats(out: dict[str, object], tokens: int, a: ResolvedArgs, mamba: MambaPool | None, run: SizingRun) -> None:
    """resolve_max_num_reqs, its errors and warnings, and the CUDA graphs captured for it."""
    mrr = resolve_max_num_reqs(tokens, a.context_len, a.requested_mrr, mamba.slot_cap if mamba else None)
    if mamba is not None and mrr <= 0:
        run.fatal(
            "sglang-mamba-no-requests",
            "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            f"max_mamba_cache_size={mamba.max_mamba_cache_size}, mamba_ratio={mamba.ratio}, resulting "
            f"max_num_reqs={mrr}. Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
            "or (3) use GPUs with more memory.",
        )
        return
    uncapped = resolve_max_num_reqs(tokens, a.context_len, a.requested_mrr, None)
    if mamba is not None and mrr < uncapped:
        run.notes.append(
            f"max_running_requests is capped to {mrr} by the mamba state cache "
            f"(max_mamba_cache_size={mamba.max_mamba_cache_size}, {mamba.ratio} state slots per request)"
        )
    elif a.requested_mrr is not None and mrr < a.requested_mrr:
        run.notes.append(f"max_running_requests was reduced from the requested {a.requested_mrr} to {mrr} "
                         "(per dp worker) due to the available KV cache capacity.")
    out["max_running_requests"] = mrr
    out["cuda_graph_capture_bs"] = captured_batch_sizes(a.decode_bs, mrr) if a.graphs_on else ()


def compute_sglang_capacity(
    arch: ModelArchitecture,
    options: SglangOptions,
    *,
    gpu_capacity_bytes: int | None,
    free_before_load_bytes: int | None,
    weights_per_gpu_bytes: int | None,
    drafter: Drafter | None = None,
    engine_version: str = ENGINE_VERSION,
    free_after_load_bytes: int | None = None,
    gpu_capacity_mib: float | None = None,
    compute_capability: tuple[int, int] | None = None,
    kv_cache_memory_bytes: int | None = None,
) -> SglangCapacity:
    """SGLang's own sizing for this launch: pool, seats, graphs and the errors it would raise (per GPU).

    kv_cache_memory_bytes: a KV pin in bytes (dspark's --kv-cache-memory). SGLang pins its pool in tokens, so
    the pin becomes the tokens it buys, bytes // cell size, launched as --max-total-tokens (kv_pin_tokens).

    gpu_capacity_bytes: the device total nvidia-smi reports (floored to MiB); gpu_capacity_mib overrides it.
    free_before_load_bytes: free memory when SGLang starts (MemAvailable on unified-memory parts).
    free_after_load_bytes: free memory once weights (and draft weights) are loaded; default before - weights.
    compute_capability: decides SM100's attention backend, hence the page size (None: Hopper-like, page 1).
    """
    run = SizingRun()
    o = options
    for flag in o.ambiguous:
        run.refusals.append(SglangRefusal(
            "sglang-ambiguous-flag", f"argparse: ambiguous option: {flag} could match {flag}-decode, {flag}-prefill"
        ))
    if engine_version != ENGINE_VERSION:
        run.notes.append(f"modelled on SGLang {ENGINE_VERSION}; asked for {engine_version}")
    if (o.pp_size or 1) > 1:
        run.notes.append("pipeline parallel: SGLang sizes each stage from its own layers; not modelled (all layers)")
    if gpu_capacity_mib is None and gpu_capacity_bytes is not None:
        gpu_capacity_mib = float(gpu_capacity_bytes // MIB)
    a = resolve_args(arch, o, gpu_capacity_mib, drafter, run, compute_capability)
    cell, full_layers = _cell_size(arch, a, drafter, run)
    if kv_cache_memory_bytes is not None:
        o = kv_pin_tokens(o, kv_cache_memory_bytes, cell, arch.is_hybrid, run)
    state = _state(arch, o, a, run)
    values: dict[str, object] = {}
    if not run.stopped:
        if free_before_load_bytes is None:
            values = _pinned_without_memory(o, a, run)
        else:
            if free_after_load_bytes is None:
                if weights_per_gpu_bytes is None:
                    run.assumptions.append("weights unknown: counted as 0 bytes")
                free_after_load_bytes = free_before_load_bytes - (weights_per_gpu_bytes or 0)
            run.assumptions.append(f"free memory {free_before_load_bytes:,} B before the weights and "
                                   f"{free_after_load_bytes:,} B after them")
            values = _pool(o, a, state, cell, free_before_load_bytes, free_after_load_bytes, run)
    fields_: dict[str, object] = {
        "pre_model_load_gib": None, "available_gib": None, "rest_memory_gib": None, "kv_budget_bytes": None,
        "mamba": None, "profiled_tokens": None, "max_total_num_tokens": None, "pinned": False,
        "max_running_requests": None, "cuda_graph_capture_bs": (), "footprint_bytes": None,
    }
    fields_.update(values)
    if kv_cache_memory_bytes is not None and fields_["pinned"]:
        fields_["kv_budget_bytes"] = kv_cache_memory_bytes  # the budget the user pinned, not the profiled one
    return SglangCapacity(
        engine_version=engine_version, context_len=a.context_len, tp_size=a.tp, pp_size=a.pp,
        page_size=a.page_size, kv_cache_dtype=a.kv_dtype, cell_size=cell, full_attention_layers=full_layers,
        draft_kv_layers=a.draft_layers, mem_fraction_static=a.fraction, mem_fraction_static_source=a.fraction_source,
        reserved_mem_mib=a.reserved, gpu_capacity_mib=a.gpu_mib, chunked_prefill_size=a.chunked,
        speculative_algorithm=a.algorithm, speculative_num_steps=a.steps, speculative_eagle_topk=a.topk,
        speculative_num_draft_tokens=a.draft_tokens, requested_max_running_requests=a.requested_mrr,
        decode_graph_max_bs=a.decode_max_bs if a.graphs_on else None,
        decode_graph_bs=a.decode_bs,
        prefill_graph=a.prefill_graph,
        refusals=tuple(run.refusals), notes=tuple(run.notes), assumptions=tuple(run.assumptions),
        moe=(arch.moe.num_experts, arch.moe.top_k) if arch.moe is not None else None,
        free_before_load_bytes=free_before_load_bytes, free_after_load_bytes=free_after_load_bytes,
        compute_capability=compute_capability, schedule_policy=o.schedule_policy,
        enable_mixed_chunk=bool(o.enable_mixed_chunk), max_prefill_tokens=o.max_prefill_tokens,
        radix_cache=not o.disable_radix_cache,
        **fields_,  # type: ignore[arg-type]
    )


def kv_pin_tokens(o: SglangOptions, pin_bytes: int, cell: int, hybrid: bool, run: SizingRun) -> SglangOptions:
    """The options with a byte pin turned into SGLang's own: --max-total-tokens = pin_bytes // cell_size."""
    if o.max_total_tokens is not None:  # settings let only one pin through; an engine flag would be a second
        raise ValueError("both a byte pin and --max-total-tokens reached SGLang's sizing")
    tokens = pin_bytes // cell
    if tokens < 1:
        run.fatal("sglang-not-enough-memory",
                  f"--kv-cache-memory {pin_bytes:,} B is less than one token's KV ({cell:,} B per token)")
    run.notes.append(
        f"KV pin {pin_bytes:,} B = {tokens:,} tokens at {cell:,} B per token (SGLang's cell size): SGLang pins its "
        f"pool in tokens, so the launch passes --max-total-tokens {tokens:,}"
        + ("; its linear-state pool is sized apart, from --mem-fraction-static" if hybrid else "")
    )
    return replace(o, max_total_tokens=tokens)


def _pinned_without_memory(o: SglangOptions, a: ResolvedArgs, run: SizingRun) -> dict[str, object]:
    """No free-memory figure: only --max-total-tokens can name the pool (SGLang keeps min(it, profiled))."""
    if o.max_total_tokens is None:
        run.assumptions.append("free GPU memory unknown: the pool cannot be computed")
        return {}
    run.assumptions.append("free GPU memory unknown: pool taken as --max-total-tokens (SGLang keeps the smaller "
                           "of it and the profiled pool)")
    tokens = o.max_total_tokens // a.page_size * a.page_size
    out: dict[str, object] = {"max_total_num_tokens": tokens, "pinned": True}
    _seats(out, tokens, a, None, run)
    return out
