"""Settings: flag > environment > recipe > default, each value with its source; malformed values named exactly."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dspark.config.knobs import KNOB_NAMES, KNOBS, Knob
from dspark.config.recipes import Recipe, load_recipe_text, recipe_json_schema
from dspark.config.settings import (
    OTHER_DSPARK_ENV,
    ResolvedSettings,
    Setting,
    resolve_settings,
    select_recipe,
)
from dspark.core.errors import SettingsError

RECIPE_TEXT = """\
name: r
engine: vllm
model: {path: org/model}
parallel: {tensor: 2, nodes: 2}
context: {max_model_len: 262144}
kv_cache: {memory: 28GB, dtype: fp8}
batching: {max_num_seqs: 8, max_num_batched_tokens: 8192}
speculative: {method: mtp, num_speculative_tokens: 4}
prefix_caching: true
"""
SGLANG_TEXT = """\
name: s
engine: sglang
model: {path: org/model}
kv_cache: {memory: 20GB}
batching: {max_num_seqs: 16}
"""
SEATS = "a whole number of seats from 1 to 65536"
SEATS_HINT = "unset MAX_NUM_SEQS to use the recipe's value or the default (6)"


def _recipe(text: str = RECIPE_TEXT) -> Recipe:
    return load_recipe_text(text, "recipes/r.yaml")


def _raises(cli: dict[str, object | None], env: dict[str, str], recipe: Recipe | None = None) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        resolve_settings(cli, env, recipe)
    return info.value


# --- precedence: one test per adjacent pair of sources ------------------------------------------------------


def test_flag_beats_env() -> None:
    s = resolve_settings({"max_num_seqs": 12}, {"MAX_NUM_SEQS": "10"}, _recipe())
    assert s.max_num_seqs == Setting(12, "flag")


def test_env_beats_recipe() -> None:
    s = resolve_settings({"max_num_seqs": None}, {"MAX_NUM_SEQS": "10"}, _recipe())
    assert s.max_num_seqs == Setting(10, "env:MAX_NUM_SEQS")


def test_recipe_beats_default() -> None:
    s = resolve_settings({}, {}, _recipe())
    assert s.max_num_seqs == Setting(8, "recipe:recipes/r.yaml:batching.max_num_seqs")


def test_default_when_nothing_sets_it_and_the_launcher_can_say_so() -> None:
    s = resolve_settings({}, {}, None)
    assert s.max_num_seqs == Setting(6, "default")
    assert s.max_num_seqs_is_fallback
    assert s.notices() == ("MAX_NUM_SEQS not set, using default: 6",)


@pytest.mark.parametrize(
    ("knob", "flag", "env", "env_value", "recipe_value", "default"),
    [
        ("max_model_len", 4096, "DSPARK_MAX_MODEL_LEN", "8K", 262144, Setting(None, "computed")),
        ("kv_cache_memory_bytes", "1GiB", "DSPARK_KV_CACHE_MEMORY", "2GB", 28_000_000_000, Setting(None, "computed")),
        ("kv_cache_dtype", "bfloat16", "DSPARK_KV_CACHE_DTYPE", "fp8_e5m2", "fp8", Setting("auto", "default")),
        ("tensor_parallel_size", 1, "DSPARK_TP", "1", 2, Setting(1, "default")),
        ("max_num_batched_tokens", 2048, "DSPARK_MAX_NUM_BATCHED_TOKENS", "4096", 8192, Setting(None, "default")),
        ("enable_prefix_caching", False, "DSPARK_PREFIX_CACHING", "off", True, Setting(None, "default")),
        ("num_speculative_tokens", 2, "DSPARK_NUM_SPECULATIVE_TOKENS", "3", 4, None),
        ("model", "/models/a", "DSPARK_MODEL", "/models/b", "org/model", Setting(None, "default")),
    ],
)
def test_each_adjacent_pair_for_other_knobs(
    knob: str, flag: object, env: str, env_value: str, recipe_value: object, default: Setting[object] | None
) -> None:
    recipe = _recipe()
    path = next(k.recipe_path for k in KNOBS if k.name == knob)
    expected_flag = {"kv_cache_memory_bytes": 1 << 30}.get(knob, flag)
    expected_env = {
        "max_model_len": 8192,
        "kv_cache_memory_bytes": 2_000_000_000,
        "tensor_parallel_size": 1,
        "enable_prefix_caching": False,
        "num_speculative_tokens": 3,
        "max_num_batched_tokens": 4096,
    }.get(knob, env_value)
    nodes = {"DSPARK_NNODES": "1"}  # TP 1 from flag or env must still split over the nodes
    assert getattr(resolve_settings({knob: flag}, {env: env_value} | nodes, recipe), knob) == Setting(
        expected_flag, "flag"
    )
    assert getattr(resolve_settings({}, {env: env_value} | nodes, recipe), knob) == Setting(expected_env, f"env:{env}")
    assert getattr(resolve_settings({}, {}, recipe), knob) == Setting(recipe_value, f"recipe:recipes/r.yaml:{path}")
    if default is not None:
        assert getattr(resolve_settings({}, {}, None), knob) == default


def test_defaults_can_be_overridden_by_the_caller() -> None:
    s = resolve_settings({}, {}, None, {"max_num_seqs": 4, "kv_cache_dtype": "fp8"})
    assert (s.max_num_seqs, s.kv_cache_dtype) == (Setting(4, "default"), Setting("fp8", "default"))
    assert s.notices() == ("MAX_NUM_SEQS not set, using default: 4",)


# --- malformed values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("abc", "not a whole number"),
        ("0", "out of range"),
        ("-3", "out of range"),
        ("1e9", "not a whole number"),
        ("12.5", "not a whole number"),
        ("65537", "out of range"),
        ("0x10", "not a whole number"),
    ],
)
def test_malformed_max_num_seqs_names_variable_value_and_range(raw: str, reason: str) -> None:
    error = _raises({}, {"MAX_NUM_SEQS": raw})
    assert error.message == f"MAX_NUM_SEQS={raw!r}: {reason}; expected {SEATS}"
    assert error.hint == SEATS_HINT


@pytest.mark.parametrize("raw", ["", "   "])
def test_an_empty_variable_is_an_error_naming_it(raw: str) -> None:
    # Issue #3: empty is malformed, not "unset" (unset MAX_NUM_SEQS prints the fallback notice instead).
    error = _raises({}, {"MAX_NUM_SEQS": raw})
    assert error.message == f"MAX_NUM_SEQS={raw!r}: empty; expected {SEATS}"
    assert error.hint is not None and error.hint.startswith("unset MAX_NUM_SEQS")


def test_whitespace_around_a_number_is_fine() -> None:
    assert resolve_settings({}, {"MAX_NUM_SEQS": " 12 "}, None).max_num_seqs == Setting(12, "env:MAX_NUM_SEQS")


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        ({"max_num_seqs": 0}, f"--max-num-seqs 0: out of range; expected {SEATS}"),
        ({"max_num_seqs": "many"}, f"--max-num-seqs 'many': not a whole number; expected {SEATS}"),
        ({"max_num_seqs": True}, f"--max-num-seqs True: not a whole number; expected {SEATS}"),
        (
            {"gpu_memory_utilization": 1.5},
            "gpu_memory_utilization 1.5 (an engine flag after --): out of range; expected a fraction above 0 and at "
            "most 1 (e.g. 0.85)",
        ),
    ],
)
def test_malformed_flags_name_the_flag(cli: dict[str, object | None], message: str) -> None:
    error = _raises(cli, {})
    assert (error.message, error.hint) == (message, None)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DSPARK_ENGINE": "vlm"},
            "DSPARK_ENGINE='vlm': not one of the choices; expected vllm or sglang; did you mean 'vllm'?",
        ),
        ({"DSPARK_TP": "two"}, "DSPARK_TP='two': not a whole number; expected 1 to 1024"),
        (
            {"DSPARK_KV_CACHE_MEMORY": "28QQ"},
            "DSPARK_KV_CACHE_MEMORY='28QQ': unknown unit 'QQ'; expected a positive size: bytes as an int, or a "
            "number with a unit: GB/MB/KB/TB decimal (28GB = 28e9), GiB/MiB/KiB/TiB binary (28GiB = 28*2^30), "
            "or vLLM's k/m/g/t decimal and K/M/G/T binary",
        ),
        (
            {"DSPARK_GPU_MEMORY_UTILIZATION": "90%"},
            "DSPARK_GPU_MEMORY_UTILIZATION='90%': not a number; expected a fraction above 0 and at most 1 (e.g. 0.85)",
        ),
        (
            {"DSPARK_PREFIX_CACHING": "maybe"},
            "DSPARK_PREFIX_CACHING='maybe': not a yes/no value; expected 1/0, true/false, yes/no or on/off",
        ),
        ({"DSPARK_NODE_RANK": "-1"}, "DSPARK_NODE_RANK='-1': out of range; expected 0 to nnodes - 1"),
        ({"DSPARK_PORT": "80000"}, "DSPARK_PORT='80000': out of range; expected 1 to 65535"),
    ],
)
def test_malformed_environment_values(env: dict[str, str], message: str) -> None:
    assert _raises({}, env).message == message


@pytest.mark.parametrize(
    ("env", "knob", "expected"),
    [
        ({"DSPARK_KV_CACHE_MEMORY": "28GB"}, "kv_cache_memory_bytes", 28_000_000_000),
        ({"DSPARK_KV_CACHE_MEMORY": "28GiB"}, "kv_cache_memory_bytes", 30_064_771_072),
        ({"DSPARK_KV_CACHE_MEMORY": "28G"}, "kv_cache_memory_bytes", 30_064_771_072),
        ({"DSPARK_GPU_MEMORY_UTILIZATION": "0.85"}, "gpu_memory_utilization", 0.85),
        ({"DSPARK_GPU_MEMORY_UTILIZATION": "1"}, "gpu_memory_utilization", 1.0),
        ({"DSPARK_PREFIX_CACHING": "ON"}, "enable_prefix_caching", True),
        ({"DSPARK_PREFIX_CACHING": "0"}, "enable_prefix_caching", False),
        ({"DSPARK_ENGINE": "SGLang"}, "engine", "sglang"),
        ({"DSPARK_MAX_MODEL_LEN": "256K"}, "max_model_len", 262_144),
        ({"DSPARK_HARDWARE": " h200 "}, "hardware", "h200"),
        ({"DSPARK_PLATFORM": "cpu"}, "platform", "cpu"),
    ],
)
def test_environment_values_are_parsed(env: dict[str, str], knob: str, expected: object) -> None:
    assert getattr(resolve_settings({}, env, None), knob).value == expected


# --- values that clash -------------------------------------------------------------------------------------


def test_a_higher_layer_pin_in_tokens_replaces_a_recipe_pin_in_bytes() -> None:
    s = resolve_settings({}, {"DSPARK_KV_CACHE_TOKENS": "500000"}, _recipe(SGLANG_TEXT))
    assert s.max_total_tokens == Setting(500_000, "env:DSPARK_KV_CACHE_TOKENS")
    assert s.kv_cache_memory_bytes == Setting(None, "default")
    assert s.notes == (
        "kv_cache_memory_bytes from recipe:recipes/r.yaml:kv_cache.memory is ignored: "
        "env:DSPARK_KV_CACHE_TOKENS pins the KV pool in tokens",
    )


def test_two_pins_in_one_layer_are_refused() -> None:
    error = _raises({}, {"DSPARK_KV_CACHE_TOKENS": "500000", "DSPARK_KV_CACHE_MEMORY": "1GB"}, _recipe(SGLANG_TEXT))
    assert error.message == (
        "both a KV pin in bytes (env:DSPARK_KV_CACHE_MEMORY) and one in tokens (env:DSPARK_KV_CACHE_TOKENS) are set"
    )
    assert error.hint == "keep one: each fixes the size of the KV pool"


def test_an_engine_other_than_the_recipes_is_refused() -> None:
    error = _raises({}, {"DSPARK_ENGINE": "sglang"}, _recipe())
    assert error.message == "recipe r is for vllm, but DSPARK_ENGINE asks for sglang"
    assert error.hint == "pick a sglang recipe (dspark recipes list) or unset DSPARK_ENGINE"


@pytest.mark.parametrize(
    ("cli", "env", "text", "message", "hint"),
    [
        (
            {},
            {"DSPARK_NODE_RANK": "2"},
            RECIPE_TEXT,
            "node_rank 2 from DSPARK_NODE_RANK is out of range for 2 node(s) (ranks 0 to 1)",
            "nnodes comes from recipe:recipes/r.yaml:parallel.nodes",
        ),
        (
            {"tensor_parallel_size": 3},
            {},
            RECIPE_TEXT,
            "tensor x pipeline parallel = 3 GPUs cannot be split evenly over 2 nodes",
            "tensor_parallel_size from the command line, nnodes from recipe:recipes/r.yaml:parallel.nodes",
        ),
        (
            {},
            {"DSPARK_NUM_SPECULATIVE_TOKENS": "3"},
            SGLANG_TEXT,
            "DSPARK_NUM_SPECULATIVE_TOKENS sets num_speculative_tokens, but no speculative method is configured",
            "speculative decoding is set up in the recipe (speculative.method)",
        ),
    ],
)
def test_clashing_values(
    cli: dict[str, object | None], env: dict[str, str], text: str, message: str, hint: str
) -> None:
    error = _raises(cli, env, _recipe(text))
    assert (error.message, error.hint) == (message, hint)


def test_stray_dspark_variables_are_reported_not_silently_ignored() -> None:
    s = resolve_settings({}, {"DSPARK_MAX_NUM_SEQS": "12", "DSPARK_ENGINE_PYTHON": "/x/python", "PATH": "/bin"}, None)
    assert s.max_num_seqs == Setting(6, "default")
    assert s.notes == ("DSPARK_MAX_NUM_SEQS is not a dspark setting and is ignored; did you mean MAX_NUM_SEQS?",)


def test_unknown_setting_names_are_a_programming_error() -> None:
    with pytest.raises(KeyError, match="not a setting: max_seqs"):
        resolve_settings({"max_seqs": 1}, {}, None)
    with pytest.raises(KeyError, match="not a setting: seats"):
        resolve_settings({}, {}, None, {"seats": 1})


# --- the recipe choice -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "env", "model_given", "expected"),
    [
        ("mine.yaml", {"DSPARK_RECIPE": "flash-next-sglang"}, False, Setting("mine.yaml", "flag")),
        (None, {"DSPARK_RECIPE": "flash-next-sglang"}, False, Setting("flash-next-sglang", "env:DSPARK_RECIPE")),
        (None, {}, False, Setting("flash-next-vllm", "default")),
        (None, {}, True, Setting(None, "default")),
    ],
)
def test_select_recipe(cli: str | None, env: dict[str, str], model_given: bool, expected: Setting[str | None]) -> None:
    assert select_recipe(cli, env, model_given=model_given) == expected


@pytest.mark.parametrize(("cli", "env", "named"), [(None, {"DSPARK_RECIPE": " "}, "DSPARK_RECIPE=' '"),
                                                 (None, {"DSPARK_RECIPE": ""}, "DSPARK_RECIPE=''"),
                                                 ("", {}, "RECIPE ''")])
def test_set_but_empty_recipe_is_an_error(cli: str | None, env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=f"{re.escape(named)}: empty"):
        select_recipe(cli, env)


def test_resolved_settings_record_the_recipe_choice() -> None:
    assert resolve_settings({"recipe": "recipes/r.yaml"}, {}, _recipe()).recipe == Setting("recipes/r.yaml", "flag")
    assert resolve_settings({}, {}, _recipe()).recipe == Setting("r", "default")
    assert resolve_settings({}, {}, None).recipe == Setting(None, "default")


# --- output: JSON, --explain, computed values ----------------------------------------------------------------


def test_to_json_gives_value_and_source_for_every_setting() -> None:
    s = resolve_settings({}, {"MAX_NUM_SEQS": "12"}, _recipe())
    data = json.loads(json.dumps(s.to_json()))
    assert list(data) == ["recipe", *KNOB_NAMES]
    assert data["max_num_seqs"] == {"value": 12, "source": "env:MAX_NUM_SEQS"}
    assert data["kv_cache_memory_bytes"] == {"value": 28_000_000_000, "source": "recipe:recipes/r.yaml:kv_cache.memory"}
    assert data["platform"] == {"value": None, "source": "computed"}
    assert data["port"] == {"value": None, "source": "default"}


def test_explain_lists_each_value_with_its_source() -> None:
    text = resolve_settings({"port": 8001}, {"MAX_NUM_SEQS": "12"}, _recipe()).explain()
    lines = {line.split()[0]: re.split(r"\s{2,}", line) for line in text.splitlines() if not line.startswith("note")}
    assert lines["max_num_seqs"] == ["max_num_seqs", "12", "env:MAX_NUM_SEQS"]
    assert lines["kv_cache_memory_bytes"] == [
        "kv_cache_memory_bytes",
        "28000000000 = 28.00 GB (26.08 GiB)",
        "recipe:recipes/r.yaml:kv_cache.memory",
    ]
    assert lines["port"] == ["port", "8001", "flag"]
    assert lines["platform"] == ["platform", "(computed later)", "computed"]
    assert lines["host"] == ["host", "(engine default)", "default"]
    assert lines["enable_prefix_caching"] == ["enable_prefix_caching", "true", "recipe:recipes/r.yaml:prefix_caching"]


def test_with_computed_fills_only_what_nothing_else_set() -> None:
    s = resolve_settings({}, {"MAX_NUM_SEQS": "12"}, None)
    filled = s.with_computed(max_model_len=4096, kv_cache_memory_bytes=1 << 30)
    assert filled.max_model_len == Setting(4096, "computed")
    assert filled.kv_cache_memory_bytes == Setting(1 << 30, "computed")
    assert filled.max_num_seqs == Setting(12, "env:MAX_NUM_SEQS")
    with pytest.raises(
        ValueError, match="max_num_seqs was set by env:MAX_NUM_SEQS; a computed value must not replace it"
    ):
        s.with_computed(max_num_seqs=4)
    with pytest.raises(KeyError):
        s.with_computed(seats=4)


def test_a_computed_seat_count_is_announced_as_the_default() -> None:
    # Nothing set the seats: the computed safe count is what the deployment's words announce.
    s = resolve_settings({}, {}, None).with_computed(max_num_seqs=5)
    assert s.max_num_seqs == Setting(5, "computed")
    assert s.notices() == ("MAX_NUM_SEQS not set, using default: 5",)


def test_missing_for_launch() -> None:
    assert resolve_settings({}, {}, _recipe()).missing_for_launch() == (
        "a launch across 2 nodes needs the address of node 0: set --master-addr or DSPARK_MASTER_ADDR "
        "(or parallel.master_addr in the recipe)",
    )
    assert resolve_settings({}, {"DSPARK_MASTER_ADDR": "10.0.0.1"}, _recipe()).missing_for_launch() == ()
    assert resolve_settings({}, {}, None).missing_for_launch() == ("no model: give a recipe or --model DIR",)


# --- the knob table is consistent with the recipe model and the module's documentation --------------------------


def test_every_knob_has_a_resolved_field_and_every_field_a_knob() -> None:
    fields = set(ResolvedSettings.__dataclass_fields__) - {"notes", "recipe", "engine_settings"}
    assert fields == set(KNOB_NAMES)


def test_setting_reads_a_field_or_an_engine_setting_and_nothing_else() -> None:
    """An engine knob without a field (a new engine's) reads, lists and computes like a typed one."""
    resolved = resolve_settings({}, {}, None)
    assert resolved.engine_settings == {}
    assert resolved.setting("max_num_seqs") is resolved.max_num_seqs
    for name in ("notes", "recipe", "engine_settings", "not_a_knob", "settings"):
        with pytest.raises(KeyError):
            resolved.setting(name)
    extra = dataclasses.replace(resolved, engine_settings={"extra_pin": Setting(None, "computed")})
    assert extra.setting("extra_pin") == Setting(None, "computed")
    computed = extra.with_computed(extra_pin=7, max_num_seqs=3)
    assert computed.setting("extra_pin") == Setting(7, "computed")
    assert computed.max_num_seqs == Setting(3, "computed")


@pytest.mark.parametrize("knob", [k for k in KNOBS if k.recipe_path is not None], ids=lambda k: k.name)
def test_every_recipe_path_is_a_recipe_key(knob: Knob) -> None:
    schema = recipe_json_schema()
    section: dict[str, Any] | None = schema
    for part in (knob.recipe_path or "").split("."):
        assert section is not None, knob.recipe_path
        properties = section["properties"]
        assert part in properties, knob.recipe_path
        # A section is a $ref to its definition, directly or inside anyOf (an optional section).
        refs = [p["$ref"] for p in [properties[part], *properties[part].get("anyOf", [])] if "$ref" in p]
        section = schema["$defs"][refs[0].rsplit("/", 1)[1]] if refs else None


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.name)
def test_every_variable_is_documented_in_docs_environment_md(knob: Knob) -> None:
    """The list lives in the generated docs/environment.md (tests/config/test_environment_doc.py), not here again."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "environment.md").read_text(encoding="utf-8")
    assert re.search(rf"^\| `{knob.env}` \| {knob.name} \|", doc, re.MULTILINE), knob.env


def test_variables_read_outside_the_settings_table_are_not_called_typos() -> None:
    for name in OTHER_DSPARK_ENV:
        notes = resolve_settings({}, {name: "x"}, None).notes
        assert not any(name in note for note in notes), name
    typo = resolve_settings({}, {"DSPARK_ENGNE": "vllm"}, None).notes
    assert any("DSPARK_ENGNE is not a dspark setting" in note for note in typo)


@pytest.mark.parametrize(("knob", "env", "raw", "flag", "given", "shown"), [
    ("max_num_seqs", "MAX_NUM_SEQS", "8", "--max-num-seqs", 12, "12"),
    ("max_model_len", "DSPARK_MAX_MODEL_LEN", "32k", "--max-model-len", 4096, "4096"),
    ("kv_cache_memory_bytes", "DSPARK_KV_CACHE_MEMORY", "20GB", "--kv-cache-memory", 1 << 30,
     "1073741824 = 1.07 GB (1.00 GiB)"),
])
def test_a_flag_overriding_the_environment_is_said(knob: str, env: str, raw: str, flag: str, given: int,
                                                   shown: str) -> None:
    s = resolve_settings({knob: given}, {env: raw}, None)
    assert f"{env}={raw} from the environment overridden by {flag} {shown}" in s.notices()
    assert s.to_json()[knob] == {"value": given, "source": "flag",
                                 "overridden": [{"source": f"env:{env}", "value": raw}]}


def test_nothing_is_said_when_the_flag_overrides_nothing() -> None:
    s = resolve_settings({"max_num_seqs": 12}, {}, None)
    assert not any("overridden" in line for line in s.notices())
    assert s.to_json()["max_num_seqs"] == {"value": 12, "source": "flag"}
