"""Recipes: the model, the loader's messages (file:line: key: message (got value)), shipped recipes, schema."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import get_args

import pytest
from click.testing import CliRunner

from dspark.cli import cli
from dspark.config.recipe_model import ModelSpec, SpeculativeMethod
from dspark.config.recipes import (
    default_recipe,
    find_recipe,
    list_recipes,
    load_recipe,
    load_recipe_text,
    recipe_from_data,
    render_json_schema,
    shipped_recipe_names,
    shipped_recipes_dir,
)
from dspark.core.constants import DEFAULT_RECIPE
from dspark.core.errors import RecipeError
from dspark.model import architecture
from dspark.model.architecture import AttentionLayer, LinearStateLayer, MLALayer, parse_config, parse_drafter

ROOT = Path(__file__).resolve().parents[2]
BASE = "name: x\nengine: vllm\nmodel: {path: m}\n"  # lines 1-3 of every case below
SIZE_HELP = (
    "use bytes as an int, or a number with a unit: GB/MB/KB/TB decimal (28GB = 28e9), "
    "GiB/MiB/KiB/TiB binary (28GiB = 28*2^30), or vLLM's k/m/g/t decimal and K/M/G/T binary"
)


def _error(text: str) -> str:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "r.yaml")
    return str(info.value)


def _one(line: int, rest: str) -> str:
    return f"r.yaml: invalid recipe (1 problem):\n  r.yaml:{line}: {rest}"


# --- the model ---------------------------------------------------------------------------------------------


def test_a_minimal_recipe_leaves_every_knob_unset() -> None:
    recipe = load_recipe_text(BASE, "r.yaml")
    assert recipe.source == "r.yaml"
    assert recipe.model.path == "m"
    assert recipe.batching.max_num_seqs is None
    assert recipe.kv_cache.memory is None
    assert recipe.parallel.tensor is None
    assert recipe.speculative is None
    assert recipe.engine_args == []
    assert recipe.observations == []


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("28GB", 28_000_000_000),
        ("28 GiB", 30_064_771_072),
        ("28G", 30_064_771_072),
        ("28g", 28_000_000_000),
        ("28000000000", 28_000_000_000),
        ("'28000000000'", 28_000_000_000),
    ],
)
def test_kv_memory_sizes(written: str, expected: int) -> None:
    recipe = load_recipe_text(BASE + f"kv_cache:\n  memory: {written}\n", "r.yaml")
    assert recipe.kv_cache.memory == expected


@pytest.mark.parametrize(
    ("written", "expected"), [("262144", 262_144), ("256K", 262_144), ("128k", 128_000), ("'8192'", 8192)]
)
def test_token_counts_take_vllm_suffixes(written: str, expected: int) -> None:
    recipe = load_recipe_text(BASE + f"context:\n  max_model_len: {written}\n", "r.yaml")
    assert recipe.context.max_model_len == expected


def test_env_numbers_become_text_and_booleans_do_not() -> None:
    recipe = load_recipe_text(BASE + "env:\n  VLLM_CPU_KVCACHE_SPACE: 4\n  X: '1'\n", "r.yaml")
    assert recipe.env == {"VLLM_CPU_KVCACHE_SPACE": "4", "X": "1"}


def test_dates_are_read_by_pydantic_not_yaml() -> None:
    recipe = load_recipe_text(
        BASE + "observations:\n  - {metric: wall_s, value: 1, source: s, date: 2026-03-01}\n", "r.yaml"
    )
    assert recipe.observations[0].date is not None
    assert recipe.observations[0].date.isoformat() == "2026-03-01"


def test_cross_checks_also_run_without_the_loader() -> None:
    data = {"name": "x", "engine": "vllm", "model": {"path": "m"}, "kv_cache": {"tokens": 1000}}
    with pytest.raises(
        RecipeError, match=r"kv_cache\.tokens: vllm has no such setting; for vllm use kv_cache\.memory"
    ):
        recipe_from_data(data)


@pytest.mark.parametrize(
    ("on_disk", "inline", "overrides", "expected"),
    [
        (None, None, None, None),
        (None, {"a": 1}, None, {"a": 1}),
        ({"a": 2}, {"a": 1}, None, {"a": 2}),  # the directory's config.json wins over the inline copy
        ({"a": 2, "q": {"x": 1, "y": 2}}, None, {"q": {"y": 3}, "b": 4}, {"a": 2, "q": {"x": 1, "y": 3}, "b": 4}),
        (None, {"a": 1}, {"a": 5}, {"a": 5}),
    ],
)
def test_resolve_config(
    on_disk: dict[str, object] | None,
    inline: dict[str, object] | None,
    overrides: dict[str, object] | None,
    expected: dict[str, object] | None,
) -> None:
    spec = ModelSpec(path="m", config=inline, config_overrides=overrides)
    assert spec.resolve_config(on_disk) == expected


def test_speculative_methods_are_the_ones_the_architecture_layer_sizes() -> None:
    assert get_args(SpeculativeMethod) == architecture.DRAFTER_METHODS


# --- the loader's messages ---------------------------------------------------------------------------------

CASES = [
    pytest.param(
        "name: x\nengine: [vllm\n",
        "r.yaml:3:1: not valid YAML: while parsing a flow sequence; expected ',' or ']', but got '<stream end>'",
        id="broken-yaml-names-line-and-column",
    ),
    pytest.param(
        "name: x\n\tengine: vllm\n",
        "r.yaml:2:1: not valid YAML: while scanning for the next token; found character '\\t' that cannot start "
        "any token",
        id="tab",
    ),
    pytest.param(
        BASE + "x: !!python/object:os.system {}\n",
        "r.yaml:4:4: not valid YAML: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object:os.system'",
        id="no-python-objects",
    ),
    pytest.param("", "r.yaml: the recipe is empty; it needs at least name, engine and model.path", id="empty"),
    pytest.param(
        "# only a comment\n", "r.yaml: the recipe is empty; it needs at least name, engine and model.path", id="comment"
    ),
    pytest.param(
        "- a\n- b\n", "r.yaml:1: a recipe is a mapping of keys (name:, engine:, model:, ...), not a list", id="list"
    ),
    pytest.param(
        "name: x\nengine: vllm\nname: y\nmodel: {path: a}\n",
        _one(3, "name: duplicate key (first given on line 1)"),
        id="duplicate-key",
    ),
    pytest.param(
        BASE + "kv_cache:\n  memroy: 28GB\n",
        _one(5, "kv_cache.memroy: unknown key; did you mean 'memory'?"),
        id="typo-did-you-mean",
    ),
    pytest.param(
        BASE + "max_num_seqs: 12\n",
        _one(4, "max_num_seqs: unknown key here; did you mean 'batching.max_num_seqs'?"),
        id="key-in-the-wrong-section",
    ),
    pytest.param(
        BASE + "tensor_parallel_size: 2\n",
        _one(4, "tensor_parallel_size: unknown key here; did you mean 'parallel.tensor'?"),
        id="engine-flag-name",
    ),
    pytest.param(
        BASE + "batching:\n  max_model_len: 4096\n",
        _one(5, "batching.max_model_len: unknown key here; did you mean 'context.max_model_len'?"),
        id="nested-wrong-section",
    ),
    pytest.param(
        BASE + "node_rank: 1\n",
        _one(
            4,
            "node_rank: unknown key: node_rank belongs to one machine or run, not a recipe "
            "(--node-rank / DSPARK_NODE_RANK)",
        ),
        id="per-machine-key",
    ),
    pytest.param(
        BASE + "frobnicate: 1\n",
        _one(
            4,
            "frobnicate: unknown key; valid keys here: name, description, engine, engine_version, model, "
            "hardware, parallel, context, kv_cache, batching, speculative, prefix_caching, engine_args, env, "
            "observations",
        ),
        id="unknown-lists-valid-keys",
    ),
    pytest.param(
        BASE + "observations:\n  - metric: wall_s\n    value: 1\n    sauce: t\n",
        "r.yaml: invalid recipe (2 problems):\n"
        "  r.yaml:5: observations[0].source: missing required key\n"
        "  r.yaml:7: observations[0].sauce: unknown key; did you mean 'source'?",
        id="unknown-in-a-list-item",
    ),
    pytest.param(
        "name: x\nengine: vlm\nmodel: {path: m}\n",
        _one(2, "engine: expected one of: vllm, sglang; did you mean 'vllm'? (got 'vlm')"),
        id="choice-did-you-mean",
    ),
    pytest.param(
        BASE + "parallel: {tensor: two}\n",
        _one(4, "parallel.tensor: expected a whole number (got 'two')"),
        id="wrong-type-names-the-type",
    ),
    pytest.param(
        BASE + "engine_version: 0.32\n",
        _one(4, 'engine_version: expected a string (quote it: "0.32") (got 0.32)'),
        id="number-for-text",
    ),
    pytest.param(
        "name: x\nengine: vllm\nmodel: m\n", _one(3, "model: expected a mapping of keys (got 'm')"), id="scalar-section"
    ),
    pytest.param(
        "name: x\nengine: vllm\nmodel:\n  served_name: y\n", _one(3, "model.path: missing required key"), id="missing"
    ),
    pytest.param(
        "description: hi\n",
        "r.yaml: invalid recipe (3 problems):\n"
        "  r.yaml:1: name: missing required key\n"
        "  r.yaml:1: engine: missing required key\n"
        "  r.yaml:1: model: missing required key",
        id="all-missing",
    ),
    pytest.param(
        "name: Flash Next\nengine: vllm\nmodel: {path: m}\n",
        _one(1, "name: use lower-case letters, digits, '.', '_' and '-' (it is also a file name) (got 'Flash Next')"),
        id="name-slug",
    ),
    pytest.param(
        BASE + "kv_cache:\n  memory: 28QQ\n",
        _one(5, f"kv_cache.memory: unknown unit 'QQ'; {SIZE_HELP} (got '28QQ')"),
        id="bad-size",
    ),
    pytest.param(
        BASE + "kv_cache:\n  memory: 0\n", _one(5, "kv_cache.memory: must be greater than 0 (got 0)"), id="zero"
    ),
    pytest.param(
        BASE + "batching:\n  max_num_seqs: 70000\n",
        _one(5, "batching.max_num_seqs: must be less than or equal to 65536 (got 70000)"),
        id="seats-upper-bound",
    ),
    pytest.param(
        BASE + "context:\n  max_model_len: lots\n",
        _one(
            5,
            "context.max_model_len: not a whole number of tokens (suffixes: k/m/g decimal, K/M/G binary) (got 'lots')",
        ),
        id="bad-count",
    ),
    pytest.param(
        BASE + "prefix_caching: maybe\n", _one(4, "prefix_caching: expected true or false (got 'maybe')"), id="bool"
    ),
    pytest.param(
        BASE + "observations:\n  - {metric: wall_s, value: 1, source: s, date: 2026-13-01}\n",
        _one(5, "observations[0].date: expected a date (YYYY-MM-DD) (got '2026-13-01')"),
        id="bad-date",
    ),
    pytest.param(
        BASE + "observations:\n  - {metric: full_context, value: 6.5, source: s}\n",
        _one(
            5,
            "observations[0].metric: expected one of: kv_pool_tokens, full_contexts, cudagraph_max_capture_size, "
            "decode_tok_s, stream_decode_tok_s, ttft_s, wall_s, decode_step_ms, prefill_ms_per_token, kv_usage_peak, "
            "prefix_hit_rate; "
            "did you mean 'full_contexts'? (got 'full_context')",
        ),
        id="metric",
    ),
    # Checks across fields, each pointing at the key to change.
    pytest.param(
        BASE + "kv_cache:\n  tokens: 1000\n",
        _one(5, "kv_cache.tokens: vllm has no such setting; for vllm use kv_cache.memory"),
        id="vllm-token-pin",
    ),
    pytest.param(
        "name: x\nengine: sglang\nmodel: {path: m}\nkv_cache:\n  memory: 1GB\n  tokens: 1000\n",
        _one(6, "kv_cache.tokens: set kv_cache.memory or kv_cache.tokens, not both: each pins the pool"),
        id="two-pins",
    ),
    pytest.param(
        "name: x\nengine: sglang\nmodel: {path: m}\nkv_cache:\n  gpu_memory_utilization: 0.9\n",
        _one(5, "kv_cache.gpu_memory_utilization: sglang has no such setting; "
                "for sglang use kv_cache.mem_fraction_static"),
        id="vllm-knob-on-sglang",
    ),
    pytest.param(
        BASE + "kv_cache:\n  mem_fraction_static: 0.8\n",
        _one(5, "kv_cache.mem_fraction_static: vllm has no such setting; for vllm use kv_cache.gpu_memory_utilization"),
        id="sglang-knob-on-vllm",
    ),
    pytest.param(
        BASE + "parallel:\n  tensor: 3\n  nodes: 2\n",
        _one(6, "parallel.nodes: tensor x pipeline = 3 GPUs cannot be split evenly over 2 nodes"),
        id="uneven-split",
    ),
    pytest.param(
        BASE + "speculative:\n  method: dflash\n  num_speculative_tokens: 15\n",
        _one(4, "speculative.draft_model: is required for method dflash"),
        id="drafter-needed",
    ),
    pytest.param(
        BASE + "speculative: {method: mtp, num_speculative_tokens: 4, draft_model: d}\n",
        _one(4, "speculative.draft_model: is not used by method mtp (it drafts with the model itself)"),
        id="drafter-unused",
    ),
    pytest.param(
        BASE + "engine_args: [--enable-chunked-prefill, --max-num-seqs, '8']\n",
        _one(
            4,
            "engine_args[1]: --max-num-seqs is a recipe field: set batching.max_num_seqs instead "
            "(one place per setting, so the precedence chain sees it)",
        ),
        id="modelled-flag-in-engine-args",
    ),
    pytest.param(
        BASE + "engine_args: [--no-enable-prefix-caching]\n",
        _one(
            4,
            "engine_args[0]: --no-enable-prefix-caching is a recipe field: set prefix_caching instead "
            "(one place per setting, so the precedence chain sees it)",
        ),
        id="negated-flag",
    ),
    pytest.param(
        BASE + "engine_args: ['--port=8001']\n",
        _one(4, "engine_args[0]: --port belongs to one machine or run, not a recipe: use --port / DSPARK_PORT"),
        id="run-flag",
    ),
    pytest.param(
        BASE + "env:\n  MAX_NUM_SEQS: '12'\n",
        _one(
            5,
            "env.MAX_NUM_SEQS: is read by dspark itself, not by the engine: set the recipe's own field, "
            "or export it when you run dspark",
        ),
        id="dspark-setting-in-env",
    ),
    pytest.param(
        BASE + "observations:\n  - {metric: kv_pool_tokens, value: 1.5, source: s}\n",
        _one(5, "observations[0].value: kv_pool_tokens is a count; expected a whole number (got 1.5)"),
        id="count-metric",
    ),
    pytest.param(
        BASE + "batching:\n  max_num_seqs: 0\nkv_cache:\n  dtype: fp9\n",
        "r.yaml: invalid recipe (2 problems):\n"
        "  r.yaml:5: batching.max_num_seqs: must be greater than or equal to 1 (got 0)\n"
        "  r.yaml:7: kv_cache.dtype: expected one of: auto, bfloat16, bf16, float16, fp8, fp8_e4m3, fp8_e5m2, "
        "fp8_inc, fp8_ds_mla, nvfp4_ds_mla, nvfp4, mxfp8, fp4_e2m1, fp4_mx_block16; did you mean 'fp8'? (got 'fp9')",
        id="every-error-listed-in-file-order",
    ),
]


@pytest.mark.parametrize(("text", "message"), CASES)
def test_loader_messages(text: str, message: str) -> None:
    assert _error(text) == message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE + "env:\n  HF_TOKEN: [hf_secret]\n", _one(5, "env.HF_TOKEN: expected a string (got a list)")),
        (BASE + "env:\n  API_KEY: true\n", _one(5, "env.API_KEY: expected a string (got a boolean)")),
        (
            BASE + "engine_args: ['--api-key', 987654321]\n",
            _one(4, "engine_args[1]: expected a string (got a whole number)"),
        ),
        (
            BASE + "env:\n  HF_TOKEN: hf_secret: oops\n",
            "r.yaml:5:22: not valid YAML: mapping values are not allowed here",
        ),
    ],
    ids=["env-list", "env-bool", "engine-arg-number", "broken-yaml-on-a-secret-line"],
)
def test_secrets_never_appear_in_messages(text: str, message: str) -> None:
    error = _error(text)
    assert error == message
    assert "hf_secret" not in error
    assert "987654321" not in error


def test_load_recipe_names_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=f"^{tmp_path / 'nope.yaml'}: recipe file not found$"):
        load_recipe(tmp_path / "nope.yaml")
    with pytest.raises(RecipeError, match=f"^{tmp_path}: is a directory, not a recipe file$"):
        load_recipe(tmp_path)
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(RecipeError, match=rf"^{bad}: is not UTF-8 text \(byte 9\)$"):
        load_recipe(bad)


def test_load_recipe_messages_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(BASE + "kv_cache:\n  memroy: 1GB\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert str(info.value) == (
        f"{path}: invalid recipe (1 problem):\n  {path}:5: kv_cache.memroy: unknown key; did you mean 'memory'?"
    )


# --- finding recipes ---------------------------------------------------------------------------------------


def test_find_recipe_by_name_and_by_path(tmp_path: Path) -> None:
    assert find_recipe("flash-next-sglang").engine == "sglang"
    path = tmp_path / "mine.yaml"
    path.write_text(BASE)
    recipe = find_recipe(str(path))
    assert (recipe.name, recipe.source) == ("x", str(path))


def test_a_bare_word_that_is_not_shipped_may_be_a_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "myrecipe").write_text(BASE)
    monkeypatch.chdir(tmp_path)
    assert find_recipe("myrecipe").source == "myrecipe"


def test_unknown_recipe_names_the_shipped_ones_and_suggests() -> None:
    with pytest.raises(RecipeError) as info:
        find_recipe("flash-next-vlm")
    assert info.value.message == (
        "no recipe named 'flash-next-vlm'; shipped recipes: deepseek-v4-flash-vllm, flash-next-sglang, "
        "flash-next-vllm, qwen27b-dflash-sglang"
    )
    assert info.value.hint == "did you mean 'flash-next-vllm'?"


def test_a_yaml_path_that_does_not_exist_is_not_looked_up_by_name() -> None:
    with pytest.raises(RecipeError, match=r"^flash-next-vllm\.yaml: recipe file not found$"):
        find_recipe("flash-next-vllm.yaml")


def test_default_recipe_is_flash_next_on_vllm() -> None:
    recipe = default_recipe()
    assert (DEFAULT_RECIPE, recipe.name, recipe.engine) == ("flash-next-vllm", "flash-next-vllm", "vllm")


# --- the shipped recipes -----------------------------------------------------------------------------------

SHIPPED = ["deepseek-v4-flash-vllm", "flash-next-sglang", "flash-next-vllm", "qwen27b-dflash-sglang"]


def test_top_level_recipes_is_the_packaged_directory_itself() -> None:
    # One copy: recipes/ is a link to the package data, so the two cannot drift.
    link = ROOT / "recipes"
    assert link.is_symlink()
    assert link.resolve() == shipped_recipes_dir().resolve()


def test_every_shipped_recipe_loads_under_its_file_name() -> None:
    assert shipped_recipe_names() == SHIPPED
    assert [r.name for r in list_recipes()] == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_recipes_carry_observations_with_provenance(name: str) -> None:
    recipe = find_recipe(name)
    assert recipe.observations
    assert all("docs/deployment.md" in o.source for o in recipe.observations)
    assert recipe.hardware == "gb10x2"
    assert (recipe.parallel.tensor, recipe.parallel.nodes) == (2, 2)


@pytest.mark.parametrize(
    ("name", "path", "expected"),
    [
        ("flash-next-vllm", "kv_cache.memory", 28_000_000_000),
        ("flash-next-vllm", "context.max_model_len", 262_144),
        ("flash-next-vllm", "batching.max_num_seqs", None),  # unset: validate computes the safe 6
        ("flash-next-vllm", "batching.max_num_batched_tokens", 8192),
        ("flash-next-vllm", "speculative.method", "mtp"),
        ("flash-next-vllm", "speculative.num_speculative_tokens", 4),
        ("flash-next-vllm", "model.quantization", "nvfp4"),
        ("flash-next-sglang", "batching.max_num_seqs", 16),
        ("flash-next-sglang", "context.max_model_len", 262_144),
        ("deepseek-v4-flash-vllm", "batching.max_num_seqs", 8),
        ("deepseek-v4-flash-vllm", "context.max_model_len", 131_072),
        ("deepseek-v4-flash-vllm", "model.quantization", "nvfp4"),
        ("qwen27b-dflash-sglang", "batching.max_num_seqs", 22),  # SGLang's state-slot cap on the GB10 pair
        ("qwen27b-dflash-sglang", "speculative.method", "dflash"),
        ("qwen27b-dflash-sglang", "speculative.num_speculative_tokens", 15),
    ],
)
def test_shipped_recipe_settings_match_the_deployment(name: str, path: str, expected: object) -> None:
    node: object = find_recipe(name)
    for part in path.split("."):
        node = getattr(node, part)
    assert node == expected


@pytest.mark.parametrize(
    ("name", "observed"),
    [
        ("flash-next-vllm", [("full_contexts", 6.52, None, 262_144)]),
        ("deepseek-v4-flash-vllm", [("kv_pool_tokens", 181_777, 8, 131_072), ("full_contexts", 1.39, 8, 131_072)]),
        (
            "flash-next-sglang",
            [
                ("kv_pool_tokens", 1_720_000, 6, 262_144),
                ("kv_pool_tokens", 1_482_304, 16, 262_144),
                ("kv_pool_tokens", 1_140_288, 32, 262_144),
            ],
        ),
        (
            "qwen27b-dflash-sglang",
            [("decode_step_ms", 67, 1, None), ("decode_step_ms", 130, 8, None), ("decode_step_ms", 205, 18, None)],
        ),
    ],
)
def test_shipped_capacity_observations(name: str, observed: list[tuple[str, float, int | None, int | None]]) -> None:
    capacity = {"kv_pool_tokens", "full_contexts", "decode_step_ms"}
    got = [
        (o.metric, o.value, o.seats, o.max_model_len) for o in find_recipe(name).observations if o.metric in capacity
    ]
    assert got == observed


def test_flash_next_bench_table_is_recorded_at_8_and_16_seats() -> None:
    obs = {
        (o.metric, o.seats, o.workload is not None and o.workload.startswith("warm")): o.value
        for o in find_recipe("flash-next-vllm").observations
        if o.seats is not None
    }
    assert obs == {
        ("decode_tok_s", 8, False): 147.0, ("decode_tok_s", 16, False): 183.6,
        ("stream_decode_tok_s", 8, False): 20.3, ("stream_decode_tok_s", 16, False): 13.4,
        ("ttft_s", 8, False): 71.9, ("ttft_s", 16, False): 40.7,
        ("wall_s", 8, False): 348.4, ("wall_s", 16, False): 278.8,
        ("kv_usage_peak", 8, False): 0.16, ("kv_usage_peak", 16, False): 0.31,
        ("prefix_hit_rate", 8, True): 0.73, ("prefix_hit_rate", 16, True): 0.11,
        ("wall_s", 8, True): 179.6, ("wall_s", 16, True): 387.6,
    }  # fmt: skip


def _kinds(layers: tuple[object, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in layers:
        out[type(layer).__name__] = out.get(type(layer).__name__, 0) + 1
    return out


@pytest.mark.parametrize(
    ("name", "model_type", "kinds", "top_k"),
    [
        ("flash-next-vllm", "qwen3_next", {"LinearStateLayer": 36, "AttentionLayer": 12}, (512, 10)),
        ("flash-next-sglang", "qwen3_next", {"LinearStateLayer": 36, "AttentionLayer": 12}, (512, 10)),
        ("deepseek-v4-flash-vllm", "deepseek_v4", {"MLALayer": 43}, (256, 6)),
        ("qwen27b-dflash-sglang", "qwen3_5", {"LinearStateLayer": 48, "AttentionLayer": 16}, None),
    ],
)
def test_inline_configs_read_as_real_config_json(
    name: str, model_type: str, kinds: dict[str, int], top_k: tuple[int, int] | None
) -> None:
    recipe = find_recipe(name)
    config = recipe.model.resolve_config(None)
    assert config is not None
    arch = parse_config(config, recipe.model.path)
    assert arch.model_type == model_type
    assert _kinds(arch.layers) == kinds
    assert (None if arch.moe is None else (arch.moe.num_experts, arch.moe.top_k)) == top_k
    assert len(arch.mtp_layers) == 1


def test_flash_next_layer_shapes() -> None:
    config = find_recipe("flash-next-vllm").model.resolve_config(None)
    assert config is not None
    layers = parse_config(config).layers
    assert layers[3] == AttentionLayer(num_kv_heads=2, head_dim=256)
    assert isinstance(layers[0], LinearStateLayer)
    gdn = layers[0]
    assert (gdn.num_k_heads, gdn.num_v_heads, gdn.head_k_dim, gdn.conv_kernel) == (16, 32, 128, 4)


def test_deepseek_v4_compression_ratios() -> None:
    config = find_recipe("deepseek-v4-flash-vllm").model.resolve_config(None)
    assert config is not None
    layers = parse_config(config).layers
    assert all(isinstance(layer, MLALayer) for layer in layers)
    ratios = [layer.compress_ratio for layer in layers if isinstance(layer, MLALayer)]
    assert (ratios[:4], ratios.count(4), ratios.count(128)) == ([0, 0, 4, 128], 21, 20)


def test_the_dflash_drafter_keeps_five_sliding_window_layers() -> None:
    recipe = find_recipe("qwen27b-dflash-sglang")
    assert recipe.speculative is not None
    config = recipe.model.resolve_config(None)
    assert config is not None
    drafter = parse_drafter(
        recipe.speculative.draft_config, recipe.speculative.method, recipe.speculative.draft_model or "",
        target=parse_config(config),
    )  # fmt: skip
    assert drafter.layers == (AttentionLayer(num_kv_heads=8, head_dim=128, sliding_window=2048),) * 5
    assert drafter.parameter_count == 1_730_213_120  # 3.22 GiB in bf16, the published size


# --- the JSON Schema and purity ------------------------------------------------------------------------------


def test_checked_in_schema_is_up_to_date() -> None:
    checked_in = (ROOT / "dspark" / "data" / "recipe.schema.json").read_text()
    assert checked_in == render_json_schema(), "regenerate: dspark recipes schema > dspark/data/recipe.schema.json"


def test_schema_forbids_unknown_keys_everywhere() -> None:
    schema = json.loads(render_json_schema())
    assert schema["additionalProperties"] is False
    assert all(d.get("additionalProperties") is False for d in schema["$defs"].values() if d.get("type") == "object")
    assert schema["required"] == ["name", "engine", "model"]


@pytest.mark.parametrize("module", ["config/recipes.py", "config/settings.py", "core/units.py"])
def test_core_modules_stay_pure(module: str) -> None:
    tree = ast.parse((ROOT / "dspark" / module).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not imported & {"click", "pynvml", "psutil", "subprocess"}
    attrs = {
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
    }
    assert not {a for a in attrs if a.startswith("os.exec") or a in ("os.environ", "os.getenv")}


# --- the command -------------------------------------------------------------------------------------------


def test_recipes_list_is_the_default_subcommand() -> None:
    result = CliRunner().invoke(cli, ["recipes"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ENGINE", "SEATS", "WINDOW", "MODEL"]
    assert lines[3].split() == [
        "flash-next-vllm",
        "*",
        "vllm",
        "-",
        "262144",
        "nvidia/Qwen3-Next-80B-A3B-Instruct-NVFP4",
    ]
    assert result.stdout == CliRunner().invoke(cli, ["recipes", "list"]).stdout


def test_recipes_list_json_is_one_object() -> None:
    result = CliRunner().invoke(cli, ["recipes", "list", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["default"] == "flash-next-vllm"
    assert [r["name"] for r in data["recipes"]] == SHIPPED
    assert data["recipes"][2]["max_num_seqs"] is None  # the default recipe leaves seats to the computed default


def test_recipes_show_prints_the_file_as_written() -> None:
    result = CliRunner().invoke(cli, ["recipes", "show", "flash-next-vllm"])
    assert result.exit_code == 0, result.output
    path = shipped_recipes_dir() / "flash-next-vllm.yaml"
    assert result.stdout == f"# {path}\n" + path.read_text()


def test_recipes_show_json() -> None:
    result = CliRunner().invoke(cli, ["recipes", "show", "deepseek-v4-flash-vllm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["recipe"]["batching"]["max_num_seqs"] == 8
    assert data["recipe"]["observations"][0]["value"] == 181777


def test_recipes_show_bad_recipe_exits_2_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(BASE + "kv_cache:\n  memroy: 1GB\n")
    result = CliRunner().invoke(cli, ["recipes", "show", str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: invalid recipe (1 problem):\n"
        f"  {path}:5: kv_cache.memroy: unknown key; did you mean 'memory'?\n"
    )
    assert result.stdout == ""


def test_recipes_schema_prints_the_schema() -> None:
    result = CliRunner().invoke(cli, ["recipes", "schema"])
    assert result.exit_code == 0, result.output
    assert result.stdout == render_json_schema()
