"""`vllm serve` flags that change capacity, read from the argv a user pastes after `--` (pure, no vLLM import).

Mirrors vLLM's own parser (vllm/utils/argparse_utils.py FlexibleArgumentParser in 0.32.0): `--x=y` and
`--x y`, underscores in long names read as dashes, `--flag`/`--no-flag` booleans, human-readable sizes
(human_readable_int: k/m/g/t decimal, K/M/G/T binary), `auto`/-1 for --max-model-len
(human_readable_int_or_auto), JSON for --speculative-config/-sc and --compilation-config/-cc plus the
dotted `-cc.key=value` form. Flags it does not know are kept in `unknown` and otherwise ignored: the
engine's real parser checks the argv elsewhere (dspark.engines._argv_check).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dspark.core.errors import SettingsError
from dspark.engines.flag_values import choice, float_value, int_value, json_count, positive_int

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
    quantization: str | None = None
    distributed_executor_backend: str | None = None
    unknown: tuple[str, ...] = ()  # flags (and their values) this reader does not interpret

    @property
    def distributed_runtime(self) -> str | None:
        """dspark's distributed_runtime the backend flag sets: ray -> ray, mp -> native, others none."""
        return RUNTIME_OF_BACKEND.get(self.distributed_executor_backend or "")


def human_readable_int(value: str, *, flag: str) -> int:
    """vLLM's human_readable_int: '25.6k' -> 25,600 (decimal k/m/g/t), '1K' -> 1,024 (binary, no decimals)."""
    text = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if match:
        number, suffix = match.groups()
        if suffix in "kmgt":
            multiplier: int = 10 ** (3 * ("kmgt".index(suffix) + 1))
            return int(float(number) * multiplier)  # vLLM: int(float(number) * mult)
        if "." in number:
            raise SettingsError(
                f"{flag} {value}: decimals are not allowed with binary suffixes like {suffix}",
                hint=f"did you mean {number}{suffix.lower()}?",
            )
        binary: int = 2 ** (10 * ("KMGT".index(suffix) + 1))
        return int(number) * binary
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{flag} {value}: not an integer (sizes take k/m/g or K/M/G)") from None


def _max_model_len(value: str, flag: str) -> MaxModelLen:
    """human_readable_int_or_auto: '-1' and 'auto' mean auto-fit to the KV memory."""
    text = value.strip()
    if text == "-1" or text.lower() == "auto":
        return "auto"
    return human_readable_int(text, flag=flag)


def _json_object(value: str, flag: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{flag}: not valid JSON ({exc.msg})", hint=f"got {value!r}") from None
    if not isinstance(obj, dict):
        raise SettingsError(f"{flag}: expected a JSON object, got {value!r}")
    return obj


def _dotted_value(text: str) -> Any:
    """A value given as `-cc.key=value`: JSON when it parses (numbers, lists, true), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# Long flag -> (field, kind). Kinds: int, size, len, float, str, bool (BooleanOptionalAction), flag.
_VALUE_FLAGS: dict[str, tuple[str, str]] = {
    "--model": ("model", "str"),
    "--max-model-len": ("max_model_len", "len"),
    "--dtype": ("dtype", "dtype"),
    "--kv-cache-dtype": ("kv_cache_dtype", "str"),
    "--block-size": ("block_size", "cache_pos"),
    "--mamba-cache-mode": ("mamba_cache_mode", "str"),
    "--mamba-cache-dtype": ("mamba_cache_dtype", "mamba_dtype"),
    "--mamba-ssm-cache-dtype": ("mamba_ssm_cache_dtype", "mamba_dtype"),
    "--mamba-block-size": ("mamba_block_size", "cache_pos"),
    "--max-num-seqs": ("max_num_seqs", "int"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", "size"),
    "--gpu-memory-utilization": ("gpu_memory_utilization", "float"),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", "size"),
    "--num-gpu-blocks-override": ("num_gpu_blocks_override", "int"),
    "--tensor-parallel-size": ("tensor_parallel_size", "int"),
    "--pipeline-parallel-size": ("pipeline_parallel_size", "int"),
    "--data-parallel-size": ("data_parallel_size", "parallel_pos"),
    "--max-cudagraph-capture-size": ("max_cudagraph_capture_size", "int"),
    "--performance-mode": ("performance_mode", "str"),
    "--quantization": ("quantization", "str"),
    "--distributed-executor-backend": ("distributed_executor_backend", "backend"),
    "--spec-method": ("speculative_method", "str"),
    "--spec-model": ("speculative_model", "str"),
    "--spec-tokens": ("num_speculative_tokens", "spec_pos"),
}
_BOOL_FLAGS: dict[str, str] = {
    "--enable-prefix-caching": "enable_prefix_caching",
    "--enable-chunked-prefill": "enable_chunked_prefill",
    "--enforce-eager": "enforce_eager",
    "--disable-hybrid-kv-cache-manager": "disable_hybrid_kv_cache_manager",
}
_ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-q": "--quantization",
    "-sc": "--speculative-config",
    "-cc": "--compilation-config",
}
_JSON_FLAGS = {"--speculative-config", "--compilation-config"}


def _normalise(name: str) -> str:
    """vLLM reads `--max_num_seqs` as `--max-num-seqs` (FlexibleArgumentParser); short aliases to long."""
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return _ALIASES.get(name, name)


# Positive integers, with the engine config class whose pydantic field (gt=0 / ge=1) refuses the rest.
_POSITIVE_OWNERS = {
    "cache_pos": "vLLM CacheConfig",
    "parallel_pos": "vLLM ParallelConfig",
    "spec_pos": "vLLM SpeculativeConfig.num_speculative_tokens",
}


_CHOICES = {"dtype": MODEL_DTYPES, "mamba_dtype": MAMBA_DTYPES, "backend": EXECUTOR_BACKENDS}


def _convert(kind: str, value: str, flag: str) -> Any:
    if kind in _POSITIVE_OWNERS:
        return positive_int(value, flag, _POSITIVE_OWNERS[kind])
    if kind in _CHOICES:
        return choice(value, flag, _CHOICES[kind])
    readers = {
        "int": int_value,
        "size": lambda v, f: human_readable_int(v, flag=f),
        "len": _max_model_len,
        "float": float_value,
    }
    return readers[kind](value, flag) if kind in readers else value


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
    if not isinstance(raw, list) or not all(isinstance(x, int) for x in raw):
        raise SettingsError(f"{flag}: cudagraph_capture_sizes must be a list of integers, got {raw!r}")
    return tuple(raw)


def _apply_compilation(values: dict[str, Any], conf: dict[str, Any], flag: str) -> None:
    """Fields of --compilation-config that set CUDA-graph capture."""
    if "cudagraph_mode" in conf and conf["cudagraph_mode"] is not None:
        values["cudagraph_mode"] = str(conf["cudagraph_mode"]).upper()
    if "max_cudagraph_capture_size" in conf and conf["max_cudagraph_capture_size"] is not None:
        values["max_cudagraph_capture_size"] = int_value(str(conf["max_cudagraph_capture_size"]), flag)
    if "cudagraph_capture_sizes" in conf and conf["cudagraph_capture_sizes"] is not None:
        values["cudagraph_capture_sizes"] = _sizes(conf["cudagraph_capture_sizes"], flag)


class _Reader:
    """One pass over an argv, the way vLLM's FlexibleArgumentParser reads it."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.args = list(argv)
        self.pos = 0
        self.values: dict[str, Any] = {}
        self.json_parts: dict[str, dict[str, Any]] = {name: {} for name in _JSON_FLAGS}
        self.unknown: list[str] = []

    def value(self, flag: str, inline: str | None) -> str:
        """The flag's value: after `=`, else the next argument."""
        if inline is not None:
            return inline
        if self.pos + 1 >= len(self.args):
            raise SettingsError(f"{flag} needs a value")
        self.pos += 1
        return self.args[self.pos]

    def positional(self, arg: str) -> None:
        """`vllm serve MODEL ...`: the first bare argument is the model tag."""
        if "model" not in self.values and not self.unknown:
            self.values["model"] = arg
        else:
            self.unknown.append(arg)

    def capture_sizes(self, flag: str, inline: str | None) -> None:
        """--cudagraph-capture-sizes is a list[int] field: nargs='+' in vLLM's parser."""
        items = [inline] if inline is not None else []
        while inline is None and self.pos + 1 < len(self.args) and self.args[self.pos + 1].isdigit():
            self.pos += 1
            items.append(self.args[self.pos])
        if not items:
            raise SettingsError(f"{flag} needs at least one integer")
        self.values["cudagraph_capture_sizes"] = tuple(int_value(x, flag) for x in items)

    def keep_unknown(self, arg: str, inline: str | None) -> None:
        """Keep an unknown flag with its value, so the value is not read as the model or a flag."""
        self.unknown.append(arg)
        nxt = self.pos + 1
        if inline is None and nxt < len(self.args) and not self.args[nxt].startswith("-"):
            self.pos = nxt
            self.unknown.append(self.args[nxt])

    def flag(self, arg: str) -> None:
        """Interpret one `--name[=value]` argument (and its value)."""
        raw_name, eq, inline_value = arg.partition("=")
        inline = inline_value if eq else None
        name = _normalise(raw_name)
        base, dot, key = name.partition(".")
        base = _normalise(base)
        if dot and base in _JSON_FLAGS:
            # `-cc.max_cudagraph_capture_size=64`, `--speculative-config.method mtp`
            self.json_parts[base][key] = _dotted_value(self.value(name, inline))
        elif name in _JSON_FLAGS:
            self.json_parts[name].update(_json_object(self.value(name, inline), name))
        elif name in _VALUE_FLAGS:
            field, kind = _VALUE_FLAGS[name]
            self.values[field] = _convert(kind, self.value(name, inline), name)
        elif name in _BOOL_FLAGS or (name.startswith("--no-") and "--" + name[5:] in _BOOL_FLAGS):
            positive = name in _BOOL_FLAGS
            if inline is not None:
                # argparse's BooleanOptionalAction takes no value, not even "true".
                on, off = (name, f"--no-{name[2:]}") if positive else (f"--{name[5:]}", name)
                raise SettingsError(
                    f"argument {on}/{off}: ignored explicit argument {inline!r}",
                    hint=f"write {on} to turn it on or {off} to turn it off, with no value",
                )
            self.values[_BOOL_FLAGS[name if positive else "--" + name[5:]]] = positive
        elif name == "--cudagraph-capture-sizes":
            self.capture_sizes(name, inline)
        else:
            self.keep_unknown(arg, inline)

    def read(self) -> VllmOptions:
        """Walk the argv, then fold the JSON flags in."""
        while self.pos < len(self.args):
            arg = self.args[self.pos]
            if arg.startswith("-") and arg != "-":
                self.flag(arg)
            else:
                self.positional(arg)
            self.pos += 1
        spec = self.json_parts["--speculative-config"]
        for key, field in _SPEC_SHORTCUTS.items():
            if key in spec and field in self.values:
                # EngineArgs raises when a --spec-* shortcut repeats a key of --speculative-config.
                raise SettingsError(f"--speculative-config sets {key!r} and so does a --spec-* flag")
        _apply_speculative(self.values, spec, "--speculative-config")
        _apply_compilation(self.values, self.json_parts["--compilation-config"], "--compilation-config")
        method = self.values.get("speculative_method")
        if method is not None and method not in SPECULATIVE_METHODS:
            raise SettingsError(
                f"--speculative-config: method {method!r} is not one vLLM 0.32.0 knows "
                f"(SpeculativeConfig.method: {', '.join(sorted(SPECULATIVE_METHODS - MTP_METHOD_ALIASES))}, "
                "or an MTP name such as mtp / qwen3_next_mtp)"
            )
        if method in MTP_METHOD_ALIASES:
            self.values["speculative_method"] = "mtp"
        return VllmOptions(**self.values, unknown=tuple(self.unknown))


_SPEC_SHORTCUTS = {"method": "speculative_method", "num_speculative_tokens": "num_speculative_tokens",
                   "model": "speculative_model"}  # fmt: skip


def known_flags() -> tuple[str, ...]:
    """The long flags this reader interprets (for suggestions when a flag is not one of them)."""
    return (*_VALUE_FLAGS, *_BOOL_FLAGS, *(f"--no-{f[2:]}" for f in _BOOL_FLAGS), *_JSON_FLAGS,
            "--cudagraph-capture-sizes")


def parse_vllm_serve_flags(argv: Sequence[str]) -> VllmOptions:
    """Read the capacity-relevant `vllm serve` flags of argv; unknown flags are kept in `unknown`."""
    return _Reader(argv).read()
