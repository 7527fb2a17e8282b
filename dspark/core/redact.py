"""Secrets never printed: which names hold them, and argv / environment with their values replaced.

Only values of secrets are hidden, by exact flag names and by name patterns that end in a secret's word
(HF_TOKEN, OPENAI_API_KEY, --api-key, --ssl-keyfile-password); counts such as --max-num-batched-tokens,
--max-total-tokens or --speculative-num-draft-tokens are numbers a user must be able to paste back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# A name (flag or environment variable, normalised to UPPER_SNAKE) whose last word names a secret.
_SECRET_NAME = re.compile(r"(?:^|_)(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|APIKEY)$")
# Flags that take a secret whose names the pattern does not catch.
_SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password"})
REDACTED = "***"


def _normalised(name: str) -> str:
    return name.lstrip("-").replace("-", "_").upper()


def is_secret_name(name: str) -> bool:
    """True for environment variable or flag names that hold secrets (HF_TOKEN, --api-key), never for counts."""
    return name in _SECRET_FLAGS or bool(_SECRET_NAME.search(_normalised(name)))


def redact_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The argv with the values of secret flags replaced (both `--flag value` and `--flag=value`)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        if arg.startswith("--") and is_secret_name(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with secret values replaced."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}
