"""The witness: each vLLM release's own planner (kv_cache_planning / kv_cache_utils) on dspark's specs and budget.

vLLM 0.33.0 has no CPU build to start, so its own planning code, run in its interpreter, judges the pure 0.33
model: to the token and to the printed decimals, for every layer kind, on CPU and on CUDA parameters (SM90,
SM12.1 with CUDA 13: the FlashInfer GDN alignment). For 0.32.0 the real engine is the judge
(test_vllm_oracle.py); its planner must agree with the model on every oracle case too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from test_vllm_oracle import CASES, REFUSED, predict_direct

from dspark.engines.vllm.capacity import CpuFeatures, VllmCapacity, compute_vllm_capacity
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.engines.vllm.witness_input import vllm_witness_request
from dspark.engines.witness import run_witness
from dspark.model.architecture import ModelArchitecture, parse_config

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
H200 = 150_754_820_096
MTP1 = '{"method":"mtp","num_speculative_tokens":1}'
MTP2 = '{"method":"mtp","num_speculative_tokens":2}'
MTP4 = '{"method":"qwen3_next_mtp","num_speculative_tokens":4}'
NGRAM3 = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'
EPYC = CpuFeatures(amx=False, avx512_bf16=True)


def fixture(name: str) -> ModelArchitecture:
    return parse_config(json.loads((FIXTURES / f"{name}.json").read_text()), name)


def tiny(models: Path, name: str) -> ModelArchitecture:
    return parse_config(json.loads((models / name / "config.json").read_text()), str(models / name))


# (id, model, flags, platform, compute capability): every layer kind, prefix caching on and off, fp8, TP=2,
# MTP and ngram, on CUDA parameters and on the CPU. "tiny:" models are tests/real_engines's; the others real shapes.
CASES_033: list[tuple[str, str, str, str, tuple[int, int] | None]] = [
    ("dense-gqa-sm90", "qwen3-32b", "--max-model-len 32768 --kv-cache-memory-bytes 20G", "cuda", (9, 0)),
    (
        "dense-fp8-tp2",
        "qwen3-32b",
        "--max-model-len 40000 --kv-cache-dtype fp8 -tp 2 --kv-cache-memory-bytes 7G",
        "cuda",
        (9, 0),
    ),
    (
        "dense-ngram",
        "qwen3-32b",
        f"--max-model-len 8192 --speculative-config {NGRAM3} --kv-cache-memory-bytes 3G",
        "cuda",
        (9, 0),
    ),
    ("dense-autofit", "qwen3-32b", "--max-model-len auto --kv-cache-memory-bytes 2G", "cuda", (9, 0)),
    ("sliding-sm90", "mistral-7b-v0.1", "--max-model-len 16384 --kv-cache-memory-bytes 3G", "cuda", (9, 0)),
    (
        "sliding-ngram",
        "mistral-7b-v0.1",
        f"--max-model-len 16384 --speculative-config {NGRAM3} --kv-cache-memory-bytes 3G",
        "cuda",
        (9, 0),
    ),
    ("mla-sm90", "deepseek-v3", "--max-model-len 32768 --kv-cache-memory-bytes 20G", "cuda", (9, 0)),
    (
        "mla-fp8-mtp",
        "deepseek-v3",
        f"--max-model-len 32768 --kv-cache-dtype fp8 --kv-cache-memory-bytes 9G -sc {MTP1}",
        "cuda",
        (9, 0),
    ),
    ("gdn-prefix-sm90", "qwen3.5-27b", "--max-model-len 32768 --kv-cache-memory-bytes 20G", "cuda", (9, 0)),
    (
        "gdn-noprefix-sm90",
        "qwen3.5-27b",
        "--max-model-len 32768 --no-enable-prefix-caching --kv-cache-memory-bytes 20G",
        "cuda",
        (9, 0),
    ),
    (
        "gdn-prefix-gb10-cuda13-mtp4-tp2",
        "qwen3-next-80b-a3b-instruct",
        f"-tp 2 --max-num-seqs 8 --speculative-config {MTP4} --kv-cache-memory-bytes 28G",
        "cuda",
        (12, 1),
    ),
    (
        "gdn-noprefix-gb10",
        "qwen3-next-80b-a3b-instruct",
        "-tp 2 --no-enable-prefix-caching --kv-cache-memory-bytes 28G",
        "cuda",
        (12, 1),
    ),
    (
        "gdn-fp8-gb10",
        "qwen3-next-80b-a3b-instruct",
        "-tp 2 --kv-cache-dtype fp8 --kv-cache-memory-bytes 28G",
        "cuda",
        (12, 1),
    ),
    ("cpu-dense", "tiny:dense-qwen3", "--max-model-len 2048 --kv-cache-memory-bytes 1073741824", "cpu", None),
    (
        "cpu-dense-fp8",
        "tiny:dense-qwen3",
        "--max-model-len 1000 --kv-cache-dtype fp8 --kv-cache-memory-bytes 123456789",
        "cpu",
        None,
    ),
    (
        "cpu-sliding",
        "tiny:sliding-mistral",
        "--max-model-len 4000 --max-num-batched-tokens 512 --kv-cache-memory-bytes 50000001",
        "cpu",
        None,
    ),
    ("cpu-mla", "tiny:mla-deepseek-v3", "--max-model-len 2000 --kv-cache-memory-bytes 100000000", "cpu", None),
    (
        "cpu-hybrid-prefix",
        "tiny:hybrid-qwen3-next",
        "--max-model-len 2048 --kv-cache-memory-bytes 1073741824",
        "cpu",
        None,
    ),
    (
        "cpu-hybrid-noprefix-mtp2",
        "tiny:hybrid-qwen3-next",
        f"--max-model-len 2000 --no-enable-prefix-caching --speculative-config {MTP2} "
        "--kv-cache-memory-bytes 100000000",
        "cpu",
        None,
    ),
    ("cpu-dense-tp2", "tiny:dense-qwen3", "--max-model-len 1500 -tp 2 --kv-cache-memory-bytes 33333333", "cpu", None),
]


def predict_033(models: Path, model: str, flags: str, platform: str, cc: tuple[int, int] | None) -> VllmCapacity:
    arch = tiny(models, model[5:]) if model.startswith("tiny:") else fixture(model)
    return compute_vllm_capacity(
        arch,
        parse_vllm_serve_flags(flags.split()),
        platform="cpu" if platform == "cpu" else "cuda",
        device_total_bytes=H200 if platform == "cuda" else None,
        device_free_bytes=H200 if platform == "cuda" else None,
        compute_capability=cc,
        weights_per_gpu_bytes=None,
        engine_version="0.33.0",
        cuda_runtime_major=13,
        cpu_features=EPYC if platform == "cpu" else None,
    )


def figures(cap: VllmCapacity) -> tuple[int, str, int, int]:
    return cap.kv_pool_tokens, f"{cap.max_concurrency:.2f}", cap.max_model_len, cap.num_blocks


def answer_figures(answer: dict[str, Any]) -> tuple[int, str, int, int]:
    assert answer["ok"], answer.get("error")
    return answer["kv_pool_tokens"], f"{answer['max_concurrency']:.2f}", answer["max_model_len"], answer["num_blocks"]


@pytest.fixture(scope="module")
def planner_033(vllm033_python: str, tiny_models: Path) -> dict[str, tuple[VllmCapacity, dict[str, Any]]]:
    """Each 0.33 case: dspark's pure model, and 0.33's own planner on its specs and budget (one process)."""
    predicted = {cid: predict_033(tiny_models, m, f, p, cc) for cid, m, f, p, cc in CASES_033}
    requests: list[Mapping[str, Any]] = [vllm_witness_request(cap) for cap in predicted.values()]
    answers = run_witness(vllm033_python, requests, timeout=600)
    return {cid: (predicted[cid], ans) for cid, ans in zip(predicted, answers, strict=True)}


@pytest.mark.parametrize("cid", [c[0] for c in CASES_033])
def test_0_33_model_equals_0_33_planner(cid: str, planner_033: dict[str, tuple[VllmCapacity, dict[str, Any]]]) -> None:
    """Pool to the token, Maximum concurrency to the printed decimals, window and num_blocks."""
    cap, answer = planner_033[cid]
    assert answer["engine_version"] == "0.33.0"
    assert "vllm.v1.core.kv_cache_planning.get_global_kv_cache_groups" in answer["functions"]
    assert answer_figures(answer) == figures(cap)
    assert answer["blocks_per_request"] == cap.blocks_per_request


def test_the_flashinfer_gdn_cases_exercise_0_33s_difference(
    planner_033: dict[str, tuple[VllmCapacity, dict[str, Any]]],
) -> None:
    """The SM90 / GB10 prefix-caching GDN cases carry the checkpoint block the planner counts (MambaSpec)."""
    for cid in ("gdn-prefix-sm90", "gdn-prefix-gb10-cuda13-mtp4-tp2"):
        cap, _ = planner_033[cid]
        mamba = [s for s in cap.engine_layers if s.kind == "mamba"]
        assert mamba and all(dict(s.engine_kwargs)["num_prefill_checkpoint_blocks"] == 1 for s in mamba), cid
    cap, _ = planner_033["gdn-noprefix-gb10"]
    assert all(
        dict(s.engine_kwargs)["num_prefill_checkpoint_blocks"] == 0 for s in cap.engine_layers if s.kind == "mamba"
    )


def test_0_32_planner_agrees_on_every_oracle_case(vllm_python: str, tiny_models: Path) -> None:
    """The installed 0.32.0's planner, on the model's specs and budget, prints what the engine printed."""
    started = [c for c in CASES if c.id not in REFUSED]
    predicted = [predict_direct(tiny_models, c) for c in started]
    requests: list[Mapping[str, Any]] = [vllm_witness_request(cap) for cap in predicted]
    answers = run_witness(vllm_python, requests, timeout=600)
    for c, cap, answer in zip(started, predicted, answers, strict=True):
        assert answer["engine_version"] == "0.32.0"
        assert answer_figures(answer) == figures(cap), c.id
        assert "vllm.v1.core.kv_cache_utils.get_kv_cache_configs" in answer["functions"]
