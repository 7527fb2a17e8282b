"""vllm bench serve's workload options: --range-ratio lengths, ShareGPT and JSONL datasets (dspark.bench.datasets)."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest

from dspark.bench import datasets
from dspark.bench.datasets import (
    MAX_PROMPT_LEN,
    MAX_TOTAL_LEN,
    MIN_LEN,
    is_valid_sequence,
    length_intervals,
    read_dataset,
    sample_lengths,
    sharegpt_requests,
)
from dspark.bench.load import LoadOptions, bench_spec
from dspark.core.errors import InputError

URL = "http://127.0.0.1:9"


def _vllm_interval(length: int, ratio: float, floor_one: bool) -> tuple[int, int]:
    """vLLM's get_sampling_params, written out again: floor below, ceil above (output at least 1)."""
    lo, hi = math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))
    return (max(lo, 1), max(hi, 1)) if floor_one else (lo, hi)


@pytest.mark.parametrize("seed", range(40))
def test_intervals_round_as_vllm_does(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible cases
    length, out, ratio = rng.randint(2, 5000), rng.randint(1, 3000), rng.choice([0.0, 0.1, 0.25, 0.5, 0.99,
                                                                                   rng.random() * 0.95])
    if math.floor(length * (1 - ratio)) < 1:
        with pytest.raises(InputError, match="range-ratio"):
            length_intervals(length, out, ratio)
        return
    (ilo, ihi), (olo, ohi) = length_intervals(length, out, ratio)
    assert (ilo, ihi) == _vllm_interval(length, ratio, floor_one=False)
    assert (olo, ohi) == _vllm_interval(out, ratio, floor_one=True)
    assert ilo <= length <= ihi and olo <= out <= ohi


@pytest.mark.parametrize("ratio", [-0.1, 1.0, 1.5, math.nan, math.inf])
def test_a_ratio_outside_0_1_is_refused(ratio: float) -> None:
    with pytest.raises(InputError, match=r"\[0, 1\)"):
        length_intervals(100, 10, ratio)


@pytest.mark.parametrize("use_numpy", [True, False])
def test_lengths_stay_in_bounds_cover_them_and_repeat_by_seed(use_numpy: bool) -> None:
    lengths = sample_lengths(4000, 100, 20, 0.5, seed=3, use_numpy=use_numpy)
    assert (min(lengths.input), max(lengths.input)) == (50, 150)  # 4,000 draws reach both ends
    assert (min(lengths.output), max(lengths.output)) == (10, 30)
    assert sum(lengths.input) / 4000 == pytest.approx(100, rel=0.02)
    assert sample_lengths(4000, 100, 20, 0.5, seed=3, use_numpy=use_numpy) == lengths
    assert sample_lengths(4000, 100, 20, 0.5, seed=4, use_numpy=use_numpy) != lengths


def test_numpy_draws_are_vllms() -> None:
    import numpy as np  # noqa: PLC0415 - matplotlib ([plot]) brings it; the draws are vLLM's only with it

    gen = np.random.default_rng(11)
    ins, outs = gen.integers(75, 125 + 1, size=30), gen.integers(24, 40 + 1, size=30)
    got = sample_lengths(30, 100, 32, 0.25, seed=11, use_numpy=True)
    assert got.input == tuple(int(v) for v in ins)
    assert got.output == tuple(int(v) for v in outs)
    assert "vLLM" in got.rng


def test_range_ratio_lengths_reach_the_requests() -> None:
    spec = bench_spec(LoadOptions(requests=20, input_len=40, output_len=10, range_ratio=0.5, seed=5), URL)
    prompts = spec.prompts_for_rep(0)
    lengths = sample_lengths(20, 40, 10, 0.5, seed=5)
    assert [len(p) for p in prompts] == list(lengths.input)
    assert spec.client.max_tokens_each == lengths.output
    assert [len(p) for p in spec.prompts_for_rep(1)] == list(lengths.input)  # same lengths, other tokens
    assert spec.prompts_for_rep(1) != prompts
    assert spec.metadata["range_ratio"] == 0.5 and spec.metadata["input_lengths"]["min"] >= 20


def _words(n: int) -> str:
    return " ".join(["w"] * n)


def _count(text: str) -> int:
    return len(text.split())


def _conv(prompt: int, reply: int, tag: str = "") -> dict[str, object]:
    return {"conversations": [{"from": "human", "value": tag + _words(prompt)},
                              {"from": "gpt", "value": _words(reply)}]}


def test_sharegpt_filters_shuffles_and_oversamples_as_vllm() -> None:
    data = [_conv(10, 20, "a "), _conv(2, 20), _conv(10, 2), _conv(1100, 5), _conv(1000, 1049),
            {"conversations": [{"from": "human", "value": "one turn"}]}, {"id": "no conversations"},
            _conv(30, 40, "b ")]
    out, skipped = sharegpt_requests(data, "f", count=5, seed=0, output_len=None, tokenize=_count)
    assert skipped == 4  # prompt too short, output too short, prompt too long, both too long
    kept = {r.prompt.split()[0] for r in out[:2]}  # type: ignore[union-attr]
    assert kept == {"a", "b"}
    assert len(out) == 5 and all(r in out[:2] for r in out[2:])  # topped up from the usable ones
    assert {r.max_tokens for r in out[:2]} == {20, 40}  # the reply's length
    # The order: vLLM's random.seed(seed); random.shuffle(entries with two turns or more).
    two_turns = [i for i, e in enumerate(data) if len(e.get("conversations", [])) >= 2]  # type: ignore[attr-defined]
    random.seed(0)
    random.shuffle(two_turns)
    firsts = [i for i in two_turns if i in (0, 7)]
    assert [r.prompt.split()[0] for r in out[:2]] == ["a" if i == 0 else "b" for i in firsts]  # type: ignore[union-attr]


def test_sharegpt_output_len_overrides_and_skips_the_short_reply_check() -> None:
    out, skipped = sharegpt_requests([_conv(10, 1)], "f", count=1, seed=0, output_len=7, tokenize=_count)
    assert (skipped, out[0].max_tokens) == (0, 7)


def test_sharegpt_without_a_tokenizer_sends_everything() -> None:
    out, skipped = sharegpt_requests([_conv(1, 1), _conv(5000, 1)], "f", count=2, seed=0, output_len=None,
                                     tokenize=None)
    assert skipped == 0 and [r.max_tokens for r in out] == [None, None]


def test_the_length_bounds_are_vllms() -> None:
    assert (MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN) == (4, 1024, 2048)
    assert is_valid_sequence(4, 4) and not is_valid_sequence(3, 4) and not is_valid_sequence(4, 3)
    assert is_valid_sequence(4, 3, skip_min_output=True)
    assert is_valid_sequence(1024, 1024) and not is_valid_sequence(1025, 10) and not is_valid_sequence(1024, 1025)


BAD_SHAREGPT = [
    ({"conversations": []}, "JSON list of conversations"),
    ([1, 2], "entry 0 is a JSON int"),
    (["text"], "not a conversation object"),
    ([{"conversations": {"from": "human"}}], "'conversations' is an object"),
    ([{"conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "x"}]}], "string 'value'"),
    ([{"conversations": ["a", "b"]}], "string 'value'"),
    ([{"conversations": [{"value": "a"}, None]}], "string 'value'"),
    ([], "no usable conversation"),
    ([{"conversations": [{"value": "a b"}, {"value": "c"}]}], "no usable conversation"),
]


@pytest.mark.parametrize(("data", "message"), BAD_SHAREGPT)
def test_bad_sharegpt_shapes_are_input_errors(tmp_path: Path, data: object, message: str) -> None:
    f = tmp_path / "d.json"
    f.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        read_dataset(f, count=3, seed=0, output_len=None, tokenize=_count)


def _random_json(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice([None, True, 3, -1.5, "x"])
    if kind == 1:
        return "".join(rng.choice("ab \u00e9\n\"") for _ in range(rng.randrange(5)))
    if kind == 2:
        return rng.randrange(-10, 10)
    if kind == 3:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 4:
        return {rng.choice(["conversations", "value", "from", "x"]): _random_json(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    return [{"conversations": [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]}]


@pytest.mark.parametrize("seed", range(60))
def test_generated_json_is_read_or_refused_never_a_crash(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible cases
    f = tmp_path / "d.json"
    value = [_random_json(rng) for _ in range(rng.randrange(1, 5))]
    f.write_text(json.dumps(value))
    try:
        got = read_dataset(f, count=2, seed=seed, output_len=None, tokenize=_count)
    except InputError as exc:
        assert str(f) in str(exc)
    else:
        assert len(got.requests) == 2 and all(isinstance(r.prompt, str) for r in got.requests)


def test_deep_huge_special_and_binary_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested deeper"):
        read_dataset(deep, count=1, seed=0, output_len=None, tokenize=None)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"[\xff\xfe]")
    with pytest.raises(InputError, match="not UTF-8"):
        read_dataset(binary, count=1, seed=0, output_len=None, tokenize=None)
    with pytest.raises(InputError, match="is a directory"):
        read_dataset(tmp_path, count=1, seed=0, output_len=None, tokenize=None)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_dataset(fifo, count=1, seed=0, output_len=None, tokenize=None)  # returns at once: no writer needed
    with pytest.raises(InputError, match="not found"):
        read_dataset(tmp_path / "absent.json", count=1, seed=0, output_len=None, tokenize=None)
    big = tmp_path / "big.json"
    big.write_text("[" + " " * 2000 + "]")
    monkeypatch.setattr(datasets, "DATASET", datasets.DATASET._replace(limit_bytes=1000))
    with pytest.raises(InputError, match="more than a dataset file may be"):
        read_dataset(big, count=1, seed=0, output_len=None, tokenize=None)
    text = tmp_path / "text.txt"
    text.write_text("hello")
    with pytest.raises(InputError, match="neither a ShareGPT JSON list nor JSONL"):
        read_dataset(text, count=1, seed=0, output_len=None, tokenize=None)


def test_jsonl_dataset_prompts_messages_and_max_tokens(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "hi there", "max_tokens": 5}\n\n{"messages": [{"role": "user", "content": "yo"}]}\n')
    got = read_dataset(f, count=3, seed=0, output_len=9, tokenize=None)
    assert [r.max_tokens for r in got.requests] == [5, 9, 5]
    assert got.requests[1].prompt == [{"role": "user", "content": "yo"}]
    f.write_text('{"prompt": "a"}\n{"prompt": 3}\n')
    with pytest.raises(InputError, match=r"d.jsonl:2"):
        read_dataset(f, count=1, seed=0, output_len=None, tokenize=None)


def test_dataset_options_conflict_and_tokenizer_errors(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "a"}\n')
    with pytest.raises(InputError, match="both name the requests"):
        bench_spec(LoadOptions(prompts_file=f, dataset=f), URL)
    with pytest.raises(InputError, match="does not apply"):
        bench_spec(LoadOptions(dataset=f, range_ratio=0.2), URL)
    with pytest.raises(InputError, match=r"no tokenizer\.json"):
        bench_spec(LoadOptions(dataset=f, tokenizer=tmp_path), URL)
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="not a tokenizer file"):
        bench_spec(LoadOptions(dataset=f, tokenizer=tmp_path), URL)


def test_a_word_level_tokenizer_counts_and_filters(tmp_path: Path) -> None:
    import tokenizers  # noqa: PLC0415 - the [tokenizer] extra
    vocab = {f"t{i}": i for i in range(50)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="t0"))  # noqa: S106
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    data = tmp_path / "d.json"
    data.write_text(json.dumps([{"conversations": [{"value": "t1 t2 t3 t4 t5"}, {"value": "t1 t2 t3 t4 t5 t6"}]},
                                {"conversations": [{"value": "t1 t2"}, {"value": "t3 t4 t5 t6"}]}]))
    spec = bench_spec(LoadOptions(dataset=data, tokenizer=tmp_path, requests=2, max_tokens=99), URL)
    assert spec.prompts_for_rep(0) == ["t1 t2 t3 t4 t5"] * 2
    assert spec.client.max_tokens_each == (6, 6)
    assert "1 skipped by length" in spec.prompt_source and "tokenizer" in spec.prompt_source
