"""vLLM's flags that leave a multimodal model's vision tower unloaded (SupportsMultiModal._mark_tower_model)."""

from __future__ import annotations

import pytest

from dspark.core.errors import SettingsError
from dspark.engines.vllm.options import loads_vision_tower, parse_vllm_serve_flags


@pytest.mark.parametrize(("argv", "loads"), [
    ([], True),
    (["--language-model-only"], False),
    (["--no-language-model-only"], True),
    (["--limit-mm-per-prompt", '{"image": 0, "video": 0}'], False),
    (["--limit-mm-per-prompt", '{"image": {"count": 0}, "video": 0}'], False),
    (["--limit-mm-per-prompt", '{"image": 0}'], True),  # video unlisted: 999, the tower stays
    (["--limit-mm-per-prompt", '{"image": 2, "video": 0}'], True),
])
def test_which_flags_drop_the_tower(argv: list[str], loads: bool) -> None:
    assert loads_vision_tower(parse_vllm_serve_flags(argv)) is loads


@pytest.mark.parametrize("value", ['{"image": -1}', '{"image": "0"}', "[0]", "{image: 0}"])
def test_a_bad_limit_names_the_flag(value: str) -> None:
    with pytest.raises(SettingsError, match="--limit-mm-per-prompt"):
        parse_vllm_serve_flags(["--limit-mm-per-prompt", value])
