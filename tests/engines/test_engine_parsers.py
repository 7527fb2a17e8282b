"""The argv check against the installed engines' real parsers (vLLM 0.32.0 CPU build, SGLang 0.5.23)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark.engines import get_engine
from dspark.engines.base import check_argv
from dspark.engines.serve_config import ServeConfig
from dspark.engines.sglang.adapter import SglangEngine
from dspark.engines.vllm.adapter import VllmEngine
from dspark.planning.validate import ValidateRequest, validate

RECIPES = Path(__file__).resolve().parents[2] / "dspark" / "data" / "recipes"

pytestmark = pytest.mark.engine


def test_vllm_parser_accepts_plan_and_reports_values(vllm_python: str) -> None:
    engine = VllmEngine()
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=12,
                      engine_values={"kv_cache_memory_bytes": 1_000_000_007}, max_model_len=4096, platform="cpu",
                      extra_args=("--enforce-eager",))
    check = check_argv(engine, engine.build_plan(cfg, vllm_python), vllm_python)
    assert check.ok, check.error
    assert check.engine_version == "0.32.0"
    assert check.parsed["max_num_seqs"] == 12
    assert check.parsed["kv_cache_memory_bytes"] == 1_000_000_007
    assert check.parsed["enforce_eager"] is True


def test_vllm_parser_rejects_unknown_and_removed_flags(vllm_python: str) -> None:
    engine = VllmEngine()
    cfg = ServeConfig(engine="vllm", model="/m", max_num_seqs=2, extra_args=("--cuda-graph-sizes", "8"))
    check = check_argv(engine, engine.build_plan(cfg, vllm_python), vllm_python)
    assert not check.ok
    assert "unrecognized arguments: --cuda-graph-sizes 8" in (check.error or "")


def test_sglang_parser_accepts_two_node_plan(sglang_python: str) -> None:
    engine = SglangEngine()
    base = dict(engine="sglang", model="/m", max_num_seqs=16, engine_values={"max_total_tokens": 1_482_304},
                max_model_len=262144,
                tensor_parallel_size=2, nnodes=2, master_addr="10.0.0.1", master_port=5000,
                speculative={"method": "mtp", "num_speculative_tokens": 4}, cudagraph_max_capture_size=48)
    for rank in (0, 1):
        plan = engine.build_plan(ServeConfig(**base, node_rank=rank), sglang_python)  # type: ignore[arg-type]
        check = check_argv(engine, plan, sglang_python)
        assert check.ok, check.error
        assert check.parsed["node_rank"] == rank if rank else "node_rank" not in check.parsed
        assert check.parsed["nnodes"] == 2
        assert check.parsed["dist_init_addr"] == "10.0.0.1:5000"
        assert check.parsed["max_running_requests"] == 16
        assert check.parsed["speculative_num_steps"] == 4
        assert check.parsed["speculative_num_draft_tokens"] == 5
        assert check.parsed["cuda_graph_max_bs_decode"] == 48  # the decode graph cap (0.5.23's flag)
        assert check.num_options is not None and check.num_options > 500


SHIPPED = sorted(p.stem for p in RECIPES.glob("*.yaml"))


@pytest.mark.parametrize("recipe", SHIPPED)
def test_every_shipped_recipe_plan_passes_its_engine_parser(recipe: str, vllm_python: str,
                                                            sglang_python: str) -> None:
    # A recipe's engine_args reach the engine verbatim: a flag the modelled release renamed must fail here,
    # not at `dspark start` on the user's machine.
    report = validate(ValidateRequest(recipe=recipe))
    engine = get_engine(report.serve.engine)
    python = sglang_python if report.serve.engine == "sglang" else vllm_python
    check = check_argv(engine, engine.build_plan(report.serve, python), python)
    assert check.ok, f"{recipe}: {check.error}"
