"""Verdicts the numbers back: the default seats are the safe seats, findings that do not contradict, DP counted."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import RefusedError
from dspark.hardware.nvml import NvmlUnavailable
from dspark.hardware.select import resolve_hardware
from dspark.planning.validate import ValidateRequest, ValidationReport, validate

QWEN3 = str(Path(__file__).resolve().parents[1] / "fixtures" / "model-qwen3-32b")


class _NoNvml:
    def snapshot(self) -> Any:
        raise NvmlUnavailable("no NVML in this test")


def _resolver(spec: str | None, default_profile: str, origin: str = "--hardware") -> Any:
    return resolve_hardware(spec, default_profile=default_profile, nvml_factory=_NoNvml, origin=origin)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    yield


def _validate(recipe: str | None = None, flags: dict[str, object] | None = None, engine_flags: tuple[str, ...] = (),
              env: dict[str, str] | None = None, **kw: Any) -> ValidationReport:
    request = ValidateRequest(flags=flags or {}, recipe=recipe, engine_flags=engine_flags, env=env or {}, **kw)
    return validate(request, hardware_resolver=_resolver)


def _codes(report: ValidationReport) -> list[str]:
    return [f.code for f in report.findings]


def test_default_recipe_defaults_to_the_six_seats_its_pin_holds() -> None:
    report = _validate()
    assert report.capacity.safe_max_num_seqs == 6  # 6.52 observed contexts under the 28 GB pin
    assert report.settings.max_num_seqs.value == 6
    assert report.settings.max_num_seqs.layer in ("default", "computed")
    assert "MAX_NUM_SEQS not set, using default: 6" in report.settings.notices()


def test_default_seats_follow_the_pool_not_a_constant() -> None:
    # Pin the pool to hold 2.5 full windows of a real model: the default must be 2 seats, not the old fallback 6.
    window = 32_768
    probe = _validate(flags={"model": QWEN3, "engine": "vllm", "hardware": "h200", "max_model_len": window,
                             "kv_cache_memory_bytes": "8GiB"})
    pin = math.ceil(probe.capacity.kv_bytes_per_token * window * 2.5)
    report = _validate(flags={"model": QWEN3, "engine": "vllm", "hardware": "h200", "max_model_len": window,
                              "kv_cache_memory_bytes": str(pin)})
    assert 2 <= report.capacity.max_concurrency < 3
    assert report.settings.max_num_seqs.value == report.capacity.max_num_seqs == 2
    assert "MAX_NUM_SEQS not set, using default: 2" in report.settings.notices()
    assert "seats-above-safe" not in _codes(report)


def test_seats_someone_set_are_kept_above_the_safe_count() -> None:
    report = _validate(env={"MAX_NUM_SEQS": "16"})
    assert report.settings.max_num_seqs.value == 16
    assert report.settings.max_num_seqs.source == "env:MAX_NUM_SEQS"
    assert "seats-above-safe" in _codes(report)
    assert not any("not set" in n for n in report.settings.notices())


def test_typical_context_seats_count_each_seats_state_blocks() -> None:
    # The figures below were worked under vLLM 0.32.0 (0.33.0 aligns the GDN blocks differently on GB10).
    report = _validate("flash-next-vllm", typical_context=20_000, prefix_cache_reserve=30_000,
                       engine_version="0.32.0")
    cap = report.capacity
    tokens_only = (cap.kv_pool_tokens - 30_000) // 20_000
    assert tokens_only == 99  # what token arithmetic alone says
    assert cap.typical_context_seats == 67  # block arithmetic: every seat also holds its linear-state blocks
    assert cap.typical_context_seats is not None and cap.typical_context_seats < tokens_only


def test_average_context_is_never_above_the_window() -> None:
    report = _validate()
    assert report.capacity.kv_pool_tokens // report.capacity.max_num_seqs > report.capacity.max_model_len
    assert report.capacity.avg_context_at_max_num_seqs == report.capacity.max_model_len


def test_cpu_build_says_graphs_do_not_apply() -> None:
    report = _validate(flags={"model": QWEN3, "engine": "vllm", "platform": "cpu", "kv_cache_memory_bytes": "1GiB",
                              "max_model_len": 4096})
    graph = next(f for f in report.findings if f.code == "cudagraph-capture")
    assert report.capacity.cudagraph_max_capture_size == 0
    assert "do not apply on the CPU build" in graph.message
    assert "batch 0" not in graph.message


def test_weights_that_overflow_the_gpu_name_the_tp_that_fits_and_nothing_contradicts() -> None:
    report = _validate("deepseek-v4-flash-vllm", flags={"hardware": "rtx5090", "tensor_parallel_size": 1,
                                                        "nnodes": 1})
    fails = [f for f in report.findings if f.code == "weights-do-not-fit"]
    assert len(fails) == 1  # one judgement of the weights, not one per checker
    assert "--tp 8 would put about" in fails[0].message and "short" in fails[0].message
    assert report.verdict == "fail"
    assert "fits" not in _codes(report)
    assert not any("Try increasing" in f.message for f in report.findings)  # advice that cannot help is dropped


def test_weights_that_overflow_the_gpu_on_sglang_name_the_tp_that_holds_them() -> None:
    report = _validate("flash-next-sglang", flags={"hardware": "rtx5090", "tensor_parallel_size": 1, "nnodes": 1})
    fails = [f for f in report.findings if f.code == "weights-do-not-fit"]
    assert len(fails) == 1 and "would hold them" in fails[0].message
    assert report.verdict == "fail"


def test_under_a_pin_the_advice_does_not_say_shorten_the_window() -> None:
    report = _validate(flags={"hardware": "h100-80gb", "nnodes": 1, "tensor_parallel_size": 1,
                              "kv_cache_memory_bytes": "40GB"})
    short = next(f for f in report.findings if f.code == "does-not-fit")
    assert "lower the KV pin" in short.message
    assert "max_model_len" not in short.message
    assert "fits" not in _codes(report)


def test_data_parallel_takes_gpus_and_says_the_figures_are_per_replica() -> None:
    with pytest.raises(RefusedError, match=r"needs 2 GPU\(s\) per node .*DP 2"):
        _validate(flags={"model": QWEN3, "engine": "vllm", "hardware": "h200"},
                  engine_flags=("--data-parallel-size", "2"))
    report = _validate(flags={"model": QWEN3, "engine": "vllm", "hardware": "h200:2"},
                       engine_flags=("--data-parallel-size", "2"))
    assert sum(f.code == "fits" for f in report.findings) == 2  # both GPUs checked
    dp = next(f for f in report.findings if f.code == "data-parallel")
    assert f"{2 * report.capacity.max_num_seqs} requests at once" in dp.message
    sglang = _validate(flags={"model": QWEN3, "engine": "sglang", "hardware": "h200"},
                       engine_flags=("--dp-size", "2", "--enable-dp-attention"))
    assert "split between them" in next(f for f in sglang.findings if f.code == "data-parallel").message


def test_engine_flags_dspark_cannot_place_are_named() -> None:
    report = _validate(engine_flags=("--max-num-seq", "12", "--bogus-flag", "3"))
    finding = next(f for f in report.findings if f.code == "argv-not-checked")
    assert finding.level == "warn"
    assert "--max-num-seq (did you mean --max-num-seqs?)" in finding.message
    assert "--bogus-flag" in finding.message
    assert report.verdict != "ok"
