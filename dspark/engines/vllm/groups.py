"""vLLM KV-cache groups, bytes per block, the admission check, auto-fit and num_blocks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from dspark.engines.vllm.kv_types import KVGroup, LayerSpec, VllmNotModelledError, VllmRefusal, cdiv, format_gib
from dspark.engines.vllm.options import VllmOptions
from dspark.engines.vllm.resolve import Resolved

# ---------------------------------------------------------------------------------------------
# 4. Groups and blocks (kv_cache_utils.get_kv_cache_groups, get_kv_cache_config_from_groups)
# ---------------------------------------------------------------------------------------------


def _type_key(spec: LayerSpec) -> tuple[object, ...]:
    """UniformTypeKVCacheSpecs.is_uniform_type: same registry base type (MLA counts as full attention)."""
    if spec.kind in ("full", "mla", "indexer"):
        return ("full",)
    if spec.kind == "sliding":
        return ("sliding", spec.sliding_window)
    return ("mamba", spec.page_bytes, spec.mamba_blocks_per_request)


def promote_sliding(specs: list[LayerSpec], block: int) -> list[LayerSpec]:
    """unify_hybrid_kv_cache_specs (--disable-hybrid-kv-cache-manager): sliding layers allocate as full."""
    kinds = {s.kind for s in specs}
    if "sliding" not in kinds or not kinds & {"full", "mla"}:
        return specs
    out = []
    for spec in specs:
        if spec.kind != "sliding":
            out.append(spec)
            continue
        page = block * spec.per_token_bytes
        out.append(
            replace(
                spec,
                kind="full",
                block_size=block,
                page_bytes=page,
                unpadded_page_bytes=page,
                sliding_window=None,
                identity=("full", block, *spec.identity[3:]),
            )
        )
    return out


def _unify_pages(specs: list[LayerSpec]) -> list[LayerSpec]:
    """unify_kv_cache_spec_page_size: smaller attention pages grow their block; mamba pages are padded."""
    max_page = max(s.page_bytes for s in specs)
    out = []
    for s in specs:
        if s.page_bytes == max_page:
            out.append(s)
        elif s.kind == "mamba":
            out.append(replace(s, page_bytes=max_page, identity=("mamba", max_page, *s.identity[2:])))
        elif max_page % s.page_bytes == 0:
            ratio = max_page // s.page_bytes
            new_block = s.block_size * ratio
            out.append(
                replace(
                    s,
                    block_size=new_block,
                    page_bytes=max_page,
                    unpadded_page_bytes=max_page,
                    identity=(s.identity[0], new_block, *s.identity[2:]),
                )
            )
        elif s.kind in ("full", "sliding"):
            out.append(replace(s, page_bytes=max_page, identity=(*s.identity, "padded", max_page)))
        else:
            raise VllmNotModelledError(
                f"layer {s.name}: page size {s.page_bytes} does not divide {max_page} and MLA pages cannot be "
                "padded (vLLM falls back to full allocation or fails here)"
            )
    return out


def _group_uniform_page(specs: list[LayerSpec]) -> list[tuple[list[LayerSpec], int]]:
    """_get_kv_cache_groups_uniform_page_size: bucket equal specs, split into groups of group_size layers."""
    buckets: dict[tuple[object, ...], list[LayerSpec]] = {}
    for s in specs:
        buckets.setdefault(s.identity, []).append(s)
    sizes = [len(b) for b in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)  # e.g. 12 sliding + 13 full -> groups of 13, one padding layer
    groups: list[tuple[list[LayerSpec], int]] = []
    for bucket in buckets.values():
        n = cdiv(len(bucket), group_size)
        for i in range(n):
            members = bucket[i::n]
            groups.append((members, group_size - len(members)))
    return groups


def _group(
    specs: Sequence[LayerSpec], padding: int, length: int, in_flight: int, *, uniform_type: bool = False
) -> KVGroup:
    """A KVGroupSpec: its layers, block, page, and the blocks one request of `length` tokens takes."""
    first = specs[0]
    if uniform_type:
        # UniformTypeKVCacheSpecs: a block costs every layer's page; a request takes the most any layer needs.
        per_request = max(s.blocks_per_request(length, in_flight) for s in specs)
        width = sum(s.page_bytes for s in specs)
    else:
        per_request = first.blocks_per_request(length, in_flight)
        width = first.page_bytes * len(specs)
    return KVGroup(
        kind=first.kind,
        layers=tuple(s.name for s in specs),
        padding_layers=padding,
        block_size=first.block_size,
        page_bytes=first.page_bytes,
        bytes_per_block=width,
        blocks_per_request=per_request,
        uniform_type=uniform_type,
    )


def _build_groups(specs: list[LayerSpec], max_in_flight: int, max_model_len: int) -> list[KVGroup]:
    """get_kv_cache_groups: uniform spec, uniform type, or uniform page size (layer-outer layouts)."""
    if len({s.identity for s in specs}) == 1:
        return [_group(specs, 0, max_model_len, max_in_flight)]
    if len({s.block_size for s in specs}) == 1 and len({_type_key(s) for s in specs}) == 1:
        return [_group(specs, 0, max_model_len, max_in_flight, uniform_type=True)]
    return [
        _group(members, padding, max_model_len, max_in_flight)
        for members, padding in _group_uniform_page(_unify_pages(specs))
    ]


def pp_stage_of(layer_name: str, num_layers: int, pp: int) -> int:
    """vllm.distributed.utils.get_pp_indices: even split, remainder on the middle/earlier stages."""
    if pp == 1:
        return 0
    if not layer_name.startswith("layers."):
        return pp - 1  # drafter layers run on the last stage
    index = int(layer_name.split(".")[1])
    partitions = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        partitions[-i] += 1
    start = 0
    for stage, count in enumerate(partitions):
        if index < start + count:
            return stage
        start += count
    return pp - 1


def _bytes_per_block(groups: Sequence[KVGroup], specs_by_name: Mapping[str, LayerSpec], names: set[str]) -> int:
    """_get_kv_cache_bytes_per_block (layer-outer layout): the widest group's pages held by one worker.

    Padding layers are not real layers: a padded group is narrower, the widest is group_size pages.
    """
    widest = 0
    for g in groups:
        held = [n for n in g.layers if n in names]
        if not held:
            continue
        width = sum(specs_by_name[n].page_bytes for n in held) if g.uniform_type else g.page_bytes * len(held)
        widest = max(widest, width)
    return widest


# ---------------------------------------------------------------------------------------------
# 6. The admission check, auto-fit and num_blocks (get_kv_cache_configs)
# ---------------------------------------------------------------------------------------------


def _needed(groups: Sequence[KVGroup], bytes_per_block: int) -> int:
    """_max_memory_usage_bytes_from_groups: bytes_per_block x blocks one request takes over all groups."""
    return bytes_per_block * sum(g.blocks_per_request for g in groups)


def _fit_search(fits: Callable[[int], bool], upper: int) -> int:
    """The engine's binary search (_estimate_max_model_len_from_groups): largest length in [1, upper] that fits."""
    if not fits(1):
        return 0
    left, right, result = 1, upper, 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            result, left = mid, mid + 1
        else:
            right = mid - 1
    return result


class _Fit(NamedTuple):
    """get_kv_cache_configs' outcome: final length, groups, block bytes, num_blocks and refusals."""

    max_model_len: int
    groups: list[KVGroup]
    bytes_per_block: int
    num_blocks: int
    refusals: list[VllmRefusal]
    notes: list[str]


def fit_blocks(
    specs: list[LayerSpec], r: Resolved, options: VllmOptions, budget: int, max_in_flight: int, num_layers: int
) -> _Fit:
    """Groups, bytes per block per PP worker, auto-fit, the admission check, num_blocks (min over workers)."""
    refusals: list[VllmRefusal] = []
    notes: list[str] = []
    max_model_len = r.max_model_len
    groups = _build_groups(specs, max_in_flight, max_model_len)
    by_name = {s.name: s for s in specs}
    workers = [{s.name for s in specs if pp_stage_of(s.name, num_layers, r.pp) == stage} for stage in range(r.pp)]
    # Per worker (PP stage): its widest group; every group's blocks count for every worker
    # (_project_kv_cache_groups_to_worker keeps empty groups, _max_memory_usage_bytes_from_groups sums them).
    bpb_workers = [_bytes_per_block(groups, by_name, names) for names in workers]
    memories = [budget] * r.pp
    if options.num_gpu_blocks_override is not None:
        memories = [options.num_gpu_blocks_override * bpb for bpb in bpb_workers]

    def blocks_at(length: int) -> int:
        return sum(g.blocks_per_request for g in _build_groups(specs, max_in_flight, length))

    # The null block is held back before the admission check and auto-fit (get_kv_cache_configs).
    check_memory = [memory - bpb for memory, bpb in zip(memories, bpb_workers, strict=True)]
    if r.auto_fit:
        fitted = min(
            _fit_search(_fits(blocks_at, bpb, memory), max_model_len)
            for bpb, memory in zip(bpb_workers, check_memory, strict=True)
        )
        if fitted <= 0:
            refusals.append(
                VllmRefusal(
                    "auto_fit_failed",
                    "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. "
                    "Try increasing `gpu_memory_utilization`.",
                )
            )
        elif fitted < max_model_len:
            notes.append(f"Auto-fit max_model_len: reduced from {max_model_len} to {fitted}")
            max_model_len = fitted
            groups = _build_groups(specs, max_in_flight, max_model_len)
        else:
            notes.append(f"Auto-fit max_model_len: full model context length {max_model_len} fits")
    for bpb, memory in zip(bpb_workers, check_memory, strict=True):
        refusal = _check_enough_memory(
            memory, bpb * blocks_at(max_model_len), max_model_len, _estimator(blocks_at, bpb, max_model_len)
        )
        if refusal is not None:
            refusals.append(refusal)
            break
    num_blocks = min(max(0, memory) // bpb for memory, bpb in zip(memories, bpb_workers, strict=True))
    return _Fit(max_model_len, groups, max(bpb_workers), num_blocks, refusals, notes)


def _estimator(blocks_at: Callable[[int], int], bytes_per_block: int, upper: int) -> Callable[[int], int]:
    """estimate_max_model_len for the refusal message: the longest request that fits in `available`."""
    return lambda available: _fit_search(_fits(blocks_at, bytes_per_block, available), upper)


def _fits(blocks_at: Callable[[int], int], bytes_per_block: int, memory: int) -> Callable[[int], bool]:
    """A predicate for the binary search: one request of this length fits in memory."""
    return lambda length: bytes_per_block * blocks_at(length) <= memory


def _check_enough_memory(
    available: int, needed: int, max_model_len: int, estimate: Callable[[int], int]
) -> VllmRefusal | None:
    """_check_enough_kv_cache_memory: no memory at all, or one max-length request does not fit."""
    if available <= 0:
        return VllmRefusal(
            "no_kv_memory",
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
            "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
            "details.",
        )
    if needed <= available:
        return None
    estimated = estimate(available)
    hint = f"Based on the available memory, the estimated maximum model length is {estimated}. " if estimated else ""
    return VllmRefusal(
        "max_model_len_does_not_fit",
        f"To serve at least one request with the model's max seq len ({max_model_len}), ({format_gib(needed)} GiB "
        f"KV cache is needed, which is larger than the available KV cache memory ({format_gib(available)} GiB). "
        f"{hint}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or "
        "decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        suggested_max_model_len=estimated or None,
    )
