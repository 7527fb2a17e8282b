"""The rotary tables a config implies (dspark/model/architecture/rope.py) and vLLM's bytes for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import ArchitectureError
from dspark.engines.vllm.budget import rotary_cache_bytes
from dspark.model.architecture import parse_config

CONFIGS = Path(__file__).resolve().parents[2] / "device" / "configs"


def _arch(name: str, **override: Any) -> Any:
    return parse_config({**json.loads((CONFIGS / f"{name}.json").read_text()), **override}, name)


def test_gemma3_has_a_linear_global_rope_and_a_local_one() -> None:
    tables = _arch("gemma-3-12b-text").rotary_tables
    assert [(t.rope_type, t.factor, t.theta) for t in tables] == [("linear", 8.0, 1e6), ("default", 1.0, 1e4)]
    # 131,072 x 8 rows and 131,072 rows of 256 bf16: the two cos_sin_cache buffers the engine held on the H200.
    assert rotary_cache_bytes(_arch("gemma-3-12b-text"), "bfloat16") == (131072 * 8 + 131072) * 256 * 2


def test_ropes_that_differ_only_in_their_base_are_two_tables() -> None:
    arch = _arch("gemma-3-12b-text", rope_scaling=None)
    assert len(arch.rotary_tables) == 2 and arch.rotary_tables[0].theta != arch.rotary_tables[1].theta


@pytest.mark.parametrize(("name", "rows", "dim"), [
    ("qwen3-8b", 40960, 128),  # default: max_position rows
    ("llama-3.1-8b", 131072, 128),  # llama3 keeps max_position rows
    ("deepseek-v2-lite", 4096 * 40, 64),  # DeepSeek-YaRN: original x factor, the MLA rope width
    ("qwen3.5-27b", 262144 * 4, 64),  # mrope: 4x the positions, a quarter of the 256-wide head
    # LongRoPE (Phi3LongRoPEScaledRotaryEmbedding): the short table (original_max_position_embeddings, a top-level
    # key in Phi-3/Phi-4 configs) and the long one concatenated; partial_rotary_factor 0.75 of the 128-wide head.
    ("phi-4-mini-instruct", 4096 + 131072, 96),
])
def test_rows_and_width_per_rope_type(name: str, rows: int, dim: int) -> None:
    assert rotary_cache_bytes(_arch(name), "bfloat16") == rows * dim * 2


@pytest.mark.parametrize("factor", [0, -2, "8", True, 1e9])
def test_a_bad_scaling_factor_names_the_file_and_key(factor: Any) -> None:
    with pytest.raises(ArchitectureError, match=r"gemma-3-12b-text.*factor"):
        _arch("gemma-3-12b-text", rope_scaling={"rope_type": "linear", "factor": factor})


def test_longrope_reads_the_original_length_beside_rope_scaling_or_inside_it() -> None:
    base = json.loads((CONFIGS / "phi-4-mini-instruct.json").read_text())
    scaling = {**base["rope_scaling"], "original_max_position_embeddings": 8192}
    inside = _arch("phi-4-mini-instruct", rope_scaling=scaling)  # inside wins (what get_rope reads)
    old_spelling = _arch("phi-4-mini-instruct", rope_scaling={**base["rope_scaling"], "type": "su"})
    assert [(t.rope_type, t.original_max_position) for t in (*inside.rotary_tables, *old_spelling.rotary_tables)] == [
        ("longrope", 8192), ("longrope", 4096)]
    # Without the original length (not a loadable Phi-3 config for vLLM): the long table alone.
    bare = {k: v for k, v in base.items() if k != "original_max_position_embeddings"}
    assert rotary_cache_bytes(parse_config(bare), "bfloat16") == 131072 * 96 * 2
