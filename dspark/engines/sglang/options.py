"""`python -m sglang.launch_server` flags that change capacity, read from a pasted argv (pure, no SGLang import).

Mirrors SGLang 0.5.23's parser (argparse built by ServerArgs.add_cli_args from arg_groups/fields/*):
`--x=y` and `--x y`, store-true booleans, human-readable integers for --max-total-tokens /
--context-length / --max-prefill-tokens (utils/common.py human_readable_int: SI k/M/G/T with
decimals, IEC Ki/Mi/Gi/Ti integers; case-sensitive), the aliases the parser declares (--model,
--tensor-parallel-size, --pipeline-parallel-size, --speculative-draft-model). Flags it does not know
are kept in `unknown` and otherwise ignored: the engine's real parser checks the argv elsewhere.

`--cuda-graph-max-bs` and `--cuda-graph-bs` are read as the decode settings (older SGLang's names), but
0.5.23's argparse rejects them as ambiguous prefixes of the -decode/-prefill flags: they are listed in
`ambiguous` so capacity can say so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from dspark.core.errors import SettingsError
from dspark.engines.flag_values import choice, float_value, int_value, positive_int

KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
MAMBA_SSM_DTYPES = ("float32", "bfloat16", "float16")
MAMBA_RADIX_STRATEGIES = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
GRAPH_BACKENDS = ("full", "breakable", "disabled")
# SpeculativeAlgorithm (srt/speculative/spec_info.py) members, plus NEXTN, which from_string reads as EAGLE.
SPECULATIVE_ALGORITHMS = ("DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NEXTN")


@dataclass(frozen=True)
class SglangOptions:
    """The capacity-relevant SGLang server settings; every field is None when the argv does not set it."""

    model_path: str | None = None
    tp_size: int | None = None
    pp_size: int | None = None
    dp_size: int | None = None
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    kv_cache_dtype: str | None = None
    page_size: int | None = None
    disable_radix_cache: bool | None = None
    speculative_algorithm: str | None = None  # as given (upper-cased by SGLang): NEXTN, EAGLE, EAGLE3, DFLASH, ...
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    mamba_ssm_dtype: str | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float | None = None
    mamba_radix_cache_strategy: str | None = None
    disable_overlap_schedule: bool | None = None
    cuda_graph_max_bs: int | None = None  # the decode graphs' largest batch (--cuda-graph-max-bs-decode)
    cuda_graph_bs: tuple[int, ...] | None = None  # explicit decode batch sizes (--cuda-graph-bs-decode)
    disable_cuda_graph: bool | None = None  # decode graphs off (--disable-cuda-graph, -decode-, backend disabled)
    disable_cuda_graph_all: bool | None = None  # --disable-cuda-graph: both phases (the prefill graph too)
    disable_prefill_cuda_graph: bool | None = None  # --disable-prefill-cuda-graph
    cuda_graph_backend_prefill: str | None = None  # --cuda-graph-backend-prefill: full, breakable, disabled
    cuda_graph_max_bs_prefill: int | None = None  # the prefill graphs' largest capture size (tokens)
    cuda_graph_bs_prefill: tuple[int, ...] | None = None  # explicit prefill capture sizes (--cuda-graph-bs-prefill)
    disable_cuda_graph_padding: bool | None = None
    mm_feature_transport: str | None = None  # --mm-feature-transport: cuda_ipc / cuda_vmm reserve 1 GiB more
    language_only: bool | None = None  # --language-only: no multimodal memory headroom
    language_model_only: bool | None = None  # --language-model-only: likewise
    attention_backend: str | None = None  # decides the page size on some backends (trtllm_mha/_mla, flashmla)
    ambiguous: tuple[str, ...] = ()  # flags 0.5.23's argparse rejects as ambiguous prefixes
    unknown: tuple[str, ...] = ()  # flags (and their values) this reader does not interpret


def human_readable_int(value: str, *, flag: str) -> int:
    """SGLang's human_readable_int: '1.5M' -> 1,500,000 (SI, decimals ok), '1Mi' -> 1,048,576 (IEC, integers)."""
    text = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if match:
        number, suffix = match.groups()
        if suffix.endswith("i"):
            if "." in number:
                raise SettingsError(
                    f"{flag} {value}: decimals are not allowed with IEC suffixes like {suffix}",
                    hint=f"use an integer ({int(Decimal(number))}{suffix}) or an SI value ({number}{suffix[0]})",
                )
            return int(number) << (10 * ("KMGT".index(suffix[0]) + 1))
        try:
            return int(Decimal(number) * 10 ** (3 * ("kMGT".index(suffix) + 1)))
        except InvalidOperation:  # pragma: no cover - the regex admits only digits
            raise SettingsError(f"{flag} {value}: not an integer") from None
    try:
        return int(text)
    except ValueError:
        raise SettingsError(
            f"{flag} {value}: not an integer", hint="use a plain integer, SI (1k, 1M) or IEC (1Ki, 1Mi) suffixes"
        ) from None


def _choice(value: str, flag: str, choices: Sequence[str]) -> str:
    return choice(value, flag, choices)


def _algorithm(value: str, flag: str) -> str:
    """SpeculativeAlgorithm.from_string: case-insensitive names; anything else raises in SGLang's words."""
    if value.upper() not in SPECULATIVE_ALGORITHMS:
        raise SettingsError(
            f"{flag} {value}: Unknown speculative algorithm name: {value} (SGLang SpeculativeAlgorithm.from_string)",
            hint=f"one of {', '.join(SPECULATIVE_ALGORITHMS)}",
        )
    return value


# flag -> (field, kind). Kinds: int, hint (human_readable_int), float, str, bool (store_true), and choices.
_VALUE_FLAGS: dict[str, tuple[str, str]] = {
    "--model-path": ("model_path", "str"),
    "--model": ("model_path", "str"),
    "--tp-size": ("tp_size", "pos"),
    "--tp": ("tp_size", "pos"),  # argparse accepts the unambiguous prefix
    "--tensor-parallel-size": ("tp_size", "pos"),
    "--pp-size": ("pp_size", "pos"),
    "--pipeline-parallel-size": ("pp_size", "pos"),
    "--dp-size": ("dp_size", "pos"),
    "--data-parallel-size": ("dp_size", "pos"),
    "--mem-fraction-static": ("mem_fraction_static", "float"),
    "--max-running-requests": ("max_running_requests", "pos"),
    "--max-total-tokens": ("max_total_tokens", "hint"),
    "--context-length": ("context_length", "hint"),
    "--chunked-prefill-size": ("chunked_prefill_size", "int"),
    "--max-prefill-tokens": ("max_prefill_tokens", "hint"),
    "--kv-cache-dtype": ("kv_cache_dtype", "kv"),
    "--page-size": ("page_size", "pos"),
    "--speculative-algorithm": ("speculative_algorithm", "algo"),
    "--speculative-num-steps": ("speculative_num_steps", "pos"),
    "--speculative-eagle-topk": ("speculative_eagle_topk", "pos"),
    "--speculative-num-draft-tokens": ("speculative_num_draft_tokens", "pos"),
    "--speculative-draft-model-path": ("speculative_draft_model_path", "str"),
    "--speculative-draft-model": ("speculative_draft_model_path", "str"),
    "--mamba-ssm-dtype": ("mamba_ssm_dtype", "ssm"),
    "--max-mamba-cache-size": ("max_mamba_cache_size", "int"),
    "--mamba-full-memory-ratio": ("mamba_full_memory_ratio", "float"),
    "--mamba-radix-cache-strategy": ("mamba_radix_cache_strategy", "radix"),
    "--cuda-graph-max-bs-decode": ("cuda_graph_max_bs", "int"),
    "--cuda-graph-max-bs": ("cuda_graph_max_bs", "int"),
    "--cuda-graph-backend-decode": ("disable_cuda_graph", "backend"),
    "--cuda-graph-backend-prefill": ("cuda_graph_backend_prefill", "graph"),
    "--cuda-graph-max-bs-prefill": ("cuda_graph_max_bs_prefill", "int"),
    "--attention-backend": ("attention_backend", "str"),
    "--mm-feature-transport": ("mm_feature_transport", "str"),
}
_BOOL_FLAGS: dict[str, tuple[str, ...]] = {
    "--disable-radix-cache": ("disable_radix_cache",),
    "--disable-overlap-schedule": ("disable_overlap_schedule",),
    "--disable-cuda-graph": ("disable_cuda_graph", "disable_cuda_graph_all"),
    "--disable-decode-cuda-graph": ("disable_cuda_graph",),
    "--disable-prefill-cuda-graph": ("disable_prefill_cuda_graph",),
    "--disable-cuda-graph-padding": ("disable_cuda_graph_padding",),
    "--language-only": ("language_only",),
    "--language-model-only": ("language_model_only",),
}
_LIST_FLAGS: dict[str, str] = {"--cuda-graph-bs-decode": "cuda_graph_bs", "--cuda-graph-bs": "cuda_graph_bs",
                               "--cuda-graph-bs-prefill": "cuda_graph_bs_prefill"}
_AMBIGUOUS = frozenset({"--cuda-graph-max-bs", "--cuda-graph-bs"})


_CHOICES: dict[str, Sequence[str]] = {"kv": KV_CACHE_DTYPES, "ssm": MAMBA_SSM_DTYPES, "radix": MAMBA_RADIX_STRATEGIES,
                                      "graph": GRAPH_BACKENDS}


def _convert(kind: str, value: str, flag: str) -> object:
    """The flag's value in the type SGLang's parser gives it."""
    if kind in _CHOICES:
        return _choice(value, flag, _CHOICES[kind])
    if kind == "backend":
        return _choice(value, flag, GRAPH_BACKENDS) == "disabled"
    if kind == "hint":
        return human_readable_int(value, flag=flag)
    if kind == "pos":
        # Sizes, counts and group sizes: SGLang divides or allocates by them, so 0 or less cannot start.
        return positive_int(value, flag, "SGLang ServerArgs", problem="must be a positive integer")
    if kind == "algo":
        return _algorithm(value, flag)
    numbers = {"int": int_value, "float": float_value}
    return numbers[kind](value, flag) if kind in numbers else value


def known_flags() -> tuple[str, ...]:
    """The flags this reader interprets (for suggestions when a flag is not one of them)."""
    return (*_VALUE_FLAGS, *_BOOL_FLAGS, *_LIST_FLAGS)


def parse_sglang_flags(argv: Sequence[str]) -> SglangOptions:
    """Read the capacity-relevant flags of a launch_server argv; the last occurrence wins, as in argparse."""
    values: dict[str, object] = {}
    unknown: list[str] = []
    ambiguous: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, inline = token.partition("=")
        if name in _BOOL_FLAGS:
            if eq:
                raise SettingsError(f"{name} takes no value (got {token!r})")
            values.update(dict.fromkeys(_BOOL_FLAGS[name], True))
            i += 1
            continue
        if name in _VALUE_FLAGS or name in _LIST_FLAGS:
            if name in _AMBIGUOUS:
                ambiguous.append(name)
            if name in _LIST_FLAGS:
                items = [inline] if eq else []
                j = i + 1
                while not eq and j < len(args) and not args[j].startswith("--"):
                    items.append(args[j])
                    j += 1
                if not items:
                    raise SettingsError(f"{name} needs at least one batch size")
                values[_LIST_FLAGS[name]] = tuple(int_value(v, name) for v in items)
                i = j if not eq else i + 1
                continue
            if eq:
                value, i = inline, i + 1
            elif i + 1 < len(args) and not (args[i + 1].startswith("--") and len(args[i + 1]) > 2):
                value, i = args[i + 1], i + 2
            else:
                raise SettingsError(f"{name} needs a value")
            field_name, kind = _VALUE_FLAGS[name]
            values[field_name] = _convert(kind, value, name)
            continue
        unknown.append(token)
        i += 1
    return SglangOptions(**values, ambiguous=tuple(ambiguous), unknown=tuple(unknown))  # type: ignore[arg-type]


def sglang_speculative_flags(method: str, proposed: int) -> dict[str, int]:
    """SGLang's speculative sizes for `proposed` tokens: DFLASH drafts a block of proposed + 1; the others chain
    n steps at top-1 with n + 1 draft tokens (0.5.23 asserts on a partial set)."""
    if method == "dflash":
        return {"speculative_num_draft_tokens": proposed + 1}
    draft = proposed + 1
    return {"speculative_num_steps": proposed, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": draft}
