"""SGLang 0.5.23's sizing formulas, table by table, with values worked out from its source.

The same functions are checked against SGLang's own code in tests/real_engines/test_sglang_oracle.py; here each
formula is pinned on its own, with the arithmetic written out.
"""

from __future__ import annotations

import math

import pytest

from dspark.core.errors import SettingsError
from dspark.engines.sglang.capacity import (
    available_gib,
    compute_sglang_capacity,
    float32,
    mamba_ratio,
    resolve_max_num_reqs,
)
from dspark.engines.sglang.options import SglangOptions, human_readable_int, parse_sglang_flags
from dspark.engines.sglang.server_args import resolve_page_size, resolve_prefill_graph
from dspark.engines.sglang.server_defaults import (
    captured_batch_sizes,
    decode_graph_batch_sizes,
    default_mem_fraction_static,
    dsa_indexer_cell_size,
    gpu_memory_defaults,
    linear_state_bytes,
    mha_cell_size,
    mla_cell_size,
    prefill_graph_batch_sizes,
    prefill_graph_reserve_mib,
    speculative_params,
    vlm_mem_fraction,
)
from dspark.engines.sglang.sizing_types import SglangCapacity
from dspark.model.architecture import AttentionLayer, LinearStateLayer, MLALayer, ModelArchitecture, MoE, parse_config

GIB = 1 << 30

GDN = LinearStateLayer(family="gated_delta_net", conv_kernel=4, num_k_heads=16, num_v_heads=32, head_k_dim=128,
                       head_v_dim=128)
FULL = AttentionLayer(num_kv_heads=2, head_dim=256)
# Flash-Next (docs/deployment.md): 48 layers, every 4th full attention (2 KV heads x 256), 36 Gated-DeltaNet layers.
FLASH_NEXT = ModelArchitecture(
    model_type="qwen3_next", architecture="Qwen3NextForCausalLM", dtype="bfloat16", hidden_size=2048,
    vocab_size=151936, max_position_embeddings=262144,
    layers=tuple(FULL if (i + 1) % 4 == 0 else GDN for i in range(48)), num_attention_heads=16,
    moe=MoE(num_experts=512, top_k=10), mtp_layers=(FULL,),
    notes=("Qwen3-Next ships 1 MTP layer its config does not list; vLLM defaults it to 1",),
)
QWEN3 = ModelArchitecture(
    model_type="qwen3", architecture="Qwen3ForCausalLM", dtype="bfloat16", hidden_size=256, vocab_size=1024,
    max_position_embeddings=4096, layers=(AttentionLayer(num_kv_heads=2, head_dim=64),) * 4,
)
DSV3_LAYER = MLALayer(kv_lora_rank=512, qk_rope_head_dim=64)
DSV32_LAYER = MLALayer(kv_lora_rank=512, qk_rope_head_dim=64, index_head_dim=128)


# --- the flags a user pastes ----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--model", "m", "--tp", "2"], {"model_path": "m", "tp_size": 2}),
        (["--model-path=m", "--tensor-parallel-size=4"], {"model_path": "m", "tp_size": 4}),
        (["--mem-fraction-static", "0.8", "--max-running-requests=16"],
         {"mem_fraction_static": 0.8, "max_running_requests": 16}),
        (["--max-total-tokens", "1.5M", "--context-length", "256Ki"],
         {"max_total_tokens": 1_500_000, "context_length": 262_144}),
        (["--chunked-prefill-size", "-1", "--kv-cache-dtype", "fp8_e4m3", "--page-size", "64"],
         {"chunked_prefill_size": -1, "kv_cache_dtype": "fp8_e4m3", "page_size": 64}),
        (["--disable-radix-cache", "--disable-overlap-schedule"],
         {"disable_radix_cache": True, "disable_overlap_schedule": True}),
        (["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4", "--speculative-draft-model", "d"],
         {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
          "speculative_num_draft_tokens": 4, "speculative_draft_model_path": "d"}),
        (["--mamba-ssm-dtype", "bfloat16", "--max-mamba-cache-size", "200", "--mamba-full-memory-ratio", "0.5",
          "--mamba-radix-cache-strategy", "no_buffer"],
         {"mamba_ssm_dtype": "bfloat16", "max_mamba_cache_size": 200, "mamba_full_memory_ratio": 0.5,
          "mamba_radix_cache_strategy": "no_buffer"}),
        (["--cuda-graph-max-bs-decode", "64", "--disable-cuda-graph"],
         {"cuda_graph_max_bs": 64, "disable_cuda_graph": True, "disable_cuda_graph_all": True}),
        (["--disable-decode-cuda-graph", "--disable-prefill-cuda-graph"],
         {"disable_cuda_graph": True, "disable_prefill_cuda_graph": True}),
        (["--cuda-graph-backend-prefill", "full", "--cuda-graph-max-bs-prefill", "512"],
         {"cuda_graph_backend_prefill": "full", "cuda_graph_max_bs_prefill": 512}),
        (["--cuda-graph-bs-prefill", "8", "64", "--tp-size", "2"], {"cuda_graph_bs_prefill": (8, 64), "tp_size": 2}),
        (["--cuda-graph-bs-decode", "1", "2", "8", "--page-size", "1"], {"cuda_graph_bs": (1, 2, 8), "page_size": 1}),
        (["--cuda-graph-backend-decode", "disabled"], {"disable_cuda_graph": True}),
        (["--cuda-graph-max-bs", "8"], {"cuda_graph_max_bs": 8, "ambiguous": ("--cuda-graph-max-bs",)}),
        (["--host", "0.0.0.0", "--trust-remote-code", "--tp-size", "2", "--log-level", "info"],
         {"tp_size": 2, "host": "0.0.0.0", "unknown": ("--trust-remote-code", "--log-level", "info")}),
        (["--tp-size", "2", "--tp-size", "4"], {"tp_size": 4}),
    ],
)
def test_parse_flags(argv: list[str], expected: dict[str, object]) -> None:
    """Each flag lands in its field; the rest stay None; unknown flags are kept; the last occurrence wins."""
    assert parse_sglang_flags(argv) == SglangOptions(**expected)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp-size", "two"], "--tp-size two: not an integer"),
        # argparse's own words, as SGLang's parser says them (tests/real_engines/test_argv_readers.py compares).
        (["--mem-fraction-static"], "argument --mem-fraction-static: expected one argument"),
        (["--kv-cache-dtype", "fp16"], "argument --kv-cache-dtype: invalid choice: 'fp16'"),
        (["--disable-radix-cache=true"], "argument --disable-radix-cache: ignored explicit argument 'true'"),
        (["--cuda-graph-backend-prefill", "tc_piecewise"],
         "argument --cuda-graph-backend-prefill: tc_piecewise was removed; select breakable, full, or disabled"),
        (["--cuda-graph-backend-prefill", "tc"], "argument --cuda-graph-backend-prefill: invalid choice: 'tc'"),
        (["--cuda-graph-bs-decode", "--page-size", "1"], "argument --cuda-graph-bs-decode: expected at least one"),
        (["--max-total-tokens", "1.5Mi"], "decimals are not allowed with IEC suffixes"),
    ],
)
def test_parse_flags_rejects(argv: list[str], message: str) -> None:
    """Malformed values are a settings error naming the flag, as SGLang's argparse would refuse them."""
    with pytest.raises(SettingsError, match=message):
        parse_sglang_flags(argv)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("1k", 1000), ("25.6k", 25600), ("1M", 1_000_000), ("2G", 2_000_000_000),
     ("1Ki", 1024), ("256Ki", 262_144), ("1Mi", 1_048_576)],
)
def test_human_readable_int(text: str, value: int) -> None:
    """utils/common.human_readable_int: SI with decimals, IEC integers, case-sensitive."""
    assert human_readable_int(text, flag="--x") == value


# --- server-argument defaults --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("gpu_mib", "tp", "chunk", "max_bs"),
    [(16384, 1, 2048, 8), (24564, 1, 4096, 48), (24564, 4, 4096, 160), (40960, 1, 4096, 32),
     (81559, 1, 8192, 256), (81559, 8, 8192, 512), (143771, 2, 8192, 256), (183359, 1, 16384, 512),
     (None, 1, 4096, 160)],
)
def test_gpu_memory_defaults(gpu_mib: float | None, tp: int, chunk: int, max_bs: int) -> None:
    """handle_gpu_memory_settings: chunked prefill and decode-graph max_bs by nvidia-smi memory.total."""
    assert gpu_memory_defaults(gpu_mib, tp) == (chunk, max_bs)


@pytest.mark.parametrize(
    ("gpu_mib", "chunk", "tp", "max_bs", "prefill", "fraction", "reserved"),
    [
        # 512 + 8192 * 1.5 + 1/8 * 1024 + 256 * 2 = 13,440, + 58 prefill capture sizes * 8 = 464 -> 13,904;
        # (143,771 - 13,904) / 143,771 = 0.90329 -> 0.903
        (143771, 8192, 1, 256, 464.0, 0.903, 13904.0),
        # the same without the prefill graph: 13,440 -> 0.90652 -> 0.907
        (143771, 8192, 1, 256, 0.0, 0.907, 13440.0),
        # TP=2: + 256 instead of 128 -> 13,568 + 464 = 14,032 -> 0.9024 -> 0.902
        (143771, 8192, 2, 256, 464.0, 0.902, 14032.0),
        # GB10, TP=2, 16 seats (decode max_bs 16): 512 + 12,288 + 256 + 32 = 13,088 + 464 = 13,552;
        # (124,546 - 13,552) / 124,546 = 0.89119 -> 0.891 (0.89491 -> 0.895 without the prefill graph)
        (124546, 8192, 2, 16, 464.0, 0.891, 13552.0),
        (124546, 8192, 2, 16, 0.0, 0.895, 13088.0),
        # chunked prefill off: max_prefill_tokens 16,384 -> 512 + 24,576 + 128 + 512 = 25,728 (no prefill sizes)
        (143771, -1, 1, 256, 0.0, 0.821, 25728.0),
        # decode graphs off: no decode term; 13,440 - 512 + 464 = 13,392 -> 0.90685 -> 0.907
        (143771, 8192, 1, None, 464.0, 0.907, 13392.0),
        # MLA's flat 1.5 GiB prefill term: 13,440 + 1,536 = 14,976 -> 0.89583 -> 0.896
        (143771, 8192, 1, 256, 1536.0, 0.896, 14976.0),
        # 24 GiB: 512 + 6,144 + 128 + 96 + 50 * 8 = 7,280 (no 10 GiB floor below 60 GiB) -> 0.70363 -> 0.704
        (24564, 4096, 1, 48, 400.0, 0.704, 7280.0),
        # 60+ GiB floor: A100-80G with chunk 2048 -> 512 + 3,072 + 128 + 16 + 42 * 8 = 4,064 -> 10,240 -> 0.875
        (81920, 2048, 1, 8, 336.0, 0.875, 10240.0),
        # no GPU figure: SGLang's fallback
        (None, 4096, 1, 160, 400.0, 0.95, None),
    ],
)
def test_default_mem_fraction_static(
    gpu_mib: float | None, chunk: int, tp: int, max_bs: int | None, prefill: float, fraction: float,
    reserved: float | None,
) -> None:
    """memory_hook: round((gpu - reserved) / gpu, 3), reserve floored at 10 GiB above 60 GiB."""
    assert default_mem_fraction_static(gpu_mib, chunked_prefill_size=chunk, max_prefill_tokens=16384, tp_size=tp,
                                       pp_size=1, decode_graph_max_bs=max_bs,
                                       prefill_graph_reserve_mib=prefill) == (fraction, reserved)


@pytest.mark.parametrize(
    ("max_bs", "count", "last"),
    # 4-32 by 4 (8), 48-256 by 16 (14), 288-512 by 32 (8), 576-1024 by 64 (8), 1280-4096 by 256 (12), then by 512
    [(8192, 58, 8192), (4096, 50, 4096), (16384, 74, 16384), (2048, 42, 2048), (100, 12, 96), (-1, 0, None)],
)
def test_prefill_graph_batch_sizes(max_bs: int, count: int, last: int | None) -> None:
    """generate_prefill_cuda_graph_batch_sizes: the capture sizes up to max_bs (none for chunked prefill off)."""
    sizes = prefill_graph_batch_sizes(max_bs)
    assert len(sizes) == count
    assert (sizes[-1] if sizes else None) == last
    assert sizes[:9] == (4, 8, 12, 16, 20, 24, 28, 32, 48)[: len(sizes)]


def test_prefill_graph_reserve_mib() -> None:
    """reserve_for_graph_mb's prefill term: 8 MiB per capture size, MLA 1.5 GiB flat, nothing when disabled."""
    sizes = prefill_graph_batch_sizes(8192)
    assert prefill_graph_reserve_mib("breakable", sizes, mla=False) == 58 * 8 == 464
    assert prefill_graph_reserve_mib("full", sizes, mla=False) == 464
    assert prefill_graph_reserve_mib("breakable", sizes, mla=True) == 1536
    assert prefill_graph_reserve_mib("disabled", sizes, mla=False) == 0


def _prefill(arch: ModelArchitecture, flags: list[str], capability: tuple[int, int] = (9, 0)) -> tuple[str, ...]:
    o = parse_sglang_flags(flags)
    graph = resolve_prefill_graph(arch, o, chunked=o.chunked_prefill_size or 8192, pp=o.pp_size or 1,
                                  capability=capability)
    return graph.sizing_backend, graph.backend, str(len(graph.capture_sizes)), str(graph.reserve_mib)


@pytest.mark.parametrize(
    ("arch", "flags", "expected"),
    [
        # default_prefill_backend on CUDA; sizes up to the chunk (8,192): 58 of them, 8 MiB each
        (QWEN3, [], ("breakable", "breakable", "58", "464")),
        # neither a hybrid model nor MTP turn it off
        (FLASH_NEXT, ["--speculative-algorithm", "NEXTN"], ("breakable", "breakable", "58", "464")),
        (QWEN3, ["--chunked-prefill-size", "4096"], ("breakable", "breakable", "50", "400")),
        # off: no reserve, though memory_hook still lists the sizes
        (QWEN3, ["--disable-cuda-graph"], ("disabled", "disabled", "58", "0.0")),
        (QWEN3, ["--disable-decode-cuda-graph"], ("breakable", "breakable", "58", "464")),  # decode only
        (QWEN3, ["--disable-prefill-cuda-graph"], ("disabled", "disabled", "58", "0.0")),
        (QWEN3, ["--cuda-graph-backend-prefill", "disabled"], ("disabled", "disabled", "58", "0.0")),
        # the explicit backend wins over the off switches
        (QWEN3, ["--disable-cuda-graph", "--cuda-graph-backend-prefill", "full"], ("full", "full", "58", "464")),
        (QWEN3, ["--pp-size", "2"], ("disabled", "disabled", "58", "0.0")),  # pipeline parallelism: opt-in only
        # opted in with pipeline parallelism: capture sizes capped at 8,192 tokens
        (QWEN3, ["--pp-size", "2", "--cuda-graph-backend-prefill", "breakable", "--chunked-prefill-size", "16384"],
         ("breakable", "breakable", "58", "464")),
        (QWEN3, ["--cuda-graph-max-bs-prefill", "512"], ("breakable", "breakable", "30", "240")),
        (QWEN3, ["--cuda-graph-bs-prefill", "16", "256", "1024"], ("breakable", "breakable", "3", "24")),
        # 4-32, 48-256, 288-512, 576-960: 8 + 14 + 8 + 7
        (QWEN3, ["--max-total-tokens", "1000"], ("breakable", "breakable", "37", "296")),
        (QWEN3, ["--model-path", "/m/Llama-2-7b"], ("breakable", "breakable", "50", "400")),  # at most 4,096
        (QWEN3, ["--chunked-prefill-size", "-1"], ("breakable", "breakable", "0", "0")),
    ],
)
def test_resolve_prefill_graph(arch: ModelArchitecture, flags: list[str], expected: tuple[str, ...]) -> None:
    """parse_cuda_graph_config, apply_cuda_graph_compatibility and memory_hook's prefill capture sizes (H200)."""
    assert _prefill(arch, flags) == expected


def test_deepseek_v3_on_trtllm_mla_keeps_the_reserve() -> None:
    """The trtllm_mla rule runs after the fraction is set: the graph ends off, MLA's 1.5 GiB stays reserved."""
    dsv3 = ModelArchitecture(**{**vars(QWEN3), "architecture": "DeepseekV3ForCausalLM", "layers": (DSV3_LAYER,) * 4})
    assert _prefill(dsv3, [], (10, 0)) == ("breakable", "disabled", "58", "1536.0")  # SM100 picks trtllm_mla
    assert _prefill(dsv3, [], (9, 0)) == ("breakable", "breakable", "58", "1536.0")
    locked = ["--cuda-graph-backend-prefill", "breakable"]
    assert _prefill(dsv3, locked, (10, 0)) == ("breakable", "breakable", "58", "1536.0")


@pytest.mark.parametrize("architecture", ["DeepseekV4ForCausalLM", "Qwen3VLForConditionalGeneration"])
def test_breakable_prefill_graph_off_for_incompatible_archs(architecture: str) -> None:
    """disable_breakable_cudagraph_if_incompatible: DeepSeek-V4, and multimodal models SGLang has not validated."""
    arch = ModelArchitecture(**{**vars(QWEN3), "architecture": architecture})
    assert _prefill(arch, [])[:2] == ("disabled", "disabled")
    assert _prefill(arch, ["--cuda-graph-backend-prefill", "breakable"])[0] == "breakable"  # explicit: kept
    allowlisted = ModelArchitecture(**{**vars(QWEN3), "architecture": "Qwen3_5ForConditionalGeneration"})
    assert _prefill(allowlisted, [])[0] == "breakable"


def test_decode_graph_batch_sizes() -> None:
    """generate_decode_cuda_graph_batch_sizes: plain, speculative and unpadded lists; max_bs always in."""
    plain = decode_graph_batch_sizes(256, speculative=False)
    assert plain[:6] == (1, 2, 4, 8, 12, 16)
    assert plain[-3:] == (240, 248, 256)
    assert len(plain) == 36
    assert decode_graph_batch_sizes(600, speculative=False)[-3:] == (544, 576, 600)
    assert decode_graph_batch_sizes(48, speculative=True) == (
        1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48)
    assert decode_graph_batch_sizes(6, speculative=False) == (1, 2, 4, 6)
    assert decode_graph_batch_sizes(5, speculative=False, no_padding=True) == (1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("listed", "seats", "captured"),
    [((1, 2, 4, 8, 12, 16, 24), 10, (1, 2, 4, 8, 10)), ((1, 2, 4, 8), 48, (1, 2, 4, 8)), ((1, 2, 3, 4), 3, (1, 2, 3))],
)
def test_captured_batch_sizes(listed: tuple[int, ...], seats: int, captured: tuple[int, ...]) -> None:
    """get_batch_sizes_to_capture: sizes above the request pool go, the pool size itself is added."""
    assert captured_batch_sizes(listed, seats) == captured


@pytest.mark.parametrize(
    ("algorithm", "architecture", "params"),
    [("EAGLE", "Qwen3NextForCausalLM", (3, 1, 4)), ("EAGLE", "LlamaForCausalLM", (5, 4, 8)),
     ("STANDALONE", "LlamaForCausalLM", (3, 1, 4)), ("EAGLE3", "DeepseekV3ForCausalLM", (3, 1, 4))],
)
def test_speculative_params(algorithm: str, architecture: str, params: tuple[int, int, int]) -> None:
    """_auto_choose_speculative_params."""
    assert speculative_params(algorithm, architecture) == params


# --- bytes per token and per request --------------------------------------------------------------

@pytest.mark.parametrize(
    ("layer", "layers", "tp", "elem", "cell"),
    [
        (FULL, 12, 1, 2, 24_576),  # Flash-Next: 2 heads x (256 + 256) x 12 x 2
        (FULL, 12, 2, 2, 12_288),  # one KV head per rank
        (FULL, 12, 4, 2, 12_288),  # max(1, 2 // 4): KV heads replicate past TP=2
        (FULL, 12, 2, 1, 6_144),  # fp8
        (AttentionLayer(num_kv_heads=8, head_dim=192, head_dim_v=128), 10, 2, 2, 25_600),  # 4 x 320 x 10 x 2
    ],
)
def test_mha_cell_size(layer: AttentionLayer, layers: int, tp: int, elem: int, cell: int) -> None:
    """_compute_cell_size (MHA/GQA): max(1, kv_heads // tp) * (head_dim + v_head_dim) * layers * bytes."""
    assert mha_cell_size(layer, layers, tp, elem) == cell


@pytest.mark.parametrize(
    ("layer", "kv", "elem", "raw", "cell"),
    [
        (DSV3_LAYER, "bfloat16", 2, False, 70_272),  # (512 + 64) x 61 x 2
        (DSV3_LAYER, "fp8_e4m3", 1, False, 35_136),
        (DSV32_LAYER, "bfloat16", 2, False, 78_324),  # 70,272 + (128 + 4) x 61 indexer keys
        (DSV32_LAYER, "fp8_e4m3", 1, False, 48_068),  # (512 + 16 scales + 64 x 2 rope) x 61 + 8,052
        (DSV32_LAYER, "fp8_e4m3", 1, True, 43_188),  # trtllm layout (SM100): 576 x 61 + 8,052
    ],
)
def test_mla_cell_size(layer: MLALayer, kv: str, elem: int, raw: bool, cell: int) -> None:
    """calculate_mla_kv_cache_dim * layers * bytes + _compute_dsa_indexer_cell_size."""
    assert mla_cell_size(layer, 61, kv, elem, raw_layout=raw) == cell


def test_dsa_indexer_cell_size() -> None:
    """uint8 keys of index_head_dim plus a 4-byte scale per 128, per layer."""
    assert dsa_indexer_cell_size(DSV32_LAYER, 61) == 8_052
    assert dsa_indexer_cell_size(DSV3_LAYER, 61) == 0


@pytest.mark.parametrize(
    ("tp", "ssm_dtype", "conv", "ssm"),
    [
        (1, "float32", 49_152, 2_097_152),  # conv (4096 + 2 x 16 x 128) x 3 x 2; ssm 32 x 128 x 128 x 4
        (2, "float32", 24_576, 1_048_576),
        (1, "bfloat16", 49_152, 1_048_576),
        (4, "float32", 12_288, 524_288),
    ],
)
def test_linear_state_bytes(tp: int, ssm_dtype: str, conv: int, ssm: int) -> None:
    """Mamba2StateShape.create + mamba_cache_per_req for one Flash-Next GDN layer."""
    assert linear_state_bytes(GDN, tp, ssm_dtype=ssm_dtype) == (conv, ssm)


def test_linear_state_pads_groups_to_tp() -> None:
    """extra_groups_for_head_shards: 1 group at TP=2 becomes 2 before the conv width is split."""
    mamba = LinearStateLayer(family="mamba2", conv_kernel=4, num_k_heads=1, num_v_heads=8, head_k_dim=128,
                             head_v_dim=64)
    # conv_dim = 8 x 64 + 2 x 2 x 128 = 1,024 -> 512 per rank x 3 x 2 B; ssm 4 x 64 x 128 x 4 B
    assert linear_state_bytes(mamba, 2, ssm_dtype="float32") == (3_072, 131_072)


@pytest.mark.parametrize(
    ("strategy", "overlap", "ratio"),
    [("disabled", True, 1), ("extra_buffer", True, 5), ("extra_buffer", False, 4), ("extra_buffer_lazy", True, 4),
     ("no_buffer", False, 3)],
)
def test_mamba_ratio(strategy: str, overlap: bool, ratio: int) -> None:
    """_calculate_mamba_ratio: state slots each running request holds."""
    assert mamba_ratio(strategy, overlap) == ratio


# --- memory readings and seats --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("free", "world", "gib"),
    [
        (150_109_880_320, 1, 150_109_880_320 / GIB),
        (118_412_345_678, 1, 118_412_345_678 / GIB),
        # float32 keeps 24 bits: between 2**36 and 2**37 the step is 8,192 bytes; 678 - 334 rounds down
        (118_412_345_678, 2, 118_412_345_344 / GIB),
    ],
)
def test_available_gib(free: int, world: int, gib: float) -> None:
    """get_available_gpu_memory: bytes / 2**30, through a float32 all-reduce when distributed."""
    assert available_gib(free, world) == gib


def test_float32_rounding() -> None:
    """Round to nearest, ties to even, as torch.tensor(..., dtype=float32)."""
    assert float32(2**24 + 1) == 2**24
    assert float32(2**24 + 3) == 2**24 + 4
    assert float32(118_412_345_678) == 118_412_345_344


@pytest.mark.parametrize(
    ("tokens", "context", "requested", "cap", "seats"),
    [
        (1_000_000, 4096, None, None, 4096),  # 1e6 / 4096 * 512 = 125,000 -> clamp 4,096
        (100_000, 262144, None, None, 2048),  # 195 -> clamp 2,048
        (3000, 4096, None, None, 1500),  # tokens // 2
        (100_000, 4096, 64, None, 64),
        (100_000, 4096, 64, 40, 40),  # the state-slot cap
        (100, 4096, 64, None, 50),  # tokens // 2
    ],
)
def test_resolve_max_num_reqs(tokens: int, context: int, requested: int | None, cap: int | None, seats: int) -> None:
    """resolve_max_num_reqs: the flag or clamp(tokens / context * 512, 2048, 4096), <= tokens / 2, <= K // ratio."""
    assert resolve_max_num_reqs(tokens, context, requested, cap) == seats


@pytest.mark.parametrize(
    ("arch", "flags", "capability", "page"),
    [
        (QWEN3, [], (9, 0), 1),
        (QWEN3, [], (10, 0), 64),  # trtllm_mha
        (QWEN3, ["--page-size", "16"], (10, 0), 16),
        (QWEN3, ["--speculative-algorithm", "EAGLE"], (10, 0), 1),  # topk unset: not trtllm_mha
        (QWEN3, ["--page-size", "8"], (12, 1), 8),  # GB10 is not SM100
        (FLASH_NEXT, [], (10, 0), 1),  # radix cache, no speculation: triton
        (FLASH_NEXT, ["--disable-radix-cache"], (10, 0), 64),
        (FLASH_NEXT, ["--speculative-algorithm", "NEXTN", "--page-size", "16"], (10, 0), 1),
        (FLASH_NEXT, ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1"], (10, 0), 64),
        (FLASH_NEXT, ["--page-size", "64"], (12, 1), 64),
    ],
)
def test_resolve_page_size(arch: ModelArchitecture, flags: list[str], capability: tuple[int, int], page: int) -> None:
    """--page-size after SGLang's attention-backend choice and its page constraints."""
    assert resolve_page_size(arch, parse_sglang_flags(flags), capability) == page


# --- the pool, end to end ---------------------------------------------------------------------------

def _flash_next(flags: list[str]) -> SglangCapacity:
    return compute_sglang_capacity(
        FLASH_NEXT, parse_sglang_flags(["--tp-size", "2", *flags]), gpu_capacity_bytes=124_546 << 20,
        free_before_load_bytes=118_412_345_678, weights_per_gpu_bytes=26 * GIB + 123, compute_capability=(12, 1),
    )


def test_dense_pool_by_hand() -> None:
    """rest = after - before * (1 - f); tokens = int(rest * 2**30) // cell (H200, one GPU, f 0.903)."""
    cap = compute_sglang_capacity(QWEN3, parse_sglang_flags([]), gpu_capacity_bytes=143_771 << 20,
                                  free_before_load_bytes=150_109_880_320, weights_per_gpu_bytes=20 * GIB)
    before = 150_109_880_320 / GIB
    rest = (150_109_880_320 - 20 * GIB) / GIB - before * (1 - 0.903)
    assert cap.mem_fraction_static == 0.903
    assert cap.cell_size == 2048
    assert cap.kv_budget_bytes == int(rest * GIB)
    assert cap.max_total_num_tokens == int(rest * GIB) // 2048
    assert cap.max_running_requests == 4096
    assert cap.cudagraph_max_capture_size == 256


def test_hybrid_state_pool_by_hand() -> None:
    """Auto branch without speculation: K = (budget - per_req) // per_req, pool takes (K + 1) slots.

    Worked out from the inputs (TP=2, so free memory passes through float32; mem_fraction_static 0.887 on a GB10):
      per request: 36 GDN layers x (24,576 conv + 1,048,576 SSM) B = 38,633,472 B
      before = float32(118,412,345,678) / 2**30 = 110.28009033203125 GiB
      after  = float32(118,412,345,678 - 26 GiB - 123) / 2**30 = 84.28009033203125 GiB
      rest   = after - before x (1 - 0.887) = 71.81844012451172 GiB
      K      = (rest x 0.9 / 1.9 x 2**30 - per_req) // per_req = 944 state slots (188 requests at 5 each)
      budget = int((rest - 945 x per_req / 2**30) x 2**30) = 40,605,831,856 B
      tokens = budget // 12,288 B a cell = 3,304,511
    """
    cap = _flash_next([])
    m = cap.mamba
    assert m is not None
    assert m.per_req_bytes == 36 * (24_576 + 1_048_576) == 38_633_472
    assert (m.max_mamba_cache_size, m.ratio, m.slot_cap, m.intermediate_bytes) == (944, 5, 188, 0)
    assert cap.kv_budget_bytes == 40_605_831_856
    assert cap.max_total_num_tokens == 3_304_511
    assert cap.max_running_requests == 188  # 4,096 by the estimate, capped by the state slots


@pytest.mark.parametrize(
    ("seats", "pool", "intermediate_requests"),
    [(6, 4_572_352, 7), (16, 4_446_592, 17), (32, 4_245_376, 33)],
)
def test_flash_next_pool_shrinks_with_seats_under_mtp(seats: int, pool: int, intermediate_requests: int) -> None:
    """NEXTN (D = 4): every seat keeps D intermediate states, (seats + 1) * D * per_req bytes leave the KV pool.

    Same inputs as tests/real_engines flash-next-gb10-*: SGLang 0.5.23 computes these pools.
    """
    cap = _flash_next(["--speculative-algorithm", "NEXTN", "--max-running-requests", str(seats), "--page-size", "64"])
    assert cap.max_total_num_tokens == pool
    assert cap.mamba is not None
    assert cap.mamba.intermediate_requests == intermediate_requests
    assert cap.mamba.intermediate_bytes == 38_633_472 * intermediate_requests * 4
    assert cap.speculative_num_draft_tokens == 4
    assert cap.draft_kv_layers is None  # the config does not list its MTP layer: the cell stays 12,288
    assert cap.cell_size == 12_288
    assert cap.max_running_requests == seats


@pytest.mark.parametrize(
    ("flags", "pinned", "source"),
    [(["--max-total-tokens", "100000"], True, "pinned"), (["--max-total-tokens", "1G"], False, "estimate")],
)
def test_max_total_tokens_pin(flags: list[str], pinned: bool, source: str) -> None:
    """_apply_token_constraints: min(profiled, --max-total-tokens), page-aligned.

    100,000 // 64 x 64 = 99,968; 1G is above the profiled 3,304,511 tokens (test_hybrid_state_pool_by_hand), which
    page-aligned to 64 are 3,304,448.
    """
    cap = _flash_next([*flags, "--page-size", "64"])
    assert cap.pinned is pinned
    assert cap.summary().kv_budget_source == source
    assert cap.max_total_num_tokens == (99_968 if pinned else 3_304_448)


# --- the deployment's figures (docs/deployment.md) -------------------------------------------------------

@pytest.mark.parametrize(
    ("seats", "pool", "contexts", "safe", "avg", "coverage"),
    # contexts = pool / 262,144; avg = pool // seats; coverage = 1 - (502/512)^(4 x seats): every seat verifies
    # 1 + 3 drafted tokens (NEXTN, 4 steps, 5 draft tokens counted as SGLang does).
    [(6, 1_720_000, 6.561279296875, 6, 286_666, 0.377112),
     (16, 1_482_304, 5.654541015625, 5, 92_644, 0.717017),
     (32, 1_140_288, 4.349853515625, 4, 35_634, 0.919921)],
)
def test_flash_next_full_contexts(seats: int, pool: int, contexts: float, safe: int, avg: int,
                                  coverage: float) -> None:
    """Pools 1,720,000 / 1,482,304 / 1,140,288 at 6 / 16 / 32 seats hold 6.6 / 5.7 / 4.35 contexts of 262,144."""
    cap = compute_sglang_capacity(
        FLASH_NEXT, parse_sglang_flags(["--tp-size", "2", "--speculative-algorithm", "NEXTN", "--max-running-requests",
                                        str(seats), "--max-total-tokens", str(pool), "--page-size", "64"]),
        gpu_capacity_bytes=None, free_before_load_bytes=None, weights_per_gpu_bytes=None,
    )
    s = cap.summary()
    assert s.kv_pool_tokens == pool
    assert s.max_concurrency == contexts
    assert s.safe_max_num_seqs == safe
    assert s.avg_context_at_max_num_seqs == avg
    assert s.max_num_seqs == seats
    assert s.expert_coverage == pytest.approx(coverage, abs=5e-7)


def test_safe_seats_capped_by_state_slots() -> None:
    """safe_max_num_seqs = floor(pool / context) but never above the state-slot cap K // ratio."""
    cap = _flash_next(["--max-mamba-cache-size", "10", "--context-length", "4096"])
    assert cap.mamba is not None
    assert cap.mamba.slot_cap == 2
    assert math.floor(cap.max_concurrency) > 2
    assert cap.summary().safe_max_num_seqs == 2
    assert cap.max_running_requests == 2


# --- what SGLang refuses ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("arch", "flags", "free", "weights", "code", "start"),
    [
        (QWEN3, [], 100 * GIB, 99 * GIB, "sglang-weights-leave-no-kv",
         "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.903. Raise "
         "--mem-fraction-static above 0.990 (minimum viable = 1 - available/pre = 0.9900)."),
        (QWEN3, ["--mem-fraction-static", "0.5"], 100 * GIB, 50 * GIB - 1000, "sglang-not-enough-memory",
         "Not enough memory. Please try to increase --mem-fraction-static."),
        (FLASH_NEXT, ["--mem-fraction-static", "0.3", "--speculative-algorithm", "NEXTN"], 100 * GIB, 69 * GIB,
         "sglang-mamba-cache-too-small", "Not enough GPU memory for hybrid (mamba/linear-attention) state cache."),
        (FLASH_NEXT, ["--max-mamba-cache-size", "3"], 100 * GIB, 20 * GIB, "sglang-mamba-no-requests",
         "Hybrid (mamba/linear-attention) state cache is too small to serve any requests. max_mamba_cache_size=3, "
         "mamba_ratio=5, resulting max_num_reqs=0."),
        (QWEN3, ["--context-length", "8192"], 100 * GIB, 20 * GIB, "sglang-context-length",
         "Warning: User-specified context_length (8192) is greater than the derived context_length (4096)."),
        (QWEN3, ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"], 100 * GIB, 20 * GIB,
         "sglang-speculative-args", "AssertionError: "),
        (QWEN3, ["--speculative-algorithm", "DFLASH"], 100 * GIB, 20 * GIB, "sglang-speculative-args",
         "DFLASH speculative decoding requires setting --speculative-draft-model-path."),
    ],
)
def test_refusals(
    arch: ModelArchitecture, flags: list[str], free: int, weights: int, code: str, start: str
) -> None:
    """The errors SGLang raises come back as structured refusals with its message; nothing after is sized."""
    cap = compute_sglang_capacity(arch, parse_sglang_flags(flags), gpu_capacity_bytes=143_771 << 20,
                                  free_before_load_bytes=free, weights_per_gpu_bytes=weights)
    assert [r.code for r in cap.refusals] == [code]
    assert cap.refusals[0].message.startswith(start)
    assert cap.max_running_requests is None
    assert cap.summary().kv_pool_tokens == (cap.max_total_num_tokens or 0)


def test_ambiguous_flag_is_refused_but_sized() -> None:
    """--cuda-graph-max-bs: 0.5.23's argparse stops at it; dspark says so and still sizes the launch."""
    cap = compute_sglang_capacity(QWEN3, parse_sglang_flags(["--cuda-graph-max-bs", "8"]),
                                  gpu_capacity_bytes=143_771 << 20, free_before_load_bytes=100 * GIB,
                                  weights_per_gpu_bytes=20 * GIB)
    assert [r.code for r in cap.refusals] == ["sglang-ambiguous-flag"]
    assert cap.refusals[0].message == ("argparse: ambiguous option: --cuda-graph-max-bs could match "
                                       "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    assert cap.cuda_graph_capture_bs == (1, 2, 4, 8)


def test_unknown_memory_without_pin_sizes_nothing() -> None:
    """No free-memory reading and no --max-total-tokens: the pool is unknown, said as an assumption."""
    cap = compute_sglang_capacity(QWEN3, parse_sglang_flags([]), gpu_capacity_bytes=None,
                                  free_before_load_bytes=None, weights_per_gpu_bytes=None)
    assert cap.max_total_num_tokens is None
    assert cap.summary().kv_pool_tokens == 0
    assert "free GPU memory unknown: the pool cannot be computed" in cap.assumptions


def test_parse_config_path_matches_hand_built() -> None:
    """parse_config's Flash-Next config gives the same figures as the hand-built architecture."""
    config = {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
        "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
        "vocab_size": 151936, "max_position_embeddings": 262144, "full_attention_interval": 4,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "intermediate_size": 5120,
    }
    parsed = compute_sglang_capacity(
        parse_config(config, "flash-next"), parse_sglang_flags(["--tp-size", "2", "--speculative-algorithm", "NEXTN"]),
        gpu_capacity_bytes=124_546 << 20, free_before_load_bytes=118_412_345_678,
        weights_per_gpu_bytes=26 * GIB + 123, compute_capability=(12, 1))
    by_hand = _flash_next(["--speculative-algorithm", "NEXTN"])
    assert (parsed.max_total_num_tokens, parsed.cell_size, parsed.draft_kv_layers) == (
        by_hand.max_total_num_tokens, by_hand.cell_size, by_hand.draft_kv_layers)


def test_a_vision_tower_lowers_the_default_fraction_by_its_size() -> None:
    # ViT-L/14 (24 x 1024^2) keeps 0.95 of it; 1152 wide: 1 - 0.1 x (1152^2 / 1024^2 - 1) = 0.9734375 on top.
    assert vlm_mem_fraction(0.891, (24, 1024)) == pytest.approx(0.891 * 0.95)
    assert vlm_mem_fraction(0.891, (24, 1152)) == pytest.approx(0.891 * 0.95 * 0.9734375)
    assert vlm_mem_fraction(0.9, (48, 4096)) == pytest.approx(0.9 * 0.95 * 0.8)  # clamped below
    assert vlm_mem_fraction(0.9, (1, 64)) == pytest.approx(0.9 * 0.95 * 1.05)  # clamped above
    assert vlm_mem_fraction(0.9, None) == 0.9  # multimodal without a vision_config (audio): unchanged
