"""Judging the engine planner's answer beside dspark's figures (the planner itself: tests/real_engines/)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dspark.cli import main
from dspark.engines.vllm.capacity import VllmCapacity, compute_vllm_capacity
from dspark.engines.vllm.options import parse_vllm_serve_flags
from dspark.engines.vllm.witness_input import vllm_witness_request
from dspark.engines.witness import judge, with_engine_figures, witness_finding, witness_request
from dspark.model.architecture import AttentionLayer, ModelArchitecture

DENSE = ModelArchitecture(
    model_type="qwen3",
    architecture="Qwen3ForCausalLM",
    dtype="bfloat16",
    hidden_size=64,
    vocab_size=512,
    max_position_embeddings=4096,
    layers=(AttentionLayer(2, 32),) * 4,
    source="/models/tiny",
)


def capacity(extra: tuple[str, ...] = ()) -> VllmCapacity:
    return compute_vllm_capacity(
        DENSE,
        parse_vllm_serve_flags(["--max-model-len", "2048", "--kv-cache-memory-bytes", "1073741824", *extra]),
        platform="cpu",
        device_total_bytes=None,
        device_free_bytes=None,
        compute_capability=None,
        weights_per_gpu_bytes=None,
        engine_version="0.33.0",
    )


def test_the_request_carries_the_specs_per_pipeline_stage_and_the_budget() -> None:
    cap = capacity(("-pp", "2"))
    request = vllm_witness_request(cap)
    workers = request["workers"]
    assert isinstance(workers, list) and [len(stage) for stage in workers] == [2, 2]
    layer = workers[0][0]
    assert layer["class"] == "FullAttentionSpec" and layer["block_size"] == 128
    assert layer["kwargs"]["num_kv_heads"] == 2 and layer["kwargs"]["dtype"] == "bfloat16"
    assert request["budget_bytes"] == 1 << 30 and request["max_model_len"] == 2048


def test_agreement_is_to_the_token_and_the_printed_decimals() -> None:
    summary = capacity().summary()
    same = {
        "ok": True,
        "engine_version": "0.33.0",
        "kv_pool_tokens": summary.kv_pool_tokens,
        "max_concurrency": summary.max_concurrency + 1e-4,
        "max_model_len": summary.max_model_len,
    }
    assert judge(same, summary).agrees
    assert witness_finding(judge(same, summary), summary).code == "witness-agrees"
    fewer = {**same, "kv_pool_tokens": summary.kv_pool_tokens - 1}
    verdict = judge(fewer, summary)
    assert not verdict.agrees
    finding = witness_finding(verdict, summary)
    assert finding.code == "witness-disagrees" and f"{summary.kv_pool_tokens - 1:,}" in finding.message
    assert f"{summary.kv_pool_tokens:,}" in finding.message


def test_launching_on_the_engine_figure_lowers_the_safe_seats() -> None:
    summary = replace(capacity().summary(), max_num_seqs=8)
    verdict = judge({"ok": True, "kv_pool_tokens": 4096, "max_concurrency": 2.0, "max_model_len": 2048}, summary)
    launched = with_engine_figures(summary, verdict)
    assert (launched.kv_pool_tokens, launched.safe_max_num_seqs, launched.avg_context_at_max_num_seqs) == (4096, 2, 512)


def test_an_engine_error_is_said_not_judged() -> None:
    summary = capacity().summary()
    verdict = judge({"ok": False, "error": "ValueError: no memory"}, summary)
    assert not verdict.agrees and witness_finding(verdict, summary).code == "witness-failed"


def test_a_request_is_built_or_the_reason_there_is_none_is_said(tmp_path: Path) -> None:
    assert witness_request("vllm", capacity()).request is not None
    nothing = witness_request("vllm", None)
    assert nothing.request is None and "no vllm plan" in nothing.unavailable
    # The detail is not read before the model directory is found missing: any computed capacity will do.
    inline = witness_request("sglang", capacity(), ["--model-path", str(tmp_path / "absent")])
    assert inline.request is None
    assert "config.json" in inline.unavailable and str(tmp_path / "absent") in inline.unavailable
    assert "--model" in inline.unavailable  # the fix is named
    assert witness_request("llamacpp", capacity()).unavailable == "no witness for engine llamacpp"


def test_engine_check_on_an_inline_config_recipe_says_why_sglang_cannot_be_witnessed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # flash-next-sglang carries its config inline: there is no directory for SGLang's sizing to read. The hardware
    # is named, not read from this host's NVML, so the verdict (warn: the seats above the observed pool) is fixed.
    rc = main(["validate", "flash-next-sglang", "--engine-check", "--hardware", "gb10x2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert (rc, report["verdict"]) == (0, "warn")
    failed = [f for f in report["findings"] if f["code"] == "witness-failed"]
    assert len(failed) == 1
    assert "config.json" in failed[0]["message"] and "point --model at a local copy" in failed[0]["message"]
    assert "version unknown" not in failed[0]["message"]


MODEL = Path(__file__).resolve().parents[1] / "fixtures" / "model-qwen3-32b"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("named", [True, False])
def test_engine_check_without_the_engine_is_one_rule_exit_2(
    engine: str, named: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interpreter named with --engine-python that lacks the engine is the same bad input as no engine at all."""
    import sys  # noqa: PLC0415

    from dspark.engines import interpreter  # noqa: PLC0415

    for name in ("DSPARK_ENGINE_PYTHON", "DSPARK_ENGINE_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(interpreter, "find_spec", lambda name: None)  # neither engine in this interpreter
    monkeypatch.setattr("shutil.which", lambda name: None)  # nor on PATH
    extra = ["--engine-python", sys.executable] if named else []
    rc = main(["validate", "--model", str(MODEL), "--engine", engine, "--hardware", "h200", "--engine-check",
               "--json", *extra])
    captured = capsys.readouterr()
    assert rc == 2, captured.out[-800:]
    error = json.loads(captured.out)["error"]
    assert error["code"] == "engine_not_installed_error"
    assert engine in error["message"]
    if named:
        assert sys.executable in error["message"]
