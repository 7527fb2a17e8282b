"""What `dspark bench` sends, as `vllm bench serve` samples it: lengths around a mean (--range-ratio) and local
dataset files (ShareGPT-style JSON, JSONL); pure, apart from reading the file and loading a tokenizer.

Lengths (vLLM 0.32's benchmarks/datasets/utils.py get_sampling_params): input lengths are whole numbers drawn
uniformly from [floor(L·(1−R)), ceil(L·(1+R))], output lengths likewise around the output length with a floor of
1, R in [0, 1). vLLM draws them with numpy's default_rng(seed): input lengths for every request, then output
lengths. Where numpy is installed dspark draws them the same way, so one --seed gives both tools the same
lengths; without it Python's random draws from the same intervals (other values), and the result says which.

ShareGPT (vLLM's ShareGPTDataset): entries with at least two turns under "conversations"; shuffled with Python's
random seeded by --seed (as vLLM shuffles them); the first turn's value is the prompt, the second's token length
the output length unless --output-len is given; a request is skipped when its prompt has fewer than 4 tokens,
its output fewer than 4 (not checked under --output-len), its prompt more than 1024 or both more than 2048
(vLLM's is_valid_sequence). Fewer usable entries than --requests are topped up by drawing among them again
(random seeded by --seed, as vLLM's oversampling does).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.bench.prompts import Prompt, PromptLine, read_jsonl
from dspark.core.errors import InputError
from dspark.core.extras import require_extra
from dspark.core.files import GIB, FileKind, read_text
from dspark.core.jsonfile import parse_json_text

# vLLM's is_valid_sequence defaults (benchmarks/datasets/datasets.py).
MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048
# A dataset file larger than this is not a benchmark's dataset (ShareGPT_V3 is ~670 MB).
DATASET = FileKind("dataset file", 1 * GIB, "ShareGPT-style JSON or JSONL; take the requests you need into a "
                   "smaller file")


def length_intervals(input_len: int, output_len: int, ratio: float) -> tuple[tuple[int, int], tuple[int, int]]:
    """The whole-number intervals (inclusive) input and output lengths are drawn from, as vLLM computes them."""
    if not (math.isfinite(ratio) and 0.0 <= ratio < 1.0):
        raise InputError(f"--range-ratio must be within [0, 1), got {ratio}",
                         hint="0.5 draws lengths from half to one and a half times --input-len/--output-len")
    if input_len < 1 or output_len < 1:
        raise InputError("--input-len and --output-len must be positive")
    in_lo, in_hi = math.floor(input_len * (1 - ratio)), math.ceil(input_len * (1 + ratio))
    out_lo, out_hi = max(math.floor(output_len * (1 - ratio)), 1), max(math.ceil(output_len * (1 + ratio)), 1)
    if in_lo < 1:
        raise InputError(f"--input-len {input_len} with --range-ratio {ratio} allows prompts of {in_lo} tokens",
                         hint="raise --input-len or lower --range-ratio so that floor(L·(1−R)) ≥ 1")
    return (in_lo, in_hi), (out_lo, out_hi)


@dataclass(frozen=True)
class Lengths:
    """Each request's input and output length, and the generator that drew them."""

    input: tuple[int, ...]
    output: tuple[int, ...]
    rng: str


def sample_lengths(count: int, input_len: int, output_len: int, ratio: float, seed: int, *,
                   use_numpy: bool | None = None) -> Lengths:
    """`count` (input, output) lengths around the means; numpy's default_rng as vLLM's where it is installed."""
    (in_lo, in_hi), (out_lo, out_hi) = length_intervals(input_len, output_len, ratio)
    if use_numpy is None:
        try:
            import numpy  # noqa: F401, PLC0415 - optional: the same draws as vllm bench serve
        except ImportError:
            use_numpy = False
        else:
            use_numpy = True
    if use_numpy:
        import numpy as np  # noqa: PLC0415

        gen = np.random.default_rng(seed)
        ins = gen.integers(in_lo, in_hi + 1, size=count)
        outs = gen.integers(out_lo, out_hi + 1, size=count)
        return Lengths(tuple(int(v) for v in ins), tuple(int(v) for v in outs), "numpy default_rng (as vLLM)")
    rng = random.Random(seed)  # noqa: S311 - reproducible lengths, not secrets
    ins_py = tuple(rng.randint(in_lo, in_hi) for _ in range(count))
    outs_py = tuple(rng.randint(out_lo, out_hi) for _ in range(count))
    return Lengths(ins_py, outs_py, "python random (numpy not installed: other draws than vLLM's)")


def token_prompts_of(lengths: Sequence[int], *, vocab_size: int, seed: int) -> list[Prompt]:
    """One prompt of random token ids in [10, vocab_size) per length (distinct: no prefix hits between them)."""
    if vocab_size <= 10:
        raise InputError(f"vocab size {vocab_size} is too small for synthetic token prompts (need > 10)")
    rng = random.Random(seed)  # noqa: S311
    return [[rng.randrange(10, vocab_size) for _ in range(n)] for n in lengths]


def text_prompts_of(lengths: Sequence[int], *, seed: int) -> list[Prompt]:
    """One prompt of common words (about one token each) per length."""
    from dspark.bench.prompts import synthetic_text_prompts  # noqa: PLC0415

    return [synthetic_text_prompts(1, n, seed=seed * 1_000_003 + i)[0] for i, n in enumerate(lengths)]


# ---- dataset files --------------------------------------------------------------------------------------------

Tokenize = Callable[[str], int]  # text -> its token count


def load_tokenizer(model_dir: Path) -> Tokenize:
    """The token counter of a model directory's tokenizer.json (the `tokenizers` package, the [tokenizer] extra);
    counts as `tokenizer(text).input_ids` does in vLLM's bench: special tokens added."""
    require_extra("tokenizer", "--tokenizer")
    from tokenizers import Tokenizer  # noqa: PLC0415

    path = model_dir / "tokenizer.json" if model_dir.is_dir() else model_dir
    if not path.is_file():
        raise InputError(f"--tokenizer {model_dir}: no tokenizer.json there",
                         hint="pass the model directory (it holds tokenizer.json) or the tokenizer.json itself")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception for a bad file
        raise InputError(f"--tokenizer {path}: not a tokenizer file the tokenizers library reads: "
                         f"{str(exc)[:200]}") from None
    return lambda text: len(tok.encode(text).ids)


def read_dataset_text(path: Path) -> str:
    """The file's text through the project's bounded reader (dspark.core.files): a regular UTF-8 file of at most
    1 GiB; InputError naming it otherwise (a FIFO, a device, a directory, a huge or binary file)."""
    return read_text(path, DATASET)


@dataclass(frozen=True)
class DatasetRequest:
    """One request of a dataset: its prompt, the output tokens it asks for (None: the command's) and its prompt
    length where a tokenizer counted it."""

    prompt: Prompt
    max_tokens: int | None
    prompt_len: int | None = None


@dataclass(frozen=True)
class Dataset:
    """The requests to send, and how they were read (for the result's prompt_source)."""

    requests: tuple[DatasetRequest, ...]
    source: str


def is_valid_sequence(prompt_len: int, output_len: int, *, skip_min_output: bool = False) -> bool:
    """vLLM's ShareGPT filter: neither too short nor too long."""
    return not (prompt_len < MIN_LEN or (not skip_min_output and output_len < MIN_LEN)
                or prompt_len > MAX_PROMPT_LEN or prompt_len + output_len > MAX_TOTAL_LEN)


def _turn_text(turn: object, where: str) -> str:
    if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
        raise InputError(f"{where}: a turn must be an object with a string 'value', got {_shape(turn)}",
                         hint='ShareGPT turns look like {"from": "human", "value": "..."}')
    return str(turn["value"])


def _shape(value: object) -> str:
    if isinstance(value, dict):
        return "an object with keys " + ", ".join(repr(k) for k in list(value)[:5])
    return f"a JSON {type(value).__name__}"


def sharegpt_requests(data: Any, label: str, *, count: int, seed: int, output_len: int | None,
                      tokenize: Tokenize | None) -> tuple[list[DatasetRequest], int]:
    """ShareGPT entries as vLLM's ShareGPTDataset samples them; the requests and how many entries were skipped."""
    if not isinstance(data, list):
        raise InputError(f"{label}: a ShareGPT file is a JSON list of conversations, got {_shape(data)}",
                         hint='write [{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}]')
    entries = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise InputError(f"{label}: entry {i} is {_shape(entry)}, not a conversation object")
        turns = entry.get("conversations")
        if turns is None:
            continue
        if not isinstance(turns, list):
            raise InputError(f"{label}: entry {i}: 'conversations' is {_shape(turns)}, not a list of turns")
        if len(turns) >= 2:
            entries.append((i, turns))
    random.Random(seed).shuffle(entries)  # noqa: S311 - vLLM: random.seed(seed); random.shuffle(data)
    out: list[DatasetRequest] = []
    skipped = 0
    for i, turns in entries:
        if len(out) >= count:
            break
        prompt = _turn_text(turns[0], f"{label}: entry {i}, turn 0")
        reply = _turn_text(turns[1], f"{label}: entry {i}, turn 1")
        if tokenize is None:
            out.append(DatasetRequest(prompt, output_len))
            continue
        prompt_len = tokenize(prompt)
        new_out = tokenize(reply) if output_len is None else output_len
        if not is_valid_sequence(prompt_len, new_out, skip_min_output=output_len is not None):
            skipped += 1
            continue
        out.append(DatasetRequest(prompt, new_out, prompt_len))
    if not out:
        raise InputError(f"{label}: no usable conversation ({len(entries)} with two turns or more, {skipped} "
                         f"outside vLLM's length bounds: prompt {MIN_LEN}..{MAX_PROMPT_LEN} tokens, output at least "
                         f"{MIN_LEN}, both at most {MAX_TOTAL_LEN})")
    if len(out) < count:  # vLLM's maybe_oversample_requests: random.seed(seed); random.choice per missing one
        rng = random.Random(seed)  # noqa: S311
        out += [rng.choice(out) for _ in range(count - len(out))]
    return out, skipped


def _jsonl_requests(path: Path, count: int, output_len: int | None) -> list[DatasetRequest]:
    lines: list[PromptLine] = read_jsonl(path)
    return [DatasetRequest(line.prompt, line.max_tokens if line.max_tokens is not None else output_len)
            for line in (lines[i % len(lines)] for i in range(count))]


def read_dataset(path: Path, *, count: int, seed: int, output_len: int | None,
                 tokenize: Tokenize | None) -> Dataset:
    """`count` requests from a dataset file: a JSON list (ShareGPT) or JSONL ({"prompt"} / {"messages"} lines)."""
    text = read_dataset_text(path)
    head = text.lstrip()[:1]
    how = "lengths by the tokenizer" if tokenize is not None else \
        "no tokenizer: text sent as is, token counts from the server's usage, no length filter"
    if head == "[":
        data = parse_json_text(text, f"dataset {path}",
                               hint="a ShareGPT file is one JSON list; JSONL has one object per line")
        requests, skipped = sharegpt_requests(data, str(path), count=count, seed=seed, output_len=output_len,
                                              tokenize=tokenize)
        source = f"ShareGPT {path} ({count} requests, seed {seed}, {skipped} skipped by length; {how})"
        return Dataset(tuple(requests), source)
    if head == "{":
        first = text.lstrip().split("\n", 1)[0]
        if '"conversations"' in first[:10_000] and '"prompt"' not in first and '"messages"' not in first:
            raise InputError(f"{path}: a ShareGPT file is a JSON list of conversations, not one object per line",
                             hint='write [{"conversations": [...]}, ...], or JSONL lines of {"prompt": ...}')
        return Dataset(tuple(_jsonl_requests(path, count, output_len)), f"JSONL {path} ({count} requests)")
    raise InputError(f"{path}: neither a ShareGPT JSON list nor JSONL objects (starts with {text[:20]!r})",
                     hint='ShareGPT: [{"conversations": [...]}]; JSONL: one {"prompt": ...} or '
                          '{"messages": [...]} per line')
