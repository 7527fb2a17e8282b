"""Each engine's read_back: the capacity-relevant values its parser read (ArgvCheck.parsed) against dspark's reading.

Generated: every value dspark's reader holds for a compared flag is perturbed in the engine's namespace, and
each perturbation must be named with both values; the engine's own defaults (absent from parsed) never are.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from dspark.engines import engine_spec

RNG = random.Random(9)  # noqa: S311 - reproducible cases, no secret

VLLM_ARGV = ("/m", "--max-num-seqs", "99", "--gpu-memory-utilization", "0.92", "--max-num-batched-tokens", "8192",
             "--kv-cache-dtype", "fp8", "--block-size", "32", "-tp", "2", "-pp", "2", "--no-enable-prefix-caching",
             "--max-model-len", "32768", "--kv-cache-memory-bytes", "1G",
             "--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 2}')
# vLLM 0.32.0's parse of VLLM_ARGV (the values away from its defaults, as _argv_check.py reports them).
VLLM_PARSED: dict[str, Any] = {
    "model_tag": "/m", "max_num_seqs": 99, "gpu_memory_utilization": 0.92, "max_num_batched_tokens": 8192,
    "kv_cache_dtype": "fp8", "block_size": 32, "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
    "enable_prefix_caching": False, "max_model_len": 32768, "kv_cache_memory_bytes": 1 << 30,
    "speculative_config": {"method": "deepseek_mtp", "num_speculative_tokens": 2},
    "trust_remote_code": True, "api_key": ["sk-x"],
}
SGLANG_ARGV = ("--model-path", "/m", "--max-running-requests", "64", "--mem-fraction-static", "0.8",
               "--context-length", "32k", "--max-total-tokens", "100000", "--chunked-prefill-size", "4096",
               "--kv-cache-dtype", "fp8_e4m3", "--page-size", "32", "--tp-size", "2", "--disable-radix-cache",
               "--speculative-algorithm", "nextn", "--speculative-num-steps", "2")
SGLANG_PARSED: dict[str, Any] = {
    "model_path": "/m", "max_running_requests": 64, "mem_fraction_static": 0.8, "context_length": 32000,
    "max_total_tokens": 100000, "chunked_prefill_size": 4096, "kv_cache_dtype": "fp8_e4m3", "page_size": 32,
    "tp_size": 2, "disable_radix_cache": True, "speculative_algorithm": "nextn", "speculative_num_steps": 2,
    "trust_remote_code": True,
}


def _other(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + RNG.randrange(1, 50)
    if isinstance(value, float):
        return round(value / 2, 3)
    if isinstance(value, dict):
        return {**value, "num_speculative_tokens": value["num_speculative_tokens"] + 1}
    return value + "x"


@pytest.mark.parametrize(("engine", "argv", "parsed"), [("vllm", VLLM_ARGV, VLLM_PARSED),
                                                        ("sglang", SGLANG_ARGV, SGLANG_PARSED)])
def test_the_same_reading_agrees_and_every_changed_value_is_named(engine: str, argv: tuple[str, ...],
                                                                  parsed: dict[str, Any]) -> None:
    spec = engine_spec(engine)
    options = spec.parse_flags(argv)
    assert list(spec.read_back(options, parsed)) == []
    assert list(spec.read_back(options, {})) == []  # all at the engine's defaults: nothing to compare
    compared = [d for d in parsed if d not in ("model_tag", "model_path", "trust_remote_code", "api_key")]
    for dest in compared:
        changed = {**parsed, dest: _other(parsed[dest])}
        found = list(spec.read_back(options, changed))
        assert len(found) == 1, (dest, found)
        flag, ours, theirs = found[0]
        assert flag.startswith("--") and ours != theirs, (dest, found)


def test_vllm_reads_the_window_s_auto_and_mtp_names_as_dspark_does() -> None:
    spec = engine_spec("vllm")
    options = spec.parse_flags(("--max-model-len", "auto", "--spec-method", "qwen3_next_mtp"))
    assert list(spec.read_back(options, {"max_model_len": -1, "spec_method": "qwen3_next_mtp"})) == []


def test_a_value_dspark_did_not_read_is_named_as_the_engine_s_default() -> None:
    """issue 26 item 9: the abbreviation the engine read and dspark did not (a recipe's engine_args)."""
    spec = engine_spec("vllm")
    options = spec.parse_flags(("--max-num-seqs", "99", "--gpu-memory-util", "0.5"))  # not spelled out
    assert list(spec.read_back(options, {"max_num_seqs": 99, "gpu_memory_utilization": 0.5})) == [
        ("--gpu-memory-utilization", None, 0.5)]
