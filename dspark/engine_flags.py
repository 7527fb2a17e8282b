"""Engine flags after `--`: read them, map the ones dspark plans with onto its knobs, name the ones it cannot place.

Pure: the readers (dspark.engines.vllm_options / sglang_options) mirror each engine's own parser; nothing here
runs an engine.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from dspark.engines import ENGINES
from dspark.errors import SettingsError
from dspark.findings import Finding

# Engine flags after `--` are command-line values too: map them onto dspark's knobs.
ENGINE_NAMES = tuple(sorted(ENGINES))

_VLLM_FLAG_KNOBS = {
    "max_num_seqs": "max_num_seqs",
    "max_model_len": "max_model_len",
    "kv_cache_dtype": "kv_cache_dtype",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "enable_prefix_caching": "enable_prefix_caching",
    # Not num_speculative_tokens: a pasted --speculative-config carries its method with it, and the options
    # keep both; as a setting on its own it would need the recipe's method.
}
_SGLANG_FLAG_KNOBS = {
    "max_running_requests": "max_num_seqs",
    "context_length": "max_model_len",
    "kv_cache_dtype": "kv_cache_dtype",
    "max_total_tokens": "max_total_tokens",
    "mem_fraction_static": "mem_fraction_static",
    "tp_size": "tensor_parallel_size",
    "pp_size": "pipeline_parallel_size",
    "chunked_prefill_size": "max_num_batched_tokens",
}


def parse_engine_flags(engine: str, argv: tuple[str, ...]) -> Any:
    """The engine's options from its argv (VllmOptions or SglangOptions); SettingsError for values it refuses."""
    if engine == "vllm":
        from dspark.engines.vllm_options import parse_vllm_serve_flags  # noqa: PLC0415

        return parse_vllm_serve_flags(argv)
    from dspark.engines.sglang_options import parse_sglang_flags  # noqa: PLC0415

    return parse_sglang_flags(argv)


def flag_values_from_engine_flags(engine: str, options: Any) -> dict[str, object]:
    """Knob values the pasted engine flags set (only those dspark plans with)."""
    table = _VLLM_FLAG_KNOBS if engine == "vllm" else _SGLANG_FLAG_KNOBS
    out: dict[str, object] = {}
    for attr, knob in table.items():
        value = getattr(options, attr, None)
        if value is None or (knob == "max_model_len" and not isinstance(value, int)):
            continue
        out[knob] = value
    if engine == "sglang" and getattr(options, "disable_radix_cache", None):
        out["enable_prefix_caching"] = False
    return out


def merge_flags(own: Mapping[str, object | None], pasted: Mapping[str, object]) -> dict[str, object | None]:
    """dspark's flags and the pasted engine flags together; the same knob given differently is an error."""
    merged = dict(own)
    for knob, value in pasted.items():
        mine = merged.get(knob)
        if mine is not None and mine != value:
            raise SettingsError(
                f"{knob} is given twice on the command line: {mine!r} (dspark flag) and {value!r} (engine flag)",
                hint="give it once",
            )
        merged[knob] = value
    return merged


def unplaced_flag_findings(engine: str, options: Any) -> list[Finding]:
    """Engine flags after `--` that dspark's reader does not know: said, with a guess where one is close.

    dspark reads only the flags that change capacity; the rest reach the engine untouched. validate does not
    run the engine's parser, so a typo such as --max-num-seq would otherwise pass unremarked.
    """
    flags = [arg.partition("=")[0] for arg in getattr(options, "unknown", ()) if arg.startswith("-")]
    if not flags:
        return []
    if engine == "vllm":
        from dspark.engines.vllm_options import known_flags  # noqa: PLC0415
    else:
        from dspark.engines.sglang_options import known_flags  # noqa: PLC0415
    known = known_flags()
    named = []
    for flag_name in flags:
        close = difflib.get_close_matches(flag_name, known, n=1, cutoff=0.85)
        named.append(f"{flag_name} (did you mean {close[0]}?)" if close else flag_name)
    return [Finding("warn", "argv-not-checked",
                    f"dspark cannot place these {engine} flags: {', '.join(named)}; they are passed to the engine "
                    "unchecked here (dspark reads the flags that change capacity; `dspark start` runs the installed "
                    "engine's own parser, which rejects unknown ones)")]


def data_parallel_of(engine: str, options: Any) -> tuple[int, bool]:
    """(DP size, DP attention) from the engine flags: vLLM --data-parallel-size, SGLang --dp-size.

    SGLang's --enable-dp-attention runs the DP ranks inside the TP group (no extra GPUs); plain DP adds
    replicas of TP × PP GPUs each, as vLLM's does.
    """
    dp = getattr(options, "data_parallel_size", None) or getattr(options, "dp_size", None) or 1
    dp_attention = engine == "sglang" and "--enable-dp-attention" in getattr(options, "unknown", ())
    return int(dp), dp_attention
