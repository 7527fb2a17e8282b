"""dspark's vLLM prediction against the real vLLM 0.32.0 CPU engine: pool tokens and Maximum concurrency.

Every case starts the installed engine on a tiny random-weight model and reads its own line,
"CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx". The prediction
must equal it to the token and to the two printed decimals; where the engine refuses to start, the
predicted refusal must carry the engine's own message.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from vllm_harness import OracleCase, OracleResult

from dspark.engines.vllm.capacity import VllmCapacity, compute_vllm_capacity, cpu_features_from_flags
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.hardware.select import read_cpu_flags
from dspark.model.architecture import ModelArchitecture, parse_config

pytestmark = pytest.mark.engine

MTP2 = '{"method":"mtp","num_speculative_tokens":2}'
MTP1 = '{"method":"mtp","num_speculative_tokens":1}'
NGRAM3 = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}'


def case(cid: str, model: str, flags: str, *, kv: int | None = None, space_gib: int | None = None) -> OracleCase:
    """A case pinned by --kv-cache-memory-bytes (kv) or by VLLM_CPU_KVCACHE_SPACE (whole GiB)."""
    argv = flags.split()
    if kv is not None:
        argv += ["--kv-cache-memory-bytes", str(kv)]
        return OracleCase(cid, model, tuple(argv), {}, str(kv))
    assert space_gib is not None
    return OracleCase(cid, model, tuple(argv), {"VLLM_CPU_KVCACHE_SPACE": str(space_gib)}, f"{space_gib}GiB")


# Engine starts that print the KV line. Lengths that are not multiples of the block size, odd byte
# budgets, fp8, prefix caching on and off, speculative tokens (ngram, MTP), and each layer kind.
CASES = [
    case("dense-1gib-env", "dense-qwen3", "--max-model-len 2048", space_gib=1),
    case("dense-fp8-odd", "dense-qwen3", "--max-model-len 1000 --kv-cache-dtype fp8", kv=123_456_789),
    case(
        "dense-noprefix-block64",
        "dense-qwen3",
        "--max-model-len 3001 --no-enable-prefix-caching --block-size 64",
        kv=98_765_432,
    ),
    case("dense-autofit", "dense-qwen3", "--max-model-len auto", kv=2_000_000),
    case("hybrid-1gib-env", "hybrid-qwen3-next", "--max-model-len 2048", space_gib=1),
    case(
        "hybrid-noprefix-bf16ssm",
        "hybrid-qwen3-next",
        "--max-model-len 3000 --no-enable-prefix-caching --mamba-ssm-cache-dtype bfloat16",
        kv=100_000_000,
    ),
    case("hybrid-mtp2", "hybrid-qwen3-next", f"--max-model-len 2000 --speculative-config {MTP2}", kv=100_000_000),
    case("hybrid-fp8-odd", "hybrid-qwen3-next", "--max-model-len 5000 --kv-cache-dtype fp8", kv=77_777_777),
    case("mla-default", "mla-deepseek-v3", "--max-model-len 2000", kv=100_000_000),
    case(
        "mla-fp8-noprefix",
        "mla-deepseek-v3",
        "--max-model-len 1500 --kv-cache-dtype fp8 --no-enable-prefix-caching",
        kv=55_555_555,
    ),
    case("mla-mtp1", "mla-deepseek-v3", f"--max-model-len 2000 --speculative-config {MTP1}", kv=100_000_000),
    case("sliding-default", "sliding-mistral", "--max-model-len 3000", kv=100_000_000),
    case("sliding-budget512", "sliding-mistral", "--max-model-len 4000 --max-num-batched-tokens 512", kv=50_000_001),
    # ngram last among the starts: its drafter imports numba, after which 0.32.0's CPU kernel-override
    # rescan fails in the same process (the runner then retries the next case in a fresh one).
    case("dense-ngram3", "dense-qwen3", f"--max-model-len 2000 --speculative-config {NGRAM3}", kv=100_000_000),
    # Refusals last: each one ends a runner process (the next case starts a fresh one).
    case("dense-too-long", "dense-qwen3", "--max-model-len 4096", kv=2_000_000),
    case("hybrid-too-long", "hybrid-qwen3-next", "--max-model-len 8192", kv=1_000_000),
]
REFUSED = {"dense-too-long": "max_model_len_does_not_fit", "hybrid-too-long": "max_model_len_does_not_fit"}
# vLLM renames method "mtp" to "dspark" when the draft path (for MTP the model's own) contains "dspark".
REDETECTED = case(
    "mtp-path-named-dspark", "dspark-named-hybrid", f"--max-model-len 2000 --speculative-config {MTP2}", kv=100_000_000
)


def architecture(models: Path, model: str) -> ModelArchitecture:
    """The model's layers as dspark reads its config.json."""
    return parse_config(json.loads((models / model / "config.json").read_text()), str(models / model))


# The engine beside these tests runs on this host: predict for its CPU (AMX or not, AVX512-BF16 or not) the way
# `dspark validate --platform cpu` reads it. tests/capacity/test_vllm.py covers each branch with explicit features.
HOST_CPU = cpu_features_from_flags(read_cpu_flags(), platform.machine())


def predict_direct(models: Path, c: OracleCase) -> VllmCapacity:
    """compute_vllm_capacity on the case for this host's CPU, as `dspark validate --platform cpu` would call it."""
    options = parse_vllm_serve_flags(c.flags)
    return compute_vllm_capacity(
        architecture(models, c.model),
        options,
        platform="cpu",
        device_total_bytes=None,
        device_free_bytes=None,
        compute_capability=None,
        weights_per_gpu_bytes=None,
        environ=c.env,
        cpu_features=HOST_CPU,
        engine_version="0.32.0",  # the engine beside these tests
    )


def predict_via_validate(dspark_exe: str, models: Path, c: OracleCase) -> Mapping[str, object]:
    """`dspark validate --model DIR --engine vllm --platform cpu --kv-cache-memory SIZE --json -- FLAGS`."""
    flags = list(c.flags)
    if "--kv-cache-memory-bytes" in flags:  # the pin goes through dspark's own option
        i = flags.index("--kv-cache-memory-bytes")
        del flags[i : i + 2]
    argv = [
        dspark_exe,
        "validate",
        "--model",
        str(models / c.model),
        "--engine",
        "vllm",
        "--platform",
        "cpu",
        "--kv-cache-memory",
        c.kv_pin,
        "--engine-version",
        "0.32.0",  # the engine beside these tests (detection itself: test_engine_versions_e2e.py)
        "--json",
        "--",
        *flags,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.strip(), f"dspark validate printed nothing (exit {proc.returncode}): {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout)
    capacity = report["capacity"]
    assert isinstance(capacity, dict)
    return capacity


def predicted_figures(dspark_exe: str, models: Path, c: OracleCase) -> tuple[int, float, int]:
    """(kv_pool_tokens, max_concurrency, max_model_len) as `dspark validate --json` predicts them for the case."""
    cap = predict_via_validate(dspark_exe, models, c)
    return int(str(cap["kv_pool_tokens"])), float(str(cap["max_concurrency"])), int(str(cap["max_model_len"]))


REPORT: dict[str, dict[str, object]] = {}


@pytest.fixture(scope="module", autouse=True)
def report_file() -> Iterator[None]:
    """With ORACLE_REPORT=path, write each case's engine line (or error) beside dspark's line as JSON."""
    yield
    if path := os.environ.get("ORACLE_REPORT"):
        Path(path).write_text(json.dumps(REPORT, indent=2) + "\n")


def record(c: OracleCase, engine: OracleResult, models: Path) -> None:
    """Keep the case's two lines for ORACLE_REPORT."""
    try:
        predicted: object = predict_direct(models, c).kv_line
    except Exception as exc:
        predicted = f"{type(exc).__name__}: {exc}"
    REPORT[c.id] = {
        "flags": " ".join(c.flags),
        "env": dict(c.env),
        "engine": engine.line or engine.error,
        "dspark": predicted,
        "engine_seconds": round(engine.seconds, 1),
    }


@pytest.fixture(scope="module")
def oracle(
    run_oracle: Callable[[list[OracleCase]], dict[str, OracleResult]], tiny_models: Path
) -> dict[str, OracleResult]:
    """Every case's engine result, from as few engine processes as the refusals allow."""
    results = run_oracle([*CASES, REDETECTED])
    for c in [*CASES, REDETECTED]:
        record(c, results[c.id], tiny_models)
    return results


@pytest.mark.parametrize(
    "c",
    [
        pytest.param(c)
        for c in CASES
        if c.id not in REFUSED
    ],
    ids=lambda c: c.id,
)
def test_pool_and_concurrency_match_the_engine(
    c: OracleCase, oracle: dict[str, OracleResult], tiny_models: Path, dspark_exe: str
) -> None:
    """Pool tokens to the token and Maximum concurrency to the two printed decimals."""
    engine = oracle[c.id]
    direct = predict_direct(tiny_models, c)
    late = [r for r in direct.refusals if r.code == "cpu_kv_cache_dtype"]
    if late:  # a host without AVX-512 or AMX: 0.32 prints its KV line, then its fp8 attention refuses
        assert engine.error is not None and "requires x86 with AVX-512 or AMX" in engine.error, engine.error
    else:
        assert engine.error is None, f"the engine refused {c.id}: {engine.error}"
    assert engine.line is not None and engine.tokens is not None
    # The whole line, verbatim, from the direct prediction.
    assert direct.kv_line == engine.line
    tokens, concurrency, max_model_len = predicted_figures(dspark_exe, tiny_models, c)
    assert (tokens, f"{concurrency:.2f}", max_model_len) == (engine.tokens, engine.concurrency, engine.max_model_len)


@pytest.mark.parametrize("c", [c for c in CASES if c.id in REFUSED], ids=lambda c: c.id)
def test_refusal_matches_the_engine(c: OracleCase, oracle: dict[str, OracleResult], tiny_models: Path) -> None:
    """Where one max-length request does not fit, dspark predicts the engine's ValueError, message and all."""
    engine = oracle[c.id]
    assert engine.line is None and engine.error is not None
    pred = predict_direct(tiny_models, c)
    assert pred.kv_line is None
    (refusal,) = pred.refusals
    assert refusal.code == REFUSED[c.id]
    assert engine.error == f"ValueError: {refusal.message}"


def test_mtp_under_a_dspark_path_is_refused_like_the_engine(oracle: dict[str, OracleResult], tiny_models: Path) -> None:
    """A model path containing "dspark" turns MTP into vLLM's "dspark" method, which the CPU runner refuses."""
    engine = oracle[REDETECTED.id]
    assert engine.line is None and engine.error is not None
    pred = predict_direct(tiny_models, REDETECTED)
    (refusal,) = pred.refusals
    assert refusal.code == "speculative_method_redetected"
    assert pred.kv_line is None
    engine_text = "Model Runner V1 does not support: dspark speculative decoding"
    assert engine_text in engine.error and refusal.message.endswith(engine_text)


def test_blocks_match_the_engine(oracle: dict[str, OracleResult], tiny_models: Path) -> None:
    """num_gpu_blocks, block size and mamba mode as the engine stored them, for every started case."""
    for c in CASES:
        if c.id in REFUSED:
            continue
        figures = oracle[c.id].figures
        pred = predict_direct(tiny_models, c)
        if any(r.code == "cpu_kv_cache_dtype" for r in pred.refusals):
            # An x86 CPU without AVX-512 or AMX: fp8 attention refused after the KV line, before the engine
            # stored its settings (test_pool_and_concurrency_match_the_engine holds the line and the words).
            assert "requires x86 with AVX-512 or AMX" in (oracle[c.id].error or ""), c.id
            continue
        got = (
            pred.num_blocks,
            pred.block_size,
            pred.mamba_cache_mode or "none",
            pred.enable_prefix_caching,
            pred.max_num_seqs,
            pred.max_num_batched_tokens,
        )
        want = (
            figures["num_gpu_blocks"],
            figures["block_size"],
            figures["mamba_cache_mode"],
            figures["enable_prefix_caching"],
            figures["max_num_seqs"],
            figures["max_num_batched_tokens"],
        )
        assert got == want, c.id


SERVE_CASES = [
    # Through `python -m vllm.entrypoints.openai.api_server` itself, with tensor parallel 2 on the CPU build:
    # one core per worker, KV heads split across the two ranks (2 -> 1 a rank: half the page).
    OracleCase(
        "serve-dense-tp2",
        "dense-qwen3",
        ("--max-model-len", "1500", "--tensor-parallel-size", "2", "--kv-cache-memory-bytes", "33333333"),
        {"VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        "33333333",
    ),
]


@pytest.mark.parametrize("c", SERVE_CASES, ids=lambda c: c.id)
def test_serve_entrypoint_matches(
    c: OracleCase, serve_kv_line: Callable[[OracleCase], OracleResult], tiny_models: Path, dspark_exe: str
) -> None:
    """The api_server entrypoint prints the predicted line (TP=2 included)."""
    engine = serve_kv_line(c)
    record(c, engine, tiny_models)
    assert engine.error is None, engine.error
    tokens, concurrency, max_model_len = predicted_figures(dspark_exe, tiny_models, c)
    assert (tokens, f"{concurrency:.2f}", max_model_len) == (engine.tokens, engine.concurrency, engine.max_model_len)
    assert predict_direct(tiny_models, c).kv_line == engine.line
