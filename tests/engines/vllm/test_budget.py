"""The unpinned KV budget's runtime terms (budget.py): the compiled embedding-table transient, the MTP drafter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.engines.vllm.budget import CUBLAS_WORKSPACE_BYTES
from dspark.engines.vllm.capacity import compute_vllm_capacity
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.model.architecture import parse_config

ROOT = Path(__file__).resolve().parents[3]
QWEN3_8B = json.loads((ROOT / "tests/device/configs/qwen3-8b.json").read_text())
H200 = 150_754_820_096


def _activation(config: dict[str, object], flags: list[str], version: str = "0.25.0") -> int:
    cap = compute_vllm_capacity(
        parse_config(config), parse_vllm_serve_flags(["--max-model-len", "32768", "--max-num-seqs", "24", *flags]),
        platform="cuda", device_total_bytes=H200, device_free_bytes=H200, compute_capability=(9, 0),
        weights_per_gpu_bytes=16_000_000_000, engine_version=version,
    )
    return dict(cap.budget.terms)["activation_peak"]


@pytest.mark.parametrize("vocab", [40_000, 100_000, 151_936, 151_937, 262_208])
def test_the_compiled_transient_is_the_tables_bytes_when_larger_than_the_forward(vocab: int) -> None:
    config = {**QWEN3_8B, "vocab_size": vocab}
    row = 8192 * 4096 * 2
    table = -(-vocab // 64) * 64 * 4096 * 2
    assert _activation(config, []) == max(16 * row, table + row * 3 // 2 + CUBLAS_WORKSPACE_BYTES)
    assert _activation(config, ["--enforce-eager"]) == 16 * row  # eager: no compile, no transient
    assert _activation(config, [], "0.32.0") == 16 * row  # not measured there: not counted


def test_tensor_parallel_shards_the_table_not_the_rows() -> None:
    config = {**QWEN3_8B, "vocab_size": 262_208}
    row = 8192 * 4096 * 2
    table = 262_208 * 4096 * 2
    assert _activation(config, ["--tensor-parallel-size", "2"]) == table // 2 + row * 3 // 2 + CUBLAS_WORKSPACE_BYTES


def test_the_mtp_drafter_adds_four_rows() -> None:
    config = json.loads((ROOT / "tests/device/configs/qwen3.5-27b.json").read_text())
    spec = ["--language-model-only", "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 3})]
    assert _activation(config, spec) - _activation(config, ["--language-model-only"]) == 4 * 8192 * 5120 * 2


@pytest.mark.parametrize(
    ("inductor", "transient"),
    [
        (None, True),  # vLLM 0.25 turns combo_kernels and benchmark_combo_kernel on when neither is given
        ({}, True),
        ({"max_autotune": False}, True),
        ({"combo_kernels": True, "benchmark_combo_kernel": False}, False),
        ({"benchmark_combo_kernel": False}, False),
        ({"combo_kernels": False}, False),  # vLLM then sets neither; Inductor's default benchmark is off
        ({"combo_kernels": True}, False),
        ({"benchmark_combo_kernel": True}, False),  # benchmarking without combo kernels has nothing to time
        ({"combo_kernels": True, "benchmark_combo_kernel": True}, True),
    ],
)
def test_the_transient_follows_inductors_combo_kernel_benchmarking(
    inductor: dict[str, object] | None, transient: bool
) -> None:
    row = 8192 * 4096 * 2
    flags = [] if inductor is None else ["--compilation-config", json.dumps({"inductor_compile_config": inductor})]
    assert (_activation(QWEN3_8B, flags) > 16 * row) == transient
    if inductor:
        dotted = [f"-cc.inductor_compile_config.{k}={str(v).lower()}" for k, v in inductor.items()]
        assert (_activation(QWEN3_8B, dotted) > 16 * row) == transient
