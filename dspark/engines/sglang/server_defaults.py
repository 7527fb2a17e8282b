"""SGLang server-argument defaults, and per-token and per-request sizes (memory_hook, pool_configurator, ...)."""

from __future__ import annotations

from dspark.engines.sglang.sizing_types import DSA_INDEXER_QUANT_BLOCK, KV_DTYPE_BYTES, SPEC_PARAMS_5_4_8
from dspark.model.architecture import (
    AttentionLayer,
    Layer,
    LinearStateLayer,
    MLALayer,
    ModelArchitecture,
    dtype_bytes,
)

# --------------------------------------------------------------------------------------------------
# Server-argument defaults (arg_groups/memory_hook.py, cuda_graph_hook.py, speculative_hook.py)
# --------------------------------------------------------------------------------------------------


def gpu_memory_defaults(gpu_mib: float | None, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode graph max_bs) by nvidia-smi memory.total: handle_gpu_memory_settings."""
    if gpu_mib is None:
        return 4096, 160
    table = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (90, 8192, 256, 512),
             (160, 8192, 256, 512))  # fmt: skip
    for below_gib, chunk, small_tp, large_tp in table:
        if gpu_mib < below_gib * 1024:
            return chunk, small_tp if tp_size < 4 else large_tp
    return 16384, 512


def decode_graph_batch_sizes(max_bs: int, *, speculative: bool, no_padding: bool = False) -> tuple[int, ...]:
    """cuda_graph_hook.generate_decode_cuda_graph_batch_sizes: the decode batch sizes up to max_bs."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8),
                 *range(272, max_bs + 1, 16)]  # fmt: skip
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return tuple(sizes)


def captured_batch_sizes(decode_bs: tuple[int, ...], max_running_requests: int) -> tuple[int, ...]:
    """get_batch_sizes_to_capture (alignment 1: no DP attention, no two-batch overlap)."""
    sizes = list(decode_bs)
    if max(sizes) > max_running_requests:
        sizes.append(max_running_requests)
    return tuple(sorted({bs for bs in sizes if bs <= max_running_requests}))


def default_mem_fraction_static(
    gpu_mib: float | None, *, chunked_prefill_size: int, max_prefill_tokens: int, tp_size: int, pp_size: int,
    decode_graph_max_bs: int | None, prefill_graph_reserve_mib: float,
) -> tuple[float, float | None]:
    """(mem_fraction_static, reserved MiB): handle_gpu_memory_settings + reserve_for_graph_mb, no disaggregation.

    prefill_graph_reserve_mib: reserve_for_graph_mb's prefill term (prefill_graph_reserve_mib below). DP attention
    and DeepEP are not modelled.
    """
    if gpu_mib is None:
        return 0.95, None
    activation_tokens = max(chunked_prefill_size, 2048) if chunked_prefill_size > 0 else max(max_prefill_tokens, 2048)
    reserved: float = 512
    reserved += activation_tokens * 1.5
    reserved += tp_size * pp_size / 8 * 1024
    reserved += decode_graph_max_bs * 2 if decode_graph_max_bs is not None else 0.0
    reserved += prefill_graph_reserve_mib
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3), reserved


def vlm_mem_fraction(fraction: float, vision_tower: tuple[int, int] | None) -> float:
    """memory_hook.adjust_mem_fraction_for_vlm (no post-capture KV sizing, SGLang's default): room for the ViT.

    0.95 × a factor that falls 10% per doubling of the tower's layers × width² over ViT-L/14's (24 × 1024²),
    clamped to [0.8, 1.05]; unchanged without a vision_config. Not rounded again, as in SGLang.
    """
    if vision_tower is None:
        return fraction
    layers, width = vision_tower
    ratio = layers * width**2 / (24 * 1024**2)
    factor = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return fraction * (0.95 * factor)


def prefill_graph_batch_sizes(max_bs: int) -> tuple[int, ...]:
    """cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes: the prefill capture sizes (tokens) up to max_bs."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]  # fmt: skip
    return tuple(s for s in sizes if s <= max_bs)


def prefill_graph_reserve_mib(backend: str, capture_sizes: tuple[int, ...], *, mla: bool) -> float:
    """reserve_for_graph_mb's prefill term: 8 MiB per capture size, 1.5 GiB flat with MLA; 0 when disabled."""
    if backend == "disabled":
        return 0.0
    return 1.5 * 1024 if mla else len(capture_sizes) * 8


def speculative_params(algorithm: str, architecture: str) -> tuple[int, int, int]:
    """_auto_choose_speculative_params: (steps, topk, draft tokens) when --speculative-num-steps is unset."""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    return (5, 4, 8) if architecture in SPEC_PARAMS_5_4_8 else (3, 1, 4)


# --------------------------------------------------------------------------------------------------
# Per-token KV cell and per-request linear state (pool_configurator.py, configs/mamba_utils.py)
# --------------------------------------------------------------------------------------------------


def kv_storage(
    kv_cache_dtype: str | None, arch: ModelArchitecture, capability: tuple[int, int] | None = None
) -> tuple[str, int]:
    """(dtype name, bytes per element) of the KV pool: mem_cache/kv_cache_dtype.configure_kv_cache_dtype."""
    name = kv_cache_dtype or "auto"
    dsa = any(isinstance(layer, MLALayer) and layer.index_head_dim is not None for layer in arch.layers)
    if dsa and name == "auto":
        # overrides._dsa_kv_cache_dtype_default: fp8_e4m3 from SM100 on, bfloat16 before.
        name = "fp8_e4m3" if capability is not None and capability[0] >= 10 else "bfloat16"
    if name == "auto":
        return arch.dtype, dtype_bytes(arch.dtype)
    if name in KV_DTYPE_BYTES:
        return name, KV_DTYPE_BYTES[name]
    raise ValueError(f"--kv-cache-dtype {name}: dspark does not model SGLang's {name} KV layout")


def full_attention_layers(arch: ModelArchitecture) -> list[Layer]:
    return [layer for layer in arch.layers if not isinstance(layer, LinearStateLayer)]


def mha_cell_size(layer: AttentionLayer, num_layers: int, tp_size: int, elem: int) -> int:
    """_compute_cell_size, MHA/GQA: max(1, kv_heads // tp) * (head_dim + v_head_dim) * layers * bytes."""
    heads = max(1, layer.num_kv_heads // tp_size)
    return heads * (layer.head_dim + layer.v_dim) * num_layers * elem


def mla_cell_size(layer: MLALayer, num_layers: int, kv_dtype: str, elem: int, *, raw_layout: bool = False) -> int:
    """_compute_cell_size, MLA: calculate_mla_kv_cache_dim * layers * bytes, + the DSA indexer keys.

    raw_layout: the DSA backends are trtllm (SM100's default), which keep the plain latent even in FP8.
    """
    dim = layer.latent_dim
    if layer.index_head_dim is not None and kv_dtype == "fp8_e4m3" and not raw_layout:
        # calculate_mla_kv_cache_dim, DSA with FP8 (non-trtllm backends): per-128 scales + bf16 rope.
        dim = layer.kv_lora_rank + layer.kv_lora_rank // DSA_INDEXER_QUANT_BLOCK * 4 + layer.qk_rope_head_dim * 2
    return dim * num_layers * elem + dsa_indexer_cell_size(layer, num_layers)


def dsa_indexer_cell_size(layer: MLALayer, num_layers: int) -> int:
    """_compute_dsa_indexer_cell_size: uint8 index keys + one 4-byte scale per 128, every layer (kpool 1)."""
    if layer.index_head_dim is None:
        return 0
    dim = layer.index_head_dim
    return (dim + dim // DSA_INDEXER_QUANT_BLOCK * 4) * num_layers


def linear_state_bytes(
    layer: LinearStateLayer, tp_size: int, *, ssm_dtype: str, conv_dtype: str = "bfloat16"
) -> tuple[int, int]:
    """(conv, recurrent) bytes of one layer, one request: Mamba2StateShape.create + mamba_cache_per_req."""
    n_groups = layer.num_k_heads
    if n_groups % tp_size != 0:
        n_groups += tp_size - n_groups  # extra_groups_for_head_shards
    intermediate = layer.head_v_dim * layer.num_v_heads
    conv_dim = intermediate + 2 * n_groups * layer.head_k_dim
    if conv_dim % tp_size or layer.num_v_heads % tp_size:
        raise ValueError(f"linear-attention heads do not divide by tp_size {tp_size}")
    conv = conv_dim // tp_size * (layer.conv_kernel - 1) * dtype_bytes(conv_dtype)
    ssm = layer.num_v_heads // tp_size * layer.head_v_dim * layer.head_k_dim * dtype_bytes(ssm_dtype)
    return conv, ssm
