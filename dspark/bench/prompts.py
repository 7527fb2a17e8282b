"""Prompts for a pass: real prompts from JSONL, or synthetic ones of a given token length (pure).

The JSONL reader here is the one `dspark bench --prompts` and `dspark advise --workload` share: one request per
line, {"prompt": text | [token ids]} (also spelled "text") or {"messages": [...]}, each with an optional
positive integer "max_tokens" (absent: the command's --max-tokens / --output-len).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, Union

from dspark.core.errors import InputError
from dspark.core.files import PROMPTS, read_text, shown_path
from dspark.core.jsonfile import parse_json_text

Message = dict[str, str]
# Text, token ids (completions only; works with --skip-tokenizer-init) or chat messages.
Prompt = Union[str, list[int], list[Message]]  # noqa: UP007 - a runtime alias, kept readable on 3.10
T = TypeVar("T")

# Real words that are one token each in common BPE vocabularies, so a synthetic text prompt of N words is ~N tokens.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her are an this had not but be have one all were "
    "they which she or there been can more if will would who so no when their what out up about time into only "
    "other new some could them these two may first then do any like my now over such our man me even most made "
    "after also did many before must through back years where much your way well down should because each just"
)
_WORDS = tuple(_WORD_TEXT.split())
# Bounds on the numbers a prompts file holds: token ids are below 2^31 in every vocabulary an engine serves (they
# are int32 on the GPU), and no request asks for more output than the longest context any model has.
MAX_TOKEN_ID = 1 << 31
MAX_OUTPUT_TOKENS = 1 << 30


def shown_value(value: object) -> str:
    """A value from the file for a message, cut to a line (a 4,000-digit number is not echoed whole)."""
    huge = isinstance(value, int) and value.bit_length() >= 200
    text = f"a {value.bit_length()}-bit number" if huge and isinstance(value, int) else repr(value)
    return text if len(text) <= 80 else text[:60] + f"… ({len(text):,} characters)"


def synthetic_token_prompts(count: int, length: int, *, vocab_size: int, seed: int) -> list[Prompt]:
    """`count` prompts of `length` random token ids in [10, vocab_size): distinct, so a cold pass has no prefix hits."""
    if length < 1 or count < 1:
        raise InputError("synthetic prompts need a positive count and length")
    if vocab_size <= 10:
        raise InputError(f"vocab size {vocab_size} is too small for synthetic token prompts (need > 10)")
    rng = random.Random(seed)  # noqa: S311 - reproducible prompts, not secrets
    # Ids below 10 are skipped: small ids are often special tokens (BOS/EOS/PAD) in real vocabularies.
    return [[rng.randrange(10, vocab_size) for _ in range(length)] for _ in range(count)]


def synthetic_text_prompts(count: int, length: int, *, seed: int) -> list[Prompt]:
    """`count` prompts of `length` common words (about one token each), distinct from each other."""
    if length < 1 or count < 1:
        raise InputError("synthetic prompts need a positive count and length")
    rng = random.Random(seed)  # noqa: S311 - reproducible prompts, not secrets
    return [" ".join(rng.choice(_WORDS) for _ in range(length)) for _ in range(count)]


def _prompt_of(obj: object, where: str) -> Prompt:
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object or string, got {type(obj).__name__}")
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in msgs
        ):
            raise InputError(f"{where}: 'messages' must be a list of {{role, content}} objects with string values")
        return [{"role": m["role"], "content": m["content"]} for m in msgs]
    for key in ("prompt", "text"):
        if key in obj:
            val = obj[key]
            if isinstance(val, str):
                return val
            if isinstance(val, list) and val and all(isinstance(t, int) and not isinstance(t, bool)
                                                     and 0 <= t < MAX_TOKEN_ID for t in val):
                return [int(t) for t in val]
            raise InputError(f"{where}: '{key}' must be a string or a non-empty list of token ids "
                             f"(whole numbers from 0 to {MAX_TOKEN_ID - 1:,})")
    raise InputError(f"{where}: no 'prompt', 'text' or 'messages' key")


@dataclass(frozen=True)
class PromptLine:
    """One line of a prompts file: the prompt, and the output tokens it asks for (None: the command's default)."""

    prompt: Prompt
    max_tokens: int | None
    where: str = ""  # FILE:LINE, for messages about this request


def _max_tokens_of(obj: object, where: str) -> int | None:
    if not isinstance(obj, dict) or "max_tokens" not in obj:
        return None
    value = obj["max_tokens"]
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_OUTPUT_TOKENS:
        raise InputError(f"{where}: 'max_tokens' must be at most {MAX_OUTPUT_TOKENS:,}, got {shown_value(value)}",
                         hint="no model's context holds more output tokens; ask for the number you mean")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{where}: 'max_tokens' must be a positive integer, got {shown_value(value)}",
                         hint='write it as a whole number of output tokens, e.g. "max_tokens": 256, or leave it '
                              "out for the command's default")
    return value


def read_jsonl(path: Path) -> list[PromptLine]:
    """The requests of a JSONL prompts (workload) file, in file order; blank lines skipped."""
    # A regular file within PROMPTS' limit (a FIFO or /dev/zero is refused, not read forever).
    lines = read_text(path, PROMPTS).splitlines()
    out: list[PromptLine] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{shown_path(path)}:{n}"
        # Nesting, 5,000-digit numbers and NaN are input errors naming the line, as a syntax error is.
        obj = parse_json_text(line, where, one_line=True)
        out.append(PromptLine(_prompt_of(obj, where), _max_tokens_of(obj, where), where))
    if not out:
        raise InputError(f"{path}: no prompts")
    return out


def load_jsonl(path: Path) -> list[Prompt]:
    """The prompts of a JSONL prompts file (read_jsonl), without their max_tokens."""
    return [line.prompt for line in read_jsonl(path)]


def take(items: Sequence[T], count: int) -> list[T]:
    """`count` items (prompts, lines), cycling through the list when it is shorter."""
    return [items[i % len(items)] for i in range(count)]
