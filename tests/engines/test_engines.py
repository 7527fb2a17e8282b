"""Engine adapters: argv built from a ServeConfig, user flags passed through, managed flags deduplicated."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence

import pytest

from dspark.core.errors import EngineArgError, EngineNotInstalledError, InputError
from dspark.engines import get_engine
from dspark.engines.argv import strip_flags
from dspark.engines.base import ArgvCheck, check_argv, require_ok
from dspark.engines.inside import MARKER
from dspark.engines.serve_config import ServeConfig
from dspark.engines.sglang.adapter import SglangEngine
from dspark.engines.vllm.adapter import VllmEngine
from dspark.runtime.launch import LaunchPlan


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--max-num-seqs", "3", "--foo", "1"], ("--foo", "1")),
        (["--max-num-seqs=3", "--foo"], ("--foo",)),
        (["--max_num_seqs", "3"], ()),
        (["--no-enable-prefix-caching", "--enforce-eager"], ("--enforce-eager",)),
        (["--enable-prefix-caching", "--x"], ("--x",)),
    ],
)
def test_strip_flags(argv: list[str], expected: tuple[str, ...]) -> None:
    managed = {"--max-num-seqs": 1, "--enable-prefix-caching": 0}
    assert strip_flags(argv, managed) == expected


def test_vllm_plan_single_node_console() -> None:
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=12, engine_values={"kv_cache_memory_bytes": 1 << 30},
                      max_model_len=4096, extra_args=("--enforce-eager", "--max-num-seqs", "3"))
    plan = VllmEngine(console=True).build_plan(cfg, "/py")
    assert plan.argv[:5] == ("/py", "-m", "vllm.entrypoints.cli.main", "serve", "/m")
    assert plan.argv.count("--max-num-seqs") == 1
    assert plan.argv[plan.argv.index("--max-num-seqs") + 1] == "12"
    assert "--enforce-eager" in plan.argv
    assert "--gpu-memory-utilization" not in plan.argv  # not set: the engine's default applies
    assert VllmEngine().parser_argv(plan)[0] == "/m"


def test_vllm_plan_without_console_uses_api_server_module() -> None:
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=4)
    plan = VllmEngine(console=False).build_plan(cfg, "/py")
    assert plan.argv[:5] == ("/py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m")
    assert VllmEngine().parser_argv(plan)[:2] == ["--model", "/m"]


def test_vllm_two_node_flags_and_headless_worker() -> None:
    base = dict(engine="vllm", model="/m", max_num_seqs=8, tensor_parallel_size=2, nnodes=2,
                master_addr="127.0.0.1", master_port=29501)
    head = VllmEngine(console=True).build_plan(ServeConfig(**base, node_rank=0), "/py").argv  # type: ignore[arg-type]
    worker = VllmEngine(console=True).build_plan(ServeConfig(**base, node_rank=1), "/py").argv  # type: ignore[arg-type]
    assert "--headless" not in head
    assert "--headless" in worker
    for argv in (head, worker):
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--master-addr") + 1] == "127.0.0.1"
    assert worker[worker.index("--node-rank") + 1] == "1"


def test_headless_worker_needs_console() -> None:
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=8, nnodes=2, node_rank=1)
    with pytest.raises(EngineNotInstalledError, match="headless"):
        VllmEngine(console=False).build_plan(cfg, "/py")


def test_sglang_plan() -> None:
    cfg = ServeConfig(engine="sglang", model="/m", max_num_seqs=16, engine_values={"max_total_tokens": 100_000},
                      max_model_len=262144,
                      speculative={"method": "mtp", "num_speculative_tokens": 4}, tensor_parallel_size=2, nnodes=2,
                      node_rank=1, master_addr="10.0.0.1", master_port=5000)
    argv = SglangEngine().build_plan(cfg, "/py").argv
    assert argv[:5] == ("/py", "-m", "sglang.launch_server", "--model-path", "/m")
    pairs = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--max-running-requests"] == "16"
    assert pairs["--max-total-tokens"] == "100000"
    assert pairs["--speculative-algorithm"] == "NEXTN"
    assert pairs["--dist-init-addr"] == "10.0.0.1:5000"
    assert pairs["--node-rank"] == "1"


MTP2 = '{"method":"mtp","num_speculative_tokens":2}'
SGLANG_NEXTN = ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                "--speculative-num-draft-tokens", "4")


def test_vllm_keeps_the_users_speculative_config_when_no_recipe_sets_one() -> None:
    """`dspark start --model DIR -- --speculative-config ...`: dspark sized the pool with MTP, so the engine gets it."""
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=4, extra_args=("--speculative-config", MTP2))
    argv = VllmEngine(console=True).build_plan(cfg, "/py").argv
    assert argv.count("--speculative-config") == 1
    assert argv[argv.index("--speculative-config") + 1] == MTP2


def test_vllm_recipe_speculative_replaces_the_users_copy() -> None:
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=4, extra_args=("-sc", MTP2),
                      speculative={"method": "mtp", "num_speculative_tokens": 4})
    argv = VllmEngine(console=True).build_plan(cfg, "/py").argv
    assert "-sc" not in argv and argv.count("--speculative-config") == 1
    assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 4


def test_sglang_keeps_the_users_speculative_flags_when_no_recipe_sets_them() -> None:
    cfg = ServeConfig(engine="sglang", model="/m", max_num_seqs=4, extra_args=SGLANG_NEXTN)
    argv = SglangEngine().build_plan(cfg, "/py").argv
    tail = argv[argv.index("--speculative-algorithm"):]
    assert tail[:len(SGLANG_NEXTN)] == SGLANG_NEXTN
    assert argv.count("--speculative-algorithm") == 1


def test_sglang_recipe_speculative_replaces_the_users_flags() -> None:
    cfg = ServeConfig(engine="sglang", model="/m", max_num_seqs=4, extra_args=SGLANG_NEXTN,
                      speculative={"method": "mtp", "num_speculative_tokens": 2})
    argv = SglangEngine().build_plan(cfg, "/py").argv
    assert argv.count("--speculative-algorithm") == 1 and argv.count("--speculative-num-steps") == 1
    assert argv[argv.index("--speculative-num-steps") + 1] != "3"  # the recipe's 2 tokens, not the user's 3 steps


def test_unknown_engine_is_input_error() -> None:
    with pytest.raises(InputError, match="unknown engine 'tgi'"):
        get_engine("tgi")


def _fake_runner(payload: dict[str, object]) -> object:
    def run(argv: Sequence[str], stdin: str, timeout: float, env: Mapping[str, str]
            ) -> subprocess.CompletedProcess[str]:
        assert json.loads(stdin)["argv"][0] == "/m"
        return subprocess.CompletedProcess(argv, 0, "noise\n" + MARKER + json.dumps(payload) + "\n", "")
    return run


def test_check_argv_reports_parser_error_and_require_ok_raises() -> None:
    engine = VllmEngine(console=True)
    plan = engine.build_plan(ServeConfig(engine="vllm", model="/m", max_num_seqs=2), "/py")
    check = check_argv(engine, plan, "/py", runner=_fake_runner(  # type: ignore[arg-type]
        {"ok": False, "version": "0.32.0", "error": "vllm serve: error: unrecognized arguments: --bogus"}))
    assert check == ArgvCheck(ok=False, engine_version="0.32.0", parsed={},
                              error="vllm serve: error: unrecognized arguments: --bogus")
    with pytest.raises(EngineArgError, match="unrecognized arguments: --bogus"):
        require_ok(engine, plan, check)


def test_check_argv_import_error_is_not_installed() -> None:
    engine = VllmEngine(console=True)
    plan = engine.build_plan(ServeConfig(engine="vllm", model="/m", max_num_seqs=2), "/py")
    with pytest.raises(EngineNotInstalledError, match="cannot import vllm"):
        check_argv(engine, plan, "/py", runner=_fake_runner(  # type: ignore[arg-type]
            {"ok": False, "error": "No module named 'vllm'", "import_error": True}))


def test_check_argv_without_a_device_says_how_vllm_033s_parser_loads() -> None:
    """vLLM 0.33's parser needs a device type; on a host without one the check dies before answering."""
    engine = VllmEngine(console=True)
    plan = engine.build_plan(ServeConfig(engine="vllm", model="/m", max_num_seqs=2), "/py")
    stderr = ('  File ".../vllm/config/device.py", line 55, in __post_init__\n    raise RuntimeError(\n'
              "RuntimeError: Failed to infer device type, please set the environment variable "
              "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.\n")

    def run(argv: Sequence[str], stdin: str, timeout: float, env: Mapping[str, str]
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", stderr)

    with pytest.raises(EngineNotInstalledError, match="Failed to infer device type") as err:
        check_argv(engine, plan, "/py", runner=run)
    assert err.value.hint is not None and "VLLM_TARGET_DEVICE" in err.value.hint


def test_plan_is_a_value() -> None:
    assert LaunchPlan("vllm", ("a",)) == LaunchPlan("vllm", ("a",))


def test_require_ok_hides_the_values_the_parser_echoes() -> None:
    """argparse names what it rejects with the values after it: a misspelt or abbreviated secret flag's keys
    are hidden in the error (issue 26, item 3), in each form argparse writes."""
    engine = VllmEngine(console=True)
    for flag in ("--apikey", "--api_kye", "--api-keys", "--hf-tokn", "--admin-api-k"):
        plan = engine.build_plan(ServeConfig(engine="vllm", model="/m", max_num_seqs=2,
                                             extra_args=(flag, "sk-echoed-1", "sk-echoed-2")), "/py")
        for error in (f"vllm serve: error: unrecognized arguments: {flag} sk-echoed-1 sk-echoed-2",
                      f"argument {flag}: invalid choice: 'sk-echoed-1' (choose from 'a', 'b')"):
            with pytest.raises(EngineArgError) as raised:
                require_ok(engine, plan, ArgvCheck(ok=False, engine_version="0.32.0", parsed={}, error=error))
            assert "sk-echoed" not in raised.value.message, raised.value.message
            assert flag in raised.value.message
