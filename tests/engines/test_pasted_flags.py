"""dspark's own flags and the engine flags after `--` together: each read in its own grammar, then compared."""

from __future__ import annotations

import pytest

from dspark.config.knobs import reads_as
from dspark.core.errors import SettingsError
from dspark.engines import engine_spec
from dspark.engines.pasted_flags import flag_values_from_engine_flags, merge_flags, parse_engine_flags


def _pasted(engine: str, *argv: str) -> dict[str, object]:
    spec = engine_spec(engine)
    return flag_values_from_engine_flags(spec, parse_engine_flags(spec, argv))


@pytest.mark.parametrize(
    ("engine", "own", "argv"),
    [
        ("vllm", {"max_num_seqs": "4"}, ("--max-num-seqs", "4")),
        ("vllm", {"max_model_len": "256K"}, ("--max-model-len", "262144")),
        ("vllm", {"kv_cache_memory_bytes": "28GiB"}, ("--kv-cache-memory-bytes", "28G")),
        ("vllm", {"kv_cache_memory_bytes": "1.5g"}, ("--kv-cache-memory-bytes", "1500000000")),
        ("sglang", {"max_model_len": "1M"}, ("--context-length", "1Mi")),  # SGLang's 1M is 10**6, its 1Mi dspark's 1M
        ("sglang", {"max_num_seqs": 8}, ("--max-running-requests", "8")),
    ],
)
def test_the_same_setting_given_both_ways_agrees(engine: str, own: dict[str, object], argv: tuple[str, ...]) -> None:
    merged = merge_flags(own, _pasted(engine, *argv), same=reads_as)
    (knob,) = own
    assert merged[knob] == _pasted(engine, *argv)[knob]


@pytest.mark.parametrize(
    ("engine", "own", "argv", "message"),
    [
        ("vllm", {"max_num_seqs": "4"}, ("--max-num-seqs", "5"), "max_num_seqs is given twice on the command line"),
        ("sglang", {"max_model_len": "1M"}, ("--context-length", "1M"), "'1M' (dspark flag) and 1000000 (engine flag)"),
        ("vllm", {"max_num_seqs": "four"}, ("--max-num-seqs", "4"), "'four' (dspark flag) and 4 (engine flag)"),
    ],
)
def test_a_setting_given_differently_is_refused(engine: str, own: dict[str, object], argv: tuple[str, ...],
                                               message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        merge_flags(own, _pasted(engine, *argv), same=reads_as)
