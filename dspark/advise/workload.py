"""A workload as the engine's scheduler sees it: token ids and output lengths per request, and their arrivals.

Engine-neutral and pure but for reading the file and, for text, the model directory's own tokenizer.
JSONL lines: {"prompt": [token ids] | "text", "max_tokens": N} or {"messages": [...], "max_tokens": N}
("text" is read as "prompt"); max_tokens defaults to --output-len. Text goes through the tokenizer as a
completions endpoint sends it (special tokens added), messages through its chat template with the generation
prompt, as a chat endpoint renders them. Synthetic workloads: distinct random token ids per request, optionally
behind one shared prefix (a system prompt).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.core.errors import InputError

# Ids below 10 are left out of synthetic prompts: small ids are often special tokens in real vocabularies.
_LOW_ID = 10


@dataclass(frozen=True)
class WorkloadRequest:
    """One request: its prompt's token ids and how many tokens it asks for."""

    prompt: tuple[int, ...]
    max_tokens: int


@dataclass(frozen=True)
class Arrivals:
    """Closed loop (`clients` streams, each sending its next request when one ends) or open loop (`times`)."""

    clients: int | None = None
    times: tuple[float, ...] | None = None
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        """The replay's arrivals field."""
        return {"clients": self.clients} if self.clients else {"times": list(self.times or ())}


def synthetic(count: int, input_len: int, output_len: int, *, shared_prefix: int = 0, vocab_size: int = 32000,
              seed: int = 0) -> list[WorkloadRequest]:
    """`count` requests of `input_len` random ids, the first `shared_prefix` of them the same for every request."""
    if count < 1 or input_len < 1 or output_len < 1:
        raise InputError(f"a synthetic workload needs positive --requests, --input-len and --output-len "
                         f"(got {count}, {input_len}, {output_len})")
    if not 0 <= shared_prefix < input_len:
        raise InputError(f"--shared-prefix {shared_prefix} must be at least 0 and shorter than --input-len "
                         f"{input_len}", hint="each request keeps at least one token of its own")
    if vocab_size <= _LOW_ID:
        raise InputError(f"vocab size {vocab_size} is too small for synthetic prompts (need > {_LOW_ID})")
    rng = random.Random(seed)  # noqa: S311 - reproducible prompts, not secrets
    prefix = tuple(rng.randrange(_LOW_ID, vocab_size) for _ in range(shared_prefix))
    own = input_len - shared_prefix
    return [WorkloadRequest(prefix + tuple(rng.randrange(_LOW_ID, vocab_size) for _ in range(own)), output_len)
            for _ in range(count)]


class _Tokenizer:
    """The model directory's own tokenizer (transformers, offline), loaded at the first text line."""

    def __init__(self, model_dir: Path | None, where: str) -> None:
        self.model_dir = model_dir
        self.where = where
        self._tok: Any = None

    def _load(self) -> Any:
        if self._tok is not None:
            return self._tok
        fix = "give the prompts as token ids ({\"prompt\": [1, 2, 3], \"max_tokens\": N})"
        if self.model_dir is None or not self.model_dir.is_dir():
            raise InputError(f"{self.where}: text and messages need the model directory's tokenizer, and the plan "
                             f"has no local model directory ({self.model_dir})", hint=f"pass --model DIR, or {fix}")
        try:
            from transformers import AutoTokenizer  # noqa: PLC0415 - optional: only text workloads need it
        except ImportError:
            raise InputError(f"{self.where}: text and messages are tokenized with the model's own tokenizer, which "
                             "needs transformers, not installed here",
                             hint=f"pip install transformers, or {fix}") from None
        try:
            self._tok = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.where}: cannot load the tokenizer of {self.model_dir}: {exc}",
                             hint=f"make sure the directory holds its tokenizer files, or {fix}") from None
        return self._tok

    def text(self, text: str) -> tuple[int, ...]:
        ids = self._load()(text, add_special_tokens=True)["input_ids"]
        return tuple(int(t) for t in ids)

    def messages(self, messages: list[dict[str, str]], where: str) -> tuple[int, ...]:
        tok = self._load()
        if not getattr(tok, "chat_template", None):
            raise InputError(f"{where}: the tokenizer of {self.model_dir} has no chat template for 'messages'",
                             hint="send the rendered prompt as 'prompt' text or token ids")
        ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
        if isinstance(ids, dict):  # transformers 5 answers with a BatchEncoding
            ids = ids["input_ids"]
        return tuple(int(t) for t in ids)


def load_workload(path: Path, default_max_tokens: int, model_dir: Path | None = None) -> list[WorkloadRequest]:
    """The requests of a JSONL workload file, in file order; text and messages through the model's tokenizer.

    The file is read by bench's reader (dspark.bench.prompts.read_jsonl), so `dspark bench --prompts` takes the
    same file and sends the same requests.
    """
    from dspark.bench.prompts import read_jsonl  # noqa: PLC0415 - bench's reading of the file, shared

    tokenizer = _Tokenizer(model_dir, str(path))
    out: list[WorkloadRequest] = []
    for line in read_jsonl(path):
        prompt = line.prompt
        max_tokens = line.max_tokens or default_max_tokens
        if isinstance(prompt, str):
            out.append(WorkloadRequest(tokenizer.text(prompt), max_tokens))
        elif prompt and isinstance(prompt[0], dict):
            out.append(WorkloadRequest(tokenizer.messages(prompt, line.where), max_tokens))
        else:
            out.append(WorkloadRequest(tuple(int(t) for t in prompt), max_tokens))  # type: ignore[arg-type]
    return out


def check_lengths(requests: Sequence[WorkloadRequest], max_model_len: int, source: str) -> None:
    """Refuse requests the engine would reject: prompt + max_tokens beyond the model length."""
    for i, r in enumerate(requests, start=1):
        if len(r.prompt) + r.max_tokens > max_model_len:
            raise InputError(f"{source}: request {i} needs {len(r.prompt):,} prompt + {r.max_tokens:,} output tokens, "
                             f"more than the planned model length {max_model_len:,}",
                             hint="shorten it, lower its max_tokens, or raise --max-model-len")


def arrival_times(count: int, rate: float, burstiness: float, seed: int) -> tuple[float, ...]:
    """Open-loop arrivals (s from the start) as `dspark bench --request-rate` sends them; rate inf: all at 0."""
    if math.isinf(rate) and rate > 0:
        return (0.0,) * count
    if not (math.isfinite(rate) and rate > 0):
        raise InputError(f"--request-rate must be a positive number of requests per second or inf, got {rate}")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise InputError(f"--burstiness must be positive, got {burstiness}")
    from dspark.bench.load import arrival_schedule  # noqa: PLC0415 - bench's own schedule, not a copy of it

    return tuple(arrival_schedule(count, rate, burstiness, seed))


def arrivals_of(count: int, clients: int | None, rate: float | None, burstiness: float = 1.0,
                seed: int = 0) -> Arrivals:
    """Closed loop with `clients` unless a request rate is given (open loop)."""
    if rate is not None:
        times = arrival_times(count, rate, burstiness, seed)
        text = ("every request at once, in file order" if math.isinf(rate)
                else f"open loop at {rate:g} req/s (burstiness {burstiness:g})")
        return Arrivals(times=times, description=text)
    if clients is None or clients < 1:
        raise InputError(f"--clients must be positive, got {clients}")
    return Arrivals(clients=clients, description=f"{clients} closed-loop clients")


def accepted_pattern(emitted_per_step: float, speculative_tokens: int, length: int = 120) -> list[int]:
    """Accepted draft tokens per decode step: a fixed whole-number pattern whose mean is emitted_per_step − 1."""
    if speculative_tokens <= 0:
        return [0]
    mean = min(max(emitted_per_step - 1.0, 0.0), float(speculative_tokens))
    # Evenly spread: step i accepts floor((i+1)·mean) − floor(i·mean), so any `length` steps average `mean`.
    return [math.floor((i + 1) * mean + 1e-9) - math.floor(i * mean + 1e-9) for i in range(length)]
