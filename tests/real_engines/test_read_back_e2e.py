"""start against the real vLLM 0.32.0 parser: a capacity value it reads otherwise than dspark is refused (issue 26
item 9). A recipe's engine_args are passed as written, so an abbreviation there (`--gpu-memory-util 0.5`) reaches
vLLM, which reads it as --gpu-memory-utilization 0.5, while dspark's reader, reading full names only, did not."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dspark.core.errors import EngineArgError
from dspark.planning.start import StartRequest, plan_start
from dspark.planning.validate import ValidateRequest

pytestmark = pytest.mark.engine

RECIPES = Path(__file__).resolve().parents[2] / "dspark" / "data" / "recipes"


def _recipe(tmp_path: Path, engine_args: list[str]) -> str:
    recipe = yaml.safe_load((RECIPES / "flash-next-vllm.yaml").read_text())
    recipe["engine_args"] = engine_args
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_an_abbreviation_in_a_recipe_s_engine_args_is_refused_naming_flag_and_both_values(
    vllm_python: str, tmp_path: Path,
) -> None:
    request = ValidateRequest(recipe=_recipe(tmp_path, ["--gpu-memory-util", "0.5"]),
                              flags={"master_addr": "10.0.0.1", "hardware": "gb10x2"},
                              env={"DSPARK_ENGINE_PYTHON": vllm_python})
    result = plan_start(StartRequest(validate=request, dry_run=True))
    (refusal,) = result.would_refuse
    assert isinstance(refusal, EngineArgError)
    assert ("--gpu-memory-utilization: dspark planned not set (the engine's default), the engine's parser read 0.5"
            in refusal.message)
    assert "vllm 0.32.0 parser" in refusal.message
