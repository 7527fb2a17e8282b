"""The vLLM releases dspark models, and what changes between them, as named facts (no arithmetic here).

Each field says where a release computes differently from the one before, citing the function of that
release it mirrors; the capacity code asks the fact, never the version string, so the next release is one
more entry here plus the code its new facts need.
"""

from __future__ import annotations

from typing import NamedTuple


class VllmRelease(NamedTuple):
    """What one vLLM release does that KV sizing depends on (a NamedTuple: a few immutable records, about half
    a frozen dataclass's cost to create at start-up; a release derives from another by _replace)."""

    version: str
    # Speculative methods the V2 model runner cannot run (VllmConfig._get_v2_model_runner_unsupported_features).
    v1_only_methods: frozenset[str] = frozenset({"suffix", "medusa", "mlp_speculator", "custom_class"})
    # Async scheduling with a non-EAGLE speculative method: 0.32 turns it off on every runner; 0.33 only on
    # the V1 runner (VllmConfig.__post_init__, v1_async_sched_incompat). It sets the in-flight tokens.
    async_any_method_on_v2: bool = False
    # FlashInfer's GDN prefill exports mid-prefill checkpoints on this token grid (0.33: gdn_attn.py
    # FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64): in "align" mode the hybrid block aligns to lcm(block, grid)
    # (Platform._align_hybrid_block_size) and each GDN layer keeps one prefill checkpoint block
    # (GatedDeltaNetAttention.get_kv_cache_spec: num_prefill_checkpoint_blocks=1). None: no such export.
    gdn_flashinfer_checkpoint_grid: int | None = None
    # CpuPlatform.get_attn_backend_cls checks the KV dtype: MLA takes auto/bfloat16/float16 only, and
    # CPU_ATTN's fp8 needs AVX-512 or AMX (CPUAttentionBackend.supports_kv_cache_dtype).
    cpu_checks_kv_dtype: bool = False
    # VllmConfig._reject_mismatched_float_kv_cache: an explicit float16/bfloat16 KV dtype must be the model's.
    rejects_mismatched_float_kv: bool = False
    # EngineArgs.get_batch_defaults keeps GB10 (cc 12.1) on the small tier despite its memory.
    gb10_small_batch_defaults: bool = False
    # EngineArgs.create_engine_config warns that --mamba-cache-mode has no effect (prefix caching decides).
    mamba_cache_mode_deprecated: bool = False
    # gpu_worker.init_device creates cuBLAS handles before the start-up memory snapshot (baseline, not non-torch).
    cublas_in_baseline: bool = False
    # VllmConfig._is_default_v2_model_runner_model: None, every generate model takes the V2 model runner (unless a
    # feature needs V1); a set, only non-MoE, non-hybrid models and MoE models of these architectures do.
    v2_runner_moe_architectures: frozenset[str] | None = None
    # The V2 runner's profile_cudagraph_memory measures graph memory (False: it returns 0, nothing is reserved).
    v2_runner_profiles_cudagraphs: bool = True
    # The V1 runner's profile_cudagraph_memory captures the two largest descriptors per mode and extrapolates
    # (0.25, and 0.26 the same on CUDA: largest + (graphs - 1) x the second; dspark.engines.vllm.graph_memory);
    # False: not modelled so (0.32/0.33 keep the per-size heuristic).
    v1_graph_profile_two_samples: bool = False
    # VllmConfig._set_cudagraph_sizes adds the uniform decode batches (max_num_seqs, or n x (1 + spec) on the
    # request grid) to the default capture sizes (0.32); False: the token grid and max_num_batched_tokens only
    # (0.25 and 0.26 have no request_counts grid).
    capture_sizes_add_uniform_decode: bool = True
    # _set_cudagraph_sizes' default ceiling on SM 10.x (B200/B300): 1024 (0.32, is_device_capability_family(100));
    # 0.25/0.26 cap every device at min(max_num_seqs x (1 + spec) x 2, 512).
    blackwell_capture_ceiling: int = 1024
    # The compiled profile run's peak holds a transient: the (per-rank) embedding table and two hidden-wide rows of
    # the batch, the random arguments Inductor's compile-time combo-kernel benchmarking gives the fused embedding
    # gather + RMSNorm kernel (budget.py; measured on the H200 with 0.25.0: Llama-3.1-8B and Gemma-3-12B to
    # 43 KB, Qwen3-8B 1 MiB above, Qwen3.5-27B 0.76 row above). False: not measured, not counted.
    compiled_profile_embedding_transient: bool = False
    # The profile forward's peak is the live tensors of its largest llama-style layer block, counted from the layer
    # code (budget.forward_live_bytes; measured with 0.25.0 on the H200 to the 2 KB eager); False: the 16-row
    # heuristic (not measured there).
    profile_forward_live_rows: bool = False
    # Sliding-window / chunked-local admission (max_admission_blocks_per_request) counts the in-flight tokens of
    # every concurrent batch (VllmConfig.max_in_flight_tokens); False: max_num_batched_tokens only.
    admission_counts_in_flight: bool = True
    # Worker.determine_available_memory's non-torch term (CUDA context growth after the start-up snapshot), as a
    # heuristic byte count at TP x PP = 1.
    non_torch_bytes: int = 512 << 20
    # ModelConfig.is_prefix_caching_supported for a generative hybrid (GDN/Mamba): True turns prefix caching on
    # by default (mamba_cache_mode "align"); False leaves it off ("Hybrid models do not support prefix caching").
    hybrid_prefix_caching_default: bool = True
    changes: tuple[str, ...] = ()  # what differs from the previous release, in words


# vLLM 0.25.0: the release whose wheel pins the GPU image's torch 2.11.0 (docs/gpu-truth.md measured it on an
# H200); read against 0.32.0's source. Listed as the changes 0.32.0 made are, but backwards: what 0.25 does.
V0_25_0 = VllmRelease(
    "0.25.0",
    # _get_v2_model_runner_unsupported_features: V2 runs only eagle, eagle3, mtp, dflash and dspark drafts.
    v1_only_methods=frozenset({"ngram", "ngram_gpu", "draft_model", "suffix", "medusa", "mlp_speculator",
                               "custom_class"}),
    v2_runner_moe_architectures=frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM",
                                           "GraniteMoeForCausalLM"}),
    v2_runner_profiles_cudagraphs=False,
    v1_graph_profile_two_samples=True,
    capture_sizes_add_uniform_decode=False,
    blackwell_capture_ceiling=512,
    compiled_profile_embedding_transient=True,
    profile_forward_live_rows=True,
    admission_counts_in_flight=False,
    # Measured on the H200 (tests/device/results/2026-12-01): non_torch_increase 225-240 MiB in all 13 rows.
    non_torch_bytes=240 << 20,
    hybrid_prefix_caching_default=False,
    changes=(
        "model runner: V2 only for non-MoE, non-hybrid models and DeepseekV2/Qwen2Moe/GraniteMoe "
        "(DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES); Qwen3-MoE and other MoE models run the V1 runner",
        "the V2 runner reserves no CUDA-graph memory (GPUModelRunner V2 profile_cudagraph_memory returns 0)",
        "sliding-window and chunked-local admission count max_num_batched_tokens, not the in-flight tokens "
        "(SlidingWindowSpec.max_admission_blocks_per_request)",
        "budget: requested - (weights + torch peak increase + non-torch increase) - CUDA-graph estimate, the "
        "graphs profiled inside memory_profiling; 0.32 counts the free-memory drop plus the transient headroom",
        "the V2 runner runs eagle, eagle3, mtp, dflash and dspark drafts only (others take the V1 runner)",
        "hybrid (GDN/Mamba) models: prefix caching off by default (ModelConfig.is_prefix_caching_supported: "
        "'Hybrid models do not support prefix caching'), so one state block per request and no 'align' mode",
        "NOT MODELLED: speculative decoding was not checked against 0.25.0 on a GPU",
    ),
)
# vLLM 0.26.0: read against 0.25.0's source (its own planner agrees as witness on the GPU-truth configs,
# docs/version-matrix.md); the budget (Worker.determine_available_memory), batch defaults, capture sizes,
# request_memory, hybrid prefix caching and the V2 runner's graph profile are 0.25.0's. 0.27.0 is not modelled:
# it takes 0.32's budget accounting (free-memory drop plus transient headroom), which the GPU has not measured.
V0_26_0 = V0_25_0._replace(
    version="0.26.0",
    v2_runner_moe_architectures=frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM",
                                           "InklingForCausalLM", "InklingForConditionalGeneration",
                                           "LongcatFlashNgramForCausalLM"}),
    admission_counts_in_flight=True,
    changes=(
        "sliding-window and chunked-local admission count the in-flight tokens of every concurrent batch "
        "(SlidingWindowSpec.max_admission_blocks_per_request, VllmConfig.max_in_flight_tokens), as 0.32 does",
        "the V2 runner's default MoE architectures add InklingForCausalLM, InklingForConditionalGeneration and "
        "LongcatFlashNgramForCausalLM (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES)",
        "NOT MODELLED: the V2 runner no longer refuses logprobs modes raw_logits/processed_logits; a DFlash draft "
        "mixing sliding and full attention forces the V2 runner; unify_kv_cache_spec_page_size pads a Mamba page "
        "up to a larger draft page (0.25 refuses); context parallelism (dspark plans none)",
        "NOT MODELLED: speculative decoding was not checked against 0.26.0 on a GPU",
    ),
)
V0_32_0 = VllmRelease("0.32.0")
V0_33_0 = V0_32_0._replace(
    version="0.33.0",
    v1_only_methods=frozenset({"suffix", "custom_class"}),
    async_any_method_on_v2=True,
    gdn_flashinfer_checkpoint_grid=64,
    cpu_checks_kv_dtype=True,
    rejects_mismatched_float_kv=True,
    gb10_small_batch_defaults=True,
    mamba_cache_mode_deprecated=True,
    cublas_in_baseline=True,
    changes=(
        "planning moved to kv_cache_planning.py / kv_cache_config_builder.py (same arithmetic)",
        "FlashInfer GDN prefill (SM90; SM10x/SM12x with head_k_dim 128 and CUDA >= 13) in align mode: "
        "hybrid block aligned to lcm(block, 64), one prefill checkpoint block per GDN layer and request",
        "CPU: MLA refuses a KV dtype other than auto/bfloat16/float16; fp8 attention needs AVX-512 or AMX",
        "an explicit float16/bfloat16 KV dtype other than the model's is rejected",
        "GB10 (cc 12.1) keeps the small batch defaults (2,048 tokens, 256 seats for the API server)",
        "the V2 model runner runs medusa and mlp_speculator; async scheduling stays on with any method on V2",
        "--mamba-cache-mode is deprecated and has no effect",
        "cuBLAS handles are created before the start-up memory snapshot",
        "NOT MODELLED: VllmConfig._limit_max_model_len_to_draft lowers max_model_len to a separate draft "
        "model's on the V2 runner (dspark does not read the drafter's window)",
    ),
)

RELEASES: dict[str, VllmRelease] = {r.version: r for r in (V0_25_0, V0_26_0, V0_32_0, V0_33_0)}
MODELLED_VERSIONS = tuple(RELEASES)  # oldest first


def release(version: str) -> VllmRelease:
    """The facts of a modelled release (KeyError for others: callers pick the nearest modelled first)."""
    return RELEASES[version]
