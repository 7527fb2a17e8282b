"""The shipped recipes through `validate` against the built-in profiles (issue #3's figures, docs/deployment.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dspark.planning.validate import ValidateRequest, validate


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


def test_deepseek_v4_flash_unpinned_computes_its_pool_and_shows_the_observed_one_beside_it(
    unpinned_recipe: Callable[[str], str],
) -> None:
    report = _validate(unpinned_recipe("deepseek-v4-flash-vllm"))
    cap = report.capacity  # type: ignore[attr-defined]
    assert cap.kv_budget_source == "estimate" and cap.kv_budget_bytes > 0 and cap.kv_bytes_per_token > 0
    codes = {f.code for f in report.findings}  # type: ignore[attr-defined]
    assert "engine-not-modelled" not in codes and "fits" in codes
    # The copy records no pin, as its observations: they describe its own plan, so both figures are shown.
    differs = next(f for f in report.findings if f.code == "observed-pool-differs")  # type: ignore[attr-defined]
    assert f"predicted {cap.kv_pool_tokens:,}" in differs.message
    assert f"{cap.kv_pool_tokens - 181_777:+,} tokens" in differs.message
    assert cap.observed is not None and cap.observed.kv_pool_tokens == 181_777
    assert cap.safe_max_num_seqs == 1  # the observed 1.39 contexts, the lower


# vLLM 0.32.0 gives a GB10 (>= 70 GiB) the 8,192-token prefill budget; 0.33.0 keeps it on 2,048.
GB10_032_PREFILL = ("--max-num-batched-tokens", "8192")


def test_deepseek_v4_flash_with_a_10_gb_pin_reproduces_the_logged_pool() -> None:
    report = validate(ValidateRequest(flags={"hardware": "gb10x2", "kv_cache_memory_bytes": 10**10},
                                      recipe="deepseek-v4-flash-vllm", engine_flags=GB10_032_PREFILL, env={}))
    cap = report.capacity
    figures = (cap.kv_pool_tokens, f"{cap.max_concurrency:.2f}", cap.avg_context_at_max_num_seqs)
    assert figures == (181_777, "1.39", 22_722)
    assert cap.kv_budget_source == "pinned"


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


PROBES = Path(__file__).resolve().parents[1] / "fixtures" / "probes"  # saved by `dspark probe --json` on a real H200


def test_each_node_is_checked_with_the_peers_saved_probe() -> None:
    # Node 0: the idle H200; node 1: the same H200 with 100 GiB held by another process (real probes).
    flags = {"hardware": str(PROBES / "h200-idle.json")}
    fits = validate(ValidateRequest(flags=flags, recipe="flash-next-vllm", env={},
                                    peer_hardware=(str(PROBES / "h200-idle.json"),)))
    assert fits.verdict == "ok"  # the GB10 pair's 6.52 contexts are shown, not applied, on an H200
    busy = validate(ValidateRequest(flags=flags, recipe="flash-next-vllm", env={},
                                    peer_hardware=(str(PROBES / "h200-100gib-held.json"),)))
    assert busy.verdict == "fail"
    failing = [f for f in busy.findings if f.code == "does-not-fit"]
    assert len(failing) == 1
    assert failing[0].message.startswith("node 1 (vm): GPU 0 NVIDIA H200: the engine needs about ")
    assert "but only 39.29 GiB is free" in failing[0].message  # the busy probe's free memory


def test_a_live_node_without_peer_probes_says_the_others_were_not_checked() -> None:
    report = validate(ValidateRequest(flags={"hardware": str(PROBES / "h200-idle.json")}, recipe="flash-next-vllm",
                                      env={}))
    note = next(f for f in report.findings if f.code == "per-node")
    assert "--peer-hardware" in note.message


def test_typical_context_policy_seats_requests_of_a_given_length_with_a_prefix_reserve() -> None:
    report = validate(ValidateRequest(flags={"hardware": "gb10x2", "kv_cache_memory_bytes": 10**10},
                                      recipe="deepseek-v4-flash-vllm", engine_flags=GB10_032_PREFILL, env={},
                                      typical_context=20_000, prefix_cache_reserve=30_000))
    cap = report.capacity
    assert cap.kv_pool_tokens == 181_777
    # Token arithmetic alone would seat (181,777 - 30,000) // 20,000 = 7; but every DeepSeek-V4 request also
    # holds its sliding-window and compressor-state rings, whatever its length. Counted in blocks, as vLLM's
    # Maximum concurrency is: the growing groups take ceil(T / block) blocks, the rings their fixed count.
    groups, num_blocks = cap.details["groups"], cap.details["num_blocks"]
    assert isinstance(groups, list) and isinstance(num_blocks, int)
    per_request = sum(g["blocks_per_request"] if g["kind"] == "sliding" else math.ceil(20_000 / g["block_size"])
                      for g in groups)
    reserved = sum(math.ceil(30_000 / g["block_size"]) for g in groups if g["kind"] != "sliding")
    by_blocks = (num_blocks - reserved) // per_request
    assert (cap.typical_context, cap.prefix_cache_reserve, cap.typical_context_seats) == (20_000, 30_000, by_blocks)
    assert 0 < by_blocks < 7  # below the token-only count and the 8 configured: a warning says so
    finding = next(f for f in report.findings if f.code == "typical-context-seats")
    assert finding.level == "warn"


def test_deepseek_v4_flash_on_an_rtx5090_fails_on_its_weights_and_names_a_tp_that_starts(
    unpinned_recipe: Callable[[str], str],
) -> None:
    report = _validate(unpinned_recipe("deepseek-v4-flash-vllm"), hardware="rtx5090")
    assert report.verdict == "fail"  # type: ignore[attr-defined]
    finding = next(f for f in report.findings if f.code == "weights-do-not-fit")  # type: ignore[attr-defined]
    assert finding.level == "fail"
    per_gpu = report.weights.per_gpu_bytes / (1 << 30)  # type: ignore[attr-defined]
    assert finding.message.startswith(f"{per_gpu:.2f} GiB of weights per GPU (TP=2) do not fit")
    assert re.search(r"--tp (\d+) would put about [\d.]+ GiB of weights on each GPU", finding.message)


# --- issue 16 item 13: a shipped recipe reproduces the pool it records, or its header says which inputs differ ---

RECIPES = Path(__file__).resolve().parents[2] / "dspark" / "data" / "recipes"
SHIPPED = sorted(p.stem for p in RECIPES.glob("*.yaml"))


def _header(name: str) -> str:
    """The recipe file's leading comment block."""
    lines = []
    for line in (RECIPES / f"{name}.yaml").read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def _pool_observations(name: str) -> list[tuple[str, float, int | None]]:
    from dspark.config.recipes import find_recipe  # noqa: PLC0415

    return [(o.metric, o.value, o.seats) for o in find_recipe(name).observations
            if o.metric in ("kv_pool_tokens", "full_contexts")]


def _reproduces(name: str, metric: str, value: float, seats: int | None) -> bool:
    """Does a plain `dspark validate NAME` (at the observation's seats) print the logged figure?"""
    report = _validate(name, **({"max_num_seqs": seats} if seats else {}))
    cap = report.capacity  # type: ignore[attr-defined]
    if metric == "kv_pool_tokens":
        return bool(cap.kv_pool_tokens == int(value))
    return f"{cap.max_concurrency:.2f}" == f"{value:.2f}"


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_recipe_reproduces_its_logged_pool_or_says_which_inputs_differ(name: str) -> None:
    header = _header(name)
    for metric, value, seats in _pool_observations(name):
        if _reproduces(name, metric, value, seats):
            continue
        shown = f"{int(value):,}" if metric == "kv_pool_tokens" else f"{value:.2f}"
        assert shown in header and "differ" in header, (
            f"{name}: the logged {metric} {shown} is not what `dspark validate {name}` prints, and the recipe's "
            "header does not say which inputs differ")


def test_deepseek_v4_flash_recipe_reproduces_its_log_as_shipped() -> None:
    # The 10 GB pin at the 8,192-token prefill budget (vLLM 0.32.0's GB10 default; 0.33.0 defaults to 2,048).
    cap = _validate("deepseek-v4-flash-vllm").capacity  # type: ignore[attr-defined]
    assert (cap.kv_pool_tokens, f"{cap.max_concurrency:.2f}", cap.avg_context_at_max_num_seqs) == (
        181_777, "1.39", 181_777 // 8)
    assert cap.kv_budget_source == "pinned"
    for version in ("0.32.0", "0.33.0"):
        pinned = validate(ValidateRequest(flags={"hardware": "gb10x2"}, recipe="deepseek-v4-flash-vllm", env={},
                                          engine_version=version))
        assert pinned.capacity.kv_pool_tokens == 181_777


def _deployment_rows() -> dict[str, str]:
    """docs/deployment.md's pool table: system -> its 'dspark reproduces it' cell."""
    text = (RECIPES.parents[2] / "docs" / "deployment.md").read_text()
    table = text[text.index("| system | engine |"):].split("\n\n")[0].splitlines()
    head = [c.strip() for c in table[0].strip("|").split("|")]
    column = head.index("reproduced by dspark")
    return {row.strip("|").split("|")[0].strip(): row.strip("|").split("|")[column].strip() for row in table[2:]}


@pytest.mark.parametrize(("system", "recipe"), [
    ("DeepSeek-V4-Flash NVFP4", "deepseek-v4-flash-vllm"),
    ("Flash-Next (Qwen3-Next-80B-A3B shape, NVFP4), 28 GB KV pin", "flash-next-vllm"),
    ("Flash-Next", "flash-next-sglang"),
])
def test_deployment_doc_says_which_logged_pools_dspark_reproduces(system: str, recipe: str) -> None:
    cell = _deployment_rows()[system]
    reproduced = all(_reproduces(recipe, *obs) for obs in _pool_observations(recipe))
    assert cell.startswith("yes" if reproduced else "no"), f"{system}: {cell!r}"


# --- issue 16 item 14: the seats a recipe, its description and `dspark recipes` name are the seats it runs -------

@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_recipe_names_the_seats_its_engine_runs(name: str) -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from dspark.cli import cli  # noqa: PLC0415
    from dspark.config.recipes import find_recipe  # noqa: PLC0415

    recipe = find_recipe(name)
    report = _validate(name)
    runs = report.capacity.max_num_seqs  # type: ignore[attr-defined]
    assert "seats-capped-by-engine" not in {f.code for f in report.findings}  # type: ignore[attr-defined]
    said = re.search(r"(\d+) seats", recipe.description)  # the first: later ones may list measured settings
    assert said is not None and int(said[1]) == runs, f"{name}: the description says {said}, the engine runs {runs}"
    listing = CliRunner().invoke(cli, ["recipes"]).output
    row = next(line.replace(" * ", " ").split() for line in listing.splitlines() if line.split()[:1] == [name])
    column = listing.splitlines()[0].split().index("SEATS")
    assert row[column] == (str(recipe.batching.max_num_seqs) if recipe.batching.max_num_seqs else "-")
    if recipe.batching.max_num_seqs is not None:
        assert recipe.batching.max_num_seqs == runs
