"""Run inside a vLLM interpreter: DeepSeek-V4's KV-cache specs and plan, by the engine's own code.

Reads {"cases": [request, ...]} on stdin; prints one line per case: PREFIX + JSON (with the case's id).
The CPU build cannot run DeepSeek-V4's CUDA attention, so this builds what the CUDA worker builds without a GPU:
  - the cache modules DeepseekV4Attention.__init__ creates, in its order and with its arguments
    (the indexer's DeepseekV4IndexerCache and CompressorStateCache, DeepseekV4SWACache, the layer
    itself, its compressor's CompressorStateCache), registered in the static forward context;
    the attention layer is the platform class _select_dsv4_attn_cls picks for the compute
    capability, made without running its __init__ (its weights and CUDA events are not needed),
    with the fields its own get_kv_cache_spec reads set as __init__ sets them
    (_resolve_dsv4_kv_cache_dtype for the dtype);
  - the block size from Platform._preferred_block_size_for_backends over the layers' backends;
  - the spec dict as GPUModelRunner.get_kv_cache_spec collects it (customize_attention_spec);
  - the layout from get_supported_kv_cache_layouts + resolve_kv_cache_layout;
  - get_kv_cache_configs with the pinned budget, then get_kv_cache_capacity.
Request keys: config (the config.json dict), max_model_len, max_num_batched_tokens, max_num_seqs,
budget_bytes, tensor_parallel_size, kv_cache_dtype, compute_capability [major, minor],
async_scheduling, num_speculative_tokens (MTP when > 0), disable_hybrid_kv_cache_manager.
"""

from __future__ import annotations

import json
import sys
import types
from types import SimpleNamespace
from typing import Any


def _attention_class(major: int) -> Any:
    """_select_dsv4_attn_cls without an explicit backend: SM12x FlashInfer, else FlashMLA."""
    if major == 12:
        from vllm.models.deepseek_v4.nvidia.flashinfer_sparse import DeepseekV4FlashInferSM120Attention  # noqa: PLC0415

        return DeepseekV4FlashInferSM120Attention
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention  # noqa: PLC0415

    return DeepseekV4FlashMLAAttention


def _model_owns_grouping() -> bool:
    """0.33: whether the CUDA DeepseekV4ForCausalLM implements SupportsKVCacheGrouping (0.32 has no hook)."""
    try:
        from vllm.model_executor.models.interfaces import supports_kv_cache_grouping  # noqa: PLC0415
    except ImportError:
        return False
    from vllm.models.deepseek_v4.nvidia.model import DeepseekV4ForCausalLM  # noqa: PLC0415

    return bool(supports_kv_cache_grouping(DeepseekV4ForCausalLM))


def _vllm_config(req: dict[str, Any]) -> Any:
    from vllm.config import CacheConfig, ParallelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig  # noqa: PLC0415

    cfg = req["config"]
    hf = SimpleNamespace(**cfg)
    model_config = SimpleNamespace(
        max_model_len=req["max_model_len"],
        original_max_model_len=req["max_model_len"],
        hf_config=hf,
        hf_text_config=hf,
        use_mla=True,
        is_hybrid=False,
        architectures=cfg.get("architectures", ["DeepseekV4ForCausalLM"]),
        supports_kv_cache_grouping=_model_owns_grouping(),
    )
    scheduler = SchedulerConfig(
        max_num_batched_tokens=req["max_num_batched_tokens"],
        max_num_seqs=req["max_num_seqs"],
        max_model_len=req["max_model_len"],
        is_encoder_decoder=False,
        async_scheduling=req["async_scheduling"],
        disable_hybrid_kv_cache_manager=req.get("disable_hybrid_kv_cache_manager", False),
    )
    vc = VllmConfig(
        cache_config=CacheConfig(cache_dtype=req["kv_cache_dtype"]),
        parallel_config=ParallelConfig(tensor_parallel_size=req["tensor_parallel_size"]),
        scheduler_config=scheduler,
    )
    object.__setattr__(vc, "model_config", model_config)
    # The CPU platform hook turned async scheduling off; the CUDA worker being modelled keeps it.
    vc.scheduler_config.async_scheduling = req["async_scheduling"]
    if req.get("num_speculative_tokens"):
        # The fields num_prefill_lookahead_tokens and the MTP grouping read (use_eagle,
        # use_multi_module_mtp, method); building a SpeculativeConfig needs the model on disk.
        spec = object.__new__(SpeculativeConfig)
        object.__setattr__(spec, "method", "mtp")
        object.__setattr__(spec, "num_speculative_tokens", req["num_speculative_tokens"])
        object.__setattr__(spec, "disable_eagle_block_drop", False)
        draft_hf = SimpleNamespace(num_nextn_predict_layers=cfg.get("num_nextn_predict_layers", 1))
        object.__setattr__(spec, "draft_model_config", SimpleNamespace(hf_config=draft_hf))
        object.__setattr__(vc, "speculative_config", spec)
    return vc


def _compress_ratios(cfg: dict[str, Any]) -> list[int]:
    """Per-layer ratios as the version reads them: 0.33 through transformers' DeepseekV4Config
    (layer_types + compress_rates, get_compress_ratios), 0.32 from config.compress_ratios."""
    try:
        from vllm.transformers_utils.deepseek_v4_utils import get_compress_ratios  # noqa: PLC0415
    except ImportError:
        return list(cfg["compress_ratios"])
    from transformers import DeepseekV4Config  # noqa: PLC0415

    return list(get_compress_ratios(DeepseekV4Config(**cfg)))


def _build_layers(vc: Any, req: dict[str, Any]) -> list[str]:
    """Create the cache modules of every decoder layer (and MTP layers) as the CUDA model does."""
    import torch  # noqa: PLC0415
    from vllm.models.deepseek_v4.attention import (  # noqa: PLC0415
        MXFP4_BLOCK_SIZE,
        DeepseekV4IndexerCache,
        _resolve_dsv4_kv_cache_dtype,
    )
    from vllm.models.deepseek_v4.compressor import CompressorStateCache  # noqa: PLC0415
    from vllm.v1.attention.backends.mla.indexer import dsa_indexer_uses_fp4  # noqa: PLC0415
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache  # noqa: PLC0415

    cfg = req["config"]
    attn_cls = _attention_class(req["compute_capability"][0])
    cache_config = vc.cache_config
    ctx = vc.compilation_config.static_forward_context
    num_layers = cfg["num_hidden_layers"]
    mtp_layers = cfg.get("num_nextn_predict_layers", 0) if req.get("num_speculative_tokens") else 0
    head_dim = cfg["head_dim"]
    index_head_dim = cfg["index_head_dim"]
    ratios = _compress_ratios(cfg)
    names: list[str] = []
    for layer_id in range(num_layers + mtp_layers):
        prefix = f"model.layers.{layer_id}.attn"
        ratio = max(1, ratios[layer_id]) if layer_id < num_layers else 1
        if ratio == 4:  # DeepseekV4Indexer: its k_cache, then its compressor's state cache
            if dsa_indexer_uses_fp4(vc):
                k_dim = index_head_dim // 2 + index_head_dim // MXFP4_BLOCK_SIZE
            else:
                k_dim = index_head_dim + index_head_dim // 128 * 4
            DeepseekV4IndexerCache(
                head_dim=k_dim,
                dtype=torch.uint8,
                prefix=f"{prefix}.indexer.k_cache",
                cache_config=cache_config,
                compress_ratio=ratio,
            )
            CompressorStateCache(
                state_dim=2 * 2 * index_head_dim,
                dtype=torch.float32,
                compress_ratio=ratio,
                prefix=f"{prefix}.indexer.compressor.state_cache",
            )
        layer = object.__new__(attn_cls)
        torch.nn.Module.__init__(layer)
        layer.compress_ratio = ratio
        layer.head_dim = head_dim
        layer.kv_cache_dtype, layer.kv_cache_torch_dtype = _resolve_dsv4_kv_cache_dtype(
            layer._uses_fp8_ds_mla_layout(), cache_config.cache_dtype, cache_config
        )
        DeepseekV4SWACache(
            head_dim=head_dim,
            window_size=cfg["sliding_window"],
            dtype=layer.kv_cache_torch_dtype,
            prefix=f"{prefix}.swa_cache",
            cache_config=cache_config,
            backend_cls=attn_cls.swa_backend_cls,
        )
        ctx[prefix] = layer
        if ratio > 1:
            coff = 1 + (ratio == 4)
            CompressorStateCache(
                state_dim=2 * coff * head_dim,
                dtype=torch.float32,
                compress_ratio=ratio,
                prefix=f"{prefix}.compressor.state_cache",
            )
        names.append(prefix)
    return names


def _spec_row(name: str, spec: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": type(spec).__name__,
        "block_size": spec.block_size,
        "page_size_bytes": spec.page_size_bytes,
        "sliding_window": getattr(spec, "sliding_window", None),
        "tokens_per_state": int(getattr(spec, "tokens_per_state", 1)),
    }


PREFIX = "DSV4-PLAN "


def _einops_stand_in() -> None:
    """Stand-in for einops when the interpreter lacks it: vLLM's model modules import it at module level
    (ViT attention wrappers, reached through the model loader), but nothing here calls it."""
    try:
        import einops  # noqa: F401, PLC0415
    except ImportError:
        stub = types.ModuleType("einops")

        def unavailable(*_args: object, **_kwargs: object) -> None:
            raise NotImplementedError("einops stand-in: not used by KV-cache planning")

        for name in ("rearrange", "repeat", "reduce", "einsum", "pack", "unpack"):
            setattr(stub, name, unavailable)
        sys.modules["einops"] = stub


def main() -> None:
    """Plan every case with the engine's functions and print each one's figures as a JSON line."""
    _einops_stand_in()
    for req in json.loads(sys.stdin.read())["cases"]:
        try:
            result = plan_case(req)
        except ValueError as exc:  # the engine's own refusal (e.g. _check_enough_kv_cache_memory)
            result = {"error": str(exc)}
        print(PREFIX + json.dumps({"id": req["id"], **result}), flush=True)


def plan_case(req: dict[str, Any]) -> dict[str, Any]:
    """One launch: specs, block size, layout, groups, num_blocks, pool and concurrency."""
    from vllm.config import set_current_vllm_config  # noqa: PLC0415
    from vllm.platforms.interface import Platform  # noqa: PLC0415
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout  # noqa: PLC0415
    from vllm.v1.core import kv_cache_utils as kcu  # noqa: PLC0415
    from vllm.v1.kv_cache_interface import AttentionSpec, UniformTypeKVCacheSpecs  # noqa: PLC0415
    from vllm.v1.worker.utils import customize_attention_spec  # noqa: PLC0415

    try:  # 0.33 moved planning out of kv_cache_utils
        from vllm.v1.core import kv_cache_planning as planning  # noqa: PLC0415
    except ImportError:
        planning = kcu

    vc = _vllm_config(req)
    with set_current_vllm_config(vc):
        _build_layers(vc, req)
        from vllm.config.vllm import get_layers_from_vllm_config  # noqa: PLC0415
        from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase  # noqa: PLC0415

        layers = get_layers_from_vllm_config(vc, AttentionLayerBase)
        backends: list[Any] = []
        for module in layers.values():
            backend = module.get_attn_backend()
            if not backend.is_ssm() and backend not in backends:
                backends.append(backend)
        block = Platform._preferred_block_size_for_backends(backends, 16, vc)
        vc.cache_config.block_size = block
        specs: dict[str, Any] = {}
        for name, module in layers.items():
            if spec := module.get_kv_cache_spec(vc):
                if isinstance(spec, AttentionSpec):
                    spec = customize_attention_spec(module.get_attn_backend(), spec)
                specs[name] = spec
        layouts = [layout.name for layout in get_supported_kv_cache_layouts(backends)]
        layout = resolve_kv_cache_layout(vc, [layouts], specs.values())
        if hasattr(planning, "get_global_kv_cache_groups"):  # 0.33: grouping is its own step
            global_groups = planning.get_global_kv_cache_groups(vc, [dict(specs)])
            configs = planning.get_kv_cache_configs(vc, [dict(specs)], [req["budget_bytes"]], global_groups)
        else:
            configs = planning.get_kv_cache_configs(vc, [dict(specs)], [req["budget_bytes"]])
        config = configs[0]
        get_capacity = getattr(planning, "get_kv_cache_capacity", None) or kcu.get_kv_cache_capacity
        pool, concurrency = get_capacity(vc, config)
        groups = []
        for group in config.kv_cache_groups:
            gspec = group.kv_cache_spec
            per_layer = gspec.kv_cache_specs if isinstance(gspec, UniformTypeKVCacheSpecs) else None
            if per_layer is not None:
                pages = sum(s.page_size_bytes for s in per_layer.values())
                blocks = gspec.max_memory_usage_pages(vc)
            else:
                pages = gspec.page_size_bytes * len(group.layer_names)
                blocks = -(-gspec.max_memory_usage_bytes(vc) // gspec.page_size_bytes)
            groups.append(
                {"layers": list(group.layer_names), "bytes": pages, "blocks_per_request": blocks,
                 "block_size": gspec.block_size}
            )
        bytes_per_block = planning._pool_bytes_per_block(vc, config.kv_cache_groups)
    return {
        "block_size": block,
        "layout": layout.name,
        "specs": [_spec_row(n, s) for n, s in specs.items()],
        "groups": groups,
        "bytes_per_block": bytes_per_block,
        "num_blocks": config.num_blocks,
        "kv_pool_tokens": pool,
        "max_concurrency": concurrency,
    }


if __name__ == "__main__":
    main()
