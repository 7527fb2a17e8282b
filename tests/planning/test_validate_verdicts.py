"""Verdicts the numbers back: the default seats are the safe seats, findings that do not contradict, DP counted."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import RefusedError, SettingsError
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


def test_sglang_typical_context_seats_stop_at_its_state_slots() -> None:
    # qwen27b-dflash-sglang on the GB10 pair: SGLang 0.5.23 sizes 110 state slots at 5 per running request, so it
    # runs at most 110 // 5 = 22 requests (the recipe's logged cap), however short they are.
    short = _validate("qwen27b-dflash-sglang", typical_context=2_000)
    pool = short.capacity.kv_pool_tokens
    assert pool // 2_000 > 22  # token arithmetic alone would seat hundreds of 2,000-token requests
    assert short.capacity.typical_context_seats == 22
    finding = next(f for f in short.findings if f.code == "typical-context-seats")
    assert "seats 22 at once" in finding.message
    long = _validate("qwen27b-dflash-sglang", typical_context=100_000)  # below the cap: the pool decides
    assert long.capacity.typical_context_seats == pool // 100_000 < 22


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


def test_weights_that_overflow_the_gpu_name_the_tp_that_fits_and_nothing_contradicts(
    unpinned_recipe: Callable[[str], str],
) -> None:
    report = _validate(unpinned_recipe("deepseek-v4-flash-vllm"),
                       flags={"hardware": "rtx5090", "tensor_parallel_size": 1, "nnodes": 1})
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


def test_an_engine_flag_the_engine_does_not_have_is_refused_with_a_guess() -> None:
    # issue 26 item 20: the engine's parser refuses it at start, so validate does too (it was a warning).
    with pytest.raises(SettingsError, match=r"has no flag --bogus-flag, --max-num-seqz: it would refuse") as err:
        _validate(engine_flags=("--max-num-seqs", "12", "--bogus-flag", "3", "--max-num-seqz", "4"))
    assert "did you mean --max-num-seqs for --max-num-seqz?" in (err.value.hint or "")


def test_an_abbreviated_engine_flag_is_read_as_the_engine_reads_it() -> None:
    # issue 26 item 9: --max-num-seq is vLLM's --max-num-seqs (argparse's allow_abbrev): 12 seats are planned.
    report = _validate(engine_flags=("--max-num-seq", "12"))
    assert report.settings.max_num_seqs.value == 12
    assert "engine-flag-abbreviated" in _codes(report)
    assert report.serve.extra_args[-2:] == ("--max-num-seqs", "12")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_engine_python_that_does_not_exist_is_said(how: str, tmp_path: Path) -> None:
    """issue 26 item 20: validate ignored --engine-python /no/such/python (start warns, a real start refuses)."""
    missing = str(tmp_path / "no" / "such" / "python")
    kw: dict[str, Any] = {"engine_python": missing} if how == "flag" else {"env": {"DSPARK_ENGINE_PYTHON": missing}}
    report = _validate(**kw)
    finding = next(f for f in report.findings if f.code == "engine-python-not-found")
    assert finding.level == "warn" and missing in finding.message and "`dspark start` would refuse" in finding.message
    assert "engine-python-not-found" not in _codes(_validate())


def test_without_a_table_of_the_release_s_flags_unknown_ones_are_said_not_refused() -> None:
    report = _validate(engine_flags=("--bogus-flag", "3"), engine_version="0.25.0")
    finding = next(f for f in report.findings if f.code == "argv-not-checked")
    assert finding.level == "warn" and "--bogus-flag" in finding.message and "0.32.0" in finding.message


# --- issue 16 item 5: a pool below one full context -------------------------------------------------------

LLAMA8B_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "llama-3-8b-instruct.json"


@pytest.fixture
def llama8b(tmp_path: Path) -> str:
    """Llama-3-8B's config.json alone: 32 layers x 8 KV heads x 128 x bf16 = 131,072 B per token."""
    (tmp_path / "config.json").write_text(LLAMA8B_CONFIG.read_text())
    return str(tmp_path)


def _one_context_sentences(report: ValidationReport) -> list[str]:
    return [f.message for f in report.findings if "every seat can hold a full" in f.message]


def test_vllm_pool_below_one_context_fails_and_never_says_every_seat_holds_one(llama8b: str) -> None:
    # 512 MiB / 131,072 B = 4,096 tokens: half of one 8,192-token context.
    report = _validate(flags={"model": llama8b, "engine": "vllm", "hardware": "h200",
                              "kv_cache_memory_bytes": "512MiB", "max_model_len": 8192})
    assert report.capacity.kv_pool_tokens == 4096
    assert report.verdict == "fail"
    assert _one_context_sentences(report) == []
    assert "seats-safe" not in _codes(report)
    # vLLM's own check refuses the launch and names the context that fits (its estimate, 4,080 here): capped to
    # that, the pool holds one full context and the verdict no longer fails.
    refusal = next(f.message for f in report.findings if f.code == "max_model_len_does_not_fit")
    fits = re.search(r"max_model_len ≤ ([\d,]+) would fit", refusal)
    assert fits is not None, refusal
    capped = _validate(flags={"model": llama8b, "engine": "vllm", "hardware": "h200",
                              "kv_cache_memory_bytes": "512MiB", "max_model_len": int(fits[1].replace(",", ""))})
    assert capped.capacity.max_concurrency >= 1.0
    assert capped.verdict != "fail" and "pool-below-one-context" not in _codes(capped)


def test_a_pool_of_exactly_one_context_that_vllm_refuses_never_says_every_seat_holds_one(llama8b: str) -> None:
    # 512 MiB / 131,072 B = 4,096 tokens = one 4,096-token context by the printed pool; vLLM keeps one block back
    # and refuses (max_model_len <= 4,080 would fit), so no "every seat can hold a full context" beside it.
    report = _validate(flags={"model": llama8b, "engine": "vllm", "hardware": "h200",
                              "kv_cache_memory_bytes": "512MiB", "max_model_len": 4096})
    assert report.capacity.max_concurrency == 1.0
    assert "max_model_len_does_not_fit" in _codes(report) and report.verdict == "fail"
    assert "seats-safe" not in _codes(report)
    assert not any("every seat can hold a full" in f.message for f in report.findings)


def test_sglang_pool_below_one_context_fails_until_the_context_is_capped_to_the_pool(llama8b: str) -> None:
    # SGLang starts with a 4,000-token pool and an 8,192-token context, and then caps every request at
    # min(context, pool) - 1 tokens (tp_worker.py): a full-window request is never served. 4,000 / 8,192 = 0.49.
    flags = {"model": llama8b, "engine": "sglang", "hardware": "h200", "max_total_tokens": 4000}
    report = _validate(flags={**flags, "max_model_len": 8192})
    assert report.capacity.kv_pool_tokens == 4000
    assert f"{report.capacity.max_concurrency:.2f}" == "0.49"
    assert report.verdict == "fail"
    below = next(f for f in report.findings if f.code == "pool-below-one-context")
    assert below.level == "fail"
    assert "4,000 tokens" in below.message and "0.49 of one 8,192-token context" in below.message
    assert "--max-model-len 4000" in below.message and "--context-length" in below.message
    assert _one_context_sentences(report) == []
    capped = _validate(flags={**flags, "max_model_len": 4000})  # the fix the finding names
    assert capped.capacity.max_concurrency == 1.0
    assert capped.verdict != "fail"
    assert "pool-below-one-context" not in _codes(capped)


# --- issue 16 item 8: an observation counts only for the pin, engine version and hardware it was taken with ----

def test_an_observation_under_another_pin_is_shown_not_applied() -> None:
    # The default recipe's 6.52 contexts were logged under its 28 GB pin; a 90 GiB pin is another plan.
    report = _validate(flags={"kv_cache_memory_bytes": "90GiB"})
    cap = report.capacity
    assert cap.max_concurrency > 20  # what 90 GiB holds
    assert cap.safe_max_num_seqs == math.floor(cap.max_concurrency)
    assert report.settings.max_num_seqs.value == min(cap.safe_max_num_seqs, 256)
    assert f"MAX_NUM_SEQS not set, using default: {report.settings.max_num_seqs.value}" in report.settings.notices()
    assert cap.observed is None
    shown = next(f for f in report.findings if f.code == "observation-not-applied")
    assert shown.level == "info"
    assert "6.52" in shown.message and "28.00 GB" in shown.message and "90.00 GiB" in shown.message
    assert "observed-contexts-differ" not in _codes(report)


def test_an_observation_without_version_or_pin_applies_to_the_recipes_own_plan() -> None:
    report = _validate()  # the recipe's pin, its hardware profile (no GPU in this test)
    assert report.capacity.observed is not None
    assert report.capacity.observed.max_concurrency == 6.52
    assert report.capacity.safe_max_num_seqs == 6
    assert "MAX_NUM_SEQS not set, using default: 6" in report.settings.notices()
    assert "observation-not-applied" not in _codes(report)


def test_an_observation_is_not_applied_on_other_hardware() -> None:
    report = _validate(flags={"hardware": "h200"})  # the recipe's observations were taken on two GB10s
    assert report.capacity.safe_max_num_seqs == math.floor(report.capacity.max_concurrency)
    assert report.capacity.observed is None
    shown = next(f for f in report.findings if f.code == "observation-not-applied")
    assert "NVIDIA H200" in shown.message and "NVIDIA GB10" in shown.message


def test_an_observation_counts_only_for_the_engine_version_it_was_taken_with(tmp_path: Path) -> None:
    # The same observation, once recorded with vLLM 0.32.0: it applies to a plan for 0.32.0, not for 0.33.0.
    from dspark.config.recipes import find_recipe  # noqa: PLC0415

    text = Path(find_recipe("flash-next-vllm").source).read_text()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text.replace("name: flash-next-vllm", "name: r").replace(
        "  - metric: full_contexts\n", "  - metric: full_contexts\n    engine_version: 0.32.0\n"))
    same = _validate(str(recipe), engine_version="0.32.0")
    other = _validate(str(recipe), engine_version="0.33.0")
    assert other.capacity.safe_max_num_seqs == math.floor(other.capacity.max_concurrency) > 6
    assert same.capacity.safe_max_num_seqs == 6
    assert same.capacity.observed is not None and other.capacity.observed is None
    shown = next(f for f in other.findings if f.code == "observation-not-applied")
    assert "vllm 0.32.0" in shown.message and "0.33.0" in shown.message


def test_an_observation_that_records_its_pin_applies_under_that_pin(tmp_path: Path) -> None:
    from dspark.config.recipes import find_recipe  # noqa: PLC0415

    text = Path(find_recipe("flash-next-vllm").source).read_text()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text.replace("name: flash-next-vllm", "name: r").replace(
        "  - metric: full_contexts\n", "  - metric: full_contexts\n    kv_cache_memory: 30GB\n"))
    assert _validate(str(recipe)).capacity.observed is None  # the recipe's own 28 GB pin is not the observation's
    under = _validate(str(recipe), flags={"kv_cache_memory_bytes": "30GB"})
    assert under.capacity.observed is not None and under.capacity.safe_max_num_seqs == 6


# --- issue 16 item 6: predicted and observed pools side by side ---------------------------------------------

def test_predicted_and_observed_pools_are_both_labelled_and_the_seat_sentence_follows_from_its_numbers() -> None:
    report = _validate("flash-next-sglang")  # 16 seats; SGLang logged 1,482,304 tokens at 16 seats
    cap = report.capacity
    seat = next(f for f in report.findings if f.code == "seats-above-safe")
    m = re.search(r"^(\d+) seats but the (\w+) pool \(([\d,]+) tokens\) holds ([\d.]+) full contexts", seat.message)
    assert m is not None, seat.message
    seats, which, pool, contexts = int(m[1]), m[2], int(m[3].replace(",", "")), float(m[4])
    assert (seats, which, pool) == (16, "observed", 1_482_304)
    assert contexts == round(pool / 262_144, 2) and seats > contexts  # "16 seats but ... holds 5.65"
    assert f"predicted {cap.kv_pool_tokens:,} tokens, {cap.max_concurrency:.2f} full contexts" in seat.message
    assert "safe default 5" in seat.message
    assert f"average ≤ {1_482_304 // 16:,} tokens" in seat.message  # 92,644: the observed pool over 16 seats
    assert cap.kv_pool_tokens != 1_482_304  # the prediction stays the prediction
    assert cap.safe_max_num_seqs == 5  # floor(5.65): the lower of the two
    assert cap.observed is not None
    assert cap.observed.kv_pool_tokens == 1_482_304
    assert cap.observed.max_concurrency == pytest.approx(1_482_304 / 262_144)  # 5.65
    assert "SGLang start-up log" in cap.observed.source


def test_an_observation_is_not_applied_under_another_prefill_budget_or_layout() -> None:
    # DeepSeek-V4-Flash's 181,777 tokens hold at its 8,192-token prefill budget; at 2,048 the pool is another one.
    report = _validate("deepseek-v4-flash-vllm", flags={"max_num_batched_tokens": 2048})
    assert report.capacity.safe_max_num_seqs == math.floor(report.capacity.max_concurrency)
    assert report.capacity.kv_pool_tokens != 181_777 and report.capacity.observed is None
    shown = [f.message for f in report.findings if f.code == "observation-not-applied"]
    assert shown and all("max_num_batched_tokens 8192, planned with 2048" in m for m in shown)
    tp1 = _validate(flags={"tensor_parallel_size": 1, "nnodes": 1})  # the default recipe's 6.52 is at TP=2
    assert tp1.capacity.safe_max_num_seqs == math.floor(tp1.capacity.max_concurrency)
    assert tp1.capacity.observed is None


def test_a_window_whose_kv_does_not_fit_beside_the_weights_is_the_engine_s_window_refusal(tmp_path: Path) -> None:
    """issue 26 item 21: Llama-3-8B's 131k window on an RTX 5090 said weights-do-not-fit and --tp 2; the weights
    load there (14.96 GiB of 29.3), and vLLM then refuses the window: "decrease max_model_len (estimated maximum
    ...)". That is the cause and the fix said; --tp 2 stays as the way to keep the window."""
    config = json.loads(LLAMA8B_CONFIG.read_text()) | {"max_position_embeddings": 131072}
    (tmp_path / "config.json").write_text(json.dumps(config))
    report = _validate(flags={"model": str(tmp_path), "engine": "vllm", "hardware": "rtx5090"},
                       engine_flags=("--max-model-len", "131072"))
    assert "weights-do-not-fit" not in _codes(report)
    refusal = next(f for f in report.findings if f.code == "max_model_len_does_not_fit")
    estimated = int(re.search(r"the estimated maximum model length is (\d+)", refusal.message).group(1))  # type: ignore[union-attr]
    assert 100_000 < estimated < 131_072 and f"max_model_len ≤ {estimated:,} would fit" in refusal.message
    assert "keeping the window, --tp 2 would put about" in refusal.message
    assert report.verdict == "fail"


def test_one_seat_is_one_seat_in_every_sentence() -> None:
    """issue 26 item 24: "1 seats"."""
    report = _validate(flags={"max_num_seqs": 1})
    said = [f.message for f in report.findings]
    assert any(m.startswith("1 seat ≤ ") for m in said), said
    assert not any(re.search(r"\b1 seats\b", m) for m in said)


def _recipe_with_engine_args(tmp_path: Path, engine_args: list[str]) -> str:
    import yaml  # noqa: PLC0415

    shipped = Path(__file__).resolve().parents[2] / "dspark" / "data" / "recipes" / "flash-next-vllm.yaml"
    recipe = yaml.safe_load(shipped.read_text()) | {"engine_args": engine_args}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_a_recipe_s_engine_args_are_read_against_the_engine_s_flags(tmp_path: Path) -> None:
    """issue 26 items 9 and 20 for a recipe: a flag vLLM lacks or an ambiguous prefix is refused naming the recipe;
    an abbreviation is said (start refuses it where vLLM's reading changes a capacity value)."""
    from dspark.core.errors import RecipeError  # noqa: PLC0415

    for args, words in ((["--bogus", "1"], "--bogus: vllm 0.33.0's parser has no such flag"),
                        (["--kv-cache-dt", "fp8"], "--kv-cache-dt could match --kv-cache-dtype")):
        with pytest.raises(RecipeError, match="engine_args: ") as err:
            _validate(_recipe_with_engine_args(tmp_path, args))
        assert words in err.value.message
    report = _validate(_recipe_with_engine_args(tmp_path, ["--gpu-memory-util", "0.5"]))
    said = next(f for f in report.findings if f.code == "engine-args-abbreviated")
    assert said.level == "warn" and "--gpu-memory-util is --gpu-memory-utilization" in said.message
    assert "engine-args-abbreviated" not in _codes(_validate(_recipe_with_engine_args(tmp_path, ["--enforce-eager"])))
