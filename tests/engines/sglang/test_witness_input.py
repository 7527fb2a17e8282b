"""The SGLang witness's request: the launch flags as dspark's reader reads them, dspark's own pool pin left out."""

from __future__ import annotations

import pytest

from dspark.engines.sglang.capacity import compute_sglang_capacity
from dspark.engines.sglang.options import parse_sglang_flags
from dspark.engines.sglang.sizing_types import SglangCapacity
from dspark.engines.sglang.witness_input import WitnessNotPossibleError, sglang_witness_request
from dspark.model.architecture import AttentionLayer, ModelArchitecture

GIB = 1 << 30
QWEN3 = ModelArchitecture(
    model_type="qwen3", architecture="Qwen3ForCausalLM", dtype="bfloat16", hidden_size=256, vocab_size=1024,
    max_position_embeddings=4096, layers=(AttentionLayer(num_kv_heads=2, head_dim=64),) * 4,
)


def _capacity() -> SglangCapacity:
    return compute_sglang_capacity(QWEN3, parse_sglang_flags([]), gpu_capacity_bytes=143_771 << 20,
                                   free_before_load_bytes=150_109_880_320, weights_per_gpu_bytes=20 * GIB)


@pytest.mark.parametrize(
    ("argv", "user_pinned", "expected"),
    [
        (["--model-path", "/m", "--max-total-tokens", "1000", "--tp-size", "2"], False,
         ["--model-path", "/m", "--tp-size", "2"]),
        (["--model-path", "/m", "--max-total-tokens=1000"], False, ["--model-path", "/m"]),
        (["--model-path", "/m", "--max-total-tokens", "1000"], True, ["--model-path", "/m", "--max-total-tokens",
                                                                       "1000"]),
        (["--model=/m", "--page-size", "64"], False, ["--model=/m", "--page-size", "64"]),
    ],
)
def test_the_request_carries_the_flags_less_dsparks_own_pin(argv: list[str], user_pinned: bool,
                                                           expected: list[str]) -> None:
    request = sglang_witness_request(_capacity(), argv, user_pinned=user_pinned)
    assert request["argv"] == expected
    assert request["free_before"] == 150_109_880_320


@pytest.mark.parametrize("argv", [["--tp-size", "2"], ["--served-model-name", "model-path"]])
def test_no_model_directory_no_request(argv: list[str]) -> None:
    with pytest.raises(WitnessNotPossibleError, match=r"reads the model directory's config\.json"):
        sglang_witness_request(_capacity(), argv, user_pinned=False)
