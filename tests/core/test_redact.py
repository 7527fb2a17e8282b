"""Redaction hides the values of secrets only; counts whose names contain "token" stay pasteable."""

from __future__ import annotations

import pytest

from dspark.core.redact import REDACTED, is_secret_name, redact_argv, redact_env


@pytest.mark.parametrize(
    "name",
    ["--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password", "HF_TOKEN",
     "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "DB_PASSWORD"],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--max-num-batched-tokens", "--max-total-tokens", "--speculative-num-draft-tokens", "--skip-tokenizer-init",
     "--tokenizer", "--ssl-keyfile", "--max-prefill-tokens", "DSPARK_KV_CACHE_TOKENS", "DSPARK_MAX_NUM_BATCHED_TOKENS",
     "--num-speculative-tokens", "VLLM_CPU_KVCACHE_SPACE", "--kv-cache-memory-bytes"],
)
def test_counts_and_paths_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


def test_counts_stay_and_a_valueless_flag_does_not_eat_the_next() -> None:
    argv = ["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--skip-tokenizer-init", "--max-num-seqs", "6",
            "--api-key", "sk-1", "--hf-token=hf_x"]
    assert redact_argv(argv) == ["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--skip-tokenizer-init",
                                 "--max-num-seqs", "6", "--api-key", REDACTED, f"--hf-token={REDACTED}"]


def test_sglang_pin_stays_visible() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--max-total-tokens", "2019172",
            "--speculative-num-draft-tokens", "5"]
    assert redact_argv(argv) == argv


def test_env_counts_stay_secrets_go() -> None:
    env = {"DSPARK_KV_CACHE_TOKENS": "1000", "HF_TOKEN": "hf_x", "VLLM_API_KEY": "k"}
    assert redact_env(env) == {"DSPARK_KV_CACHE_TOKENS": "1000", "HF_TOKEN": REDACTED, "VLLM_API_KEY": REDACTED}
