"""Redaction hides the values of secrets only; counts whose names contain "token" stay pasteable."""

from __future__ import annotations

import random

import pytest

from dspark.core import redact
from dspark.core.redact import REDACTED, is_secret_name, redact_argv, redact_env


@pytest.mark.parametrize(
    "name",
    ["--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password", "HF_TOKEN",
     "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "DB_PASSWORD",
     "PASSWORD_FOR_DB", "MY_SERVICE_SECRET", "PGPASSWORD", "SECRET_ACCESS"],
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


# --- issue 26 items 2, 3 and 7: every value, abbreviations and misspellings, text, URLs, control characters ---

SECRET_FLAGS = ("--api-key", "--admin-api-key", "--hf-token", "--ssl-keyfile-password")
# Flags of vLLM 0.32 and SGLang 0.5 whose names hold a secret's word but not a secret (counts, paths, modes).
REAL_NON_SECRETS = ("--max-num-batched-tokens", "--long-prefill-token-threshold", "--dbo-decode-token-threshold",
                    "--tokenizer", "--tokenizer-mode", "--tokenizer-revision", "--skip-tokenizer-init",
                    "--ssl-keyfile", "--ssl-certfile", "--max-total-tokens", "--tokens-only", "--pass-config",
                    "--api-server-count", "--encoder-cudagraph-token-budgets", "--returned-token-ids",
                    "--max-num-seqs", "--kv-cache-memory-bytes", "--speculative-num-draft-tokens")


def _abbreviations(flag: str) -> list[str]:
    """Every prefix argparse would expand to flag alone: it cuts into the flag's last word."""
    last = flag.rindex("-")
    return [flag[:n] for n in range(last + 1, len(flag)) if n - 2 >= 4]


def _misspellings(flag: str) -> list[str]:
    """One character dropped, doubled, swapped with the next, and '-' written '_' (inside the name only)."""
    body = flag[2:]
    out = {flag.replace("-", "_").replace("__", "--", 1), flag.upper()}
    for i in range(1, len(body) - 1):
        out.add("--" + body[:i] + body[i + 1:])
        out.add("--" + body[:i] + body[i] + body[i:])
        out.add("--" + body[:i] + body[i + 1] + body[i] + body[i + 2:])
    return sorted(out - {flag})


@pytest.mark.parametrize("flag", SECRET_FLAGS)
def test_abbreviated_and_misspelt_secret_flags_are_read_as_secret(flag: str) -> None:
    variants = [flag, *_abbreviations(flag), *_misspellings(flag)]
    assert len(variants) > 10
    missed = [v for v in variants if not redact.is_secret_flag(v)]
    assert missed == []
    for v in variants:
        argv = ["vllm", "serve", "m", v, "sk-one-1234", "sk-two-5678", "--max-num-seqs", "4"]
        assert redact_argv(argv) == ["vllm", "serve", "m", v, REDACTED, REDACTED, "--max-num-seqs", "4"]
        text = redact.redact_text(f"error: unrecognized arguments: {v} sk-one-1234 sk-two-5678")
        assert "sk-one" not in text and "sk-two" not in text, text


@pytest.mark.parametrize("flag", REAL_NON_SECRETS)
def test_real_engine_flags_that_hold_no_secret_stay_readable(flag: str) -> None:
    assert not redact.is_secret_flag(flag)
    assert redact_argv(["vllm", flag, "8192"]) == ["vllm", flag, "8192"]
    message = f"argument {flag}: invalid int value: 'x8192'"
    assert redact.redact_text(message) == message


def test_every_value_of_a_multi_value_secret_flag_is_hidden() -> None:
    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "sk-2", "sk-3", "--port", "8000", "--api-key=sk-4", "sk-5"]
    assert redact_argv(argv) == ["vllm", "serve", "m", "--api-key", REDACTED, REDACTED, REDACTED, "--port", "8000",
                                 f"--api-key={REDACTED}", REDACTED]
    assert redact.secret_argv_values(argv) >= {"sk-1", "sk-2", "sk-3", "sk-4", "sk-5"}


@pytest.mark.parametrize(
    ("text", "secrets"),
    [
        ("dspark: error: unrecognized arguments: --apikey sk-abc1 sk-abc2", ["sk-abc1", "sk-abc2"]),
        ("['vllm', 'serve', '--api-key', 'sk-abc1', 'sk-abc2', '--port', '8000']", ["sk-abc1", "sk-abc2"]),
        ("non-default args: {'model': 'm', 'api_key': ['sk-abc1', 'sk-abc2'], 'port': 8000}", ["sk-abc1", "sk-abc2"]),
        ("HF_TOKEN=hf_abc1 OPENAI_API_KEY='sk-abc2' vllm serve m --hf-token=hf_abc3",
         ["hf_abc1", "sk-abc2", "hf_abc3"]),
        ("proxy http://alice:pw-abc1@proxy:3128 and https://ghp_abc2@github.com/x", ["pw-abc1", "ghp_abc2", "alice"]),
    ],
)
def test_text_forms_of_secrets_are_redacted(text: str, secrets: list[str]) -> None:
    out = redact.redact_text(text)
    assert [s for s in secrets if s in out] == [], out
    assert out.count(REDACTED) >= len(secrets) - (1 if "alice" in secrets else 0)


def test_known_values_are_found_anywhere_and_short_ones_are_not_searched() -> None:
    assert redact.redact_text("planned 'sk-live-9', engine ['sk-live-9']", {"sk-live-9"}) == (
        f"planned '{REDACTED}', engine ['{REDACTED}']")
    assert redact.redact_text("max_num_seqs=8 at port 8000", {"8"}) == "max_num_seqs=8 at port 8000"


def test_url_credentials_and_env_values() -> None:
    env = {"HTTPS_PROXY": "http://u:secret-pw@proxy:3128", "NO_PROXY": "localhost", "HF_TOKEN": "hf_x"}
    assert redact_env(env) == {"HTTPS_PROXY": f"http://{REDACTED}@proxy:3128", "NO_PROXY": "localhost",
                               "HF_TOKEN": REDACTED}
    assert redact.secret_env_values(env) >= {"hf_x", "secret-pw"}
    assert redact.redact_url("http://host:8000/v1") == "http://host:8000/v1"


def test_control_characters_are_shown_not_obeyed() -> None:
    evil = "name\x1b[2J\x1b]0;pwned\x07\rover\u202eevil\x9b31m"
    shown_text = redact.printable(evil + "\nline two\tcol")
    assert not any((ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in shown_text)
    assert "\u202e" not in shown_text
    assert shown_text.endswith("\nline two\tcol")
    assert "\\x1b[2J" in shown_text


@pytest.mark.parametrize(
    "message",
    ["Option '--hf-secret' requires an argument.", "pass --hf-secret NAME[:KEY] or --secret-name SECRET",
     "the --api-key flag is set", "argument --api-key: expected at least one argument"],
)
def test_sentences_that_name_a_secret_flag_stay_readable(message: str) -> None:
    assert redact.redact_text(message) == message


def _full_osa(a: str, b: str) -> int:
    """The optimal string alignment distance, every cell computed (the reference for redact._edits)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def test_the_edit_distance_stops_counting_past_its_limit_and_is_exact_below_it() -> None:
    rng = random.Random(24)  # noqa: S311 - reproducible test input, no secret
    for _ in range(3000):
        a = "--" + "".join(rng.choice("aekt-ny") for _ in range(rng.randint(0, 12)))
        b = rng.choice(["--api-key", "--hf-token", "--token", "--admin-api-key", a[: rng.randint(0, len(a))] + "x"])
        limit = rng.choice([0, 1, 2, 3])
        assert redact._edits(a, b, limit) == min(_full_osa(a, b), limit + 1), (a, b, limit)
