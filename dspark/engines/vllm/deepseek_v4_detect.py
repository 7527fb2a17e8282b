"""Whether a model is DeepSeek-V4, and what its vLLM classes force (pure; every plan asks).

Its caches, groups and pool are dspark.engines.vllm.deepseek_v4, which loads only for such a model.
"""

from __future__ import annotations

from dspark.core.errors import InputError
from dspark.model.architecture import MLALayer, ModelArchitecture

BLOCK_SIZE = 256  # DeepseekV4 sparse-MLA and indexer backends: get_supported_kernel_block_sizes [256]
# --kv-cache-dtype values _resolve_dsv4_kv_cache_dtype maps to fp8_ds_mla ("auto" and fp8*).
_FP8_FLAGS = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")


class DeepseekV4NotModelledError(InputError):
    """A DeepSeek-V4 setting whose vLLM accounting dspark does not reproduce."""


def is_deepseek_v4(arch: ModelArchitecture) -> bool:
    """True for DeepSeek-V4's compressed / sliding MLA layers (config compress_ratios)."""
    return any(isinstance(la, MLALayer) and la.sliding_window is not None for la in arch.layers)


def kv_cache_dtype(flag: str | None) -> str:
    """_resolve_dsv4_kv_cache_dtype for the fp8_ds_mla layout every default CUDA class uses."""
    value = (flag or "auto").lower()
    if value not in _FP8_FLAGS:
        raise DeepseekV4NotModelledError(
            f"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {value}",
            hint="drop --kv-cache-dtype or pass --kv-cache-dtype fp8",
        )
    return "fp8_ds_mla"
