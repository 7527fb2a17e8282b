"""Engine flags after `--` with values the engine refuses: a settings error in the engine's words, never a crash."""

from __future__ import annotations

import pytest

from dspark.core.errors import SettingsError
from dspark.engines.sglang.options import parse_sglang_flags
from dspark.engines.vllm.options import parse_vllm_serve_flags


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--block-size", "0"], "--block-size 0: Input should be greater than 0 (vLLM CacheConfig)"),
        (["--block-size", "-16"], "--block-size -16: Input should be greater than 0"),
        (["--mamba-block-size", "0"], "--mamba-block-size 0: Input should be greater than 0"),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1e400}'],
         "num_speculative_tokens: Input should be a valid integer, got inf"),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2.5}'], "valid integer, got 2.5"),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": true}'], "valid integer, got True"),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 0}'], "greater than 0, got 0"),
        (["--speculative-config", '{"method": "nope", "num_speculative_tokens": 2}'],
         "method 'nope' is not one vLLM 0.32.0 knows"),
        (["--spec-tokens", "0"], "--spec-tokens 0: Input should be greater than 0"),
        (["--dtype", "nope"], "argument --dtype: invalid choice: 'nope'"),
        (["--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
        (["--mamba-cache-dtype", "nope"], "argument --mamba-cache-dtype: invalid choice: 'nope'"),
        (["--mamba-ssm-cache-dtype", "nope"], "argument --mamba-ssm-cache-dtype: invalid choice: 'nope'"),
        (["--enable-prefix-caching=maybe"], "ignored explicit argument 'maybe'"),
        (["--enable-prefix-caching=true"], "ignored explicit argument 'true'"),
        (["--no-enable-prefix-caching=1"], "ignored explicit argument '1'"),
        (["--data-parallel-size", "0"], "--data-parallel-size 0: Input should be greater than 0"),
        (["--gpu-memory-utilization", "nan"], "not a finite number"),
    ],
)
def test_vllm_refuses_what_vllm_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_vllm_serve_flags(argv)
    assert message in str(err.value)


def test_vllm_accepts_the_engine_spellings() -> None:
    spec = '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2.0}'
    opts = parse_vllm_serve_flags(["--dtype", "half", "--mamba-cache-dtype", "float32", "--no-enable-prefix-caching",
                                   "--speculative-config", spec])
    assert (opts.dtype, opts.mamba_cache_dtype, opts.enable_prefix_caching) == ("half", "float32", False)
    assert (opts.speculative_method, opts.num_speculative_tokens) == ("mtp", 2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--page-size", "0"], "--page-size 0: must be a positive integer"),
        (["--dp-size", "0"], "--dp-size 0: must be a positive integer"),
        (["--speculative-num-steps", "-1"], "--speculative-num-steps -1: must be a positive integer"),
        (["--speculative-algorithm", "nope"], "Unknown speculative algorithm name: nope"),
        (["--mamba-ssm-dtype", "nope"], "argument --mamba-ssm-dtype: invalid choice: 'nope'"),
    ],
)
def test_sglang_refuses_what_sglang_refuses(argv: list[str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse_sglang_flags(argv)
    assert message in str(err.value)


def test_sglang_algorithm_names_are_case_insensitive() -> None:
    assert parse_sglang_flags(["--speculative-algorithm", "nextn"]).speculative_algorithm == "nextn"
