"""`vllm serve` flags that change capacity, read from the argv a user pastes after `--` (pure, no vLLM import).

Read the way vLLM 0.32.0 reads them: argparse (dspark.engines.argv) with the flags declared as EngineArgs
declares them, after FlexibleArgumentParser's pre-pass (vllm/utils/argparse_utils.py): `--x=y` and `--x y`,
underscores in long names read as dashes, `--flag`/`--no-flag` booleans (BooleanOptionalAction), the last
occurrence winning, human-readable sizes (human_readable_int: k/m/g/t decimal, K/M/G/T binary), `auto`/-1
for --max-model-len (human_readable_int_or_auto), "None" for optional values (optional_type), JSON for
--speculative-config/-sc and --compilation-config/-cc, and dotted `-cc.key=value` pieces, folded into one
JSON value that replaces an earlier whole one, as vLLM's pre-pass does. Flags it does not know are kept in
`unknown` and otherwise ignored: the engine's real parser checks the argv elsewhere (dspark_inside.vllm.argv_check).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dspark.core.errors import SettingsError
from dspark.core.units import suffixed_int
from dspark.engines.argv import ArgvParser, Grammar, ReadArgv, Reader, ValueFlag, as_given, read_argv, typed
from dspark.engines.flag_values import float_value, int_value, json_count, positive_int

MaxModelLen = int | Literal["auto"]

# vLLM 0.32.0's own choices (config/model.py ModelDType, config/cache.py MambaDType): argparse refuses others.
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
MAMBA_DTYPES = ("auto", "float32", "float16", "bfloat16")
# config/parallel.py DistributedExecutorBackend (0.32.0).
EXECUTOR_BACKENDS = ("ray", "mp", "uni", "external_launcher")
# Those backends -> dspark's distributed_runtime ("uni" and "external_launcher" start no multi-node runtime).
RUNTIME_OF_BACKEND = {"ray": "ray", "mp": "native"}

# vLLM's MTPModelTypes (config/speculative.py): every name is rewritten to "mtp" by SpeculativeConfig.
MTP_METHOD_ALIASES = frozenset(
    {
        "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
        "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
        "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
        "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp",
        "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
    }
)  # fmt: skip


# vLLM's SpeculativeMethod (config/speculative.py): pydantic refuses any other method name.
SPECULATIVE_METHODS = MTP_METHOD_ALIASES | frozenset(
    {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
     "extract_hidden_states", "dflash", "ngram_gpu", "dspark"}
)  # fmt: skip


@dataclass(frozen=True)
class VllmOptions:
    """The capacity-relevant `vllm serve` settings; every field is None when the argv does not set it."""

    model: str | None = None
    max_model_len: MaxModelLen | None = None
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    mamba_cache_mode: str | None = None
    mamba_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    mamba_block_size: int | None = None
    speculative_method: str | None = None  # normalised: MTP aliases read "mtp"
    num_speculative_tokens: int | None = None
    speculative_model: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    enforce_eager: bool | None = None
    cudagraph_mode: str | None = None
    max_cudagraph_capture_size: int | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    performance_mode: str | None = None
    disable_hybrid_kv_cache_manager: bool | None = None
    language_model_only: bool | None = None  # --language-model-only: no multimodal tower is built
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None = None  # --limit-mm-per-prompt, modality -> count
    quantization: str | None = None
    served_model_name: str | None = None  # launch-only, read so that dspark passes it rather than drop it
    host: str | None = None
    port: int | None = None
    distributed_executor_backend: str | None = None
    unknown: tuple[str, ...] = ()  # flags (and their values) this reader does not interpret

    @property
    def distributed_runtime(self) -> str | None:
        """dspark's distributed_runtime the backend flag sets: ray -> ray, mp -> native, others none."""
        return RUNTIME_OF_BACKEND.get(self.distributed_executor_backend or "")


def human_readable_int(value: str, *, flag: str) -> int:
    """vLLM's human_readable_int: '25.6k' -> 25,600 (decimal k/m/g/t), '1K' -> 1,024 (binary, no decimals).

    dspark.core.units.suffixed_int is that grammar (dspark's own single-letter sizes use it too); a value it
    refuses is a settings error naming the flag.
    """
    try:
        return suffixed_int(value)
    except ValueError as exc:
        raise SettingsError(f"{flag} {value}: {exc}") from None


def _max_model_len(value: str, flag: str) -> MaxModelLen:
    """human_readable_int_or_auto: '-1' and 'auto' mean auto-fit to the KV memory."""
    text = value.strip()
    if text == "-1" or text.lower() == "auto":
        return "auto"
    return human_readable_int(text, flag=flag)


def _mm_limits(value: str, flag: str) -> tuple[tuple[str, int], ...]:
    """--limit-mm-per-prompt '{"image": 0, "video": {"count": 0}}': each modality's item count."""
    limits: list[tuple[str, int]] = []
    for modality, raw in _json_object(value, flag).items():
        count = raw.get("count", 999) if isinstance(raw, dict) else raw  # MultiModalConfig: a dict or a count
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise SettingsError(f"{flag}: {modality}'s limit must be a count >= 0, got {raw!r}")
        limits.append((str(modality), count))
    return tuple(limits)


def loads_vision_tower(options: VllmOptions) -> bool:
    """Whether vLLM builds the vision tower: SupportsMultiModal._mark_tower_model skips it when image and video
    are both limited to 0 (MultiModalConfig.get_limit_per_prompt, 0 for every modality under
    --language-model-only, 999 for one not listed)."""
    if options.language_model_only:
        return False
    limits = dict(options.limit_mm_per_prompt or ())
    return not (limits.get("image", 999) == 0 and limits.get("video", 999) == 0)


def _json_object(value: str, flag: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{flag}: not valid JSON ({exc.msg})", hint=f"got {value!r}") from None
    if not isinstance(obj, dict):
        raise SettingsError(f"{flag}: expected a JSON object, got {value!r}")
    return obj


def _expand_suffixes(value: str) -> str:
    """arg_utils._expand_json_human_readable_numbers: bare `80g` / `1K` tokens outside JSON strings as integers."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', value)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(suffixed_int(m.group())), parts[i])
    return "".join(parts)


def _optional(reader: Reader) -> Reader:
    """arg_utils.optional_type: "" and "None" leave the setting unset."""
    return lambda value, flag: None if value in ("", "None") else reader(value, flag)


def _positive(owner: str) -> Reader:
    """Positive integers, with the engine config class whose pydantic field (gt=0 / ge=1) refuses the rest."""
    return lambda value, flag: positive_int(value, flag, owner)


def _size(value: str, flag: str) -> int:
    return human_readable_int(value, flag=flag)


# (option strings, field, reader, choices): the flags vLLM 0.32.0's serve parser declares with one value
# (EngineArgs.add_cli_args), read into the VllmOptions field named.
_VALUE_FLAGS: tuple[ValueFlag, ...] = (
    (("--model",), "model", as_given, None),
    (("--max-model-len",), "max_model_len", _max_model_len, None),
    (("--dtype",), "dtype", as_given, MODEL_DTYPES),
    (("--kv-cache-dtype",), "kv_cache_dtype", as_given, None),
    (("--block-size",), "block_size", _positive("vLLM CacheConfig"), None),
    (("--mamba-cache-mode",), "mamba_cache_mode", as_given, None),
    (("--mamba-cache-dtype",), "mamba_cache_dtype", as_given, MAMBA_DTYPES),
    (("--mamba-ssm-cache-dtype",), "mamba_ssm_cache_dtype", as_given, MAMBA_DTYPES),
    (("--mamba-block-size",), "mamba_block_size", _optional(_positive("vLLM CacheConfig")), None),
    (("--max-num-seqs",), "max_num_seqs", int_value, None),
    (("--max-num-batched-tokens",), "max_num_batched_tokens", _size, None),
    (("--gpu-memory-utilization", "--device-memory-utilization"), "gpu_memory_utilization", float_value, None),
    (("--kv-cache-memory-bytes",), "kv_cache_memory_bytes", _optional(_size), None),
    (("--num-gpu-blocks-override",), "num_gpu_blocks_override", _optional(int_value), None),
    (("--tensor-parallel-size", "-tp"), "tensor_parallel_size", int_value, None),
    (("--pipeline-parallel-size", "-pp"), "pipeline_parallel_size", int_value, None),
    (("--data-parallel-size", "-dp"), "data_parallel_size", _positive("vLLM ParallelConfig"), None),
    (("--max-cudagraph-capture-size",), "max_cudagraph_capture_size", int_value, None),
    (("--performance-mode",), "performance_mode", as_given, None),
    (("--quantization", "-q"), "quantization", _optional(as_given), None),
    (("--distributed-executor-backend",), "distributed_executor_backend", as_given, EXECUTOR_BACKENDS),
    (("--spec-method",), "speculative_method", _optional(as_given), None),
    (("--spec-model",), "speculative_model", _optional(as_given), None),
    # Launch-only: read so that dspark passes them on rather than drop them.
    (("--host",), "host", as_given, None),
    (("--port",), "port", int_value, None),
    (("--spec-tokens",), "num_speculative_tokens", _positive("vLLM SpeculativeConfig.num_speculative_tokens"), None),
    (("--speculative-config", "-sc"), "speculative_config", _optional(_json_object), None),
    (("--limit-mm-per-prompt",), "limit_mm_per_prompt", _mm_limits, None),
    (("--compilation-config", "-cc"), "compilation_config",
     lambda value, flag: _json_object(_expand_suffixes(value), flag), None),
)
# BooleanOptionalAction flags (`--x` / `--no-x`), by field.
_BOOL_FLAGS: dict[str, str] = {
    "--enable-prefix-caching": "enable_prefix_caching",
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--enforce-eager": "enforce_eager",
    "--disable-hybrid-kv-cache-manager": "disable_hybrid_kv_cache_manager",
    "--language-model-only": "language_model_only",
}
_INVERSE_FLAGS: dict[str, tuple[str, bool]] = {
    "--disable-prefix-caching": ("enable_prefix_caching", False),
    "--disable-chunked-prefill": ("enable_chunked_prefill", False),
    "--enable-hybrid-kv-cache-manager": ("disable_hybrid_kv_cache_manager", False),
}
_JSON_FIELDS = ("speculative_config", "compilation_config")


@functools.cache
def _parser() -> ArgvParser:
    parser = ArgvParser("vllm serve")
    parser.add_value_flags(_VALUE_FLAGS)
    for option, field in _BOOL_FLAGS.items():
        parser.add_argument(option, dest=field, action=argparse.BooleanOptionalAction)
    parser.add_argument("--cudagraph-capture-sizes", dest="cudagraph_capture_sizes", nargs="+",
                        type=typed(int_value, "--cudagraph-capture-sizes"))
    # 0.33's EnableDisableAction pairs each --enable-x with --disable-x (and --disable-x with --enable-x); 0.32's
    # parser has none of these, and its table refuses them before this reader sees them.
    for option, (field, value) in _INVERSE_FLAGS.items():
        parser.add_argument(option, dest=field, action="store_const", const=value)
    # nargs='+' in vLLM's parser; dspark launches with one name (read so that it is passed on, not dropped).
    parser.add_argument("--served-model-name", dest="served_model_name", nargs="+")
    return parser


def _apply_speculative(values: dict[str, Any], conf: dict[str, Any], flag: str) -> None:
    """Fields of --speculative-config that size KV: method, num_speculative_tokens, model."""
    if "method" in conf and conf["method"] is not None:
        values["speculative_method"] = str(conf["method"])
    if "num_speculative_tokens" in conf and conf["num_speculative_tokens"] is not None:
        values["num_speculative_tokens"] = json_count(
            conf["num_speculative_tokens"], f"{flag} num_speculative_tokens", "vLLM SpeculativeConfig"
        )
    if "model" in conf and conf["model"] is not None:
        values["speculative_model"] = str(conf["model"])


def _sizes(raw: Any, flag: str) -> tuple[int, ...]:
    """A list of integers; pydantic (lax) also takes their strings, which `-cc.cudagraph_capture_sizes+ 1,2` gives."""
    if not isinstance(raw, list) or not all(
        (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, str) and x.strip().isdigit()) for x in raw
    ):
        raise SettingsError(f"{flag}: cudagraph_capture_sizes must be a list of integers, got {raw!r}")
    return tuple(int(x) for x in raw)


def _apply_compilation(values: dict[str, Any], conf: dict[str, Any], flag: str) -> None:
    """Fields of --compilation-config that set CUDA-graph capture."""
    if "cudagraph_mode" in conf and conf["cudagraph_mode"] is not None:
        values["cudagraph_mode"] = str(conf["cudagraph_mode"]).upper()
    if "max_cudagraph_capture_size" in conf and conf["max_cudagraph_capture_size"] is not None:
        values["max_cudagraph_capture_size"] = int_value(str(conf["max_cudagraph_capture_size"]), flag)
    if "cudagraph_capture_sizes" in conf and conf["cudagraph_capture_sizes"] is not None:
        values["cudagraph_capture_sizes"] = _sizes(conf["cudagraph_capture_sizes"], flag)


_SPEC_SHORTCUTS = {"method": "speculative_method", "num_speculative_tokens": "num_speculative_tokens",
                   "model": "speculative_model"}  # fmt: skip


def _options(read: ReadArgv) -> VllmOptions:
    """The parsed flags as VllmOptions: JSON flags folded in, the positional model tag ahead of --model."""
    values = {k: v for k, v in vars(read.namespace).items() if v is not None}
    spec = values.pop("speculative_config", {})
    compilation = values.pop("compilation_config", {})
    if "cudagraph_capture_sizes" in values:
        values["cudagraph_capture_sizes"] = tuple(values["cudagraph_capture_sizes"])
    if "served_model_name" in values:
        names = values["served_model_name"]
        if len(names) != 1:
            raise SettingsError(f"--served-model-name {' '.join(names)}: dspark passes exactly one served model name",
                                hint="give one name (clients then request that name)")
        values["served_model_name"] = names[0]
    unknown = list(read.unknown)
    if read.positionals:
        # `vllm serve MODEL`: the positional model_tag; serve.cmd lets it win over --model. More are unknown.
        values["model"] = read.positionals[0]
        unknown += read.positionals[1:]
    for key, field in _SPEC_SHORTCUTS.items():
        if key in spec and field in values:
            # EngineArgs raises when a --spec-* shortcut repeats a key of --speculative-config.
            raise SettingsError(f"--speculative-config sets {key!r} and so does a --spec-* flag")
    _apply_speculative(values, spec, "--speculative-config")
    _apply_compilation(values, compilation, "--compilation-config")
    method = values.get("speculative_method")
    if method is not None and method not in SPECULATIVE_METHODS:
        raise SettingsError(
            f"--speculative-config: method {method!r} is not one vLLM 0.32.0 knows "
            f"(SpeculativeConfig.method: {', '.join(sorted(SPECULATIVE_METHODS - MTP_METHOD_ALIASES))}, "
            "or an MTP name such as mtp / qwen3_next_mtp)"
        )
    if method in MTP_METHOD_ALIASES:
        values["speculative_method"] = "mtp"
    return VllmOptions(**values, unknown=tuple(unknown))


def known_flags() -> tuple[str, ...]:
    """The long flags this reader interprets (for suggestions when a flag is not one of them)."""
    return tuple(sorted(o for o in _parser().option_strings() if o.startswith("--")))


# FlexibleArgumentParser's pre-pass: `--a_b` is `--a-b`; dotted pieces fold into their JSON flag, and a value
# that is not JSON is read as human_readable_int where it is one.
GRAMMAR = Grammar(underscores=True, dotted=True, dotted_number=suffixed_int, optimization_level=True)


def parse_vllm_serve_flags(argv: Sequence[str]) -> VllmOptions:
    """Read the capacity-relevant `vllm serve` flags of argv; unknown flags are kept in `unknown`."""
    return _options(read_argv(_parser(), argv, GRAMMAR))


# (VllmOptions field, the dest vLLM's parser stores it under, its flag): the capacity-relevant values dspark's
# reader and vLLM's parser both read, compared after the engine's parser has read the launch argv.
_READ_BACK: tuple[tuple[str, str, str], ...] = (
    ("max_num_seqs", "max_num_seqs", "--max-num-seqs"),
    ("max_model_len", "max_model_len", "--max-model-len"),
    ("gpu_memory_utilization", "gpu_memory_utilization", "--gpu-memory-utilization"),
    ("kv_cache_memory_bytes", "kv_cache_memory_bytes", "--kv-cache-memory-bytes"),
    ("num_gpu_blocks_override", "num_gpu_blocks_override", "--num-gpu-blocks-override"),
    ("max_num_batched_tokens", "max_num_batched_tokens", "--max-num-batched-tokens"),
    ("kv_cache_dtype", "kv_cache_dtype", "--kv-cache-dtype"),
    ("block_size", "block_size", "--block-size"),
    ("dtype", "dtype", "--dtype"),
    ("quantization", "quantization", "--quantization"),
    ("tensor_parallel_size", "tensor_parallel_size", "--tensor-parallel-size"),
    ("pipeline_parallel_size", "pipeline_parallel_size", "--pipeline-parallel-size"),
    ("data_parallel_size", "data_parallel_size", "--data-parallel-size"),
    ("enable_prefix_caching", "enable_prefix_caching", "--enable-prefix-caching"),
    ("enable_chunked_prefill", "enable_chunked_prefill", "--enable-chunked-prefill"),
    ("disable_hybrid_kv_cache_manager", "disable_hybrid_kv_cache_manager", "--disable-hybrid-kv-cache-manager"),
    ("mamba_cache_mode", "mamba_cache_mode", "--mamba-cache-mode"),
    ("mamba_cache_dtype", "mamba_cache_dtype", "--mamba-cache-dtype"),
    ("mamba_ssm_cache_dtype", "mamba_ssm_cache_dtype", "--mamba-ssm-cache-dtype"),
    ("mamba_block_size", "mamba_block_size", "--mamba-block-size"),
    ("enforce_eager", "enforce_eager", "--enforce-eager"),
    ("language_model_only", "language_model_only", "--language-model-only"),
    ("speculative_method", "spec_method", "--spec-method"),
    ("num_speculative_tokens", "spec_tokens", "--spec-tokens"),
    ("speculative_model", "spec_model", "--spec-model"),
)
# --speculative-config's keys that size the KV pool -> the VllmOptions field dspark reads them into.
_SPEC_KEYS = {"method": "speculative_method", "num_speculative_tokens": "num_speculative_tokens",
              "model": "speculative_model"}  # fmt: skip


def _engine_reading(dest: str, value: object) -> object:
    """vLLM's parsed value as dspark's reader holds it: -1 is "auto" for the window, MTP names read "mtp"."""
    if dest == "max_model_len" and value == -1:
        return "auto"
    if dest in ("spec_method", "method") and isinstance(value, str) and value in MTP_METHOD_ALIASES:
        return "mtp"
    return value


def read_back(options: VllmOptions, parsed: Mapping[str, object]) -> list[tuple[str, object, object]]:
    """(flag, dspark's reading, vLLM's) for each capacity-relevant value vLLM's parser read otherwise than
    dspark's reader did; `parsed` holds the values vLLM's parser set away from its defaults (a value absent
    there is vLLM's default, which dspark cannot tell from an explicit one, and is not compared)."""
    out: list[tuple[str, object, object]] = []
    for field, dest, flag in _READ_BACK:
        if dest in parsed:
            theirs, ours = _engine_reading(dest, parsed[dest]), getattr(options, field)
            if ours != theirs:
                out.append((flag, ours, theirs))
    spec = parsed.get("speculative_config")
    if isinstance(spec, Mapping):
        for key, field in _SPEC_KEYS.items():
            if key in spec and spec[key] is not None:
                theirs, ours = _engine_reading(key, spec[key]), getattr(options, field)
                if ours != theirs:
                    out.append((f"--speculative-config {key}", ours, theirs))
    return out
