"""start: a dry run plans anywhere (no engine, no GPU); a real start needs live or named hardware and the engine."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from dspark.commands.probe import probe
from dspark.core.errors import EngineArgError, EngineNotInstalledError, RefusedError, SettingsError
from dspark.engines.base import ArgvCheck
from dspark.engines.spec import Engine
from dspark.hardware.nvml import NvmlUnavailable
from dspark.hardware.select import resolve_hardware
from dspark.planning import validate as validate_module
from dspark.planning.start import StartRequest, plan_start
from dspark.planning.validate import ValidateRequest
from dspark.runtime.launch import LaunchPlan


class _NoNvml:
    def snapshot(self) -> Any:
        raise NvmlUnavailable("no NVML in this test")


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)

    def resolver(spec: str | None, default_profile: str, origin: str = "--hardware") -> Any:
        return resolve_hardware(spec, default_profile=default_profile, nvml_factory=_NoNvml, origin=origin)

    monkeypatch.setattr(validate_module, "_resolve_hw", resolver)
    yield


def _request(tmp_path: Path, *, dry_run: bool, flags: dict[str, object] | None = None,
             env: dict[str, str] | None = None) -> StartRequest:
    no_engine = {"DSPARK_ENGINE_PYTHON": str(tmp_path / "nowhere" / "python"), **(env or {})}
    return StartRequest(validate=ValidateRequest(flags=flags or {}, env=no_engine), dry_run=dry_run)


def test_dry_run_plans_without_an_engine_and_says_a_real_start_needs_the_address(tmp_path: Path) -> None:
    """The 2-node default recipe without --master-addr: the plan prints, and the dry run says what start refuses."""
    result = plan_start(_request(tmp_path, dry_run=True))  # the default recipe: 2 nodes, rank 0, no address
    assert [f.code for f in result.findings] == ["dry-run-hardware", "argv-not-checked"]
    assert "built-in profile gb10x2" in result.findings[0].message
    assert result.check.engine_version is None
    argv = result.plan.to_json()["argv"]
    assert isinstance(argv, list)
    assert argv[:2] == ["vllm", "serve"] and "--node-rank" in argv
    (refusal,) = result.would_refuse
    assert isinstance(refusal, SettingsError) and "needs the address of node 0" in refusal.message
    assert result.exit_code == 2  # what the real start exits with on exactly this
    document = result.to_json()
    assert "argv-not-checked" in [f["code"] for f in document["findings"]]
    assert document["verdict"] == "warn"
    assert [r["exit_code"] for r in document["would_refuse"]] == [2]
    with pytest.raises(SettingsError, match="needs the address of node 0"):
        plan_start(_request(tmp_path, dry_run=False))


def test_dry_run_with_the_address_would_start(tmp_path: Path) -> None:
    result = plan_start(_request(tmp_path, dry_run=True, env={"DSPARK_MASTER_ADDR": "10.0.0.1"}))
    assert result.would_refuse == () and result.exit_code == 0


def test_dry_run_of_a_worker_also_says_it_needs_the_address(tmp_path: Path) -> None:
    result = plan_start(_request(tmp_path, dry_run=True, flags={"node_rank": 1}))
    assert "--headless" in result.plan.argv
    assert ["needs the address of node 0" in r.message for r in result.would_refuse] == [True]


def test_dry_run_with_a_failing_verdict_prints_the_plan_and_exits_as_start_would(tmp_path: Path) -> None:
    result = plan_start(_request(tmp_path, dry_run=True, env={"DSPARK_MASTER_ADDR": "10.0.0.1"},
                                 flags={"kv_cache_memory_bytes": 200 << 30}))
    assert result.report.verdict == "fail"
    assert "--kv-cache-memory-bytes" in result.plan.argv
    assert [type(r) for r in result.would_refuse] == [RefusedError] and result.exit_code == 1


def test_real_start_refuses_a_fallback_profile(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="no live GPU was read here") as err:
        plan_start(_request(tmp_path, dry_run=False, env={"DSPARK_MASTER_ADDR": "10.0.0.1"}))
    assert err.value.hint is not None and "--hardware" in err.value.hint


@pytest.mark.parametrize("how", ["flag", "env"])
def test_real_start_against_named_hardware_goes_on_to_the_engine(tmp_path: Path, how: str) -> None:
    flags: dict[str, object] = {"hardware": "gb10x2"} if how == "flag" else {}
    env = {"DSPARK_MASTER_ADDR": "10.0.0.1", **({"DSPARK_HARDWARE": "gb10x2"} if how == "env" else {})}
    # Past the hardware check, the next requirement is the engine itself.
    with pytest.raises(EngineNotInstalledError):
        plan_start(_request(tmp_path, dry_run=False, flags=flags, env=env))


def test_probe_json_without_a_gpu_does_not_save_a_profile() -> None:
    out = StringIO()
    with pytest.raises(RefusedError, match="nothing to probe"):
        probe(as_json=True, out=out, resolve=lambda spec: resolve_hardware(spec, nvml_factory=_NoNvml))
    assert out.getvalue() == ""


def test_probe_of_a_named_multi_gpu_profile() -> None:
    out = StringIO()
    assert probe(hardware="b200:8", as_json=True, out=out) == 0
    snapshot = json.loads(out.getvalue())
    assert len(snapshot["gpus"]) == 8
    assert snapshot["source"] == "profile"


QWEN3_32B = Path(__file__).resolve().parents[1] / "fixtures" / "model-qwen3-32b"
_SGLANG_PINS = {"--max-total-tokens": "max_total_tokens", "--max-running-requests": "max_running_requests",
                "--context-length": "context_length"}


def test_sglang_start_on_the_engine_planners_figure_execs_an_argv_the_parser_read_with_that_pin() -> None:
    """SGLang's own sizing (an older release) finds a smaller pool than dspark: start launches on it, so the
    --max-total-tokens that execs is the engine's figure, and the engine's parser has read that very argv."""
    argvs: list[list[str]] = []

    def engine_parser(engine: Engine, plan: LaunchPlan, python: str,
                      witness_request: dict[str, Any] | None = None) -> ArgvCheck:
        argv = engine.parser_argv(plan)
        argvs.append(argv)
        parsed = {dest: int(argv[argv.index(flag) + 1]) for flag, dest in _SGLANG_PINS.items() if flag in argv}
        witness = None
        if witness_request is not None:  # the release's sizing: 1,718 tokens less than the pin dspark computed
            pool = parsed["max_total_tokens"] - 1718
            witness = {"ok": True, "engine_version": "0.5.19", "kv_pool_tokens": pool,
                       "max_concurrency": pool / parsed["context_length"], "max_model_len": parsed["context_length"]}
        return ArgvCheck(ok=True, engine_version="0.5.19", parsed=parsed, witness=witness)

    validate = ValidateRequest(flags={"model": str(QWEN3_32B), "engine": "sglang", "hardware": "h200"},
                               engine_flags=("--context-length", "32768"),
                               env={"DSPARK_ENGINE_PYTHON": sys.executable})
    result = plan_start(StartRequest(validate=validate), checker=engine_parser)

    dspark_pin = int(argvs[0][argvs[0].index("--max-total-tokens") + 1])
    engine_pool = dspark_pin - 1718
    assert [f.code for f in result.report.findings][-2:] == ["witness-disagrees", "launch-on-engine-figure"]
    assert result.report.capacity.kv_pool_tokens == engine_pool
    executed = list(result.plan.argv)
    assert executed[executed.index("--max-total-tokens") + 1] == str(engine_pool)
    assert len(argvs) == 2 and argvs[1] == executed[executed.index("sglang.launch_server") + 1:]
    assert result.check.parsed["max_total_tokens"] == engine_pool
    assert result.check.witness is not None and result.check.witness["kv_pool_tokens"] == engine_pool


def _older_sglang_parser() -> argparse.ArgumentParser:
    """The flags dspark sets here, as SGLang 0.5.10-0.5.13 name them: one decode graph size, --cuda-graph-max-bs."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    for name in ("--model-path", "--served-model-name"):
        parser.add_argument(name)
    for name in ("--max-running-requests", "--max-total-tokens", "--context-length", "--cuda-graph-max-bs"):
        parser.add_argument(name, type=int)
    return parser


def test_an_older_sglang_parser_gets_the_graph_size_under_the_name_it_knows() -> None:
    """0.5.10-0.5.13 have no --cuda-graph-max-bs-decode: start asks again with --cuda-graph-max-bs, and that
    argv (the same in the witness's request) is the one that execs."""
    parser = _older_sglang_parser()
    asked: list[tuple[list[str], list[str] | None]] = []

    def engine_parser(engine: Engine, plan: LaunchPlan, python: str,
                      witness_request: dict[str, Any] | None = None) -> ArgvCheck:
        argv = engine.parser_argv(plan)
        asked.append((argv, None if witness_request is None else list(witness_request["argv"])))
        ns, unknown = parser.parse_known_args(argv)
        if unknown:  # what parse_args would exit with
            return ArgvCheck(ok=False, engine_version="0.5.12", parsed={},
                             error=f"sglang serve: error: unrecognized arguments: {' '.join(unknown)}")
        return ArgvCheck(ok=True, engine_version="0.5.12", parsed={k: v for k, v in vars(ns).items() if v is not None})

    validate = ValidateRequest(flags={"model": str(QWEN3_32B), "engine": "sglang", "hardware": "h200"},
                               engine_flags=("--context-length", "32768"),
                               env={"DSPARK_ENGINE_PYTHON": sys.executable})
    result = plan_start(StartRequest(validate=validate), checker=engine_parser)

    first, second = asked[0][0], asked[1][0]
    assert "--cuda-graph-max-bs-decode" in first and "--cuda-graph-max-bs-decode" not in second
    size = first[first.index("--cuda-graph-max-bs-decode") + 1]
    assert second[second.index("--cuda-graph-max-bs") + 1] == size
    assert asked[1][1] is not None and "--cuda-graph-max-bs" in asked[1][1]  # the witness parses the same flags
    assert "--cuda-graph-max-bs-decode" not in asked[1][1]
    executed = list(result.plan.argv)
    assert executed[executed.index("sglang.launch_server") + 1:] == second
    assert result.check.ok and result.check.parsed["cuda_graph_max_bs"] == int(size)


def test_a_flag_no_release_knows_by_another_name_is_still_refused() -> None:
    def engine_parser(engine: Engine, plan: LaunchPlan, python: str,
                      witness_request: dict[str, Any] | None = None) -> ArgvCheck:
        return ArgvCheck(ok=False, engine_version="0.5.12", parsed={},
                         error="sglang serve: error: unrecognized arguments: --no-such-flag")

    validate = ValidateRequest(flags={"model": str(QWEN3_32B), "engine": "sglang", "hardware": "h200"},
                               engine_flags=("--no-such-flag",), env={"DSPARK_ENGINE_PYTHON": sys.executable})
    with pytest.raises(EngineArgError, match="--no-such-flag"):
        plan_start(StartRequest(validate=validate), checker=engine_parser)


def test_a_start_whose_engine_planner_cannot_run_says_why() -> None:
    """SGLang's sizing reads config.json from a model directory: a recipe with an inline config has none, so
    start launches on dspark's figures, and says so (issue 26, item 22), instead of skipping the witness quietly."""
    asked: list[dict[str, Any] | None] = []

    def engine_parser(engine: Engine, plan: LaunchPlan, python: str,
                      witness_request: dict[str, Any] | None = None) -> ArgvCheck:
        asked.append(witness_request)
        argv = engine.parser_argv(plan)
        parsed = {dest: int(argv[argv.index(flag) + 1]) for flag, dest in _SGLANG_PINS.items() if flag in argv}
        return ArgvCheck(ok=True, engine_version="0.5.23", parsed=parsed)

    validate = ValidateRequest(recipe="flash-next-sglang", flags={"hardware": "gb10x2", "master_addr": "10.0.0.1"},
                               env={"DSPARK_ENGINE_PYTHON": sys.executable})
    result = plan_start(StartRequest(validate=validate), checker=engine_parser)
    assert asked == [None]  # nothing the engine's planner can take
    (skipped,) = [f for f in result.report.findings if f.code == "witness-skipped"]
    assert skipped.level == "info"
    assert "sglang's own planner did not check the pool at start: SGLang's sizing reads config.json" in (
        skipped.message)
    assert "a recipe's inline config" in skipped.message
