"""Secrets never printed: which names hold them, and argv / environment / text with their values replaced.

Only values of secrets are hidden, by exact flag names and by name patterns that end in a secret's word
(HF_TOKEN, OPENAI_API_KEY, --api-key, --ssl-keyfile-password); counts such as --max-num-batched-tokens,
--max-total-tokens or --speculative-num-draft-tokens are numbers a user must be able to paste back.

A flag is read more loosely than a variable name, because the engines' parsers are looser than dspark: both
take unambiguous abbreviations (`--api-ke K` is `--api-key K`), and a misspelt flag (`--apikey`, `--api-kye`)
is echoed back in the parser's rejection. vLLM's `--api-key` takes several values (nargs='+'): every value
after a secret flag is hidden, up to the next option. The userinfo of a URL (`http://user:pw@proxy`) is hidden
wherever the URL is shown, and `printable` neutralises control characters (terminal escape sequences) that
came from inputs, before they reach a terminal.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

# A name (flag or environment variable, normalised to UPPER_SNAKE) whose last word names a secret.
_SECRET_NAME = re.compile(r"(?:^|_)(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?|APIKEY)$")
# Flags that take a secret whose names the pattern does not catch.
_SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-keyfile-password"})
# Words that make a flag look like a secret anywhere in its name (TOKEN and KEY only as its last word: counts
# such as --long-prefill-token-threshold are not secrets).
_SECRET_WORDS = frozenset({"APIKEY", "APIKEYS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD",
                           "CREDENTIAL", "CREDENTIALS"})
_SECRET_PARTS = ("APIKEY", "API_KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
# A flag this few edits from a secret flag is read as its misspelling (`--api-kye`, `--hftoken`: 1); the nearest
# real flags of vLLM 0.32 and SGLang 0.5 are further (`--tokenizer` is 4 from `--token`).
_LONG_FLAG = 9  # from this length (dashes included) two edits still name the secret flag
_MIN_ABBREV = 4  # characters after the dashes: `--api-` abbreviates --api-key, `--a` is not read as one
REDACTED = "***"
# scheme://userinfo@ (RFC 3986): whatever precedes the last '@' of the authority.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/?#\s@'\"]+)@")
# NAME=value where NAME may be a variable or a flag; the value runs to whitespace, a quote or a delimiter.
_ASSIGNMENT = r"(?P<name>(?:--?)?[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>'[^']*'|\"[^\"]*\"|[^\s'\",;)\]}]+)"
# An option in text, bare or quoted ('--api-key' in a Python list), or a quoted dict key ('api_key':).
_OPTION = (r"(?<![\w-])(?P<q>['\"]?)(?P<flag>--?[A-Za-z][A-Za-z0-9_.-]*)(?P=q)(?![\w.=-])"
           r"|(?P<k>['\"])(?P<key>[A-Za-z_]\w*)(?P=k):")
# One value after an option: quoted, or a run of characters that ends a word in argv, list or dict text.
_VALUE = r"(?P<sep>[ \t]*,?[ \t]*\[?[ \t]*)(?P<v>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\",\])}]+)"
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# A word of a sentence or a placeholder (NAME[:KEY]) after a flag, not a value: a key has digits, dashes, case
# mixed. Values given on the command line or in a recipe are hidden wherever they appear (`known`) anyway.
_PROSE = r"[a-z]{1,12}[.,;:!?]?|[A-Z][A-Z_]*(?:\[[^\]\s]*\]?)?[.,;:]?"
# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows.
_CONTROL = "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
# The patterns above left as text are compiled by re (and cached there) when text is first redacted: a plan
# redacts only argv.
_MIN_KNOWN = 4  # a known secret shorter than this is not searched for in text (it would hide ordinary words)


def _normalised(name: str) -> str:
    return name.lstrip("-").replace("-", "_").upper()


def is_secret_name(name: str) -> bool:
    """True for environment variable or flag names that hold secrets (HF_TOKEN, *_API_KEY, *_SECRET, anything
    with PASSWORD in it, --api-key), never for counts."""
    norm = _normalised(name)
    return (name in _SECRET_FLAGS or bool(_SECRET_NAME.search(norm)) or bool(set(norm.split("_")) & _SECRET_WORDS)
            or any(part in norm for part in _SECRET_PARTS))


@functools.lru_cache(maxsize=4096)  # a plan redacts the same argv several times (table, JSON, plan); pure
def is_secret_flag(flag: str) -> bool:
    """True for a flag that holds a secret as the engines' parsers read it: a secret name, an abbreviation of a
    secret flag (`--api-ke`), or a misspelling of one (`--apikey`, `--api-kye`, `--hf_tokn`)."""
    name = flag.partition("=")[0]
    if not name.startswith("-") or _NEGATIVE_NUMBER.match(name):
        return False
    if is_secret_name(name):
        return True
    spelt = "--" + _normalised(name).lower().replace("_", "-")
    for secret in _SECRET_FLAGS:
        rest = secret[len(spelt):]
        if len(spelt) - 2 >= _MIN_ABBREV and secret.startswith(spelt) and "-" not in rest:
            return True  # cuts into the secret flag's last word: only it can be meant
    return any(_misspells(spelt, secret) for secret in _SECRET_FLAGS)


def _misspells(spelt: str, secret: str) -> bool:
    """Whether `spelt` is within the edits that read as a misspelling of `secret` (1, or 2 for a long flag)."""
    limit = 1 if len(secret) < _LONG_FLAG else 2
    # The distance is at least the difference in length: most flags are too long or short to be that close.
    return abs(len(spelt) - len(secret)) <= limit and _edits(spelt, secret, limit) <= limit


def _edits(a: str, b: str, limit: int = 3) -> int:
    """Characters inserted, deleted, replaced or swapped with a neighbour to turn a into b (optimal string
    alignment distance); past `limit` it stops counting and answers limit + 1."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    before: list[int] | None = None
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (ca != cb))
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], before[j - 2] + 1)
        if min(current) > limit and min(row) > limit:  # each later cell builds on these two rows: all past it
            return limit + 1
        before, row = row, current
    return min(row[-1], limit + 1)


def _is_option(arg: str) -> bool:
    return arg.startswith("-") and arg != "-" and not _NEGATIVE_NUMBER.match(arg)


def redact_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The argv with the values of secret flags replaced (`--flag=value`, and every value up to the next option:
    `--api-key K1 K2`); URL credentials in any argument hidden."""
    out: list[str] = []
    hiding = False
    for arg in argv:
        if hiding and not _is_option(arg):
            out.append(REDACTED)
            continue
        hiding = False
        name, eq, _ = arg.partition("=")
        if _is_option(arg) and is_secret_flag(name):
            out.append(f"{name}={REDACTED}" if eq else arg)
            hiding = True  # after `--api-key=K` too: a value that follows is read as a second key or echoed
            continue
        out.append(redact_url(arg))
    return out


def secret_argv_values(argv: Iterable[str]) -> set[str]:
    """The values redact_argv hides in argv (to find them again in text the engine or a parser wrote)."""
    argv = list(argv)
    shown = redact_argv(argv)
    values: set[str] = set()
    for arg, seen in zip(argv, shown, strict=True):
        if seen == REDACTED:
            values.add(arg)
        elif seen != arg and "=" in arg and seen.endswith("=" + REDACTED):
            values.add(arg.partition("=")[2])
        values |= _userinfo(arg)
    return values


def secret_env_values(env: Mapping[str, str]) -> set[str]:
    """The values redact_env hides in env: secret variables' values and URL credentials."""
    values: set[str] = set()
    for name, value in env.items():
        if is_secret_name(name):
            values.add(value)
        values |= _userinfo(value)
    return values


def _userinfo(text: str) -> set[str]:
    out: set[str] = set()
    for m in _USERINFO.finditer(text):
        info = m.group("info")
        out.add(info)
        out |= {part for part in info.split(":") if part}
    return out


def redact_url(text: str) -> str:
    """text with the userinfo of every URL in it replaced (`http://u:pw@host` -> `http://***@host`)."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)


def redact_value(name: str, value: str) -> str:
    """An environment value as shown: hidden for a secret's name, else with URL credentials hidden."""
    return REDACTED if is_secret_name(name) else redact_url(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with secret values replaced (and credentials in URLs hidden)."""
    return {k: redact_value(k, v) for k, v in env.items()}


def redact_text(text: str, known: Iterable[str] = (), *, patterns: bool = True) -> str:
    """Free text (an error message, a log line, a parser's rejection) with secrets replaced: every `known`
    value, URL credentials and, with `patterns`, `NAME=value` for secret names and the values after a
    secret-looking option, whether the text writes an argv (`--apikey sk-1 sk-2`), a Python list
    (`'--api-key', 'sk-1'`) or a dict (`'api_key': ['sk-1']`). Structured output that is redacted field by
    field (a manifest's `secretKeyRef: {key: ...}`) is guarded without patterns."""
    for value in sorted({v for v in known if len(v) >= _MIN_KNOWN}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = redact_url(text)
    if not patterns:
        return text
    text = re.sub(_ASSIGNMENT, _assignment, text)
    return _redact_options(text)


def _assignment(m: re.Match[str]) -> str:
    name = m.group("name")
    secret = is_secret_flag(name) if name.startswith("-") else is_secret_name(name)
    return f"{name}={REDACTED}" if secret and m.group("value").strip("'\"") != REDACTED else m.group(0)


def _redact_options(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in re.finditer(_OPTION, text):
        flag, key = m.group("flag"), m.group("key")
        if m.start() < pos or not (is_secret_flag(flag) if flag else is_secret_name(key)):
            continue
        out.append(text[pos:m.end()])
        pos = m.end()
        # Every value up to the next option (vLLM's --api-key takes several), on this line only.
        while (v := re.compile(_VALUE).match(text, pos)) is not None and v.group("sep"):
            quote = v.group("v")[0] if v.group("v")[0] in "'\"" else ""
            word = v.group("v").strip("'\"")
            if _is_option(word) or (not quote and re.fullmatch(_PROSE, word)):
                break  # the next option, or the sentence goes on ("'--hf-secret' requires an argument")
            out.append(f"{v.group('sep')}{quote}{REDACTED}{quote}")
            pos = v.end()
    out.append(text[pos:])
    return "".join(out)


# Secret values this process was given (its argv and environment, a recipe's env and engine_args): every
# message printed through `shown` hides them wherever they appear. Filled by the CLI and the recipe reader.
_KNOWN: set[str] = set()


def remember(values: Iterable[str]) -> None:
    """Add secret values to hide from every message printed through `shown` (short ones are ignored)."""
    _KNOWN.update(v for v in values if len(v) >= _MIN_KNOWN)


def known_secrets() -> frozenset[str]:
    """The secret values remembered so far."""
    return frozenset(_KNOWN)


def printable(text: str) -> str:
    """text with control characters (escape sequences, carriage returns, bidi overrides) shown as escapes,
    keeping newlines and tabs: what an input says reaches a terminal as text, never as commands to it."""
    return re.sub(_CONTROL, lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def shown(text: str, known: Iterable[str] = ()) -> str:
    """redact_text (with the remembered secrets too), then printable: input-derived text as printed."""
    return printable(redact_text(text, {*known, *_KNOWN}))
