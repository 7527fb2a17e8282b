"""dspark's engine-flag readers against the engines' own parsers (vLLM 0.32.0, SGLang 0.5.23), argv by argv.

Each argv is parsed by the engine's parser (tests/real_engines/parse_many.py, one engine import for the whole
table) and by dspark's reader; they must agree: both accept it with the same values for every setting dspark
reads, or both refuse it. Where they knowingly differ the case says how, and that is checked too:
- "set aside": the engine's parser refuses a bare argument that dspark's reader keeps in `unknown`, and
  `dspark start` runs the engine's parser on it;
- "stricter": the engine's parser takes a value that the engine's config class refuses after parsing
  (pydantic gt=0, SpeculativeAlgorithm.from_string); dspark's reader refuses it at once.
dspark reads pasted flags as validate does (dspark.engines.pasted_flags.read_engine_flags): abbreviations spelled
out against dspark's table of the release's flags, ambiguous prefixes and flags the parser lacks refused, so those
cases agree with the engine (issue 26 item 9); every flag the readers declare is also tried abbreviated, at a
random unique prefix and at an ambiguous one, and each must read as the engine's parser reads it.
The human-readable integer grammars are compared the same way, with dspark's own size and count grammar
where it overlaps vLLM's (single-letter suffixes, dspark.core.units).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import SettingsError
from dspark.core.units import MAX_BYTES, MAX_TOKENS, parse_count, parse_size, suffixed_int
from dspark.engines import engine_spec
from dspark.engines.inside import inside_env
from dspark.engines.parser_flags import flag_table
from dspark.engines.pasted_flags import read_engine_flags
from dspark.engines.sglang.options import SglangOptions
from dspark.engines.sglang.options import human_readable_int as sglang_int
from dspark.engines.sglang.options import known_flags as sglang_known_flags
from dspark.engines.vllm.options import MTP_METHOD_ALIASES, VllmOptions
from dspark.engines.vllm.options import known_flags as vllm_known_flags

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
MARKER = "DSPARK_PARSED "


@dataclass(frozen=True)
class Case:
    """One argv; `differs` says how dspark's reader knowingly differs from the engine's parser ("" = it does not)."""

    argv: tuple[str, ...]
    differs: str = ""  # "", "set aside" or "stricter"

    @property
    def id(self) -> str:
        return " ".join(self.argv) or "(empty)"


def _cases(*rows: tuple[str, ...] | Case) -> list[Case]:
    return [row if isinstance(row, Case) else Case(row) for row in rows]


def aside(*argv: str) -> Case:
    return Case(argv, "set aside")


def stricter(*argv: str) -> Case:
    return Case(argv, "stricter")


SC = '{"method": "mtp", "num_speculative_tokens": 2}'
VLLM_CASES = _cases(
    (), ("/m",), ("/m", "--max-num-seqs", "4"), ("/m", "--max-num-seqs=4"), ("/m", "--max_num_seqs", "4"),
    ("/m", "--max_num_seqs=4"), ("--max-num-seqs", "4", "/m"), ("--model", "/m"), ("--model=/m", "/n"),
    ("/m", "--max-num-seqs", "3", "--max-num-seqs", "5"), ("/m", "--max-num-seqs"), ("/m", "--max-num-seqs", "x"),
    ("/m", "--max-model-len", "auto"), ("/m", "--max-model-len", "AUTO"), ("/m", "--max-model-len", "-1"),
    ("/m", "--max-model-len", "1k"), ("/m", "--max-model-len", "1K"), ("/m", "--max-model-len", "25.6k"),
    ("/m", "--max-model-len", "1.5K"), ("/m", "--max-model-len", "abc"), ("/m", "--max-model-len", " 2048 "),
    ("/m", "--kv-cache-memory-bytes", "1.5g"), ("/m", "--kv-cache-memory-bytes", "1G"),
    ("/m", "--kv-cache-memory-bytes", "1.5G"), ("/m", "--kv-cache-memory-bytes", "None"),
    ("/m", "--kv-cache-memory-bytes", "28GB"), ("/m", "--kv-cache-memory-bytes=1.005k"),
    ("/m", "--max-num-batched-tokens", "8k"), ("/m", "--max-num-batched-tokens", "8K"),
    ("/m", "--max-num-batched-tokens", "0x10"), ("/m", "--max-num-batched-tokens", "-1"),
    ("/m", "-tp", "2"), ("/m", "-tp=2"), ("/m", "--tensor-parallel-size=4"), ("/m", "--tensor_parallel_size", "4"),
    ("/m", "-pp", "2"), ("/m", "-dp", "2"), ("/m", "-tp", "-1"),
    ("/m", "--enable-prefix-caching"), ("/m", "--no-enable-prefix-caching"),
    ("/m", "--enable-prefix-caching", "--no-enable-prefix-caching"),
    ("/m", "--no-enable-prefix-caching", "--enable-prefix-caching"), ("/m", "--enable-prefix-caching=true"),
    ("/m", "--enable_prefix_caching"), ("/m", "--no_enable_prefix_caching"), ("/m", "--no-enable-prefix-caching=1"),
    ("/m", "--enforce-eager"), ("/m", "--no-enforce-eager"), ("/m", "--enable-chunked-prefill"),
    ("/m", "--disable-hybrid-kv-cache-manager"),
    ("/m", "--dtype", "half"), ("/m", "--dtype", "float64"), ("/m", "--dtype=bfloat16"),
    ("/m", "--gpu-memory-utilization", "0.8"), ("/m", "--device-memory-utilization", "0.7"),
    ("/m", "-q", "fp8"), ("/m", "-qfp8"), ("/m", "--quantization", "None"), ("/m", "--kv-cache-dtype", "fp8"),
    ("/m", "--speculative-config", SC),
    ("/m", "-sc", '{"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}'),
    ("/m", "-sc", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 1}'),
    ("/m", "--speculative-config.method", "mtp", "--speculative_config.num_speculative_tokens=2"),
    ("/m", "-sc", '{"method": "mtp"}', "-sc.num_speculative_tokens", "2"), ("/m", "-sc", "{bad"),
    ("/m", "-sc", SC, "-sc", '{"method": "ngram", "num_speculative_tokens": 4}'),
    ("/m", "--spec-method", "mtp", "--spec-tokens", "2"), ("/m", "--spec-model", "/d"),
    ("/m", "-cc", '{"cudagraph_mode": "FULL", "max_cudagraph_capture_size": 64}'),
    ("/m", "-cc", '{"cudagraph_mode": "full"}'), ("/m", "-cc.max_cudagraph_capture_size=64"),
    ("/m", "-cc.max_cudagraph_capture_size", "1k"), ("/m", "-cc", '{"max_cudagraph_capture_size": 1k}'),
    ("/m", "--compilation-config", '{"cudagraph_mode": "NONE"}', "-cc.max_cudagraph_capture_size=8"),
    ("/m", "--compilation_config.cudagraph_capture_sizes", "[1, 2, 4]"),
    ("/m", "-cc.cudagraph_capture_sizes+", "1,2", "-cc.cudagraph_capture_sizes+", "8"),
    ("/m", "--cudagraph-capture-sizes", "1", "2", "8"), ("/m", "--cudagraph-capture-sizes", "1", "2", "/x"),
    ("/m", "--max-cudagraph-capture-size", "8"), ("/m", "--block-size", "16"),
    ("/m", "--mamba-cache-dtype", "float32"), ("/m", "--mamba-block-size", "None"),
    ("/m", "--mamba-cache-mode", "align"), ("/m", "--performance-mode", "throughput"),
    ("/m", "--num-gpu-blocks-override", "100"),
    ("/m", "--host", "0.0.0.0", "--max-num-seqs", "4"), ("/m", "--trust-remote-code", "--max-num-seqs", "4"),
    ("/m", "-O3", "--max-num-seqs", "4"), ("/m", "--max-num-seqs", "4", "--served-model-name", "a.b"),
    ("/m", "--max-num-seqs=4", "--port=8001"),
    ("/m", "--no-such-flag", "4"), ("/m", "--max-model", "100"), ("/m", "--kv-cache-memory", "1g"), ("/m", "-tp2"),
    # issue 26 item 9: abbreviations, as vLLM's argparse (allow_abbrev) reads them, after its pre-pass.
    ("/m", "--max-num-se", "64", "--gpu-memory-util", "0.5"), ("/m", "--kv-cache-dt", "fp8"),
    ("/m", "--max_num_se=4"), ("/m", "--no-enable-prefix", "--max-num-b", "8k"), ("/m", "-t", "2"),
    ("/m", "--compilation.cudagraph_mode", "FULL"), ("/m", "--speculative-conf", SC), ("/m", "--tensor-parallel", "2"),
    ("/m", "--max-model-l=2k", "--block", "32"), ("/m", "--enable-pre"), ("/m", "-d", "2"),
    stricter("/m", "--block-size", "0"), stricter("/m", "--spec-tokens", "0"),
    stricter("/m", "-sc", '{"method": "mtp", "num_speculative_tokens": 0}'),
)

SGLANG_CASES = _cases(
    (), ("--model-path", "/m"), ("--model", "/m"), ("--model-path=/m",), ("--tp-size", "2"), ("--tp", "2"),
    ("--tensor-parallel-size=2",), ("--pp-size", "2"), ("--dp-size", "2"), ("--data-parallel-size", "2"),
    ("--tp-size", "2", "--tp-size", "4"), ("--tp-size", "two"), ("--tp-size",),
    ("--max-total-tokens", "1.5M"), ("--max-total-tokens", "256Ki"), ("--max-total-tokens", "1.5Mi"),
    ("--max-total-tokens", "1m"), ("--max-total-tokens", "1K"), ("--context-length", "128k"),
    ("--context-length", "256Ki"), ("--max-prefill-tokens", "16Ki"), ("--max-prefill-tokens", "16384"),
    ("--mem-fraction-static", "0.8"), ("--mem-fraction-static",), ("--max-running-requests=16",),
    ("--chunked-prefill-size", "-1"), ("--chunked-prefill-size", "8192"),
    ("--disable-radix-cache",), ("--disable-radix-cache=true",), ("--disable-overlap-schedule",),
    ("--kv-cache-dtype", "fp8_e4m3"), ("--kv-cache-dtype", "fp16"), ("--page-size", "64"),
    ("--cuda-graph-bs-decode", "1", "2", "8"), ("--cuda-graph-bs-prefill", "8", "64", "--tp-size", "2"),
    ("--cuda-graph-bs-decode",), ("--cuda-graph-max-bs-decode", "64"), ("--cuda-graph-max-bs-prefill", "512"),
    ("--cuda-graph-backend-decode", "disabled"), ("--cuda-graph-backend-decode", "full"),
    ("--cuda-graph-backend-prefill", "breakable"), ("--cuda-graph-backend-prefill", "tc_piecewise"),
    ("--cuda-graph-backend-prefill", "tc"), ("--disable-cuda-graph",), ("--disable-decode-cuda-graph",),
    ("--disable-prefill-cuda-graph",), ("--disable-cuda-graph", "--cuda-graph-backend-decode", "full"),
    ("--cuda-graph-backend-decode", "full", "--disable-decode-cuda-graph"), ("--disable-cuda-graph-padding",),
    ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
     "--speculative-num-draft-tokens", "4", "--speculative-draft-model", "/d"),
    ("--speculative-algorithm", "eagle3"), ("--speculative-draft-model-path=/d",),
    ("--mamba-ssm-dtype", "bfloat16"), ("--mamba-ssm-dtype", "nope"), ("--max-mamba-cache-size", "200"),
    ("--mamba-full-memory-ratio", "0.5"), ("--mamba-radix-cache-strategy", "no_buffer"),
    ("--attention-backend", "flashinfer"), ("--mm-feature-transport", "cuda_ipc"), ("--language-only",),
    ("--language-model-only",),
    ("--host", "0.0.0.0", "--trust-remote-code", "--tp-size", "2"), ("--enable-dp-attention", "--dp-size", "2"),
    ("--tp_size", "2"), aside("--model-path", "/m", "extra"),
    ("--cuda-graph-max-bs", "8"), ("--cuda-graph-bs", "1", "2"), ("--max-running", "8"),
    ("--mem-frac", "0.5", "--max-total", "100k"), ("--context", "4k"), ("--page", "32"), ("--disable-radix",),
    ("--speculative-algo", "EAGLE"), ("--kv-cache", "fp8_e4m3"), ("--max-run=8",),
    stricter("--page-size", "0"), stricter("--dp-size", "0"),
    stricter("--speculative-algorithm", "nope"), stricter("--max-running-requests", "0"),
)



# A value each engine takes for a flag (else "2"), so that a generated case tests the flag's name, not its value.
_VALUES = {
    "--model": "/x", "--model-path": "/x", "--dtype": "half", "--kv-cache-dtype": "fp8",
    "--mamba-cache-dtype": "float32", "--mamba-ssm-cache-dtype": "float32", "--mamba-cache-mode": "align",
    "--distributed-executor-backend": "mp",
    "--quantization": "fp8", "--performance-mode": "throughput", "--spec-method": "mtp", "--spec-model": "/d",
    "--speculative-config": SC, "--compilation-config": '{"cudagraph_mode": "FULL"}',
    "--limit-mm-per-prompt": '{"image": 0}', "--host": "h", "--served-model-name": "n",
    "--gpu-memory-utilization": "0.5", "--device-memory-utilization": "0.5", "--mem-fraction-static": "0.5",
    "--mamba-ssm-dtype": "bfloat16", "--mamba-radix-cache-strategy": "no_buffer", "--cuda-graph-backend-decode": "full",
    "--cuda-graph-backend-prefill": "full", "--attention-backend": "flashinfer", "--schedule-policy": "lpm",
    "--speculative-algorithm": "EAGLE", "--speculative-draft-model-path": "/d", "--speculative-draft-model": "/d",
    "--mm-feature-transport": "cuda_ipc", "--mamba-full-memory-ratio": "0.5",
}


def _abbreviations(known: Sequence[str], options: Mapping[str, Any], seed: int, *, sglang: bool) -> list[Case]:
    """Each flag the reader declares, cut at a random prefix that is unique among the parser's flags and at one that
    is not (argparse: ambiguous), with a value: generated, so that no hand-picked list decides what agrees."""
    import random  # noqa: PLC0415

    rng = random.Random(seed)  # noqa: S311 - reproducible cases, no secret
    longs = [o for o in options if o.startswith("--")]
    out = []
    for flag in known:
        if flag not in options:  # read by dspark under an older release's name only (--cuda-graph-max-bs)
            continue
        value = () if options[flag] == 0 else (_VALUES.get(flag, "2"),)
        if sglang and flag in ("--model", "--model-path"):
            continue  # the table's model comes first; a second one is not what is tested here
        cuts = [flag[:n] for n in range(4, len(flag))]
        unique = [c for c in cuts if [o for o in longs if o.startswith(c)] == [flag]]
        shared = [c for c in cuts if len([o for o in longs if o.startswith(c)]) > 1 and c not in longs]
        for pick in (unique, shared):
            if pick:
                out.append(Case((rng.choice(pick), *value)))
    return out


_VLLM_TABLE = flag_table("vllm", "0.32.0")
_SGLANG_TABLE = flag_table("sglang", "0.5.23")
assert _VLLM_TABLE is not None and _SGLANG_TABLE is not None
VLLM_CASES += [Case(("/m", *c.argv)) for c in _abbreviations(vllm_known_flags(), _VLLM_TABLE.options, 26, sglang=False)]
SGLANG_CASES += _abbreviations(sglang_known_flags(), _SGLANG_TABLE.options, 26, sglang=True)

# Human-readable integers: engine function against dspark's, string by string.
INT_TEXTS = ("4096", "1k", "1K", "25.6k", "1.005k", "0.3g", "1.5K", "1.5G", "2M", "3t", "-1", "1_000", " 7 ", "+5",
             "1Ki", "256Ki", "1Mi", "1.5Mi", "1.5M", "1m", "1kb", "28GB", ".5k", "28 G", "k", "", "1e3", "0x10",
             "12.5", "99999999999T", "1.0000000001k")


def _run(python: str, engine: str, request: Mapping[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([python, str(HERE / "parse_many.py"), engine], input=json.dumps(request),
                          capture_output=True, text=True, timeout=600, check=False, env=inside_env())
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARKER)), None)
    assert line is not None, f"parse_many.py gave no answer (exit {proc.returncode}): {proc.stderr[-2000:]}"
    answer: dict[str, Any] = json.loads(line[len(MARKER):])
    return answer


@pytest.fixture(scope="module")
def vllm_parsed(vllm_python: str) -> dict[str, Any]:
    return _run(vllm_python, "vllm", {"argvs": [list(c.argv) for c in VLLM_CASES], "ints": list(INT_TEXTS)})


# SGLang's parser requires the model; dspark passes it ahead of the pasted flags, and so does this table.
SGLANG_MODEL = ("--model-path", "/base")


def _sglang_read(argv: Sequence[str]) -> SglangOptions:
    options: SglangOptions = read_engine_flags(engine_spec("sglang"), [*SGLANG_MODEL, *argv], "0.5.23").options
    return options


def _vllm_read(argv: Sequence[str]) -> VllmOptions:
    options: VllmOptions = read_engine_flags(engine_spec("vllm"), argv, "0.32.0").options
    return options


@pytest.fixture(scope="module")
def sglang_parsed(sglang_python: str) -> dict[str, Any]:
    argvs = [[*SGLANG_MODEL, *c.argv] for c in SGLANG_CASES]
    return _run(sglang_python, "sglang", {"argvs": argvs, "ints": list(INT_TEXTS)})


def _mtp(method: Any) -> Any:
    return "mtp" if method in MTP_METHOD_ALIASES else method


def _vllm_engine_view(ns: Mapping[str, Any]) -> dict[str, Any]:
    """The settings dspark reads, as the engine's namespace holds them (JSON flags over their shortcuts)."""
    spec = ns["speculative_config"] or {}
    cc = ns["compilation_config"]
    same = ("dtype", "kv_cache_dtype", "block_size", "enable_prefix_caching", "enable_chunked_prefill",
            "mamba_cache_mode", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_block_size", "max_num_seqs",
            "max_num_batched_tokens", "gpu_memory_utilization", "kv_cache_memory_bytes", "num_gpu_blocks_override",
            "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enforce_eager",
            "performance_mode", "disable_hybrid_kv_cache_manager", "quantization")
    sizes = cc["cudagraph_capture_sizes"]
    sizes = ns["cudagraph_capture_sizes"] if sizes is None else sizes
    return {
        **{name: ns[name] for name in same},
        "model": ns["model_tag"] if ns["model_tag"] is not None else ns["model"],
        "max_model_len": "auto" if ns["max_model_len"] == -1 else ns["max_model_len"],
        "speculative_method": _mtp(spec.get("method", ns["spec_method"])),
        "num_speculative_tokens": spec.get("num_speculative_tokens", ns["spec_tokens"]),
        "speculative_model": spec.get("model", ns["spec_model"]),
        "cudagraph_mode": cc["cudagraph_mode"],
        "max_cudagraph_capture_size": cc["max_cudagraph_capture_size"] if cc["max_cudagraph_capture_size"] is not None
        else ns["max_cudagraph_capture_size"],
        "cudagraph_capture_sizes": tuple(sizes) if sizes is not None else None,
    }


def _vllm_dspark_view(opts: VllmOptions, engine_defaults: Mapping[str, Any]) -> dict[str, Any]:
    """dspark's reading, with what it leaves unset filled in from the engine's defaults."""
    view = _vllm_engine_view({**engine_defaults, "model_tag": None})
    for name in view:
        value = getattr(opts, name)
        if value is not None:
            view[name] = value
    return view


_SGLANG_DESTS = {
    "model_path": "model_path", "tp_size": "tp_size", "pp_size": "pp_size", "dp_size": "dp_size",
    "mem_fraction_static": "mem_fraction_static", "max_running_requests": "max_running_requests",
    "max_total_tokens": "max_total_tokens", "context_length": "context_length",
    "chunked_prefill_size": "chunked_prefill_size", "max_prefill_tokens": "max_prefill_tokens",
    "kv_cache_dtype": "kv_cache_dtype", "page_size": "page_size", "disable_radix_cache": "disable_radix_cache",
    "speculative_algorithm": "speculative_algorithm", "speculative_num_steps": "speculative_num_steps",
    "speculative_eagle_topk": "speculative_eagle_topk", "speculative_num_draft_tokens": "speculative_num_draft_tokens",
    "speculative_draft_model_path": "speculative_draft_model_path", "mamba_ssm_dtype": "mamba_ssm_dtype",
    "max_mamba_cache_size": "max_mamba_cache_size", "mamba_full_memory_ratio": "mamba_full_memory_ratio",
    "mamba_radix_cache_strategy": "mamba_radix_cache_strategy", "disable_overlap_schedule": "disable_overlap_schedule",
    "cuda_graph_max_bs": "cuda_graph_max_bs_decode", "cuda_graph_bs": "cuda_graph_bs_decode",
    "disable_cuda_graph_all": "disable_cuda_graph", "disable_prefill_cuda_graph": "disable_prefill_cuda_graph",
    "cuda_graph_backend_prefill": "cuda_graph_backend_prefill",
    "cuda_graph_max_bs_prefill": "cuda_graph_max_bs_prefill",
    "cuda_graph_bs_prefill": "cuda_graph_bs_prefill", "disable_cuda_graph_padding": "disable_cuda_graph_padding",
    "mm_feature_transport": "mm_feature_transport", "language_only": "language_only",
    "language_model_only": "language_model_only", "attention_backend": "attention_backend",
}


def _sglang_engine_view(ns: Mapping[str, Any]) -> dict[str, Any]:
    view = {field: tuple(ns[dest]) if isinstance(ns[dest], list) else ns[dest] for field, dest in _SGLANG_DESTS.items()}
    # cuda_graph_hook: an explicit decode backend wins over --disable-decode-cuda-graph over --disable-cuda-graph.
    backend = ns["cuda_graph_backend_decode"]
    view["disable_cuda_graph"] = (backend == "disabled" if backend is not None
                                  else bool(ns["disable_decode_cuda_graph"] or ns["disable_cuda_graph"]))
    return view


def _sglang_dspark_view(opts: SglangOptions, engine_defaults: Mapping[str, Any]) -> dict[str, Any]:
    view = _sglang_engine_view(engine_defaults)
    for name in view:
        value = getattr(opts, name)
        if value is not None:
            view[name] = value
    view["disable_cuda_graph"] = bool(opts.disable_cuda_graph)
    return view


def _judge(case: Case, engine: Mapping[str, Any], read: Callable[[Sequence[str]], Any],
           views: tuple[Callable[[Mapping[str, Any]], dict[str, Any]], Callable[[Any], dict[str, Any]]]) -> None:
    try:
        opts = read(list(case.argv))
    except SettingsError as exc:
        ours: Any = exc
    else:
        ours = opts
    refused = isinstance(ours, SettingsError)
    if case.differs == "stricter":
        assert engine["ok"], f"the engine's parser refuses it too ({engine['error']}): not stricter"
        assert refused, "dspark's reader takes it: not stricter"
        return
    if case.differs == "set aside":
        assert not refused, f"dspark refused it: {ours}"
        assert ours.unknown or getattr(ours, "ambiguous", ()), "dspark's reader set nothing aside"
        return
    if not engine["ok"]:
        assert refused, f"the engine's parser refuses it ({engine['error']}), dspark's reader reads {ours}"
        return
    assert not refused, f"the engine's parser takes it, dspark's reader refuses it: {ours}"
    engine_view, dspark_view = views[0](engine["values"]), views[1](ours)
    assert dspark_view == engine_view


@pytest.mark.parametrize("index", range(len(VLLM_CASES)), ids=[c.id for c in VLLM_CASES])
def test_vllm_reader_reads_as_vllm_parses(index: int, vllm_parsed: dict[str, Any]) -> None:
    defaults = vllm_parsed["defaults"]
    _judge(VLLM_CASES[index], vllm_parsed["argvs"][index], _vllm_read,
           (_vllm_engine_view, lambda opts: _vllm_dspark_view(opts, defaults)))


@pytest.mark.parametrize("index", range(len(SGLANG_CASES)), ids=[c.id for c in SGLANG_CASES])
def test_sglang_reader_reads_as_sglang_parses(index: int, sglang_parsed: dict[str, Any]) -> None:
    defaults = sglang_parsed["defaults"]
    _judge(SGLANG_CASES[index], sglang_parsed["argvs"][index], _sglang_read,
           (_sglang_engine_view, lambda opts: _sglang_dspark_view(opts, defaults)))


def _outcome(read: Callable[[str], int], text: str) -> tuple[bool, int | None]:
    try:
        return True, read(text)
    except (ValueError, SettingsError):
        return False, None


@pytest.mark.parametrize("index", range(len(INT_TEXTS)), ids=[repr(t) for t in INT_TEXTS])
def test_human_readable_ints_match_each_engine(index: int, vllm_parsed: dict[str, Any],
                                              sglang_parsed: dict[str, Any]) -> None:
    text = INT_TEXTS[index]
    for engine, ours in ((vllm_parsed, suffixed_int), (sglang_parsed, lambda t: sglang_int(t, flag="--x"))):
        answer = engine["ints"][index]
        assert _outcome(ours, text) == (answer["ok"], answer.get("value")), answer


_LETTER_FORM = re.compile(r"\s*[\d.]+\s*[kKmMgGtT]\s*")


@pytest.mark.parametrize("index", [i for i, t in enumerate(INT_TEXTS) if _LETTER_FORM.fullmatch(t)],
                         ids=[repr(t) for t in INT_TEXTS if _LETTER_FORM.fullmatch(t)])
def test_dsparks_own_letter_sizes_are_vllms(index: int, vllm_parsed: dict[str, Any]) -> None:
    """Where dspark's size and count grammar overlaps vLLM's (a single-letter suffix), they agree on every form."""
    text = INT_TEXTS[index]
    answer = vllm_parsed["ints"][index]
    for read, bound in ((parse_size, MAX_BYTES), (parse_count, MAX_TOKENS)):
        if answer["ok"] and answer["value"] > bound:
            # vLLM reads it; dspark bounds every size and count it reads (far past any real one) and says so.
            with pytest.raises(ValueError, match=r"than dspark plans with \(at most"):
                read(text)
            continue
        assert _outcome(read, text) == (answer["ok"], answer.get("value"))
