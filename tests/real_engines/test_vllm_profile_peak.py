"""The profile-run trace (dspark_inside.vllm.profile_peak) run by the installed vLLM 0.32.0 on tiny configs.

The live bytes it counts must be the tensors the release's forward keeps alive at its peak, shape by shape: a
wider MLP adds exactly its gate/up projection and its activation at the peak, twice the tokens doubles the
peak, and a MoE model keeps the fused-MoE workspace that dspark's heuristic (TritonExperts.workspace_shapes,
measured on the H200 to within 0.5 MiB) sizes. The H200 comparison (0.25.0, the recorded rows) is
benchmarks/profile_peak_vs_gpu.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspark.engines.inside import run_inside
from dspark.engines.vllm import profile_trace as pt
from dspark.engines.vllm.budget import moe_workspace_bytes
from dspark.model.architecture import parse_config

H200 = pt.DeviceFacts("NVIDIA H200", (9, 0), 150754820096, 132)
TOKENS = 256
DENSE: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 1024, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "hidden_act": "silu",
}
MOE: dict[str, Any] = {
    **DENSE, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "moe_intermediate_size": 32,
    "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "norm_topk_prob": True,
    "mlp_only_layers": [],
}


def _request(config: dict[str, Any], tokens: int = TOKENS) -> dict[str, Any]:
    return pt.trace_request(config, max_num_batched_tokens=tokens, max_num_seqs=4, max_model_len=1024,
                            device=H200)


@pytest.mark.engine
@pytest.mark.timeout(150)
def test_the_trace_counts_the_forwards_live_tensors(vllm_python: str) -> None:
    wide = {**DENSE, "intermediate_size": 256}
    requests = [_request(DENSE), _request(DENSE, 2 * TOKENS), _request(wide), _request(MOE)]
    base, double, wider, moe_v2 = run_inside(vllm_python, pt.TOOL, requests, 100)
    # 0.32.0 gives this MoE the V2 runner too; VLLM_USE_V2_MODEL_RUNNER=0 is the release's own switch to V1.
    [moe] = run_inside(vllm_python, pt.TOOL, [_request(MOE)], 100,
                       env={**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "0"})
    for a in (base, double, wider, moe_v2, moe):
        assert a["ok"], a.get("error")
        assert a["engine_version"] == "0.32.0" and a["dtype"] == "bfloat16"
    row = TOKENS * 64 * 2  # one hidden-wide bf16 activation of the batch
    cublas = 32 << 20  # allocated at the first GEMM (the first layer's QKV projection), never freed
    # Dense: the V2 runner (no sampler traced); its peak is in a layer's MLP, the release's own kernels stubbed.
    assert base["runner"] == "v2" and base["peak_bytes"] == base["forward_peak_bytes"]
    assert base["cublas_at"].startswith(("aten.mm", "aten.linear", "aten.addmm"))
    assert base["stubbed_kernels"]["_C.silu_and_mul"] == DENSE["num_hidden_layers"]
    sampled = 4 * 64 * 2  # the sampler's rows (hidden_states[cumsum - 1]): one 512-B block
    assert base["kept_bytes"] == row + sampled + cublas  # the forward's output hidden states and those rows
    assert base["forward_peak_bytes"] > 4 * row + cublas
    assert double["forward_peak_bytes"] - cublas == 2 * (base["forward_peak_bytes"] - cublas)
    # 128 more intermediate columns: gate_up grows by 2 x 128, the activation by 128, all alive at the peak.
    assert wider["forward_peak_bytes"] - base["forward_peak_bytes"] == TOKENS * 3 * 128 * 2
    # MoE: the fused-MoE workspace stays allocated after the forward (through the sampler, on the V1 runner).
    assert moe_v2["runner"] == "v2" and moe_v2["sampler_peak_bytes"] == 4 * 1024 * 2  # V2: its logits only
    assert moe_v2["forward_peak_bytes"] == moe["forward_peak_bytes"]  # the runner does not change the forward
    assert moe["runner"] == "v1" and moe["sampler"] == "V1 GPUModelRunner._dummy_sampler_run"
    assert moe["triton_launches"].get("fused_moe_kernel", 0) >= MOE["num_hidden_layers"]
    arch = parse_config(MOE)
    resolved = type("R", (), {"model_dtype": "bfloat16", "max_num_batched_tokens": TOKENS, "tp": 1})()
    # The workspace as FusedMoEKernel allocates it (workspace1, whose memory the (M, K) output reuses, and
    # workspace2), beside the row the forward returns, as the dense model keeps: kept = those + the sampler's rows.
    assert moe["kept_bytes"] == moe_workspace_bytes(arch, resolved) + row + sampled + cublas
    assert moe["kept_bytes"] - row - sampled - cublas == TOKENS * 2 * (64 + 64) * 2  # M x topk x (N/2|K + N|K)
    assert moe["sampler_peak_bytes"] > 4 * 1024 * 4  # fp32 logits of 4 requests, and more
    assert moe["peak_bytes"] == max(moe["forward_peak_bytes"], moe["kept_bytes"] + moe["sampler_peak_bytes"])


@pytest.mark.engine
@pytest.mark.timeout(150)
def test_validate_plans_an_eager_gpu_launch_on_the_traced_peak(vllm_python: str, tmp_path: Path) -> None:
    """DSPARK_PROFILE_TRACE=1: the installed 0.32.0 traces the plan's profile run once; the next validate reads
    the cache; the budget's activation term is the traced peak (cuBLAS workspace included)."""
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(DENSE))
    env = {**os.environ, "DSPARK_PROFILE_TRACE": "1", "DSPARK_ENGINE_PYTHON": vllm_python,
           "DSPARK_DATA_DIR": str(tmp_path / "data")}
    argv = [sys.executable, "-m", "dspark", "validate", "--model", str(model), "--hardware", "h200",
            "--max-model-len", "1024", "--max-num-seqs", "4", "--json", "--", "--enforce-eager",
            "--max-num-batched-tokens", str(TOKENS)]

    def validate() -> dict[str, Any]:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=140, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        capacity: dict[str, Any] = json.loads(done.stdout)["capacity"]
        return capacity

    first = validate()
    [traced] = [a for a in first["kv_budget_assumptions"] if a.startswith("activation peak")]
    assert "traced: vLLM 0.32.0's own profile run, eager, V2 runner, run on this host" in traced
    [cached] = [json.loads(p.read_text()) for p in (tmp_path / "data" / "profile-traces").glob("*.json")]
    assert first["details"]["kv_budget_terms"]["activation_peak"] == cached["peak_bytes"] > 32 << 20
    again = validate()
    assert any("cached on this host" in a for a in again["kv_budget_assumptions"])
    assert again["kv_pool_tokens"] == first["kv_pool_tokens"]
    compiled = subprocess.run([*argv[:-3], "--max-num-batched-tokens", str(TOKENS)], env=env, capture_output=True,
                              text=True, timeout=60, check=False)
    notes = json.loads(compiled.stdout)["capacity"]["details"]["notes"]
    assert any(n.startswith("activation peak stays the heuristic: the plan is compiled") for n in notes)
