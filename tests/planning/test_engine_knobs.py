"""Every knob x engine pair: a setting the engine reads reaches its launch argv under the engine's own flag name;
one it does not read is an error (exit 2) naming the knob, the engine and what to use; never a no-op.

The expectations are written out here from the engines' own flag names (vLLM `vllm serve`, SGLang
`launch_server`), not taken from dspark's tables.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dspark.cli import main
from dspark.config.knobs import KNOB_NAMES, KNOBS

MODEL = Path(__file__).resolve().parents[1] / "fixtures" / "model-qwen3-32b"  # 64 layers, 8 KV heads x 128, bf16
MULTI = {"DSPARK_NNODES": "2", "DSPARK_TP": "2", "DSPARK_MASTER_ADDR": "10.0.0.9"}

# One pin of 1 GiB in SGLang's terms: 1,073,741,824 B / (64 layers x 2 (K and V) x 8 KV heads x 128 x 2 B)
# = 1,073,741,824 / 262,144 = 4,096 tokens.
ONE_GIB_TOKENS = "4096"

# knob -> (environment, extra environment, {engine: argv fragment it must produce, or the knob to use instead}).
Expected = dict[str, tuple[str, ...] | str]
CASES: dict[str, tuple[dict[str, str], dict[str, str], Expected]] = {
    "served_model_name": ({"DSPARK_SERVED_MODEL_NAME": "m1"}, {},
                          {"vllm": ("--served-model-name", "m1"), "sglang": ("--served-model-name", "m1")}),
    "tensor_parallel_size": ({"DSPARK_TP": "2"}, {},
                             {"vllm": ("--tensor-parallel-size", "2"), "sglang": ("--tp-size", "2")}),
    "pipeline_parallel_size": ({"DSPARK_PP": "2"}, {},
                               {"vllm": ("--pipeline-parallel-size", "2"), "sglang": ("--pp-size", "2")}),
    "nnodes": ({"DSPARK_NNODES": "2"}, {"DSPARK_TP": "2", "DSPARK_MASTER_ADDR": "10.0.0.9"},
               {"vllm": ("--nnodes", "2"), "sglang": ("--nnodes", "2")}),
    "node_rank": ({"DSPARK_NODE_RANK": "1"}, MULTI, {"vllm": ("--node-rank", "1"), "sglang": ("--node-rank", "1")}),
    "master_addr": ({"DSPARK_MASTER_ADDR": "10.0.0.7"}, {"DSPARK_NNODES": "2", "DSPARK_TP": "2"},
                    {"vllm": ("--master-addr", "10.0.0.7"), "sglang": ("--dist-init-addr", "10.0.0.7:29500")}),
    "master_port": ({"DSPARK_MASTER_PORT": "29555"}, MULTI,
                    {"vllm": ("--master-port", "29555"), "sglang": ("--dist-init-addr", "10.0.0.9:29555")}),
    "max_model_len": ({"DSPARK_MAX_MODEL_LEN": "4096"}, {},
                      {"vllm": ("--max-model-len", "4096"), "sglang": ("--context-length", "4096")}),
    "kv_cache_dtype": ({"DSPARK_KV_CACHE_DTYPE": "fp8_e4m3"}, {},
                       {"vllm": ("--kv-cache-dtype", "fp8_e4m3"), "sglang": ("--kv-cache-dtype", "fp8_e4m3")}),
    "kv_cache_memory_bytes": ({"DSPARK_KV_CACHE_MEMORY": "1GiB"}, {},
                              {"vllm": ("--kv-cache-memory-bytes", "1073741824"),
                               "sglang": ("--max-total-tokens", ONE_GIB_TOKENS)}),
    "max_total_tokens": ({"DSPARK_KV_CACHE_TOKENS": "100000"}, {},
                         {"vllm": "kv_cache_memory_bytes", "sglang": ("--max-total-tokens", "100000")}),
    "gpu_memory_utilization": ({"DSPARK_GPU_MEMORY_UTILIZATION": "0.8"}, {},
                               {"vllm": ("--gpu-memory-utilization", "0.8"), "sglang": "mem_fraction_static"}),
    "mem_fraction_static": ({"DSPARK_MEM_FRACTION_STATIC": "0.8"}, {},
                            {"vllm": "gpu_memory_utilization", "sglang": ("--mem-fraction-static", "0.8")}),
    "max_num_seqs": ({"MAX_NUM_SEQS": "3"}, {},
                     {"vllm": ("--max-num-seqs", "3"), "sglang": ("--max-running-requests", "3")}),
    "max_num_batched_tokens": ({"DSPARK_MAX_NUM_BATCHED_TOKENS": "4096"}, {},
                               {"vllm": ("--max-num-batched-tokens", "4096"),
                                "sglang": ("--chunked-prefill-size", "4096")}),
    "enable_prefix_caching": ({"DSPARK_PREFIX_CACHING": "0"}, {},
                              {"vllm": ("--no-enable-prefix-caching",), "sglang": ("--disable-radix-cache",)}),
    "host": ({"DSPARK_HOST": "0.0.0.0"}, {}, {"vllm": ("--host", "0.0.0.0"), "sglang": ("--host", "0.0.0.0")}),
    "port": ({"DSPARK_PORT": "9001"}, {}, {"vllm": ("--port", "9001"), "sglang": ("--port", "9001")}),
}
# Knobs whose pairs are covered by their own tests below (or that choose the engine, model and hardware).
ELSEWHERE = {"engine", "model", "hardware", "platform", "distributed_runtime", "num_speculative_tokens"}


def test_every_knob_is_audited() -> None:
    assert set(CASES) | ELSEWHERE == set(KNOB_NAMES)


def _validate(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], engine: str,
              env: dict[str, str], *argv: str) -> tuple[int, dict[str, Any], str]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", "/nonexistent/python")  # no engine: plan only
    for name, value in {"DSPARK_MODEL": str(MODEL), "DSPARK_ENGINE": engine, **env}.items():
        monkeypatch.setenv(name, value)
    code = main(["validate", "--json", *argv])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def _contains(argv: list[str], fragment: tuple[str, ...]) -> bool:
    return any(tuple(argv[i:i + len(fragment)]) == fragment for i in range(len(argv)))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("knob", sorted(CASES))
def test_knob_engine_pair(knob: str, engine: str, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    env, extra, expected = CASES[knob]
    code, out, err = _validate(monkeypatch, capsys, engine, {"DSPARK_HARDWARE": "h200:8", **extra, **env})
    want = expected[engine]
    if isinstance(want, str):  # the engine has no use for it: refused, naming knob, engine and what to use
        assert code == 2, out
        error = out["error"]
        assert isinstance(error, dict)
        assert error["message"].startswith(f"{knob} from {next(iter(env))} does not apply to {engine}")
        assert f"use {want} for {engine}" in error["hint"]
        return
    assert code in (0, 1), (out.get("error"), err)  # 1: the plan does not fit this GPU, which is not the knob
    argv = out["argv"]
    assert isinstance(argv, list) and _contains(argv, want), argv


def test_the_same_knobs_through_dspark_flags(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The pairs above through the command line, where dspark has a flag of its own for the knob."""
    flags = {k.name: k.flag for k in KNOBS if k.flag}
    for knob, (env, extra, expected) in sorted(CASES.items()):
        if knob not in flags:
            continue
        for engine, want in expected.items():
            (value,) = env.values()
            code, out, _ = _validate(monkeypatch, capsys, engine, {"DSPARK_HARDWARE": "h200:8", **extra},
                                     flags[knob], value)
            if isinstance(want, str):
                assert code == 2 and "does not apply to" in out["error"]["message"]
            else:
                assert code in (0, 1) and _contains(out["argv"], want), (knob, engine, out.get("error"))


@pytest.mark.parametrize(("engine", "value", "ok"), [
    ("vllm", "fp8", True), ("sglang", "fp8", False),  # SGLang names fp8 by its format: fp8_e4m3 / fp8_e5m2
    ("vllm", "bf16", False), ("sglang", "bf16", True),  # bf16 is SGLang's spelling; vLLM's is bfloat16
    ("vllm", "float16", True), ("sglang", "float16", False),
])
def test_kv_cache_dtype_values_each_engine_takes(engine: str, value: str, ok: bool, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _validate(monkeypatch, capsys, engine, {"DSPARK_HARDWARE": "h200", "DSPARK_KV_CACHE_DTYPE": value})
    if ok:
        assert code in (0, 1) and _contains(out["argv"], ("--kv-cache-dtype", value))
    else:
        assert code == 2
        assert out["error"]["message"] == (
            f"kv_cache_dtype {value!r} from DSPARK_KV_CACHE_DTYPE is not a value {engine} takes")


@pytest.mark.parametrize(("engine", "ok"), [("vllm", True), ("sglang", False)])
def test_platform_cpu_is_vllms_cpu_build_only(engine: str, ok: bool, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _validate(monkeypatch, capsys, engine, {"DSPARK_PLATFORM": "cpu"}, "--kv-cache-memory", "1GiB")
    if ok:
        assert code in (0, 1) and "error" not in out, out.get("error")  # 1: 61 GiB of weights beside host memory
    else:
        assert code == 2
        assert out["error"]["message"].startswith(
            "platform cpu from DSPARK_PLATFORM does not apply to sglang")
        assert "--engine vllm" in out["error"]["hint"]


def test_sglang_byte_pin_is_its_token_pin_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _validate(monkeypatch, capsys, "sglang", {"DSPARK_HARDWARE": "h200"}, "--kv-cache-memory", "1GiB")
    assert code in (0, 1)
    cap = out["capacity"]
    assert isinstance(cap, dict)
    assert (cap["kv_pool_tokens"], cap["kv_budget_bytes"], cap["kv_budget_source"]) == (4096, 1 << 30, "pinned")
    notes = [f["message"] for f in out["findings"] if f["code"] == "engine-note"]
    assert any("--max-total-tokens 4,096" in n and "1,073,741,824 B" in n for n in notes), notes


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_launch_only_engine_flags_after_the_separator_reach_the_launch(
    engine: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--served-model-name, --host and --port after -- used to be stripped from the argv and never passed."""
    code, out, _ = _validate(monkeypatch, capsys, engine, {"DSPARK_HARDWARE": "h200"}, "--",
                             "--served-model-name", "foo", "--host", "0.0.0.0", "--port", "9000")
    assert code == 0
    argv = out["argv"]
    assert isinstance(argv, list)
    for fragment in (("--served-model-name", "foo"), ("--host", "0.0.0.0"), ("--port", "9000")):
        assert _contains(argv, fragment) and argv.count(fragment[0]) == 1, argv


def test_an_address_for_a_single_node_is_said_unused(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _validate(monkeypatch, capsys, "vllm", {"DSPARK_HARDWARE": "h200", "DSPARK_MASTER_PORT": "29555"})
    assert code == 0
    assert "master_port from DSPARK_MASTER_PORT is not used: a single-node launch dials no node 0" in out["notices"]
