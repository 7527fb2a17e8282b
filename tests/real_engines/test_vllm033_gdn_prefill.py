"""vLLM 0.33.0's GDN prefill choice, made by its own code, against dspark's 0.33 model (Flash-Next, the seed pin).

benchmarks/version_matrix/vllm_planner.py runs in 0.33's interpreter: the release's config, its own
QwenGatedDeltaNetAttention layers built for a device the platform reports (CUDA, compute capability, CUDA
runtime, device name: nothing else is stubbed), so its _resolve_gdn_prefill_backend decides; then its
_align_hybrid_block_size, the layers' get_kv_cache_spec and its planner. dspark's resolve (the FlashInfer
checkpoint grid) and layer specs must give the same GDN spec, block size, blocks, tokens and concurrency.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark.engines.vllm.capacity import VllmCapacity, compute_vllm_capacity
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.model.architecture import parse_config

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
PLANNER = ROOT / "benchmarks" / "version_matrix" / "vllm_planner.py"
PREFIX = "VLLM-PLANNER "
PIN = 28_000_000_000
CONFIG: dict[str, Any] = yaml.safe_load((ROOT / "dspark/data/recipes/flash-next-vllm.yaml").read_text())["model"][
    "config"
]


@dataclass(frozen=True)
class Case:
    """The seed launch (TP=2, 262,144 tokens, prefix caching, 28 GB pin) on one device."""

    id: str
    capability: tuple[int, int]
    cuda: str
    name: str
    mtp: int = 4

    def flags(self) -> list[str]:
        out = ["--tensor-parallel-size", "2", "--max-model-len", "262144", "--max-num-seqs", "6",
               "--max-num-batched-tokens", "8192", "--enable-prefix-caching"]
        if self.mtp:
            out += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": self.mtp})]
        return out

    def request(self) -> dict[str, Any]:
        """vllm_planner.py's case: the same launch as EngineArgs fields, and the device's facts."""
        ea: dict[str, Any] = {"tensor_parallel_size": 2, "max_model_len": 262144, "kv_cache_memory_bytes": PIN,
                              "max_num_seqs": 6, "max_num_batched_tokens": 8192, "enable_prefix_caching": True}
        if self.mtp:
            ea["speculative_config"] = {"method": "mtp", "num_speculative_tokens": self.mtp}
        # The CPU build has no ModelOpt NVFP4 to load; KV sizing never reads the quantization config.
        config = {k: v for k, v in CONFIG.items() if k != "quantization_config"}
        return {"id": self.id, "config": config, "engine_args": ea, "kv_bytes": PIN, "kernel_block_sizes": ["x16"],
                "device": {"capability": list(self.capability), "cuda": self.cuda, "name": self.name}}


CASES = [
    Case("seed-gb10-cuda13", (12, 1), "13.0", "NVIDIA GB10"),
    Case("mtp0-gb10-cuda13", (12, 1), "13.0", "NVIDIA GB10", mtp=0),
    Case("seed-h200-cuda13", (9, 0), "13.0", "NVIDIA H200"),
    Case("seed-h200-cuda12", (9, 0), "12.8", "NVIDIA H200"),
    Case("seed-gb10-cuda12", (12, 1), "12.8", "NVIDIA GB10"),  # control: SM12x needs CUDA >= 13
]


@pytest.fixture(scope="module")
def planned(vllm033_python: str) -> dict[str, dict[str, Any]]:
    """0.33's own figures by case id, all cases in one interpreter."""
    # VLLM_TARGET_DEVICE=cpu: the 0.33.0 wheel is a CUDA build; its config is built on the CPU platform.
    proc = subprocess.run(
        [vllm033_python, str(PLANNER)], input=json.dumps([c.request() for c in CASES]), capture_output=True,
        text=True, timeout=900, check=False,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
    )
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith(PREFIX):
            row = json.loads(line[len(PREFIX):])
            rows[row["id"]] = row
    if len(rows) != len(CASES):
        pytest.fail(f"0.33 planned {len(rows)} of {len(CASES)} cases (exit {proc.returncode}):\n{proc.stderr[-6000:]}",
                    pytrace=False)
    return rows


def dspark(case: Case, version: str = "0.33.0") -> VllmCapacity:
    options = parse_vllm_serve_flags([*case.flags(), "--kv-cache-memory-bytes", str(PIN)])
    return compute_vllm_capacity(
        parse_config(CONFIG), options, platform="cuda", device_total_bytes=None, device_free_bytes=None,
        compute_capability=case.capability, weights_per_gpu_bytes=None, engine_version=version,
        cuda_runtime_major=int(case.cuda.split(".")[0]),
    )


def gdn_spec(cap: VllmCapacity) -> dict[str, Any]:
    """dspark's spec of one GDN layer, in the fields vllm_planner.py reports for the engine's."""
    layer = next(la for la in cap.engine_layers if la.kind == "mamba")
    return {"block_size": layer.block_size, "page_size_bytes": layer.page_bytes,
            "num_prefill_checkpoint_blocks": dict(layer.engine_kwargs).get("num_prefill_checkpoint_blocks", 0)}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_dsparks_033_model_equals_033s_own_gdn_prefill_path(case: Case, planned: dict[str, dict[str, Any]]) -> None:
    theirs = planned[case.id]
    assert theirs["error"] is None, theirs.get("traceback")
    assert theirs["gdn_layers"] == "QwenGatedDeltaNetAttention"  # the release's layers, not stand-ins
    ours = dspark(case)
    engine_spec = {k: theirs["gdn_spec"][k] for k in ("block_size", "page_size_bytes", "num_prefill_checkpoint_blocks")}
    assert gdn_spec(ours) == engine_spec
    assert (ours.block_size, ours.num_blocks, ours.kv_pool_tokens, ours.max_concurrency) == (
        theirs["block_size"], theirs["num_blocks"], theirs["kv_pool_tokens"], theirs["max_concurrency"]
    )


def test_flashinfer_aligns_blocks_to_64_and_keeps_one_checkpoint_block_more(
    planned: dict[str, dict[str, Any]],
) -> None:
    """Where 0.33 picks FlashInfer (GB10 with CUDA 13, SM90 with any) in align mode: blocks on FlashInfer's 64-token
    checkpoint grid, and per request 456 attention blocks + 3 GDN groups x (2 + 4 MTP + 1 checkpoint) = 477."""
    for cid in ("seed-gb10-cuda13", "mtp0-gb10-cuda13", "seed-h200-cuda13", "seed-h200-cuda12"):
        assert planned[cid]["gdn_prefill_backend"] == "flashinfer"
        assert planned[cid]["gdn_spec"]["num_prefill_checkpoint_blocks"] == 1
        assert planned[cid]["block_size"] % 64 == 0
    seed = planned["seed-gb10-cuda13"]
    assert seed["max_concurrency"] == seed["num_blocks"] / (-(-262_144 // seed["block_size"]) + 3 * (2 + 4 + 1))


def test_the_control_falls_back_to_032s_figure(planned: dict[str, dict[str, Any]]) -> None:
    """CUDA 12 on SM12.1: 0.33's condition is false, Triton prefill, no checkpoint: 0.32.0's figure."""
    control = next(c for c in CASES if c.id == "seed-gb10-cuda12")
    theirs = planned[control.id]
    assert theirs["gdn_prefill_backend"] == "triton"
    assert theirs["gdn_spec"]["num_prefill_checkpoint_blocks"] == 0
    old = dspark(control, "0.32.0")
    assert (old.block_size, old.num_blocks, old.kv_pool_tokens, old.max_concurrency) == (
        theirs["block_size"], theirs["num_blocks"], theirs["kv_pool_tokens"], theirs["max_concurrency"]
    )
    assert theirs["max_concurrency"] == theirs["num_blocks"] / (-(-262_144 // theirs["block_size"]) + 3 * (2 + 4))
