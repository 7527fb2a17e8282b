"""Secrets never printed: which names hold them, and argv / environment with their values replaced."""

from __future__ import annotations

import re
from collections.abc import Mapping

# Names whose values are never printed: tokens, keys, passwords.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE)", re.IGNORECASE)
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--token", "--ssl-keyfile-password", "--admin-api-key"})
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """True for environment variable or flag names that hold secrets."""
    return bool(_SECRET_NAME.search(name)) or name in _SECRET_FLAGS


def redact_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The argv with the values of secret flags replaced (both `--flag value` and `--flag=value`)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
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
