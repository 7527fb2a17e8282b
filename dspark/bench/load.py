"""The load a bench sends: the options bench and sweep share, validated into the runner's spec, and one bench run."""

from __future__ import annotations

import asyncio
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from dspark.bench.client import ClientConfig, Endpoint
from dspark.bench.datasets import (
    Lengths,
    load_tokenizer,
    read_dataset,
    sample_lengths,
    text_prompts_of,
    token_prompts_of,
)
from dspark.bench.prompts import Prompt, read_jsonl, synthetic_text_prompts, synthetic_token_prompts, take
from dspark.bench.results import BenchResult
from dspark.bench.runner import BenchSpec, PassObserver, run_bench
from dspark.bench.stats import SLO_NAMES
from dspark.bench.url import finite_positive, parse_server_url, redact_url_credentials
from dspark.core.errors import InputError
from dspark.core.redact import redact_argv

# Token ids are drawn from [10, vocab_size): 500 fits every real vocabulary and the tests' tiny models (512).
DEFAULT_VOCAB = 500
STREAMS_PER_PROCESS = 64


@dataclass(frozen=True)
class LoadOptions:
    """What load to send: prompts, concurrency, lengths, repetitions; shared by bench and sweep."""

    endpoint: Endpoint = "completions"
    model: str | None = None
    prompts_file: Path | None = None
    input_len: int = 256
    prompt_kind: Literal["auto", "ids", "text"] = "auto"  # auto: token ids for completions, text for chat
    vocab_size: int = DEFAULT_VOCAB
    requests: int = 64
    concurrency: int = 8
    max_tokens: int = 128
    ignore_eos: bool = True
    reps: int = 1
    warm_rerun: bool = False
    read_metrics: bool = True
    metrics_url: str | None = None
    sample_interval_s: float = 5.0
    timeout_s: float = 600.0
    seed: int = 0
    client_processes: int = 0  # 0: one per STREAMS_PER_PROCESS streams, at most one per CPU
    request_rate: float | None = None  # open loop: requests per second (Poisson at burstiness 1); None: closed
    burstiness: float = 1.0  # gamma shape of the arrival intervals, as vllm bench serve's --burstiness
    # vllm bench serve's workload options: --output-len (default: max_tokens), --range-ratio (lengths uniform in
    # [L·(1−R), L·(1+R)]), a dataset file (ShareGPT JSON or JSONL), the tokenizer that measures its lengths,
    # and --goodput's SLOs ("ttft:500", ms).
    output_len: int | None = None
    range_ratio: float = 0.0
    dataset: Path | None = None
    tokenizer: Path | None = None
    goodput: tuple[str, ...] = ()
    # Passes sent before this bench whose synthetic prompts it must not re-send (the sweep's earlier points, which
    # filled the server's prefix cache with theirs): its prompts' content starts that many passes later; the
    # lengths and arrival times, drawn from --seed, stay the same.
    prompt_offset: int = 0


def client_processes(requested: int, concurrency: int, cpus: int | None = None) -> int:
    """Processes for the clients: the requested number, or (0) one per STREAMS_PER_PROCESS streams, capped by CPUs.

    One Python process reads ~11,000 streamed tokens/s when every token arrives in its own network read, at
    ~90 µs of CPU each (benchmarks/client_overhead.py on a 16-core host); 64 streams at 50 tok/s each keep a
    process near a third of a core, so the client stays far from being the bottleneck.
    """
    if requested > 0:
        return requested
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, min(-(-concurrency // STREAMS_PER_PROCESS), cpus))


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise InputError(f"{name} must be positive, got {value}")


def arrival_schedule(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Open-loop arrival times (s after the start) as `vllm bench serve --request-rate R --burstiness B` sends
    them (vLLM 0.32's get_request): one gamma interval of mean 1/rate and shape `burstiness` (1: Poisson) before
    each request, the first included, summed, then scaled so that the last arrives at exactly count / rate (vLLM
    rescales so, to steady the throughput across seeds). vLLM draws the intervals from numpy's global generator
    seeded with --seed (np.random.seed, then np.random.gamma per request); where numpy is installed dspark draws
    from numpy's RandomState(seed) the same way, so one seed gives both tools the same arrivals; without it,
    Python's random draws them (the same distribution, other values)."""
    theta = 1.0 / (rate * burstiness)
    try:
        import numpy as np  # noqa: PLC0415 - optional: vllm bench serve's own draws
    except ImportError:
        rng = random.Random(seed)  # noqa: S311 - a reproducible load pattern, not a secret
        gaps = [rng.gammavariate(burstiness, theta) for _ in range(count)]
    else:
        state = np.random.RandomState(seed % (1 << 32))
        gaps = [float(state.gamma(shape=burstiness, scale=theta)) for _ in range(count)]
    times: list[float] = []
    total = 0.0
    for gap in gaps:
        total += gap
        times.append(total)
    scale = count / rate / total if total > 0 else 1.0
    return [t * scale for t in times]


def parse_goodput(items: Sequence[str]) -> dict[str, float]:
    """--goodput's SLOs, NAME:MS each (also comma- or space-separated in one value), by vLLM's names (e2e is
    e2el); InputError for anything else."""
    out: dict[str, float] = {}
    hint = "write --goodput ttft:500 --goodput tpot:50 (or 'ttft:500,tpot:50'): ttft, tpot, e2el in ms"
    for item in (piece for value in items for piece in value.replace(",", " ").split()):
        name, sep, value = item.partition(":")
        name = "e2el" if name == "e2e" else name
        if not sep or name not in SLO_NAMES:
            raise InputError(f"--goodput {item[:60]!r}: not NAME:MS with NAME one of {', '.join(SLO_NAMES)}",
                             hint=hint)
        try:
            ms = float(value)
        except ValueError:
            raise InputError(f"--goodput {item[:60]!r}: {value[:40]!r} is not a number of milliseconds",
                             hint=hint) from None
        if not (math.isfinite(ms) and ms >= 0):
            raise InputError(f"--goodput {item[:60]!r}: an SLO is a finite, non-negative number of ms", hint=hint)
        out[name] = ms
    return out


def _requests(load: LoadOptions, kind: str, max_tokens: int
              ) -> tuple[list[Prompt] | None, tuple[int, ...], Lengths | None, str]:
    """A file's or dataset's prompts (None: synthetic), the max_tokens of each request (empty: max_tokens for
    all), the synthetic lengths drawn by --range-ratio (None: fixed) and the result's prompt_source."""
    if load.prompts_file is not None and load.dataset is not None:
        raise InputError("--prompts and --dataset both name the requests: give one",
                         hint="--dataset reads ShareGPT JSON and the same JSONL --prompts reads")
    if load.range_ratio and (load.prompts_file is not None or load.dataset is not None):
        raise InputError("--range-ratio draws synthetic lengths: it does not apply to --prompts or --dataset")
    # A file's lines are sent in file order (cycled to --requests), each with its own max_tokens if it has one:
    # the file `dspark advise --workload` replays.
    lines = take(read_jsonl(load.prompts_file), load.requests) if load.prompts_file is not None else None
    file_prompts = [line.prompt for line in lines] if lines is not None else None
    max_tokens_each: tuple[int, ...] = ()
    lengths: Lengths | None = None
    if lines is not None:
        source = f"{load.prompts_file} ({load.requests} requests)"
        if any(line.max_tokens is not None for line in lines):
            max_tokens_each = tuple(line.max_tokens or max_tokens for line in lines)
            source += f", max_tokens per line (--max-tokens {max_tokens} where a line has none)"
    elif load.dataset is not None:
        tokenize = load_tokenizer(load.tokenizer) if load.tokenizer is not None else None
        dataset = read_dataset(load.dataset, count=load.requests, seed=load.seed, output_len=load.output_len,
                               tokenize=tokenize)
        file_prompts = [r.prompt for r in dataset.requests]
        if any(r.max_tokens is not None for r in dataset.requests):
            max_tokens_each = tuple(r.max_tokens or max_tokens for r in dataset.requests)
        source = dataset.source
    elif load.range_ratio:
        lengths = sample_lengths(load.requests, load.input_len, max_tokens, load.range_ratio, load.seed)
        max_tokens_each = lengths.output
        source = (f"synthetic {kind}, input {min(lengths.input)}..{max(lengths.input)} tokens (mean "
                  f"{sum(lengths.input) / len(lengths.input):.1f}), output {min(lengths.output)}.."
                  f"{max(lengths.output)}: --range-ratio {load.range_ratio:g} around {load.input_len}/{max_tokens}, "
                  f"seed {load.seed}, {lengths.rng}")
    else:
        source = f"synthetic {kind}, {load.input_len} tokens, seed {load.seed}"
    return file_prompts, max_tokens_each, lengths, source


def bench_spec(load: LoadOptions, base_url: str, argv: Sequence[str] = (), seats: int | None = None) -> BenchSpec:
    """The runner's spec: synthetic prompts differ per rep (no cross-rep cache hits); a file's are reused.

    seats: the server's seat count as the user said it, recorded in the result for `dspark advise --calibrate`.
    """
    if seats is not None:
        _positive("--seats", seats)
    if load.request_rate is not None and not (math.isfinite(load.request_rate) and load.request_rate > 0):
        raise InputError(f"--request-rate must be a positive number of requests per second, got {load.request_rate}")
    if not (math.isfinite(load.burstiness) and load.burstiness > 0):
        raise InputError(f"--burstiness must be positive, got {load.burstiness}")
    for name, value in (("--requests", load.requests), ("--concurrency", load.concurrency),
                        ("--max-tokens", load.max_tokens), ("--reps", load.reps), ("--input-len", load.input_len),
                        ("--client-processes", load.client_processes + 1)):
        _positive(name, value)
    finite_positive("--sample-interval", load.sample_interval_s)
    finite_positive("--timeout", load.timeout_s)
    server = parse_server_url(base_url, "--url")
    metrics = parse_server_url(load.metrics_url, "--metrics-url") if load.metrics_url is not None else None
    kind = load.prompt_kind
    if kind == "auto":
        kind = "text" if load.endpoint == "chat" else "ids"
    if kind == "ids" and load.endpoint == "chat" and load.prompts_file is None and load.dataset is None:
        raise InputError("token-id prompts need --endpoint completions (chat takes text)")
    if load.output_len is not None:
        _positive("--output-len", load.output_len)
    max_tokens = load.output_len if load.output_len is not None else load.max_tokens
    slos = parse_goodput(load.goodput)
    file_prompts, max_tokens_each, lengths, source = _requests(load, kind, max_tokens)

    def prompts_for_rep(rep: int) -> Sequence[Prompt]:
        if file_prompts is not None:
            return file_prompts
        seed = load.seed + 1_000_003 * (load.prompt_offset + rep)
        if lengths is not None:
            if kind == "ids":
                return token_prompts_of(lengths.input, vocab_size=load.vocab_size, seed=seed)
            return text_prompts_of(lengths.input, seed=seed)
        if kind == "ids":
            return synthetic_token_prompts(load.requests, load.input_len, vocab_size=load.vocab_size, seed=seed)
        return synthetic_text_prompts(load.requests, load.input_len, seed=seed)

    client = ClientConfig(
        base_url=server.url.rstrip("/").removesuffix("/v1"),
        authorization=server.authorization,
        model=load.model or "",
        endpoint=load.endpoint,
        max_tokens=max_tokens,
        ignore_eos=load.ignore_eos,
        concurrency=load.concurrency,
        timeout_s=load.timeout_s,
        api_key=os.environ.get("OPENAI_API_KEY") or None,
        processes=client_processes(load.client_processes, load.concurrency),
        max_tokens_each=max_tokens_each,
    )
    rate = load.request_rate
    return BenchSpec(
        client=client,
        prompts_for_rep=prompts_for_rep,
        prompt_source=source,
        reps=load.reps,
        warm_rerun=load.warm_rerun,
        metrics_url=metrics.url if metrics is not None else None,
        metrics_authorization=metrics.authorization if metrics is not None else None,
        sample_interval_s=load.sample_interval_s,
        read_metrics=load.read_metrics,
        schedule_for_rep=None if rate is None else (
            lambda rep: arrival_schedule(load.requests, rate, load.burstiness, load.seed + 7919 * rep)),
        metadata={"argv": [redact_url_credentials(a) for a in redact_argv(list(argv))],
                  "synthetic": file_prompts is None, "seed": load.seed,
                  "mode": "closed loop" if rate is None else "open loop",
                  "request_rate": rate, "burstiness": load.burstiness if rate is not None else None,
                  "max_concurrency": load.concurrency,
                  "max_tokens_per_line": {"min": min(max_tokens_each), "max": max(max_tokens_each),
                                          "mean": sum(max_tokens_each) / len(max_tokens_each)}
                  if max_tokens_each else None,
                  **({"range_ratio": load.range_ratio, "input_lengths": _spread_of(lengths.input),
                      "output_lengths": _spread_of(lengths.output), "length_rng": lengths.rng}
                     if lengths is not None else {}),
                  **({"dataset": str(load.dataset), "tokenizer": str(load.tokenizer) if load.tokenizer else None}
                     if load.dataset is not None else {})},
        seats=seats,
        slos_ms=slos,
    )


def _spread_of(values: Sequence[int]) -> dict[str, float]:
    return {"min": min(values), "max": max(values), "mean": sum(values) / len(values)}


def bench_once(spec: BenchSpec, observer: PassObserver | None = None) -> BenchResult:
    """Run the spec's passes; a server that cannot be reached is an input error naming its URL."""
    try:
        return asyncio.run(run_bench(spec, observer))
    except httpx.HTTPError as exc:
        raise InputError(f"cannot reach {spec.client.base_url}: {type(exc).__name__}: {exc}",
                         hint="is the server running? --url takes http://HOST:PORT") from exc
