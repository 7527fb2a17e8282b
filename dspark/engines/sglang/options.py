"""`python -m sglang.launch_server` flags that change capacity, read from a pasted argv (pure, no SGLang import).

Read the way SGLang 0.5.23 reads them: argparse (dspark.engines.argv) with the flags declared as
ServerArgs.add_cli_args declares them (arg_groups/fields/*), a plain argparse.ArgumentParser with no pre-pass
(`--a_b` is not `--a-b` there): `--x=y` and `--x y`, store-true booleans, the last occurrence winning,
human-readable integers for --max-total-tokens / --context-length / --max-prefill-tokens (utils/common.py
human_readable_int: SI k/M/G/T with decimals, IEC Ki/Mi/Gi/Ti integers; case-sensitive), the aliases the
parser declares (--model, --tensor-parallel-size, --pipeline-parallel-size, --speculative-draft-model).
Flags it does not know are kept in `unknown` and otherwise ignored: the engine's real parser checks the argv
elsewhere.

`--cuda-graph-max-bs` and `--cuda-graph-bs` are read as the decode settings (older SGLang's names), but
0.5.23's argparse rejects them as ambiguous prefixes of the -decode/-prefill flags: they are listed in
`ambiguous` so capacity can say so.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from dspark.core.errors import SettingsError
from dspark.engines.argv import ArgvParser, ValueFlag, as_given, read_argv, typed
from dspark.engines.flag_values import float_value, int_value, positive_int

KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
MAMBA_SSM_DTYPES = ("float32", "bfloat16", "float16")
MAMBA_RADIX_STRATEGIES = ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy")
GRAPH_BACKENDS = ("full", "breakable", "disabled")
# arg_groups/fields/schedule.py schedule_policy choices (fcfs by default).
SCHEDULE_POLICIES = ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
                     "shortest-prefill-first")
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
    schedule_policy: str | None = None  # the waiting queue's order (the scheduler replay's admission)
    enable_mixed_chunk: bool | None = None  # prefill chunks share a step with the decode rows
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
    served_model_name: str | None = None  # launch-only, read so that dspark passes it rather than drop it
    host: str | None = None
    port: int | None = None
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


def _algorithm(value: str, flag: str) -> str:
    """SpeculativeAlgorithm.from_string: case-insensitive names; anything else raises in SGLang's words."""
    if value.upper() not in SPECULATIVE_ALGORITHMS:
        raise SettingsError(
            f"{flag} {value}: Unknown speculative algorithm name: {value} (SGLang SpeculativeAlgorithm.from_string)",
            hint=f"one of {', '.join(SPECULATIVE_ALGORITHMS)}",
        )
    return value


def _positive(value: str, flag: str) -> int:
    # Sizes, counts and group sizes: SGLang divides or allocates by them, so 0 or less cannot start.
    return positive_int(value, flag, "SGLang ServerArgs", problem="must be a positive integer")


def _hint(value: str, flag: str) -> int:
    return human_readable_int(value, flag=flag)


def _backend(value: str, _flag: str) -> str:
    """cuda_graph_config.parse_cuda_graph_backend_arg: the retired backend, refused in its words before choices."""
    if value == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return value


# (option strings, dest, reader, choices): as SGLang 0.5.23's ServerArgs.add_cli_args declares them
# (arg_groups/fields/*). Declared apart, so that argparse's messages name only SGLang's own strings: --tp,
# argparse's abbreviation of --tp-size, unique among SGLang's flags (the reader does not abbreviate), and
# --cuda-graph-max-bs / --cuda-graph-bs, older releases' names read as the decode settings (0.5.23's argparse
# calls them ambiguous prefixes: see `ambiguous`).
_VALUE_FLAGS: tuple[ValueFlag, ...] = (
    (("--model-path", "--model"), "model_path", as_given, None),
    (("--tp-size", "--tensor-parallel-size"), "tp_size", _positive, None),
    (("--tp",), "tp_size", _positive, None),
    (("--pp-size", "--pipeline-parallel-size"), "pp_size", _positive, None),
    (("--dp-size", "--data-parallel-size"), "dp_size", _positive, None),
    (("--mem-fraction-static",), "mem_fraction_static", float_value, None),
    (("--max-running-requests",), "max_running_requests", _positive, None),
    (("--max-total-tokens",), "max_total_tokens", _hint, None),
    (("--context-length",), "context_length", _hint, None),
    (("--chunked-prefill-size",), "chunked_prefill_size", int_value, None),
    (("--max-prefill-tokens",), "max_prefill_tokens", _hint, None),
    (("--kv-cache-dtype",), "kv_cache_dtype", as_given, KV_CACHE_DTYPES),
    (("--page-size",), "page_size", _positive, None),
    (("--speculative-algorithm",), "speculative_algorithm", _algorithm, None),
    (("--speculative-num-steps",), "speculative_num_steps", _positive, None),
    (("--speculative-eagle-topk",), "speculative_eagle_topk", _positive, None),
    (("--speculative-num-draft-tokens",), "speculative_num_draft_tokens", _positive, None),
    (("--speculative-draft-model-path", "--speculative-draft-model"), "speculative_draft_model_path", as_given, None),
    (("--mamba-ssm-dtype",), "mamba_ssm_dtype", as_given, MAMBA_SSM_DTYPES),
    (("--max-mamba-cache-size",), "max_mamba_cache_size", int_value, None),
    (("--mamba-full-memory-ratio",), "mamba_full_memory_ratio", float_value, None),
    (("--mamba-radix-cache-strategy",), "mamba_radix_cache_strategy", as_given, MAMBA_RADIX_STRATEGIES),
    (("--cuda-graph-max-bs-decode",), "cuda_graph_max_bs", int_value, None),
    (("--cuda-graph-max-bs",), "cuda_graph_max_bs", int_value, None),
    (("--cuda-graph-backend-decode",), "cuda_graph_backend_decode", _backend, GRAPH_BACKENDS),
    (("--cuda-graph-backend-prefill",), "cuda_graph_backend_prefill", _backend, GRAPH_BACKENDS),
    (("--cuda-graph-max-bs-prefill",), "cuda_graph_max_bs_prefill", int_value, None),
    (("--attention-backend",), "attention_backend", as_given, None),
    (("--schedule-policy",), "schedule_policy", as_given, SCHEDULE_POLICIES),
    (("--mm-feature-transport",), "mm_feature_transport", as_given, None),
    # Launch-only: read so that dspark passes them on rather than drop them.
    (("--served-model-name",), "served_model_name", as_given, None),
    (("--host",), "host", as_given, None),
    (("--port",), "port", int_value, None),
)
# store_true flags (DeprecatedStoreTrueAction for --disable-cuda-graph: it stores True too), by dest.
_BOOL_FLAGS: dict[str, str] = {
    "--disable-radix-cache": "disable_radix_cache",
    "--disable-overlap-schedule": "disable_overlap_schedule",
    "--enable-mixed-chunk": "enable_mixed_chunk",
    "--disable-cuda-graph": "disable_cuda_graph_all",
    "--disable-decode-cuda-graph": "disable_decode_cuda_graph",
    "--disable-prefill-cuda-graph": "disable_prefill_cuda_graph",
    "--disable-cuda-graph-padding": "disable_cuda_graph_padding",
    "--language-only": "language_only",
    "--language-model-only": "language_model_only",
}
# nargs="+" integer lists.
_LIST_FLAGS: dict[str, str] = {"--cuda-graph-bs-decode": "cuda_graph_bs", "--cuda-graph-bs": "cuda_graph_bs",
                               "--cuda-graph-bs-prefill": "cuda_graph_bs_prefill"}
_AMBIGUOUS = ("--cuda-graph-max-bs", "--cuda-graph-bs")


@functools.cache
def _parser() -> ArgvParser:
    parser = ArgvParser("sglang serve")
    parser.add_value_flags(_VALUE_FLAGS)
    for option, dest in _BOOL_FLAGS.items():
        parser.add_argument(option, dest=dest, action="store_true", default=None)
    for option, dest in _LIST_FLAGS.items():
        parser.add_argument(option, dest=dest, nargs="+", type=typed(int_value, option))
    return parser


def _graphs(values: dict[str, Any]) -> None:
    """Decode graphs off, as cuda_graph_hook resolves it: an explicit --cuda-graph-backend-decode wins over
    --disable-decode-cuda-graph, which wins over --disable-cuda-graph (either turns them off)."""
    backend = values.pop("cuda_graph_backend_decode", None)
    off = values.pop("disable_decode_cuda_graph", None) or values.get("disable_cuda_graph_all")
    if backend is not None:
        values["disable_cuda_graph"] = backend == "disabled"
    elif off:
        values["disable_cuda_graph"] = True


def known_flags() -> tuple[str, ...]:
    """The flags this reader interprets (for suggestions when a flag is not one of them)."""
    return tuple(sorted(_parser().option_strings()))


def parse_sglang_flags(argv: Sequence[str]) -> SglangOptions:
    """Read the capacity-relevant flags of a launch_server argv; the last occurrence wins, as in argparse."""
    read = read_argv(_parser(), argv)
    values: dict[str, Any] = {k: v for k, v in vars(read.namespace).items() if v is not None}
    for dest in ("cuda_graph_bs", "cuda_graph_bs_prefill"):
        if dest in values:
            values[dest] = tuple(values[dest])
    _graphs(values)
    ambiguous = tuple(t.partition("=")[0] for t in argv if t.partition("=")[0] in _AMBIGUOUS)
    # SGLang's launch_server takes no positional argument: a bare one is the engine's to refuse.
    return SglangOptions(**values, ambiguous=ambiguous, unknown=read.unknown + read.positionals)


def sglang_speculative_flags(method: str, proposed: int) -> dict[str, int]:
    """SGLang's speculative sizes for `proposed` tokens: DFLASH drafts a block of proposed + 1; the others chain
    n steps at top-1 with n + 1 draft tokens (0.5.23 asserts on a partial set)."""
    if method == "dflash":
        return {"speculative_num_draft_tokens": proposed + 1}
    draft = proposed + 1
    return {"speculative_num_steps": proposed, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": draft}


# (SglangOptions field = the dest SGLang's parser stores it under, its flag): the capacity-relevant values dspark's
# reader and SGLang's parser both read, compared after the engine's parser has read the launch argv.
_READ_BACK: tuple[tuple[str, str], ...] = (
    ("max_running_requests", "--max-running-requests"),
    ("context_length", "--context-length"),
    ("mem_fraction_static", "--mem-fraction-static"),
    ("max_total_tokens", "--max-total-tokens"),
    ("chunked_prefill_size", "--chunked-prefill-size"),
    ("max_prefill_tokens", "--max-prefill-tokens"),
    ("kv_cache_dtype", "--kv-cache-dtype"),
    ("page_size", "--page-size"),
    ("tp_size", "--tp-size"),
    ("pp_size", "--pp-size"),
    ("dp_size", "--dp-size"),
    ("disable_radix_cache", "--disable-radix-cache"),
    ("speculative_algorithm", "--speculative-algorithm"),
    ("speculative_num_steps", "--speculative-num-steps"),
    ("speculative_eagle_topk", "--speculative-eagle-topk"),
    ("speculative_num_draft_tokens", "--speculative-num-draft-tokens"),
    ("speculative_draft_model_path", "--speculative-draft-model-path"),
    ("mamba_ssm_dtype", "--mamba-ssm-dtype"),
    ("max_mamba_cache_size", "--max-mamba-cache-size"),
    ("mamba_full_memory_ratio", "--mamba-full-memory-ratio"),
    ("mamba_radix_cache_strategy", "--mamba-radix-cache-strategy"),
    ("disable_overlap_schedule", "--disable-overlap-schedule"),
    ("enable_mixed_chunk", "--enable-mixed-chunk"),
    ("schedule_policy", "--schedule-policy"),
    ("attention_backend", "--attention-backend"),
)


def read_back(options: SglangOptions, parsed: Mapping[str, object]) -> list[tuple[str, object, object]]:
    """(flag, dspark's reading, SGLang's) for each capacity-relevant value SGLang's parser read otherwise than
    dspark's reader did; `parsed` holds the values its parser set away from their defaults (one absent there is
    SGLang's default, which dspark cannot tell from an explicit one, and is not compared). Algorithm names are
    compared as SGLang reads them, in any case."""
    out: list[tuple[str, object, object]] = []
    for dest, flag in _READ_BACK:
        if dest not in parsed:
            continue
        theirs, ours = parsed[dest], getattr(options, dest)
        if dest == "speculative_algorithm" and isinstance(theirs, str) and isinstance(ours, str):
            theirs, ours = theirs.upper(), ours.upper()
        if ours != theirs:
            out.append((flag, getattr(options, dest), parsed[dest]))
    return out
