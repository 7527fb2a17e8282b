"""DeepSeek-V4's caches and groups (dspark.engines.vllm.deepseek_v4) as this engine's specs and groups,
with the engine's null-block reserve, admission check and auto-fit (get_kv_cache_configs)."""

from __future__ import annotations

from dspark.engines.vllm import deepseek_v4
from dspark.engines.vllm.deepseek_v4_detect import DeepseekV4NotModelledError
from dspark.engines.vllm.groups import _check_enough_memory as check_enough_memory
from dspark.engines.vllm.groups import _Fit as Fit
from dspark.engines.vllm.groups import _fit_search as fit_search
from dspark.engines.vllm.kv_types import EAGLE_METHODS, KVGroup, LayerSpec, SpecKind, VllmNotModelledError, VllmRefusal
from dspark.engines.vllm.options import VllmOptions
from dspark.engines.vllm.resolve import Resolved
from dspark.model.architecture import ModelArchitecture


def _lookahead_retained(arch: ModelArchitecture, r: Resolved) -> int:
    """get_kv_cache_configs: sliding layers retain num_prefill_lookahead_tokens - 1 extra tokens."""
    if r.spec_method not in EAGLE_METHODS:
        return 0
    multi_mtp = r.spec_method == "mtp" and min(len(arch.mtp_layers) or 1, r.num_spec) > 1
    return max(0, (r.num_spec if multi_mtp else 1) - 1)


def deepseek_v4_fit(
    arch: ModelArchitecture, r: Resolved, options: VllmOptions, budget: int, in_flight: int, version: str
) -> tuple[list[LayerSpec], Fit, int]:
    """DeepSeek-V4's caches and block-outermost groups (dspark.engines.vllm.deepseek_v4) as this engine's
    specs and groups, with the engine's null-block reserve, admission check and auto-fit."""
    drafting = len(r.drafter_layers) if r.spec_method == "mtp" else 0
    try:
        retained = _lookahead_retained(arch, r)
        v4_specs = deepseek_v4.layer_specs(
            arch, engine_version=version, drafting_mtp_layers=drafting, extra_retained_tokens=retained
        )
        v4_groups = deepseek_v4.pack_groups(v4_specs)
    except DeepseekV4NotModelledError as exc:
        raise VllmNotModelledError(exc.message, hint=exc.hint) from None
    kinds: dict[str, SpecKind] = {"window": "sliding", "state": "sliding", "compressed": "mla", "indexer": "indexer"}
    specs = [
        LayerSpec(
            name=s.name,
            kind=kinds[s.role],
            block_size=s.block_size,
            page_bytes=s.page_bytes,
            unpadded_page_bytes=s.page_bytes,
            sliding_window=s.sliding_window,
            extra_retained_tokens=s.extra_retained_tokens,
            identity=(s.role, s.block_size, s.page_bytes),
        )
        for s in v4_specs
    ]

    def plan_at(length: int) -> deepseek_v4.V4Plan:
        return deepseek_v4.plan(
            v4_groups, engine_version=version, budget_bytes=budget, max_model_len=length,
            max_in_flight_tokens=in_flight, num_gpu_blocks_override=options.num_gpu_blocks_override,
        )

    max_model_len, notes, refusals = r.max_model_len, [], []
    bytes_per_block = plan_at(max_model_len).bytes_per_block
    memory = budget if options.num_gpu_blocks_override is None else options.num_gpu_blocks_override * bytes_per_block
    check_memory = memory - bytes_per_block  # the null block, held back before the checks

    def fits(length: int) -> bool:
        return plan_at(length).needed_bytes <= check_memory

    if r.auto_fit:
        fitted = fit_search(fits, max_model_len)
        if fitted <= 0:
            refusals.append(VllmRefusal(
                "auto_fit_failed", "Cannot auto-fit max_model_len: not enough GPU memory available to serve even "
                "a single token. Try increasing `gpu_memory_utilization`."))
        elif fitted < max_model_len:
            notes.append(f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted}")
            max_model_len = fitted
    final = plan_at(max_model_len)
    refusal = check_enough_memory(
        check_memory, final.needed_bytes, max_model_len, lambda available: fit_search(
            lambda n: plan_at(n).needed_bytes <= available, max_model_len)
    )
    refusals += [refusal] if refusal is not None else []
    by_name = {s.name: s for s in specs}
    groups = [
        KVGroup(
            kind=by_name[g.layers[0]].kind,
            layers=g.layers,
            padding_layers=0,
            block_size=g.block_size,
            page_bytes=max(s.page_bytes for s in g.specs),
            bytes_per_block=g.bytes_per_block,
            blocks_per_request=g.blocks_per_request(max_model_len, in_flight),
            uniform_type=True,
        )
        for g in final.groups
    ]
    fit = Fit(max_model_len, groups, final.bytes_per_block, final.num_blocks, refusals, notes)
    return specs, fit, deepseek_v4.context_bytes_per_token(final.groups)
