"""Generated bad input, run through the CLI in-process: the expected exit code, no traceback, no hang.

A seeded generator (the cases are the same on every run, each a test id) mutates what users hand to dspark:
the shipped recipes, real config.json files (tests/fixtures/configs), the environment, dspark's flags, the
engine's flags after `--`, and saved probe files. Every case states the exit code it must end with; a case
with --json must also print exactly one JSON object on stdout. docs/bad-input.md lists the classes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import signal
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml

from dspark.cli import main
from dspark.config.knobs import BY_NAME, KNOBS, Invalid
from dspark.config.recipes import shipped_recipes_dir
from dspark.core.files import (
    CALIBRATION,
    KINDS,
    MODEL_CONFIG,
    PROMPTS,
    RECIPE,
    SAFETENSORS_HEADER,
    SNAPSHOT,
    WEIGHT_INDEX,
    FileKind,
    shown_path,
)
from dspark.engines import ENGINE_NAMES, engine_spec
from dspark.hardware.nvml import NvmlUnavailable
from dspark.hardware.select import host_snapshot, resolve_hardware
from dspark.hardware.snapshot import dumps_snapshot
from dspark.hardware.unified import HostMemory

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
PROBE = ROOT / "tests" / "fixtures" / "probes" / "h200-idle.json"
SECONDS_PER_CASE = 60  # a hang bound, not a speed goal: a busy shared 2-core box takes up to ~10 s a case
RNG = random.Random(20261130)  # noqa: S311 - seeds reproducible test cases, no secret

# Files a case needs, written under its tmp_path: name -> text or bytes (bytes for non-UTF-8 content).
Files = dict[str, str | bytes]


@dataclass(frozen=True)
class Case:
    """One generated input: argv (with {tmp} for the case's directory), environment, files, expected exit code."""

    kind: str
    argv: tuple[str, ...]
    expected: int
    env: dict[str, str] = field(default_factory=dict)
    files: Files = field(default_factory=dict)
    says: str | None = None  # what stderr must say (the rule that refused it), where more than one could
    # Paths under the case's directory that are not plain files: name -> fifo | dev-zero | dir | loop | dangling |
    # sparse:N (a file of N bytes that holds nothing, so that a size limit is met without writing it).
    special: dict[str, str] = field(default_factory=dict)
    seconds: int = 0  # a tighter bound than SECONDS_PER_CASE for this case (0: that one)
    says_any: tuple[str, ...] = ()  # stderr says one of these


# --- recipes ---------------------------------------------------------------------------------------------

SHIPPED = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(shipped_recipes_dir().glob("*.yaml"))}
# (path, values that must be refused there): strict numbers, finite, in range.
RECIPE_FIELDS: tuple[tuple[tuple[str | int, ...], tuple[object, ...]], ...] = (
    (("batching", "max_num_seqs"), (True, False, "lots", -1, 0, 1.5, float("inf"), [], {}, 10**9)),
    (("batching", "max_num_batched_tokens"), (True, "lots", -1, 0, float("nan"), [])),
    (("context", "max_model_len"), (True, "lots", -5, 0, float("inf"), "1.5Ki", {})),
    (("kv_cache", "memory"), (True, "lots", -1, 0, 2.5, float("inf"), "28XB", [])),
    (("speculative", "num_speculative_tokens"), (True, 0, -1, 65, 2.5, "four", float("nan"))),
    (("parallel", "tensor"), (True, 0, -2, "two", 1.5)),
    (("parallel", "nodes"), (True, 0, "two", float("inf"))),
    (("parallel", "master_port"), (True, 0, 70000, "http")),
    (("observations", 0, "value"), (True, -1, float("inf"), float("nan"), "many")),
    (("observations", 0, "seats"), (True, 0, 1.5, "six")),
    (("engine",), ("vllm2", 3, True, None)),
    (("name",), ("Not A Slug", 7, "")),
)


def _set(tree: Any, path: tuple[str | int, ...], value: object) -> bool:
    """Set tree[path] = value when every parent exists (False otherwise)."""
    node = tree
    for part in path[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node)):
        node[path[-1]] = value  # type: ignore[index]
        return True
    return False


def _recipe_field_cases() -> Iterator[Case]:
    for tree in SHIPPED.values():
        for path, bad_values in RECIPE_FIELDS:
            for value in RNG.sample(bad_values, k=min(3, len(bad_values))):
                mutated = json.loads(json.dumps(tree, allow_nan=True))
                if not _set(mutated, path, value):
                    continue
                text = yaml.safe_dump(mutated, sort_keys=False)
                yield Case("recipe-field", ("validate", "{tmp}/r.yaml", *_maybe_json()), 2, files={"r.yaml": text})


def _nest(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def _alias_bomb(levels: int, width: int) -> str:
    lines = [f"  a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _recipe_structure_cases() -> Iterator[Case]:
    base = (shipped_recipes_dir() / "flash-next-vllm.yaml").read_text()
    for _ in range(12):
        depth = RNG.choice([65, 200, 600, 3000, 20000])
        key = RNG.choice(["description", "model", "env", "observations"])
        yield Case("recipe-deep", ("validate", "{tmp}/r.yaml", *_maybe_json()), 2,
                   files={"r.yaml": f"{base}\n{key}x: {_nest(depth)}\n"})
    for _ in range(12):
        at = RNG.randrange(len(base))
        char = RNG.choice(["\x00", "\x01", "\x7f", "\ufffe"])
        yield Case("recipe-control-char", ("validate", "{tmp}/r.yaml"), 2,
                   files={"r.yaml": base[:at] + char + base[at:]})
    for _ in range(10):
        levels, width = RNG.choice([(9, 9), (6, 10), (12, 4), (5, 12)])
        where = RNG.choice(["env", "bomb"])
        yield Case("recipe-alias-bomb", ("validate", "{tmp}/r.yaml"), 2,
                   files={"r.yaml": f"{base}\n{where}x:\n{_alias_bomb(levels, width)}"})
    for _ in range(6):
        garbage = bytes(RNG.randrange(128, 256) for _ in range(RNG.randrange(1, 64)))
        at = RNG.randrange(len(base))
        yield Case("recipe-not-utf8", ("validate", "{tmp}/r.yaml"), 2,
                   files={"r.yaml": base[:at].encode() + garbage + base[at:].encode()})
    for text in ("a: &a [*a]\n", "", "- just\n- a list\n", "name: x\nname: y\n", "{", "'"):
        yield Case("recipe-shape", ("validate", "{tmp}/r.yaml", *_maybe_json()), 2, files={"r.yaml": text})


# --- config.json -----------------------------------------------------------------------------------------

CONFIG_BASES = ("llama-3-8b-instruct", "mistral-7b-v0.1", "qwen3-32b", "qwen3-next-80b-a3b-instruct", "qwen3.5-27b",
                "deepseek-v3", "deepseek-v3.2-exp")
DENSE_BASES = ("llama-3-8b-instruct", "mistral-7b-v0.1", "qwen3-32b")
CONFIG_KEYS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size", "max_position_embeddings")
CONFIG_BAD = (10**30, -5, 0, True, "x", "1e400", 2.5, None)


def _home(config: dict[str, Any], key: str) -> dict[str, Any]:
    """The mapping the key is read from: a nested text_config first (as dspark reads it)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) and key in inner else config


def _config_text(config: dict[str, Any], raw: dict[str, str] | None = None) -> str:
    text = json.dumps(config)
    for key, literal in (raw or {}).items():  # numbers JSON cannot hold as Python floats: write them verbatim
        text = text.replace(json.dumps(key) + ": " + json.dumps("__RAW__"), json.dumps(key) + ": " + literal)
    return text


def _model_case(kind: str, text: str | bytes, expected: int, extra: tuple[str, ...] = ()) -> Case:
    return Case(kind, ("validate", "--model", "{tmp}/m", "--engine", "vllm", "--hardware", "h200:8", "--tp", "8",
                       *_maybe_json(), *extra), expected, files={"m/config.json": text})


def _config_cases() -> Iterator[Case]:
    for base in CONFIG_BASES:
        original = json.loads((CONFIGS / f"{base}.json").read_text())
        yield _model_case("config-unchanged", json.dumps(original), 0)
        for key in CONFIG_KEYS:
            for value in RNG.sample(CONFIG_BAD, k=3):
                config = json.loads(json.dumps(original))
                home = _home(config, key)
                if value == "1e400":
                    home[key] = "__RAW__"
                    yield _model_case("config-count", _config_text(config, {key: "1e400"}), 2)
                    continue
                home[key] = value
                yield _model_case("config-count", json.dumps(config), 2)
        config = json.loads(json.dumps(original))
        home = _home(config, "num_attention_heads")
        heads = home.get("num_attention_heads", 8)
        for kv in (heads + 1, heads * 2, max(3, heads - 1)):
            # MLA models keep one latent for all heads: their num_key_value_heads is never read.
            if not base.startswith("deepseek") and kv > 0 and (kv > heads or heads % kv):
                home["num_key_value_heads"] = kv
                yield _model_case("config-kv-heads", json.dumps(config), 2)
        if base in DENSE_BASES:  # the families whose attention reads sliding_window (hybrids and MLA ignore it)
            config = json.loads(json.dumps(original))
            _home(config, "num_hidden_layers")["sliding_window"] = RNG.choice([-5, -1, -4096])
            yield _model_case("config-sliding-window", json.dumps(config), 2)
        yield _model_case("config-deep", '{"model_type": ' + _nest(RNG.choice([100, 100_000])) + "}", 2)
        yield _model_case("config-not-utf8", b'{"model_type": "\xff\xfe"}', 2)
    for base in ("qwen3-next-80b-a3b-instruct", "qwen3.5-27b"):
        config = json.loads((CONFIGS / f"{base}.json").read_text())
        home = _home(config, "num_hidden_layers")
        layers = home["num_hidden_layers"]
        if "layer_types" in home:
            home["layer_types"] = ["linear_attention"] * layers
        else:
            home["full_attention_interval"] = layers + RNG.randrange(1, 100)
        yield _model_case("config-hybrid-no-attention", json.dumps(config), 2)


# --- environment -----------------------------------------------------------------------------------------

TEXT_KNOBS = {"DSPARK_MODEL", "DSPARK_SERVED_MODEL_NAME", "DSPARK_MASTER_ADDR", "DSPARK_HOST"}
ENV_BAD = ("", " ", "abc", "-3", "1e400", "12.5x", "nan", "∞", "0x10", "--", "lots of them")


def _env_cases() -> Iterator[Case]:
    names = ["DSPARK_RECIPE", *(k.env for k in KNOBS if k.env not in TEXT_KNOBS)]
    for name in names:
        for value in RNG.sample(ENV_BAD, k=4):
            yield Case("env", ("validate", *_maybe_json()), 2, env={name: value})


# --- dspark's own flags ----------------------------------------------------------------------------------

FLAG_BAD: dict[str, tuple[str, ...]] = {
    "--max-num-seqs": ("abc", "-1", "0", "1e400", "12.5", "", "99999999999999999999"),
    "--max-model-len": ("abc", "-1", "0", "1e400", "1.5Ki", ""),
    "--kv-cache-memory": ("abc", "-1", "0", "1e400", "28XB", ""),
    "--tp": ("abc", "0", "-2", "2000", ""),
    "--nnodes": ("abc", "0", "5000"),
    "--node-rank": ("abc", "-1", "7"),
    "--master-port": ("abc", "0", "70000"),
    "--port": ("abc", "0", "70000"),
    "--typical-context": ("abc", "0", "-5", "1.5Ki"),
    "--prefix-cache-reserve": ("abc", "-5x"),
    "--hardware": ("abc", "h200:0", "h200:x", "nope:8", "h200:65", ""),
    "--engine": ("vllm2", ""),
    "--platform": ("gpu", ""),
    "--kv-cache-dtype": ("fp7", "", "FP8!"),
    "--model": ("", " ", "{tmp}/no-such-dir"),
    "--master-addr": ("", " "),
    "--peer-hardware": ("{tmp}/none.json", "", "{tmp}"),
    "--engine-version": ("abc", "", "1.x"),
    "--engine-python": ("", " "),
}
# dspark's options that take no value of their own to get wrong (flags), or whose values are checked elsewhere:
# the RECIPE argument (recipe cases above), --json/--explain/--engine-check/--dry-run/--force/--watch.
PLAN_COMMANDS = ("validate", "start")


def test_every_value_option_of_the_plan_commands_has_bad_values() -> None:
    """Generated from the click commands: the next option added to validate or start needs bad values here."""
    import click  # noqa: PLC0415

    from dspark.cli import cli  # noqa: PLC0415

    ctx = click.Context(cli)
    commands = [cli.get_command(ctx, name) for name in PLAN_COMMANDS]
    options = {p.opts[0] for command in commands if command is not None for p in command.params
               if isinstance(p, click.Option) and not p.is_flag}
    assert options == set(FLAG_BAD)


def _flag_cases() -> Iterator[Case]:
    for flag, values in FLAG_BAD.items():
        for value in values:
            command = RNG.choice(["validate", "validate", "start"])
            extra = ("--dry-run",) if command == "start" else ()
            yield Case("flag", (command, flag, value, *extra, *_maybe_json()), 2)
    yield Case("flag", ("validate", ""), 2)
    yield Case("flag", ("validate", "no-such-recipe"), 2)
    yield Case("flag", ("validate", "--no-such-flag"), 2)
    yield Case("flag", ("validate", "--platform", "cpu", "--hardware", "zz"), 2)


# --- engine flags after `--` -----------------------------------------------------------------------------

VLLM_BAD = (
    ("--block-size", "0"), ("--block-size", "-16"), ("--block-size", "abc"), ("--dtype", "nope"),
    ("--dtype", "float64"), ("--mamba-cache-dtype", "nope"), ("--mamba-ssm-cache-dtype", "nope"),
    ("--enable-prefix-caching=maybe",), ("--enable-prefix-caching=true",), ("--no-enable-prefix-caching=1",),
    ("--speculative-config", '{"method":"mtp","num_speculative_tokens":1e400}'),
    ("--speculative-config", '{"method":"mtp","num_speculative_tokens":0}'),
    ("--speculative-config", '{"method":"nope","num_speculative_tokens":2}'),
    ("--speculative-config", '{"method":"mtp","num_speculative_tokens":2.5}'),
    ("--speculative-config", "{not json"), ("--speculative-config", "[1, 2]"),
    ("--max-num-seqs", "0"), ("--max-num-seqs", "abc"), ("--max-model-len", "abc"), ("--max-model-len", "-5"),
    ("--kv-cache-memory-bytes", "abc"), ("--kv-cache-memory-bytes", "0"), ("--gpu-memory-utilization", "2"),
    ("--gpu-memory-utilization", "nan"), ("--tensor-parallel-size", "0"), ("--data-parallel-size", "0"),
    ("--max-num-batched-tokens", "1.5K"), ("--max-num-batched-tokens", "abc"), ("--kv-cache-dtype", "fp7"),
    ("--mamba-block-size", "0"), ("-cc", "[]"), ("--max-model-len",),
)
VLLM_GOOD = (("--enforce-eager",), ("--max-num-seqs", "4"), ("--trust-remote-code",), ("--seed", "3"))
SGLANG_BAD = (
    ("--page-size", "0"), ("--speculative-algorithm", "nope"), ("--mamba-ssm-dtype", "nope"),
    ("--kv-cache-dtype", "fp16"), ("--max-total-tokens", "1.5Mi"), ("--tp-size", "abc"), ("--dp-size", "0"),
    ("--mem-fraction-static", "1.5"), ("--mem-fraction-static", "abc"), ("--disable-radix-cache=true",),
    ("--speculative-num-steps", "0"), ("--max-running-requests", "0"), ("--context-length", "abc"),
)


def _engine_flag_cases() -> Iterator[Case]:
    for recipe, bad, good in (("flash-next-vllm", VLLM_BAD, VLLM_GOOD), ("flash-next-sglang", SGLANG_BAD, ())):
        for flags in bad:
            yield Case("engine-flag", ("validate", recipe, *_maybe_json(), "--", *flags), 2)
        for _ in range(15):
            picked = [*RNG.sample(bad, k=RNG.randint(1, 2)), *RNG.sample(good, k=min(len(good), RNG.randint(0, 2)))]
            RNG.shuffle(picked)
            argv = [part for flag in picked for part in flag]
            command = RNG.choice(["validate", "start"])
            extra = ("--dry-run",) if command == "start" else ()
            yield Case("engine-flag-mix", (command, recipe, *extra, *_maybe_json(), "--", *argv), 2)
    yield from _abbreviation_cases()


# vLLM 0.33.0's serve parser, as dspark's table of it lists its option strings (the default recipe plans for it
# when no engine is installed): abbreviations, ambiguous prefixes and flags it lacks, read as its argparse does.
VLLM_FLAGS = tuple(json.loads((Path(__file__).resolve().parents[2] / "dspark" / "data" / "engine_flags"
                               / "vllm-0.33.0.json").read_text())["options"])


def _starting(prefix: str) -> list[str]:
    return [o for o in VLLM_FLAGS if o.startswith(prefix)]


def _abbreviation_cases() -> Iterator[Case]:
    seats = "--max-num-seqs"
    unique = [seats[:n] for n in range(4, len(seats)) if _starting(seats[:n]) == [seats]]
    for prefix in RNG.sample(unique, min(4, len(unique))):
        yield Case("engine-flag-abbreviated", ("validate", "--json", "--", prefix, str(RNG.randrange(1, 9))), 0)
    longs = [o for o in VLLM_FLAGS if o.startswith("--")]
    ambiguous = sorted({o[:n] for o in longs for n in range(5, len(o))
                        if len(_starting(o[:n])) > 1 and o[:n] not in longs})
    for prefix in RNG.sample(ambiguous, 8):
        yield Case("engine-flag-ambiguous", ("validate", "--json", "--", prefix, "1"), 2, says="ambiguous option")
    for _ in range(6):
        name = "--" + "".join(RNG.choice("qxzjw-") for _ in range(RNG.randrange(4, 14))).strip("-") + "q"
        if not _starting(name):
            yield Case("engine-flag-unknown", ("validate", "--json", "--", name, "3"), 2, says="has no flag")
    for flags in (("--trust-remote-code",), ("--api-key", "sk-generated-0"), ("--trust-rem",)):
        yield Case("engine-flag-ordinary", ("validate", "--json", "--", *flags), 0)


# --- saved probe files -----------------------------------------------------------------------------------

def _probe_texts() -> Iterator[tuple[str, str | bytes]]:
    good = json.loads(PROBE.read_text())
    yield "not-utf8", b'{"format": "\xff"}'
    yield "deep", '{"gpus": ' + _nest(RNG.choice([100, 50_000])) + "}"
    yield "nan", PROBE.read_text().replace('"nodes": 1', '"nodes": NaN')
    yield "empty", ""
    yield "list", "[]"
    yield "truncated", PROBE.read_text()[: RNG.randrange(1, 200)]
    for key, value in (("total_bytes", "lots"), ("free_bytes", -1), ("free_bytes", 10**20), ("name", 3),
                       ("memory_source", "guess"), ("totl_bytes", 1)):
        bad = json.loads(json.dumps(good))
        bad["gpus"][0][key] = value
        yield f"gpu-{key}", json.dumps(bad)
    bad = json.loads(json.dumps(good))
    bad["gpus"] = []
    yield "no-gpus", json.dumps(bad)


def _probe_cases() -> Iterator[Case]:
    for label, text in _probe_texts():
        files: Files = {"p.json": text}
        yield Case(f"probe-{label}", ("validate", "--hardware", "{tmp}/p.json", *_maybe_json()), 2, files=files)
        yield Case(f"probe-{label}", ("validate", "--peer-hardware", "{tmp}/p.json"), 2, files=files)
        yield Case(f"probe-{label}", ("probe", "--hardware", "{tmp}/p.json", *_maybe_json()), 2, files=files)
        yield Case(f"probe-{label}", ("validate",), 2, env={"DSPARK_HARDWARE": "{tmp}/p.json"}, files=files)


# --- launches that must refuse or plan -------------------------------------------------------------------

def _launch_cases() -> Iterator[Case]:
    # The default recipe spans 2 nodes: without the address of node 0 a real start exits 2, and so does the dry
    # run (after printing its plan).
    yield Case("start-dry-run-no-address", ("start", "--dry-run"), 2)
    yield Case("start-dry-run-no-address", ("start", "--dry-run", "--json"), 2)
    yield Case("start-dry-run", ("start", "--dry-run", "--master-addr", "10.0.0.1"), 0)
    yield Case("start-dry-run", ("start", "--dry-run", "--json"), 0, env={"DSPARK_MASTER_ADDR": "10.0.0.1"})
    yield Case("start-dry-run", ("start", "flash-next-sglang", "--dry-run", "--json", "--master-addr", "10.0.0.1"), 0)
    yield Case("start-dry-run-rank1", ("start", "--dry-run", "--node-rank", "1"), 2)
    yield Case("start-dry-run-fails", ("start", "--dry-run", "--master-addr", "10.0.0.1", "--kv-cache-memory",
                                       "200GiB"), 1)
    yield Case("start-no-live-hardware", ("start", "--master-addr", "10.0.0.1"), 1)
    yield Case("start-no-live-hardware", ("start", "--json"), 1, env={"DSPARK_MASTER_ADDR": "10.0.0.1"})
    yield Case("probe-no-gpu", ("probe", "--json"), 1)
    yield Case("dp-over-gpus", ("validate", "--model", str(CONFIGS.parent / "model-qwen3-32b"), "--engine", "vllm",
                                "--hardware", "h200", "--", "--data-parallel-size", "2"), 1)


# --- dspark's options and settings x the engine -------------------------------------------------------------

MODEL_32B = str(CONFIGS.parent / "model-qwen3-32b")
# A valid value of each knob some engine does not read (EngineSpec.foreign_knobs), for the cases below.
FOREIGN_VALUES = {"max_total_tokens": "100000", "mem_fraction_static": "0.8", "gpu_memory_utilization": "0.8"}
Given = tuple[tuple[str, ...], dict[str, str]]  # (dspark flags, environment)
Unread = tuple[tuple[str, ...], dict[str, str], str]  # ... and what the refusal says


def _given(knob: str, value: str) -> Iterator[Given]:
    """Each way a user gives `value` to `knob` without the engine's own flags: dspark's flag, the variable."""
    spec = BY_NAME[knob]
    if spec.flag is not None:
        yield (spec.flag, value), {}
    yield (), {spec.env: value}


def _knob_takes(knob: str, value: str) -> bool:
    try:
        BY_NAME[knob].convert(value)
    except Invalid:
        return False
    return True


def _engine_does_not_read(engine: str) -> Iterator[Unread]:
    """Settings `engine` has no use for, each with a value another engine takes, generated from the engine registry:
    its foreign knobs, the platforms it has no build for, the values its parser refuses for a knob both read."""
    spec = engine_spec(engine)
    for knob, _ in spec.foreign_knobs:
        for argv, env in _given(knob, FOREIGN_VALUES[knob]):
            yield argv, env, f"{knob} from {_where(argv, env)} does not apply to {engine}"
    for platform in sorted(set().union(*(engine_spec(e).platforms for e in ENGINE_NAMES)) - set(spec.platforms)):
        for argv, env in _given("platform", platform):
            yield argv, env, f"platform {platform} from {_where(argv, env)} does not apply to {engine}"
    for knob, accepted in spec.knob_values.items():
        others = sorted(v for v in set().union(*(engine_spec(e).knob_values.get(knob, ()) for e in ENGINE_NAMES))
                        if v not in accepted and _knob_takes(knob, v))  # a value dspark takes, the engine not
        for value in RNG.sample(others, k=min(3, len(others))):
            for argv, env in _given(knob, value):
                yield argv, env, f"{knob} {value!r} from {_where(argv, env)} is not a value {engine} takes"


def _where(argv: tuple[str, ...], env: dict[str, str]) -> str:
    """Where the refusal says the value came from: the command line, or the variable that set it."""
    return "the command line" if argv else next(iter(env))


def test_every_foreign_knob_has_a_value_to_try() -> None:
    foreign = {knob for e in ENGINE_NAMES for knob, _ in engine_spec(e).foreign_knobs}
    assert foreign and foreign <= set(FOREIGN_VALUES)


# Settings a given engine has no use for, with a value that is valid for another engine: refused, never ignored.
ENGINE_DOES_NOT_READ: dict[str, tuple[Unread, ...]] = {e: tuple(_engine_does_not_read(e)) for e in ENGINE_NAMES}
# ... and the same kind of value where the engine does read it: planned (the plan may not fit: 0 or 1 is not 2).
ENGINE_READS: dict[str, tuple[tuple[tuple[str, ...], dict[str, str]], ...]] = {
    "vllm": ((("--kv-cache-dtype", "fp8"), {}), ((), {"DSPARK_GPU_MEMORY_UTILIZATION": "0.8"}),
             (("--kv-cache-memory", "20GiB"), {})),
    "sglang": ((("--kv-cache-dtype", "bf16"), {}), ((), {"DSPARK_KV_CACHE_TOKENS": "100000"}),
               ((), {"DSPARK_MEM_FRACTION_STATIC": "0.8"}), (("--kv-cache-memory", "20GiB"), {})),
}


def _option_engine_cases() -> Iterator[Case]:
    for engine in ENGINE_NAMES:
        base = ("validate", "--model", MODEL_32B, "--engine", engine, "--hardware", "h200:8")
        for flag, values in FLAG_BAD.items():  # every bad value of every dspark option, with each engine
            for value in RNG.sample(values, k=min(2, len(values))):
                yield Case("option-engine", (*base, flag, value, *_maybe_json()), 2)
        for argv, env, says in ENGINE_DOES_NOT_READ[engine]:  # refused by the knob x engine rule, not by chance
            yield Case("option-engine-unread", (*base, *argv, *_maybe_json()), 2, env=env, says=says)
        for argv, env in ENGINE_READS[engine]:
            yield Case("option-engine-read", (*base, *argv, *_maybe_json()), 0, env=env)


# --- every environment variable docs/environment.md names --------------------------------------------------

ENVIRONMENT_MD = (ROOT / "docs" / "environment.md").read_text()
DOC_ENV = sorted(set(re.findall(r"`([A-Z][A-Z0-9]*_[A-Z0-9_]*)`", ENVIRONMENT_MD)))
TINY = json.dumps({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 256,
                   "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                   "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 8192,
                   "torch_dtype": "bfloat16"})
CPU_HOST = dumps_snapshot(dataclasses.replace(
    host_snapshot(lambda: HostMemory(total_bytes=64 << 30, available_bytes=48 << 30), cpuinfo=Path("/nonexistent")),
    hostname="cpu-host", cpu_flags=("avx512_bf16", "avx512f"), cpu_arch="x86_64"))
CPU = ("validate", "--model", "{tmp}/m", "--platform", "cpu", "--hardware", "{tmp}/host.json")
CPU_FILES: Files = {"m/config.json": TINY, "host.json": CPU_HOST}
DRY = ("start", "--dry-run", "--master-addr", "10.0.0.1")
# The variables that are not settings: (value, argv, expected exit, files).
OTHER_ENV: dict[str, tuple[tuple[str, tuple[str, ...], int, Files], ...]] = {
    "DSPARK_ENGINE_PYTHON": (("", ("validate",), 2, {}), (" ", DRY, 2, {}),
                             ("{tmp}/no/python", ("validate", "--engine-check"), 2, {}),
                             ("{tmp}/no/python", DRY, 0, {})),
    "DSPARK_ENGINE_VERSION": (("", ("validate",), 2, {}), ("abc", ("validate",), 2, {}), ("1.x", ("validate",), 2, {}),
                              ("9.9.9", ("validate",), 0, {})),
    "DSPARK_ENGINES_DIR": (("{tmp}/none", ("validate",), 0, {}),),  # the test suite's, not read by dspark
    "DSPARK_IMAGE": (("not an image", ("validate",), 0, {}),),  # the compose file's, not read by dspark
    "CUDA_VISIBLE_DEVICES": (("abc", ("validate",), 0, {}), ("", ("validate",), 0, {})),  # no NVML here: the profile
    # The CPU build's own KV budget: whole GiB; vLLM refuses the rest at start-up, so the plan is refused (1).
    "VLLM_CPU_KVCACHE_SPACE": (("0.5", CPU, 1, CPU_FILES), ("abc", CPU, 1, CPU_FILES), ("-1", CPU, 1, CPU_FILES),
                               ("2", CPU, 0, CPU_FILES)),
    "HF_TOKEN": (("hf_not_a_real_token", (*DRY, "--json"), 0, {}),),  # never printed
    # A LeaderWorkerSet's own variables: nnodes, node_rank and master_addr below dspark's.
    "LWS_GROUP_SIZE": (("abc", ("validate",), 2, {}), ("", ("validate",), 2, {}), ("0", ("validate",), 2, {})),
    "LWS_WORKER_INDEX": (("abc", ("validate",), 2, {}), ("-1", ("validate",), 2, {})),
    "LWS_LEADER_ADDRESS": (("", ("validate",), 2, {}), ("10.0.0.3", DRY, 0, {})),
    # The store of recorded boots: a missing, file-blocked or corrupt store never fails a plan or a listing;
    # showing a corrupt record is bad input naming the file.
    "DSPARK_DATA_DIR": (("{tmp}/data", ("validate",), 0, {}), ("{tmp}/notdir", ("observations", "list"), 0,
                                                                {"notdir": "x"}),
                        ("{tmp}/d", ("observations", "show", "0123456789abcdef"), 2,
                         {"d/observations/0123456789abcdef.json": b"\xff{bad"})),
    # Opt-in trace of vLLM's profile run: 0 or unset is the heuristic, anything but 1 is bad input.
    "DSPARK_PROFILE_TRACE": (("0", ("validate",), 0, {}), ("yes", ("validate",), 2, {}), ("2", ("validate",), 2, {})),
    # Read only when a start runs on Ray: a plain plan does not look at it.
    "RAY_ADDRESS": (("nowhere:1", ("validate",), 0, {}),),
}


def _doc_env_cases() -> Iterator[Case]:
    knobs = {k.env for k in KNOBS} | {"DSPARK_RECIPE"}
    for name in DOC_ENV:
        if name in knobs:
            values = ("", " ") if name in TEXT_KNOBS else RNG.sample(ENV_BAD, k=3)
            for value in values:
                yield Case("doc-env", ("validate", *_maybe_json()), 2, env={name: value})
        for value, argv, expected, files in OTHER_ENV.get(name, ()):
            yield Case("doc-env", argv, expected, env={name: value}, files=files)


def test_every_variable_environment_md_names_has_cases() -> None:
    covered = {k.env for k in KNOBS} | {"DSPARK_RECIPE"} | set(OTHER_ENV)
    assert DOC_ENV and set(DOC_ENV) <= covered, sorted(set(DOC_ENV) - covered)
    assert set(OTHER_ENV) <= set(DOC_ENV)  # nothing tested that the page does not name



# --- issue 26: special files, size limits, deep and huge JSON, huge digit strings, over-long names ----------

FILE_SECONDS = 20  # every file case is refused before the file is read: seconds at most, never a hang
TINY_FILES: Files = {"m/config.json": TINY}
ADVISE = ("advise", "--model", "{tmp}/m", "--engine", "vllm", "--hardware", "h200", "--seats", "4,8",
          "--simulator", "dspark")
MODEL = ("validate", "--model", "{tmp}/m", "--engine", "vllm", "--hardware", "h200")
# Every place a user hands dspark a file: (label, argv or env with {F} for the file, its kind, the files around it).
# {F} is {tmp}/<name>; a file of the model directory is one the directory holds, not one given on the command line.
FileInput = tuple[str, tuple[str, ...], dict[str, str], FileKind, Files, str]
FILE_INPUTS: tuple[FileInput, ...] = (
    ("recipe", ("validate", "{F}"), {}, RECIPE, {}, "r.yaml"),
    ("recipe", ("start", "{F}", "--dry-run"), {}, RECIPE, {}, "r.yaml"),
    ("recipe", ("recipes", "show", "{F}"), {}, RECIPE, {}, "r.yaml"),
    ("recipe", ("render", "k8s", "--image", "x", "{F}"), {}, RECIPE, {}, "r.yaml"),
    ("recipe", ("advise", "{F}", "--seats", "4,8", "--simulator", "dspark"), {}, RECIPE, {}, "r.yaml"),
    ("recipe-env", ("validate",), {"DSPARK_RECIPE": "{F}"}, RECIPE, {}, "r.yaml"),
    ("hardware", ("validate", "--hardware", "{F}"), {}, SNAPSHOT, {}, "p.json"),
    ("hardware", ("probe", "--hardware", "{F}"), {}, SNAPSHOT, {}, "p.json"),
    ("hardware-env", ("validate",), {"DSPARK_HARDWARE": "{F}"}, SNAPSHOT, {}, "p.json"),
    ("peer-hardware", ("validate", "--peer-hardware", "{F}"), {}, SNAPSHOT, {}, "p.json"),
    ("cpu-host", ("validate", "--model", "{tmp}/m", "--platform", "cpu", "--hardware", "{F}"), {}, SNAPSHOT,
     TINY_FILES, "host.json"),
    ("config.json", MODEL, {}, MODEL_CONFIG, {}, "m/config.json"),
    ("hf_quant_config", MODEL, {}, MODEL_CONFIG, TINY_FILES, "m/hf_quant_config.json"),
    ("weight-index", MODEL, {}, WEIGHT_INDEX, TINY_FILES, "m/model.safetensors.index.json"),
    ("safetensors", MODEL, {}, SAFETENSORS_HEADER, TINY_FILES, "m/model.safetensors"),
    ("workload", (*ADVISE, "--workload", "{F}"), {}, PROMPTS, TINY_FILES, "w.jsonl"),
    ("calibrate", (*ADVISE, "--calibrate", "{F}"), {}, CALIBRATION, TINY_FILES, "c.json"),
    ("prompts", ("bench", "--url", "http://127.0.0.1:9", "--prompts", "{F}"), {}, PROMPTS, {}, "p.jsonl"),
)
SPECIALS = ("fifo", "dev-zero", "dir", "loop", "dangling", "over-limit")
# What a file that is not one says: dspark.core.files' words, or click's where the option's type checks the path
# first (click.Path(exists=True, dir_okay=False): --workload, --prompts).
SPECIAL_SAYS: dict[str, tuple[str, ...]] = {
    "fifo": ("is a FIFO (named pipe), not a regular file",), "dev-zero": ("is a character device",),
    "dir": ("is a directory",), "loop": ("symbolic links loop", "does not exist"),
    "dangling": ("not found", "does not exist"), "over-limit": ("may be (",),
    "too-long-name": ("file name too long", "does not exist"),
    "too-long-path": ("file name too long", "does not exist"),
}


def _file_case(kind: str, given: FileInput, name: str, *, special: dict[str, str] | None = None,
               content: str | bytes | None = None, says: tuple[str, ...] = ()) -> Case:
    label, argv, env, _, files, _ = given
    path = "{tmp}/" + name
    all_files = dict(files)
    if content is not None:
        all_files[name] = content
    return Case(f"{kind}-{label}", tuple(a.replace("{F}", path) for a in argv),
                2, env={k: v.replace("{F}", path) for k, v in env.items()}, files=all_files,
                says_any=says, special=special or {}, seconds=FILE_SECONDS)


def _special_file_cases() -> Iterator[Case]:
    """Each file input x each kind of file that is not a regular one within its limit, and names too long."""
    for given in FILE_INPUTS:
        kind, name = given[3], given[5]
        for special in SPECIALS:
            how = f"sparse:{kind.limit_bytes + 1}" if special == "over-limit" else special
            if special == "over-limit" and kind is SAFETENSORS_HEADER:
                # The header's 8-byte length claims more than the format's 100 MB: refused before it is read.
                yield _file_case("special-file", given, name, says=("header length is not plausible",),
                                 content=struct.pack("<Q", kind.limit_bytes + 1))
                continue
            yield _file_case("special-file", given, name, special={name: how}, says=SPECIAL_SAYS[special])
        if name.startswith("m/"):
            continue  # a model directory's own files have fixed names
        for long_name, says in ((("x" * 300) + ".json", "too-long-name"),
                                ("/".join(["y" * 200] * 25) + "/f.json", "too-long-path")):
            yield _file_case("long-name", given, long_name, says=SPECIAL_SAYS[says])


# Hostile JSON: nested past any real file, integers past Python's 4,300-digit limit or far past any real value,
# numbers no float holds. Each goes where the file's format puts a number.
def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _json_texts(label: str) -> Iterator[tuple[str, str | bytes]]:
    for depth in (65, RNG.choice([1_000, 100_000])):
        inner = _deep(depth)
        yield f"deep{depth}", {
            "config.json": '{"model_type": "qwen3", "x": ' + inner + "}",
            "hf_quant_config": '{"quantization": ' + inner + "}",
            "weight-index": '{"weight_map": ' + inner + "}",
            "safetensors": '{"t": ' + inner + "}",
            "workload": '{"prompt": ' + inner + "}\n",
            "prompts": '{"prompt": ' + inner + "}\n",
            "calibrate": '{"results": ' + inner + "}",
        }.get(label, '{"gpus": ' + inner + "}")
    for digits in (400, 4301, RNG.choice([5_000, 100_000])):
        if label == "hf_quant_config" and digits < 4300:
            continue  # dspark reads no number of it: only one past Python's limit (which no JSON reader parses)
        number = "9" * digits
        yield f"int{digits}", {
            "config.json": _config_text(json.loads(TINY) | {"hidden_size": "__RAW__"}, {"hidden_size": number}),
            "hf_quant_config": '{"quantization": {"quant_algo": "FP8", "group_size": ' + number + "}}",
            "weight-index": '{"metadata": {"total_size": ' + number + '}, "weight_map": {"t": "a.safetensors"}}',
            "safetensors": '{"t": {"dtype": "F32", "shape": [' + number + '], "data_offsets": [0, 8]}}',
            "workload": '{"prompt": [1, 2], "max_tokens": ' + number + "}\n",
            "prompts": '{"prompt": [' + number + "]}\n",
            "calibrate": '{"seats": ' + number + "}",
        }.get(label, PROBE.read_text().replace('"nodes": 1', '"nodes": ' + number))
    yield "float1e400", {
        "config.json": _config_text(json.loads(TINY) | {"hidden_size": "__RAW__"}, {"hidden_size": "1e400"}),
        "safetensors": '{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1e400]}}',
        "workload": '{"prompt": [1, 2], "max_tokens": 1e400}\n',
        "prompts": '{"prompt": "x", "max_tokens": 1e400}\n',
    }.get(label, '{"x": 1e400}')


JSON_INPUTS = ("hardware", "peer-hardware", "config.json", "hf_quant_config", "weight-index", "safetensors",
               "workload", "calibrate", "prompts")


def _json_cases() -> Iterator[Case]:
    for given in FILE_INPUTS:
        label, name = given[0], given[5]
        if label not in JSON_INPUTS:
            continue
        for variant, text in _json_texts(label):
            content: str | bytes = text
            if label == "safetensors":
                raw = text.encode() if isinstance(text, str) else text
                content = struct.pack("<Q", len(raw)) + raw + b"\0" * 8
            files = dict(given[4])
            if label == "weight-index":
                files["m/a.safetensors"] = b""  # the index's shard: the index is refused first
            yield _file_case(f"json-{variant}", (*given[:4], files, name), name, content=content)


# Huge digit strings for every number a user gives: dspark's options (from the click commands: numeric types,
# the knob table's numeric knobs, and the options whose metavar says a count or size), the knobs' variables, and
# every numeric key of the recipe schema.
NUMBER_COMMANDS: dict[str, tuple[str, ...]] = {
    "validate": ("validate",),
    "start": ("start", "--dry-run", "--master-addr", "10.0.0.1"),
    "advise": ("advise", "--seats", "4,8", "--simulator", "dspark"),
    "render": ("render", "k8s", "--image", "x"),
    "bench": ("bench", "--url", "http://127.0.0.1:9", "--requests", "1"),
}
NUMBER_METAVARS = {"TOKENS", "N", "N,N,...", "SIZE", "SECONDS"}
DIGITS = (400, 4301, 5000)


def _numeric_knob(knob: Any) -> bool:
    """A knob whose value is a number (its converter makes an int or float of "1" or "0.5")."""
    for raw in ("1", "0.5"):
        try:
            if isinstance(knob.convert(raw), int | float) and not isinstance(knob.convert(raw), bool):
                return True
        except Invalid:
            continue
    return False


def _numeric_options(command: str) -> list[str]:
    import click  # noqa: PLC0415

    from dspark.cli import cli  # noqa: PLC0415

    ctx = click.Context(cli)
    group = cli.get_command(ctx, command)  # the commands load lazily
    cmd = group.get_command(ctx, "k8s") if isinstance(group, click.Group) else group
    assert cmd is not None
    knob_flags = {k.flag for k in KNOBS if k.flag and _numeric_knob(k)}
    # click's own int and float, or dspark's bounded ones (named as click names them)
    numeric = {"integer", "float", "integer range", "float range"}
    return sorted(p.opts[0] for p in cmd.params if isinstance(p, click.Option) and not p.is_flag and (
        p.type.name in numeric or p.opts[0] in knob_flags or p.metavar in NUMBER_METAVARS))


def _recipe_number_paths() -> list[tuple[str | int, ...]]:
    """Every numeric key of the recipe's JSON schema, walked."""
    from dspark.config.recipes import recipe_json_schema  # noqa: PLC0415

    schema = recipe_json_schema()
    defs = schema.get("$defs", {})
    found: set[tuple[str | int, ...]] = set()
    stack: list[tuple[dict[str, Any], tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        stack.extend((alt, path) for key in ("anyOf", "oneOf", "allOf") for alt in node.get(key, []))
        if node.get("type") in ("integer", "number") and path[:2] != ("model", "config"):
            found.add(path)
        stack.extend((child, (*path, key)) for key, child in node.get("properties", {}).items())
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            stack.append((node["items"], (*path, 0)))
    return sorted(found, key=str)


def _number_cases() -> Iterator[Case]:
    for command, base in NUMBER_COMMANDS.items():
        for option in _numeric_options(command):
            for digits in DIGITS:
                number = RNG.choice(["", "-"]) + "9" * digits
                yield Case("huge-number-flag", (*base, option, number), 2, says=option, seconds=FILE_SECONDS)
    for knob in KNOBS:
        if _numeric_knob(knob):
            for digits in DIGITS:
                yield Case("huge-number-env", ("validate",), 2, env={knob.env: "9" * digits}, says=knob.env,
                           seconds=FILE_SECONDS)
    for path in _recipe_number_paths():
        for recipe in ("flash-next-vllm", "flash-next-sglang"):
            for digits in DIGITS:
                tree = json.loads(json.dumps(SHIPPED[recipe]))
                node = tree
                for part in path[:-1]:
                    node = node[part] if isinstance(part, int) else node.setdefault(part, {})
                node[path[-1]] = "__DIGITS__"
                text = yaml.safe_dump(tree, sort_keys=False).replace("__DIGITS__", "9" * digits)
                assert "9" * digits in text  # the number itself, not a string standing for it
                yield Case("huge-number-recipe", ("validate", "{tmp}/r.yaml", "--hardware", "h200:8"), 2,
                           files={"r.yaml": text}, says=str(path[-1]), seconds=FILE_SECONDS)


def _engine_python_cases() -> Iterator[Case]:
    """An interpreter that is a directory or cannot be run: a wrong setting (exit 2), wherever it is looked up."""
    interpreters: tuple[tuple[str, Files, dict[str, str]], ...] = (
        ("{tmp}/venv", {}, {"venv": "dir"}),  # the virtualenv, not its python
        ("{tmp}/python", {"python": "x"}, {}),  # a file without the execute bit
        ("{tmp}/" + "p" * 300, {}, {}),  # a name too long for the OS
    )
    for argv in (("validate", "--engine-check"), ("start", "--dry-run", "--master-addr", "10.0.0.1"), ("validate",)):
        for given, files, special in interpreters:
            yield Case("engine-python", (*argv, "--engine-python", given), 2, files=files, special=special,
                       seconds=FILE_SECONDS, says="--engine-python")
            yield Case("engine-python-env", argv, 2, env={"DSPARK_ENGINE_PYTHON": given}, files=files,
                       special=special, seconds=FILE_SECONDS, says="DSPARK_ENGINE_PYTHON")


def test_every_file_input_and_number_class_has_cases() -> None:
    """Generated, not listed: the classes reach every file kind, and the numbers every numeric option."""
    file_kinds = {given[3] for given in FILE_INPUTS}
    assert file_kinds == set(KINDS)
    assert {"--max-num-seqs", "--kv-cache-memory", "--max-model-len", "--tp", "--typical-context"} <= set(
        _numeric_options("validate"))
    assert {"--seats", "--requests", "--input-len", "--output-len"} <= set(_numeric_options("advise"))
    assert {"--seats", "--max-tokens", "--requests", "--timeout"} <= set(_numeric_options("bench"))
    assert {("batching", "max_num_seqs"), ("kv_cache", "memory"), ("observations", 0, "seats")} <= set(
        _recipe_number_paths())

def _maybe_json() -> tuple[str, ...]:
    return ("--json",) if RNG.random() < 0.5 else ()


CASES: list[Case] = [
    *_recipe_field_cases(), *_recipe_structure_cases(), *_config_cases(), *_env_cases(), *_flag_cases(),
    *_engine_flag_cases(), *_probe_cases(), *_launch_cases(), *_option_engine_cases(), *_doc_env_cases(),
    *_special_file_cases(), *_json_cases(), *_number_cases(), *_engine_python_cases(),
]


class _Hang(BaseException):
    """Raised by the alarm: not an Exception, so dspark's error boundary cannot turn it into exit 3."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def _write_files(case: Case, tmp_path: Path) -> None:
    """The case's files and special paths, under its directory."""
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    for name, how in case.special.items():
        _make_special(tmp_path / name, how)


def _check_issue_26_classes(case: Case, argv: list[str], err: str, tmp_path: Path, shown: str) -> None:
    """What the file, JSON and number classes must also say: the cause, the file named, nothing echoed whole."""
    if case.says_any:
        assert any(words in err for words in case.says_any), shown
    if case.special or case.kind.startswith(("special-file", "long-name", "json-")):
        named = [a for a in argv if str(tmp_path) in a] + [v for v in case.env.values() if "{tmp}" in v]
        given = named[-1].replace("{tmp}", str(tmp_path)) if named else ""
        # The message names the file: whole, or its start where it is too long to print (dspark's or click's cut).
        assert shown_path(given) in err or given[:50] in err, shown
    if case.kind.startswith(("special-file", "long-name", "json-", "huge-number", "engine-python")):
        assert len(err) < 3000, shown  # the cause in words: no file, digits or path echoed whole


def _make_special(path: Path, how: str) -> None:
    """A path that is not a plain file of its own: see Case.special."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how == "dir":
        path.mkdir()
    elif how == "loop":
        path.symlink_to(path)
    elif how == "dangling":
        path.symlink_to(path.parent / "nothing-here")
    elif how.startswith("sparse:"):
        with path.open("wb") as handle:
            handle.truncate(int(how.removeprefix("sparse:")))
    else:
        raise AssertionError(how)


def _no_gpu() -> Callable[[str | None, str, str], Any]:
    """validate's hardware resolver as on a machine without NVML, wherever the suite runs."""

    class Absent:
        def snapshot(self) -> Any:
            raise NvmlUnavailable("no NVML in this test")

    def resolver(spec: str | None, default_profile: str, origin: str = "--hardware") -> Any:
        return resolve_hardware(spec, default_profile=default_profile, nvml_factory=Absent, origin=origin)

    return resolver


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 300
    assert {c.expected for c in CASES} == {0, 1, 2}


@pytest.mark.parametrize("case", CASES, ids=[f"{i:03d}-{c.kind}" for i, c in enumerate(CASES)])
def test_generated_bad_input(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from dspark.commands import probe as probe_module  # noqa: PLC0415
    from dspark.planning import validate as validate_module  # noqa: PLC0415

    _write_files(case, tmp_path)
    for name in [k for k in os.environ
                 if k in ("MAX_NUM_SEQS", "CUDA_VISIBLE_DEVICES", "HF_TOKEN", "RAY_ADDRESS")
                 or k.startswith(("DSPARK_", "VLLM_", "LWS_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(tmp_path / "no-engine" / "python"))  # never a real engine
    for name, value in case.env.items():
        monkeypatch.setenv(name, value.replace("{tmp}", str(tmp_path)))
    monkeypatch.setattr(validate_module, "_resolve_hw", _no_gpu())
    monkeypatch.setattr(probe_module, "resolve_hardware", lambda spec: _no_gpu()(spec, "gb10x2", "--hardware"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in case.argv]

    previous = signal.signal(signal.SIGALRM, _alarm)
    seconds = case.seconds or SECONDS_PER_CASE
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        code = main(argv)
    except _Hang:
        pytest.fail(f"{case.kind}: no answer within {seconds} s: dspark {[a[:80] for a in argv]}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    shown = f"dspark {argv!r} env={case.env}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert code == case.expected, shown
    assert "Traceback" not in err and "Traceback" not in out, shown
    assert "internal error" not in err, shown
    if "--json" in argv and (argv.index("--json") < argv.index("--") if "--" in argv else True):
        document = json.loads(out)  # exactly one JSON object, success or failure
        assert isinstance(document, dict), shown
        if code != 0 and "error" in document:
            assert document["exit_code"] == code, shown
            assert set(document["error"]) == {"code", "message", "hint"}, shown
    if case.says is not None:
        assert case.says in err, shown
    _check_issue_26_classes(case, argv, err, tmp_path, shown)
    if "HF_TOKEN" in case.env:
        assert case.env["HF_TOKEN"] not in out + err, shown
    if case.kind in ("engine-flag-abbreviated", "engine-flag-ordinary"):
        _read_as_the_engine_reads(case, json.loads(out), argv, shown)


def _read_as_the_engine_reads(case: Case, document: dict[str, Any], argv: list[str], shown: str) -> None:
    """Flags the engine's parser takes raise no warning; an abbreviation is planned with its value."""
    codes = [f["code"] for f in document["findings"]]
    assert "argv-not-checked" not in codes, shown
    if case.kind == "engine-flag-abbreviated":
        assert "engine-flag-abbreviated" in codes, shown
        assert document["settings"]["max_num_seqs"]["value"] == int(argv[-1]), shown


# --- hostile servers: what `dspark bench` reads (SSE streams, usage counts, /v1/models, /metrics) -----------
# One HostileServer (tests/bench/hostile_server.py) answers every case at its own URL. A stream or model list of
# the wrong shape is exit 2 naming the cause; a failed request (HTTP error, an `error` event, a broken
# connection) is exit 1 with the results; a /metrics that is garbage, huge or trickling is never fatal (exit 0,
# its figures shown as not read). Never a traceback, a hang or a negative rate.

BENCH_ARGS = ("--requests", "2", "--concurrency", "1", "--max-tokens", "3", "--input-len", "4", "--no-progress",
              "--timeout", "20")


@dataclass(frozen=True)
class ServerCase:
    """One hostile server behaviour, the bench flags it is met with, and the exit code it must end with."""

    kind: str
    behaviour: Any  # tests.bench.hostile_server.Behaviour
    expected: int
    args: tuple[str, ...] = ()
    says: str | None = None


def _bad_payloads(chat: bool) -> Iterator[tuple[str, bytes]]:
    """(what, `data:` payload) that is not an OpenAI chunk; each must be refused (exit 2)."""
    shapes = ["[1,2]", "5", '"text"', "null", "true", "[]", '{"choices":5}', '{"choices":"abc"}', '{"choices":{}}',
              '{"choices":[5]}', '{"choices":[null]}', '{"choices":[[1]]}', '{"choices":[{}],"usage":7}',
              '{"choices":[],"usage":[1]}', '{"choices":[],"usage":"x"}', '{"choices":[{"text":"a"}],"usage":true}']
    if chat:
        shapes += ['{"choices":[{"delta":5}]}', '{"choices":[{"delta":"x"}]}', '{"choices":[{"delta":[1]}]}']
    counts = ['"3"', "-184", "-1", "1" + "0" * 30, "1.5", "true", "[]", "{}", "4", "99", "NaN", "Infinity",
              "1e400", "9" * 5000]
    for c in counts:
        shapes.append('{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":' + c + "}}")
    for c in ('"4"', "-1", "1" + "0" * 40, "2.5", "false"):
        shapes.append('{"choices":[],"usage":{"prompt_tokens":' + c + ',"completion_tokens":3}}')
    # Not JSON at all; none of these match the completion fast path (a chunk holding `"choices":[{`).
    shapes += ["{", "{'usage': 1}", '{"usage":{"completion_tokens":3}', "usage", "\x00\x01", _deep(100_000),
               '{"usage":' + _deep(5000) + "}"]
    for s in shapes:
        yield s[:40], s.encode("utf-8", "surrogatepass")
    yield "not UTF-8", b'{"usage":{"completion_tokens":3},"x":"\xff\xfe"}'


def _stream_cases() -> Iterator[ServerCase]:
    from tests.bench.hostile_server import Behaviour, chunk_event, good_stream  # noqa: PLC0415

    for chat in (False, True):
        endpoint = ("--endpoint", "chat") if chat else ()
        usage_ok = good_stream(chat, 3).split(b"\n\n")[-3] + b"\n\n"
        for _what, payload in _bad_payloads(chat):
            event = b"data: " + payload + b"\n\n"
            for where in RNG.sample(("first", "after-chunks", "as-usage"), k=2):
                if where == "first":
                    body = event + chunk_event(chat) * 3 + usage_ok + b"data: [DONE]\n\n"
                elif where == "after-chunks":
                    body = chunk_event(chat) * RNG.randrange(1, 3) + event + usage_ok + b"data: [DONE]\n\n"
                else:
                    body = chunk_event(chat) * 3 + event + b"data: [DONE]\n\n"
                procs = ("--client-processes", "2") if RNG.random() < 0.03 else ()
                yield ServerCase(f"sse-shape-{where}", Behaviour(stream=body), 2,
                                 (*endpoint, "--no-metrics", *procs, *_maybe_json()), says="error: ")
        # An event that never ends: refused at its size limit, not buffered without bound.
        yield ServerCase("sse-endless-event", Behaviour(stream=b"data: {" + b"x" * (3 << 20)), 2,
                         (*endpoint, "--no-metrics"), says="without the blank line")
        # Framing SSE allows: comments, CRLF, `event:` lines, no space after `data:`, no [DONE] before the close.
        good = good_stream(chat, 3)
        for what, body in (("crlf", good.replace(b"\n", b"\r\n")), ("comments", b": ping\n\n" + good),
                           ("event-lines", good.replace(b"data: ", b"event: x\ndata: ")),
                           ("no-space", good.replace(b"data: ", b"data:")),
                           ("no-done", good.replace(b"data: [DONE]\n\n", b"")),
                           ("extra-keys", good.replace(b'"choices"', b'"zz": [1, {"a": null}], "choices"'))):
            yield ServerCase(f"sse-framing-{what}", Behaviour(stream=body), 0, (*endpoint, "--no-metrics",
                                                                               *_maybe_json()))
        # Failed requests: results kept, exit 1.
        for what, behaviour in (
                ("error-event", Behaviour(stream=b'data: {"error": {"message": "boom"}}\n\n')),
                ("error-string", Behaviour(stream=b'data: {"error": "boom"}\n\n')),
                ("error-number", Behaviour(stream=b'data: {"error": 5}\n\n')),
                ("only-done", Behaviour(stream=b"data: [DONE]\n\n")),
                ("empty", Behaviour(stream=b"")),
                ("http-500", Behaviour(head=b"HTTP/1.1 500 Oops\r\nconnection: close\r\n\r\n", stream=b"{}")),
                ("http-500-escapes", Behaviour(head=b"HTTP/1.1 500 Oops\r\nconnection: close\r\n\r\n",
                                               stream=b"\x1b[2J\x1b]0;owned\x07 boom")),
                ("error-escapes", Behaviour(stream=b'data: {"error": {"message": "\\u001b[2Jboom"}}\n\n')),
                ("not-http", Behaviour(head=b"SSH-2.0-OpenSSH\r\n\r\n")),
                ("bad-status", Behaviour(head=b"HTTP/1.1 abc OK\r\n\r\n")),
                ("negative-length", Behaviour(head=b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n")),
                ("bad-chunk", Behaviour(head=b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")),
                ("endless-chunk-line", Behaviour(head=b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                                                 + b"f" * 5000)),
                ("huge-head", Behaviour(head=b"HTTP/1.1 200 OK\r\nx: " + b"y" * 70_000))):
            yield ServerCase(f"http-{what}", behaviour, 1, (*endpoint, "--no-metrics", *_maybe_json()))


def _models_cases() -> Iterator[ServerCase]:
    from tests.bench.hostile_server import Behaviour  # noqa: PLC0415

    bodies = [b"not json", b"[]", b"5", b'{"data": 5}', b'{"data": "abc"}', b'{"data": []}', b'{"data": [5]}',
              b'{"data": [null]}', b'{"data": [{}]}', b'{"data": [{"id": 5}]}', b'{"data": [{"id": ""}]}',
              b'{"data": [{"id": null}]}', b'{"data": [{"id": "\\u001b[31mred"}]}', b'{"nodata": 1}',
              ('{"data": ' + _deep(100_000) + "}").encode(), b'{"data": [{"id": ' + b"9" * 5000 + b"}]}",
              b"\xff\xfe\x00"]
    for body in bodies:
        yield ServerCase("models-shape", Behaviour(models=body), 2, ("--no-metrics", *_maybe_json()),
                         says="/v1/models")
        # Named with --served-model the list is read only for the engine's name: never fatal.
        yield ServerCase("models-shape-named", Behaviour(models=body), 0,
                         ("--served-model", "m", "--no-metrics", *_maybe_json()))
    for status in (404, 500, 302):
        yield ServerCase("models-status", Behaviour(models=b"{}", models_status=status), 2, ("--no-metrics",),
                         says="/v1/models")
    yield ServerCase("models-huge", Behaviour(models=b'{"data": [{"id": "m"}], "x": "' + b"y" * (17 << 20) + b'"}'),
                     2, ("--no-metrics",), says="exceeds")


def _metrics_cases() -> Iterator[ServerCase]:
    from tests.bench.hostile_server import GOOD_METRICS, Behaviour  # noqa: PLC0415

    good = GOOD_METRICS.decode()
    fixed = [b"", b"garbage", b"\xff\xfe\x00\x01" * 100, b"vllm:num_requests_running{engine=\"0\"} abc\n",
             b"vllm:num_requests_running{engine=\"0} 1\n", b"vllm:num_requests_running NaN\n",
             b"vllm:num_requests_running +Inf\nvllm:kv_cache_usage_perc -Inf\n",
             b"vllm:num_requests_running -5\nvllm:num_preemptions_total -7\n",
             b"vllm:num_requests_running 1e308\nvllm:prefix_cache_hits_total 1e308\n",
             b"vllm:num_requests_running " + b"9" * 5000 + b"\n",
             b"vllm:num_requests_running 1\n" * 20_000,
             b"# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running 1\n",
             b'other_series{le="1"} 1\n' * 400_000,  # 9 MB of series dspark does not read
             b"x" * (17 << 20),  # over the size limit
             b"vllm:num_requests_running{" + b'a="b",' * 100_000 + b"} 1\n"]
    for body in fixed:
        yield ServerCase("metrics-fixed", Behaviour(metrics=body), 0, _maybe_json())
    for _ in range(50):  # the real text, damaged at random
        raw = bytearray(good.encode())
        for _flip in range(RNG.randrange(1, 8)):
            raw[RNG.randrange(len(raw))] = RNG.choice(b'{}"=\n #-.e9\x00\xff')
        yield ServerCase("metrics-damaged", Behaviour(metrics=bytes(raw)), 0, _maybe_json())
    for _ in range(2):
        yield ServerCase("metrics-trickle", Behaviour(trickle_metrics=True), 0, _maybe_json())


SERVER_CASES: list[ServerCase] = [*_stream_cases(), *_models_cases(), *_metrics_cases()]


@pytest.fixture(scope="module")
def hostile() -> Iterator[Any]:
    from tests.bench.helpers import in_thread  # noqa: PLC0415
    from tests.bench.hostile_server import HostileServer  # noqa: PLC0415

    with in_thread(HostileServer()) as server:
        yield server


def test_there_are_enough_server_cases() -> None:
    assert len(SERVER_CASES) >= 300
    assert {c.expected for c in SERVER_CASES} == {0, 1, 2}


@pytest.mark.parametrize("case", SERVER_CASES, ids=[f"{i:03d}-{c.kind}" for i, c in enumerate(SERVER_CASES)])
def test_generated_hostile_server(case: ServerCase, hostile: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = hostile.add(case.behaviour)
    argv = ["bench", "--url", url, *BENCH_ARGS, *case.args]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS_PER_CASE)
    try:
        code = main(argv)
    except _Hang:
        pytest.fail(f"{case.kind}: no answer within {SECONDS_PER_CASE} s: dspark {argv}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    shown = f"dspark {argv!r}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert code == case.expected, shown
    assert "Traceback" not in err + out and "internal error" not in err, shown
    assert "\x1b" not in out + err, shown  # nothing the server sent reaches the terminal as an escape sequence
    if case.says is not None:
        assert case.says in err, shown
    if "--json" in argv:
        document = json.loads(out)
        assert isinstance(document, dict), shown
        for key in ("aggregate_decode_tps", "per_stream_decode_tps", "request_throughput"):
            value = (document.get("summary") or {}).get(key)
            assert value is None or value >= 0, shown  # never a negative rate
    else:
        assert not re.search(r"\| +-\d", out), shown  # no negative figure in the table
