"""The shipped recipes through `validate` against the built-in profiles (issue #3's figures, docs/deployment.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark.validate import ValidateRequest, validate


def _validate(recipe: str, **flags: object) -> object:
    return validate(ValidateRequest(flags={"hardware": "gb10x2", **flags}, recipe=recipe, env={}))


def test_flash_next_vllm_on_gb10x2_six_safe_seats_and_capture_80_at_8_seats() -> None:
    six = _validate("flash-next-vllm")
    assert six.capacity.safe_max_num_seqs == 6  # type: ignore[attr-defined]
    eight = _validate("flash-next-vllm", max_num_seqs=8)
    cap = eight.capacity  # type: ignore[attr-defined]
    assert cap.max_num_seqs == 8
    assert cap.cudagraph_max_capture_size == 80  # 8 seats x (1 + 4 speculative tokens) x 2
    assert cap.safe_max_num_seqs == 6
    codes = {f.code for f in eight.findings}  # type: ignore[attr-defined]
    assert "seats-above-safe" in codes
    # The engine's own 6.52 disagrees with 0.32.0's arithmetic: both are shown, the lower decides.
    assert "observed-contexts-differ" in codes


def test_deepseek_v4_flash_falls_back_to_the_observed_pool_and_says_so() -> None:
    report = _validate("deepseek-v4-flash-vllm")
    cap = report.capacity  # type: ignore[attr-defined]
    figures = (cap.kv_pool_tokens, f"{cap.max_concurrency:.2f}", cap.avg_context_at_max_num_seqs)
    assert figures == (181_777, "1.39", 22_722)
    assert cap.kv_budget_source == "observed"
    assert cap.safe_max_num_seqs == 1
    assert "engine-not-modelled" in {f.code for f in report.findings}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("recipe", "engine"), [("flash-next-sglang", "sglang"), ("qwen27b-dflash-sglang", "sglang")])
def test_sglang_recipes_validate(recipe: str, engine: str) -> None:
    report = _validate(recipe)
    assert report.serve.engine == engine  # type: ignore[attr-defined]
    assert report.verdict in ("ok", "warn")  # type: ignore[attr-defined]
    assert report.capacity.kv_pool_tokens > 0  # type: ignore[attr-defined]


def test_flash_next_sglang_safe_default_follows_the_observed_pool() -> None:
    report = _validate("flash-next-sglang")
    # Observed 1,482,304 tokens at 16 seats = 5.65 contexts of 262,144: the safe default is 5, not the prediction.
    assert report.capacity.safe_max_num_seqs == 5  # type: ignore[attr-defined]
    assert "observed-pool-differs" in {f.code for f in report.findings}  # type: ignore[attr-defined]


PROBES = Path(__file__).parent / "fixtures" / "probes"  # saved by `dspark probe --json` on a real H200


def test_each_node_is_checked_with_the_peers_saved_probe() -> None:
    # Node 0: the idle H200; node 1: the same H200 with 100 GiB held by another process (real probes).
    flags = {"hardware": str(PROBES / "h200-idle.json")}
    fits = validate(ValidateRequest(flags=flags, recipe="flash-next-vllm", env={},
                                    peer_hardware=(str(PROBES / "h200-idle.json"),)))
    assert fits.verdict == "warn"  # the observed-contexts warning only
    busy = validate(ValidateRequest(flags=flags, recipe="flash-next-vllm", env={},
                                    peer_hardware=(str(PROBES / "h200-100gib-held.json"),)))
    assert busy.verdict == "fail"
    failing = [f for f in busy.findings if f.code == "does-not-fit"]
    assert len(failing) == 1
    assert failing[0].message.startswith(
        "node 1 (vm): GPU 0 NVIDIA H200: the engine needs about 49.16 GiB but only 39.29"
    )


def test_a_live_node_without_peer_probes_says_the_others_were_not_checked() -> None:
    report = validate(ValidateRequest(flags={"hardware": str(PROBES / "h200-idle.json")}, recipe="flash-next-vllm",
                                      env={}))
    note = next(f for f in report.findings if f.code == "per-node")
    assert "--peer-hardware" in note.message


def test_typical_context_policy_seats_requests_of_a_given_length_with_a_prefix_reserve() -> None:
    report = validate(ValidateRequest(flags={"hardware": "gb10x2"}, recipe="deepseek-v4-flash-vllm", env={},
                                      typical_context=20_000, prefix_cache_reserve=30_000))
    cap = report.capacity
    # (181,777 - 30,000) // 20,000 = 7 seats at once, below the 8 configured: a warning says so.
    assert (cap.typical_context, cap.prefix_cache_reserve, cap.typical_context_seats) == (20_000, 30_000, 7)
    finding = next(f for f in report.findings if f.code == "typical-context-seats")
    assert finding.level == "warn"
