"""The GPU-truth rows: one engine start each, one factor changed at a time from the Qwen3-8B baseline.

Each row is a model config (tests/device/configs/NAME.json, public shapes, dummy weights) and the flags given to
both `dspark start --dry-run` and, through the argv dspark prints, to `vllm serve`. Shared by gpu_truth.py (runs
them on the GPU) and gpu_table.py (prints the table from the recorded results).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Flags every row passes: config-only model dirs (dummy weights, no tokenizer); gpu_truth.py adds --host 127.0.0.1.
COMMON = ("--max-model-len", "32768", "--load-format", "dummy", "--skip-tokenizer-init")


# FlashInfer is not carried, and 0.25.0 picks its GDN prefill kernel on Hopper (_resolve_gdn_prefill_backend):
# the hybrid rows ask for the Triton (FLA) kernel instead.
TRITON_GDN = ("--additional-config", '{"gdn_prefill_backend": "triton"}')


@dataclass(frozen=True)
class Row:
    """One engine start and the dspark plan for the same config."""

    name: str
    model: str  # tests/device/configs/<model>.json
    flags: tuple[str, ...] = ()  # vllm serve flags beside COMMON (dspark reads them after --)
    dspark: tuple[str, ...] = ()  # dspark options (e.g. --max-num-seqs)
    hold_gib: int = 0  # another process holds this much GPU memory during the row
    what: str = ""  # the factor this row changes
    env: tuple[tuple[str, str], ...] = field(default=())
    start_s: int = 150  # seconds to the engine's KV line on the H200 (recorded; gpu_truth.py starts none later)


# In the order they run (the most telling first: a device command has 10 minutes, a session 30).
ROWS: tuple[Row, ...] = (
    Row("qwen3-8b", "qwen3-8b", what="baseline: dense GQA, CUDA graphs, utilisation 0.92 (default)"),
    Row("qwen3-30b-a3b", "qwen3-30b-a3b", what="MoE (128 experts, top-8)"),
    Row("qwen3-30b-a3b-eager", "qwen3-30b-a3b", ("--enforce-eager",), what="MoE without graphs/compile"),
    Row("qwen3-8b-eager", "qwen3-8b", ("--enforce-eager",), what="no CUDA graphs, no torch.compile"),
    Row("qwen3-8b-1024seats", "qwen3-8b", dspark=("--max-num-seqs", "1024"),
        what="1,024 seats (vLLM's H200 default): sampler rows and 51 graph sizes"),
    Row("llama-3.1-8b", "llama-3.1-8b", what="dense Llama (vocab 128k)"),
    Row("deepseek-v2-lite", "deepseek-v2-lite", what="MLA + MoE (64 experts, 2 shared)"),
    Row("gemma-3-12b-text", "gemma-3-12b-text", what="interleaved sliding window 5:1 (1,024), vocab 262k"),
    Row("qwen3-8b-fp8kv", "qwen3-8b", dspark=("--kv-cache-dtype", "fp8"), what="fp8 KV cache"),
    Row("qwen3-8b-u0.7", "qwen3-8b", ("--gpu-memory-utilization", "0.7"), what="utilisation 0.7"),
    Row("qwen3-8b-u0.5", "qwen3-8b", ("--gpu-memory-utilization", "0.5"), what="utilisation 0.5"),
    Row("qwen3-8b-held40-u0.6", "qwen3-8b", ("--gpu-memory-utilization", "0.6"), hold_gib=40,
        what="another process holds 40 GiB; utilisation 0.6"),
    Row("qwen3-8b-held40", "qwen3-8b", hold_gib=40,
        what="another process holds 40 GiB at the default 0.92: the start-up check refuses"),
    Row("mistral-7b-v0.1", "mistral-7b-v0.1", what="sliding window on every layer (4,096)"),
    Row("qwen3.5-27b", "qwen3.5-27b", ("--language-model-only", *TRITON_GDN), start_s=215,
        what="hybrid Gated DeltaNet 3:1 (Qwen3.5-27B, text only: the vision tower is not loaded)"),
    Row("qwen3.5-27b-mtp3", "qwen3.5-27b",
        ("--language-model-only", *TRITON_GDN, "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}'),
        start_s=250,  # 199 s on 2026-12-01; stopped at ~225 s without its KV lines on 2026-12-02
        what="the hybrid with its own MTP layer drafting 3 tokens (speculative decoding)"),
    Row("gemma-3-12b-text-eager", "gemma-3-12b-text", ("--enforce-eager",),
        what="the Gemma row without torch.compile and CUDA graphs: separates compilation from the model"),
    Row("gemma-3-12b-text-nobench", "gemma-3-12b-text",
        ("--compilation-config",
         '{"inductor_compile_config": {"combo_kernels": true, "benchmark_combo_kernel": false}}'),
        what="the compiled Gemma row with Inductor's combo-kernel benchmarking off (combo kernels kept): is the "
             "compiled profile's embedding-table transient that benchmarking's random inputs?"),
    # Public shapes not run before 2026-12-02 (issue 28): each config.json is the HF repo's, named in `what`.
    Row("mixtral-8x7b-v0.1", "mixtral-8x7b-v0.1", start_s=170,
        what="MoE, 8 experts top-2 (mistralai/Mixtral-8x7B-v0.1): the expert intermediate (14,336) is wider than "
             "hidden, so the fused-MoE workspace is N-wide; 93 GB of weights, V1 runner"),
    Row("nemotron-nano-9b-v2", "nemotron-nano-9b-v2", start_s=200,
        what="Mamba2 hybrid (nvidia/NVIDIA-Nemotron-Nano-9B-v2): 27 Mamba2, 4 attention, 25 MLP-only layers"),
    Row("qwen3-8b-fp8", "qwen3-8b-fp8", env=(("VLLM_USE_DEEP_GEMM", "0"),),
        what="block-FP8 checkpoint (Qwen/Qwen3-8B-FP8, e4m3, 128x128 blocks); DeepGEMM off (its JIT needs a "
             "compiler the image may lack), so the precompiled CUTLASS block-FP8 GEMM runs"),
    # Public shapes not run before the rows3 session of 2026-12-02 (issue 28), predicted before any boot.
    Row("qwen2-57b-a14b", "qwen2-57b-a14b", start_s=150,
        what="MoE with a gated shared expert (Qwen/Qwen2-57B-A14B: 64 experts top-8, expert width 2,560, a "
             "20,480-wide shared expert behind a sigmoid gate, GQA 28:4, qkv bias); 115 GB of weights leave ~21 GB "
             "of KV, so its activation peak weighs 5x what it does on an 8B row; the V2 runner (Qwen2MoE is in "
             "0.25's DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES)"),
    Row("phi-4-mini-instruct", "phi-4-mini-instruct", start_s=110,
        what="Phi-3 code (microsoft/Phi-4-mini-instruct): LongRoPE (short + long tables), partial rotary 0.75, "
             "tied embeddings, a 200,064-token vocab, and sliding_window 262,144 without layer_types, which vLLM "
             "applies to every layer (CacheConfig.sliding_window) though it exceeds max_model_len"),
)

BY_NAME = {r.name: r for r in ROWS}
