"""Tensor-parallel sizes the engines refuse at start for a model's heads: a `fail` finding, never `ok` (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dspark.cli import main
from dspark.engines.parallelism import nearest_valid, parallel_finding
from dspark.engines.sglang.parallel import tp_problems as sglang_problems
from dspark.engines.vllm.parallel import tp_problems as vllm_problems
from dspark.model.architecture import parse_config

# Qwen3-8B's shape: 32 query heads, 8 KV heads.
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960,
            "torch_dtype": "bfloat16"}
RULES = {"vllm": vllm_problems, "sglang": sglang_problems}


def _engine_starts(heads: int, kv: int, tp: int) -> bool:
    """Both engines' rule in one line, written from their source (vLLM ModelConfig.verify_with_parallel_config and
    QKVParallelLinear; SGLang's attention layers): heads split evenly, KV heads split or replicated evenly."""
    return heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0)


@pytest.mark.parametrize("engine", sorted(RULES))
@pytest.mark.parametrize(("heads", "kv"), [(32, 8), (64, 8), (40, 8), (28, 4), (16, 16), (48, 8), (96, 12), (8, 1)])
def test_the_rules_match_the_engines_for_every_tp_up_to_64(engine: str, heads: int, kv: int) -> None:
    arch = parse_config({**QWEN3_8B, "num_attention_heads": heads, "num_key_value_heads": kv,
                         "hidden_size": heads * 128}, "test")
    for tp in range(1, 65):
        assert (not RULES[engine](arch, tp)) == _engine_starts(heads, kv, tp), (engine, heads, kv, tp)


def test_the_finding_quotes_vllm_and_names_the_nearest_sizes() -> None:
    arch = parse_config(QWEN3_8B, "test")
    finding = parallel_finding("vLLM", 3, lambda size: vllm_problems(arch, size))
    assert finding is not None and finding.level == "fail" and finding.code == "tp-does-not-divide"
    assert "Total number of attention heads (32) must be divisible by tensor parallel size (3)." in finding.message
    assert finding.message.endswith("--tp 2 or --tp 4 would pass this check")
    assert parallel_finding("vLLM", 4, lambda size: vllm_problems(arch, size)) is None


def test_kv_heads_replicated_unevenly_are_refused_although_the_heads_divide() -> None:
    arch = parse_config({**QWEN3_8B, "num_attention_heads": 48, "num_key_value_heads": 8, "hidden_size": 6144}, "t")
    assert vllm_problems(arch, 6) == ['"8 is not divisible by 6" (vLLM QKVParallelLinear: 8 KV heads are split '
                                      "across 6 ranks)"]
    assert nearest_valid(6, lambda size: vllm_problems(arch, size)) == (4, 8)
    assert vllm_problems(arch, 16) == []  # 16 ranks hold 8 KV heads twice each


@pytest.mark.parametrize("argv", [
    ("--engine", "vllm", "--hardware", "h200:4", "--tp", "3"),
    ("--engine", "sglang", "--hardware", "h200:4", "--tp", "3"),
    ("--engine", "vllm", "--platform", "cpu", "--tp", "3"),
    ("--engine", "vllm", "--hardware", "h200:8", "--tp", "6"),
])
def test_validate_fails_a_tp_the_engine_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                argv: tuple[str, ...]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    assert main(["validate", "--model", str(tmp_path), *argv, "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] == "fail"
    assert "tp-does-not-divide" in [f["code"] for f in document["findings"]]


def test_validate_plans_a_tp_that_divides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B))
    assert main(["validate", "--model", str(tmp_path), "--engine", "vllm", "--hardware", "h200:4", "--tp", "4",
                 "--json"]) == 0
    assert "tp-does-not-divide" not in capsys.readouterr().out
