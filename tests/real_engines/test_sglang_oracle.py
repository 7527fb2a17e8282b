"""dspark's SGLang sizing against SGLang 0.5.23's own code, run in-process (dspark_inside.sglang.sizing).

Each case is a launch_server argv, a GPU (nvidia-smi MiB, compute capability) and two free-memory
readings (before and after the weights). SGLang's parser, resolution pipeline, ModelConfig and
KVCacheConfigurator._resolve_memory_pool_config size the pools; dspark.engines.sglang.capacity predicts the same
figures from config.json alone. Every figure must be equal, the float ones bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark.engines.inside import InsideFailure, run_inside
from dspark.engines.sglang.capacity import compute_sglang_capacity
from dspark.engines.sglang.options import parse_sglang_flags
from dspark.engines.sglang.sizing_types import SglangCapacity
from dspark.model.architecture import parse_config, parse_drafter

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
H200_MIB = 143771  # nvidia-smi memory.total on the H200 of docs/hardware.md
H200_FREE = 150_109_880_320  # NVML free there
WEIGHTS = 20 * GIB + 12_345_679  # an odd figure, so float32 rounding at TP > 1 shows

_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
    "rope_theta": 1000000, "tie_word_embeddings": False,
}
_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "vocab_size": 1024, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
    "full_attention_interval": 4, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
    "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "num_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "partial_rotary_factor": 0.25, "num_nextn_predict_layers": 1,
}
_NEXT_UNLISTED_MTP = {k: v for k, v in _NEXT.items() if k != "num_nextn_predict_layers"}
# Flash-Next: the Qwen3-Next-80B shape (docs/deployment.md); its config does not list the MTP layer.
_FLASH_NEXT = {
    **_NEXT_UNLISTED_MTP, "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 48,
    "num_attention_heads": 16, "head_dim": 256, "vocab_size": 151936, "max_position_embeddings": 262144,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "rope_theta": 10000000,
}
_DSV3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 4, "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    "kv_lora_rank": 64, "q_lora_rank": 96, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    "routed_scaling_factor": 1.0, "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 10000,
    "num_nextn_predict_layers": 1,
}
_DSA = {
    **_DSV3, "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "kv_lora_rank": 128,
    "index_topk": 64, "index_head_dim": 128, "index_n_heads": 4,
}
_DFLASH_DRAFT = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
    "rope_theta": 1000000, "block_size": 8, "num_target_layers": 4,
    "dflash_config": {"block_size": 8, "target_layer_ids": [1, 2]},
}
# The shipped 27B recipe's config: a multimodal wrapper (text_config + a 1152-wide vision tower), for which SGLang
# lowers the default fraction (memory_hook.adjust_mem_fraction_for_vlm) and keeps 100 MiB (+1 GiB with CUDA
# feature transport) of the KV budget for multimodal caches (kv_cache_configurator.mm_runtime_reservation_gb).
_QWEN27B = yaml.safe_load((HERE.parents[1] / "dspark/data/recipes/qwen27b-dflash-sglang.yaml").read_text())[
    "model"]["config"]
_QWEN27B_WIDE_VIT = {**_QWEN27B, "vision_config": {**_QWEN27B["vision_config"], "num_hidden_layers": 48,
                                                   "hidden_size": 1664}}
CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3": _QWEN3, "next": _NEXT, "next-unlisted-mtp": _NEXT_UNLISTED_MTP, "flash-next": _FLASH_NEXT,
    "dsv3": _DSV3, "dsa": _DSA, "dflash-draft": _DFLASH_DRAFT, "qwen27b": _QWEN27B,
    "qwen27b-wide-vit": _QWEN27B_WIDE_VIT,
}


@dataclass(frozen=True)
class Case:
    """One launch: model, flags after --model-path, GPU and free memory before / after the weights."""

    id: str
    model: str
    flags: tuple[str, ...] = ()
    gpu_mib: int = H200_MIB
    free_before: int = H200_FREE
    weights: int = WEIGHTS
    capability: tuple[int, int] = (9, 0)
    integrated: bool = False
    draft: str | None = None
    expect_error: str | None = None  # the refusal code dspark must predict (SGLang raises)
    env: dict[str, str] = field(default_factory=dict)


def _seats(model: str, flags: tuple[str, ...], seats: tuple[int, ...], tag: str) -> list[Case]:
    return [Case(f"{tag}-{n}", model, (*flags, "--max-running-requests", str(n))) for n in seats]


FIXED_F = ("--mem-fraction-static", "0.88")  # with the default, seats move it through the decode-graph reserve
CASES: list[Case] = [
    # Dense GQA
    Case("dense-default", "qwen3"),
    Case("dense-tp2", "qwen3", ("--tp-size", "2")),
    Case("dense-tp4-odd-free", "qwen3", ("--tp-size", "4"), free_before=H200_FREE + 777, weights=WEIGHTS + 3),
    Case("dense-fp8-page16", "qwen3", ("--kv-cache-dtype", "fp8_e4m3", "--page-size", "16")),
    Case("dense-pin", "qwen3", ("--max-total-tokens", "1.5M")),
    Case("dense-pin-above-profiled", "qwen3", ("--max-total-tokens", "1000G")),
    Case("dense-context-2048-seats-16", "qwen3", ("--context-length", "2048", "--max-running-requests", "16")),
    Case("dense-f080-chunk-off", "qwen3", ("--mem-fraction-static", "0.8", "--chunked-prefill-size", "-1")),
    Case("dense-no-chunk-default-f", "qwen3", ("--chunked-prefill-size", "-1")),
    Case("dense-graph-max-64", "qwen3", ("--cuda-graph-max-bs-decode", "64")),
    Case("dense-graph-list", "qwen3", ("--cuda-graph-bs-decode", "1", "3", "9", "300")),
    Case("dense-no-graph", "qwen3", ("--disable-cuda-graph",)),
    Case("dense-4090", "qwen3", (), gpu_mib=24564, free_before=24 * GIB, weights=3 * GIB),
    Case("dense-a100-40g", "qwen3", (), gpu_mib=40960, free_before=39 * GIB, weights=3 * GIB),
    Case("dense-h100", "qwen3", (), gpu_mib=81559, free_before=79 * GIB, weights=3 * GIB),
    Case("dense-b200", "qwen3", (), gpu_mib=183359, free_before=178 * GIB, weights=3 * GIB, capability=(10, 0)),
    Case("dense-gb10-unified-tp2", "qwen3", ("--tp-size", "2"), gpu_mib=124_546, free_before=118_412_345_678,
         weights=24 * GIB + 5, capability=(12, 1), integrated=True),
    # MLA (DeepSeek-V3 shape); its NEXTN draft path defaults to the target itself
    Case("mla-default", "dsv3"),
    Case("mla-fp8", "dsv3", ("--kv-cache-dtype", "fp8_e4m3")),
    Case("mla-nextn", "dsv3", ("--speculative-algorithm", "NEXTN")),
    Case("mla-nextn-steps2-tp2", "dsv3", ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2",
                                          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
                                          "--tp-size", "2")),
    # DSA (DeepSeek-V3.2 shape): page 64 always, bf16 KV on SM90 and fp8 from SM100, the indexer's keys
    Case("dsa-default", "dsa"),
    Case("dsa-fp8", "dsa", ("--kv-cache-dtype", "fp8_e4m3")),
    Case("dsa-nextn", "dsa", ("--speculative-algorithm", "NEXTN")),
    Case("dsa-b200", "dsa", (), gpu_mib=183359, free_before=178 * GIB, capability=(10, 0)),
    # SM100: the attention backend SGLang picks decides the page size
    Case("b200-dense-page16", "qwen3", ("--page-size", "16"), gpu_mib=183359, free_before=178 * GIB,
         capability=(10, 0)),
    Case("b200-dense-eagle", "qwen3", ("--speculative-algorithm", "EAGLE"), draft="qwen3", gpu_mib=183359,
         free_before=178 * GIB, capability=(10, 0)),
    Case("b200-mla", "dsv3", (), gpu_mib=183359, free_before=178 * GIB, capability=(10, 0)),
    Case("b200-mla-page32", "dsv3", ("--page-size", "32"), gpu_mib=183359, free_before=178 * GIB,
         capability=(10, 0)),
    Case("b200-hybrid", "next", (), gpu_mib=183359, free_before=178 * GIB, capability=(10, 0)),
    Case("b200-hybrid-no-radix", "next", ("--disable-radix-cache",), gpu_mib=183359, free_before=178 * GIB,
         capability=(10, 0)),
    Case("b200-hybrid-nextn-page16", "next", ("--speculative-algorithm", "NEXTN", "--page-size", "16"),
         gpu_mib=183359, free_before=178 * GIB, capability=(10, 0)),
    Case("b200-hybrid-nextn-topk1", "next", ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                                             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"),
         gpu_mib=183359, free_before=178 * GIB, capability=(10, 0)),
    # Hybrid Gated-DeltaNet (Qwen3-Next shape)
    Case("hybrid-default", "next"),
    Case("hybrid-tp2", "next", ("--tp-size", "2")),
    Case("hybrid-ssm-bf16", "next", ("--mamba-ssm-dtype", "bfloat16")),
    Case("hybrid-no-overlap", "next", ("--disable-overlap-schedule",)),
    Case("hybrid-lazy", "next", ("--mamba-radix-cache-strategy", "extra_buffer_lazy")),
    Case("hybrid-ratio-0.5", "next", ("--mamba-full-memory-ratio", "0.5")),
    Case("hybrid-no-radix-seats-32", "next", ("--disable-radix-cache", "--max-running-requests", "32")),
    Case("hybrid-no-radix-nextn-seats-32", "next", ("--disable-radix-cache", "--max-running-requests", "32",
                                                   "--speculative-algorithm", "NEXTN")),
    Case("hybrid-mamba-200-nextn", "next", ("--max-mamba-cache-size", "200", "--speculative-algorithm", "NEXTN")),
    Case("hybrid-mamba-200", "next", ("--max-mamba-cache-size", "200")),
    Case("hybrid-pin", "next", ("--max-total-tokens", "100000", "--speculative-algorithm", "NEXTN")),
    Case("hybrid-nextn-default", "next", ("--speculative-algorithm", "NEXTN")),
    Case("hybrid-unlisted-mtp-nextn", "next-unlisted-mtp", ("--speculative-algorithm", "NEXTN")),
    Case("hybrid-nextn-tp2", "next", ("--speculative-algorithm", "NEXTN", "--tp-size", "2")),
    *_seats("next", FIXED_F, (8, 64, 512), "hybrid-seats"),
    *_seats("next", (*FIXED_F, "--speculative-algorithm", "NEXTN"), (8, 16, 32, 48), "hybrid-nextn-seats"),
    *_seats("next", ("--speculative-algorithm", "NEXTN"), (6, 16, 32), "hybrid-nextn-default-f-seats"),
    # Flash-Next's real shape at TP=2 on a GB10-like unified-memory node with MTP (NEXTN), 6 / 16 / 32 seats
    *[
        Case(f"flash-next-gb10-{n}", "flash-next", ("--tp-size", "2", "--speculative-algorithm", "NEXTN",
                                                   "--max-running-requests", str(n), "--page-size", "64"),
             gpu_mib=124_546, free_before=118_412_345_678, weights=26 * GIB + 123, capability=(12, 1),
             integrated=True)
        for n in (6, 16, 32)
    ],
    # Multimodal: the 27B recipe's model on a GB10 pair (16 / 32 seats), on an H200, text-only, and a wider ViT
    *[
        Case(f"qwen27b-gb10-{n}", "qwen27b", ("--tp-size", "2", "--max-running-requests", str(n)),
             gpu_mib=124_546, free_before=118_412_345_678, weights=28 * GIB + 77, capability=(12, 1),
             integrated=True)
        for n in (16, 32)
    ],
    Case("qwen27b-h200", "qwen27b", (), weights=54 * GIB),
    Case("qwen27b-language-only", "qwen27b", ("--language-only",), weights=54 * GIB),
    Case("qwen27b-cuda-ipc", "qwen27b", ("--mm-feature-transport", "cuda_ipc"), weights=54 * GIB),
    Case("qwen27b-wide-vit", "qwen27b-wide-vit", (), weights=54 * GIB),
    # DFLASH with a drafter of its own (two layers, block size 8)
    Case("dflash", "qwen3", ("--speculative-algorithm", "DFLASH"), draft="dflash-draft"),
    # Errors SGLang raises
    Case("err-weights-leave-no-kv", "qwen3", (), weights=H200_FREE - 5 * GIB,
         expect_error="sglang-weights-leave-no-kv"),
    # 0.5 * 100 GiB of slack leaves 1,000 bytes: less than one 2,048-byte cell
    Case("err-pool-zero", "qwen3", ("--mem-fraction-static", "0.5"), free_before=100 * GIB,
         weights=50 * GIB - 1000, expect_error="sglang-not-enough-memory"),
    Case("err-mamba-too-small", "flash-next", ("--mem-fraction-static", "0.3", "--speculative-algorithm", "NEXTN"),
         free_before=100 * GIB, weights=69 * GIB + 1, expect_error="sglang-mamba-cache-too-small"),
    Case("err-mamba-no-requests", "next", ("--max-mamba-cache-size", "3"), expect_error="sglang-mamba-no-requests"),
    Case("err-context", "qwen3", ("--context-length", "8192"), expect_error="sglang-context-length"),
    Case("err-spec-args", "qwen3", ("--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"),
         draft="qwen3", expect_error="sglang-speculative-args"),
    Case("err-spec-steps-only", "next", ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2"),
         expect_error="sglang-speculative-args"),
]


def _write_models(root: Path) -> dict[str, Path]:
    dirs = {}
    for name, config in CONFIGS.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(config))
        dirs[name] = d
    return dirs


def _argv(case: Case, dirs: dict[str, Path]) -> list[str]:
    argv = ["--model-path", str(dirs[case.model]), *case.flags]
    if case.draft is not None:
        argv += ["--speculative-draft-model-path", str(dirs[case.draft])]
    return argv


@pytest.fixture(scope="module")
def oracle(sglang_python: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, dict[str, Any]]]:
    """SGLang's own figures for every case, from one engine-venv process."""
    dirs = _write_models(tmp_path_factory.mktemp("sglang-models"))
    payload = [
        {"id": c.id, "argv": _argv(c, dirs), "gpu_mib": c.gpu_mib, "free_before": c.free_before,
         "free_after": c.free_before - c.weights, "capability": list(c.capability), "integrated": c.integrated,
         "env": c.env}
        for c in CASES
    ]
    try:
        results = {r["id"]: r for r in run_inside(sglang_python, "sglang.sizing", payload, 900)}
    except InsideFailure as failure:
        pytest.fail(f"the SGLang oracle gave no answer ({failure.detail}):\n{failure.last(60)}", pytrace=False)
    if len(results) != len(CASES):
        pytest.fail(f"the SGLang oracle answered {len(results)} of {len(CASES)} cases", pytrace=False)
    return {c.id: (c, {**results[c.id], "_dirs": dirs}) for c in CASES}


def predict(case: Case, dirs: dict[str, Path]) -> SglangCapacity:
    """dspark's prediction for a case, from the same config.json and argv."""
    arch = parse_config(CONFIGS[case.model], str(dirs[case.model]))
    drafter = None
    if case.draft is not None:
        drafter = parse_drafter(CONFIGS[case.draft], "dflash" if case.draft == "dflash-draft" else "eagle")
    options = parse_sglang_flags(_argv(case, dirs))
    return compute_sglang_capacity(
        arch, options, gpu_capacity_bytes=case.gpu_mib << 20, free_before_load_bytes=case.free_before,
        weights_per_gpu_bytes=case.weights, drafter=drafter, compute_capability=case.capability,
    )


def figures(cap: SglangCapacity) -> dict[str, Any]:
    """The figures compared with SGLang's, under the names the oracle script reports them."""
    return {
        "mem_fraction_static": cap.mem_fraction_static,
        "chunked_prefill_size": cap.chunked_prefill_size,
        "context_len": cap.context_len,
        "decode_graph_bs": list(cap.decode_graph_bs),
        "speculative_num_draft_tokens": cap.speculative_num_draft_tokens,
        "resolved_max_running_requests": cap.requested_max_running_requests,
        "pre_model_load_gib": cap.pre_model_load_gib,
        "cell_size": cap.cell_size,
        "mamba_cache_per_req": cap.mamba.per_req_bytes if cap.mamba else None,
        "max_mamba_cache_size": cap.mamba.max_mamba_cache_size if cap.mamba else None,
        "max_total_num_tokens": cap.max_total_num_tokens,
        "max_running_requests": cap.max_running_requests,
        "capture_bs": list(cap.cuda_graph_capture_bs),
        "page_size": cap.page_size,
        "decode_graph_backend": "full" if cap.decode_graph_max_bs is not None else "disabled",
        "prefill_graph_backend": cap.prefill_graph.backend,
        "prefill_graph_bs_count": len(cap.prefill_graph.capture_sizes),
    }


@pytest.mark.parametrize("case_id", [c.id for c in CASES if c.expect_error is None])
def test_figures_equal_sglang(oracle: dict[str, tuple[Case, dict[str, Any]]], case_id: str) -> None:
    """Every sizing figure equals what SGLang 0.5.23's own code computes for the same launch."""
    case, sg = oracle[case_id]
    assert sg["error"] is None, sg.get("traceback")
    cap = predict(case, sg["_dirs"])
    assert cap.refusals == ()
    mine = figures(cap)
    theirs = {k: sg.get(k) for k in mine}
    if theirs["max_mamba_cache_size"] is None or sg.get("mamba_cache_per_req") is None:
        theirs["max_mamba_cache_size"] = None  # SGLang's schedule bag keeps the field None on non-hybrids
    assert mine == theirs


@pytest.mark.parametrize("case_id", [c.id for c in CASES if c.expect_error is not None])
def test_errors_equal_sglang(oracle: dict[str, tuple[Case, dict[str, Any]]], case_id: str) -> None:
    """Where SGLang refuses the launch, dspark predicts the same refusal (and SGLang's message)."""
    case, sg = oracle[case_id]
    assert sg["error"] is not None, f"SGLang sized it: {sg.get('max_total_num_tokens')} tokens"
    cap = predict(case, sg["_dirs"])
    assert [r.code for r in cap.refusals] == [case.expect_error]
    kind, _, text = sg["error"].partition(": ")
    if kind in ("AssertionError", "TypeError"):
        assert cap.refusals[0].message.startswith(sg["error"].rstrip())
    else:
        assert cap.refusals[0].message == text


def test_hybrid_pool_does_not_depend_on_seats_without_speculation(
    oracle: dict[str, tuple[Case, dict[str, Any]]],
) -> None:
    """0.5.23, radix cache on, no speculation: the token pool is the same at 8, 64 and 512 seats."""
    pools = [oracle[f"hybrid-seats-{n}"][1]["max_total_num_tokens"] for n in (8, 64, 512)]
    assert len(set(pools)) == 1
    seats = [oracle[f"hybrid-seats-{n}"][1]["max_running_requests"] for n in (8, 64, 512)]
    assert seats == [8, 64, 512]


def test_hybrid_seats_capped_by_state_slots(oracle: dict[str, tuple[Case, dict[str, Any]]]) -> None:
    """--max-mamba-cache-size 200 with the radix cache and overlap: 5 slots per request, 40 requests."""
    _, sg = oracle["hybrid-mamba-200"]
    assert (sg["max_mamba_cache_size"], sg["max_running_requests"]) == (200, 40)


def test_hybrid_pool_shrinks_with_seats_under_speculation(oracle: dict[str, tuple[Case, dict[str, Any]]]) -> None:
    """With NEXTN each extra seat costs D = 4 intermediate states: per_req * 4 / cell tokens, floored."""
    results = [oracle[f"hybrid-nextn-seats-{n}"][1] for n in (8, 16, 32, 48)]
    pools = [r["max_total_num_tokens"] for r in results]
    assert pools == sorted(pools, reverse=True)
    assert len(set(pools)) == 4
    per_seat = results[0]["mamba_cache_per_req"] * 4 / results[0]["cell_size"]
    assert abs((pools[0] - pools[1]) - 8 * per_seat) <= 1
