"""Stored weight formats from quantization_config: what a checkpoint's bytes per parameter follow."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dspark.model.architecture.fields import ConfigFields

# quant_method -> stored weight format, for methods whose name says it all.
_QUANT_FORMATS = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "modelopt_mxfp4": "mxfp4",
}
_INT_METHODS = frozenset({"awq", "awq_marlin", "gptq", "gptq_marlin", "auto-round", "auto_round"})


def read_quantization(f: ConfigFields, notes: list[str]) -> tuple[str | None, str | None, str | None]:
    """(quant method as vLLM names it, stored weight format, routed-expert format) from quantization_config."""
    qc = f.mapping("quantization_config") or f.mapping("compression_config")
    in_qc = qc.get("expert_dtype")
    expert_dtype = f.text("expert_dtype") or (in_qc if isinstance(in_qc, str) else None)
    # DeepSeek-V4 keeps routed experts in FP4 (E2M1 + one E8M0 scale per 32: the MXFP4 layout) beside FP8.
    expert_format = {"fp4": "mxfp4", "mxfp4": "mxfp4", "fp8": "fp8"}.get(expert_dtype or "")
    if expert_dtype and expert_format is None:
        f.fail(f"'expert_dtype' is '{expert_dtype}', not one of fp4, fp8")
    if not qc:
        return None, None, expert_format
    method = qc.get("quant_method")
    if not isinstance(method, str):
        f.fail(f"'{f.where('quantization_config')}.quant_method' is missing or not a string")
    method = method.lower()
    algo = str(qc.get("quant_algo") or "").upper()
    weight_format: str | None = _QUANT_FORMATS.get(method)
    if method == "modelopt":
        # vLLM names a ModelOpt NVFP4 checkpoint "modelopt_fp4" and an FP8 one "modelopt".
        method, weight_format = ("modelopt_fp4", "nvfp4") if "FP4" in algo else (method, "fp8")
    elif method in _INT_METHODS:
        weight_format = "int8" if qc.get("bits", qc.get("w_bit", 4)) == 8 else "int4"
    elif method == "compressed-tensors":
        weight_format = _compressed_tensors_format(qc)
    elif method == "bitsandbytes":
        weight_format = "int4" if qc.get("load_in_4bit") else "int8"
    if weight_format is None:
        notes.append(f"quantization '{method}': weight format unknown, weights estimated at the model dtype")
    return method, weight_format, expert_format


def _compressed_tensors_format(qc: Mapping[str, Any]) -> str | None:
    """The weight format of a compressed-tensors config: its first config group's weights scheme."""
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            continue
        bits, kind, size = weights.get("num_bits"), weights.get("type"), weights.get("group_size")
        if bits == 8:
            return "fp8" if kind == "float" else "int8"
        if bits == 4 and kind == "float":
            return "mxfp4" if size == 32 else "nvfp4"
        if bits == 4:
            return "int4"
    return None


def block_scale_bytes(f: ConfigFields, weight_format: str | None) -> float:
    """FP8 block quantisation (quantization_config.weight_block_size [bn, bk]): its fp32 scale per block, per
    parameter (Fp8LinearMethod.create_weights -> create_fp8_scale_parameter, BlockQuantScaleParameter)."""
    qc = f.mapping("quantization_config")
    block = qc.get("weight_block_size") if qc else None
    if weight_format != "fp8" or not isinstance(block, list) or len(block) != 2:
        return 0.0
    bn, bk = block
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (bn, bk)):
        f.fail(f"'{f.where('quantization_config')}.weight_block_size' must be two positive integers, got {block!r}")
    return 4.0 / (int(bn) * int(bk))
