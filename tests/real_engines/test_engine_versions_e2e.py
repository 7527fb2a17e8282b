"""`dspark validate` / `start` with the engine version as an input, and the installed engine's planner as witness.

Real interpreters only: vLLM 0.32.0's CPU build, vLLM 0.33.0's planning code, SGLang 0.5.23.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def dspark(dspark_exe: str, *argv: str, **env: str) -> tuple[int, dict[str, Any] | None, str]:
    """Run dspark with a clean DSPARK_* environment; (exit code, the JSON object if any, stderr)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_") and k != "MAX_NUM_SEQS"}
    proc = subprocess.run(
        [dspark_exe, *argv], env={**clean, **env}, capture_output=True, text=True, timeout=300, check=False
    )
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    return proc.returncode, out, proc.stderr


def dense(models: Path, *extra: str) -> list[str]:
    return [
        "validate",
        "--model",
        str(models / "dense-qwen3"),
        "--engine",
        "vllm",
        "--platform",
        "cpu",
        "--kv-cache-memory",
        "1GiB",
        *extra,
        "--json",
        "--",
        "--max-model-len",
        "2048",
    ]


def test_the_installed_version_is_detected_and_reported(dspark_exe: str, tiny_models: Path, vllm_python: str) -> None:
    rc, out, err = dspark(dspark_exe, *dense(tiny_models), DSPARK_ENGINE_PYTHON=vllm_python)
    assert rc == 0 and out is not None, err
    assert out["engine"] == "vllm"
    assert out["engine_version"] == {
        "modelled": "0.32.0",
        "installed": "0.32.0",
        "requested": "0.32.0",
        "source": "installed",
    }
    assert out["capacity"]["engine_version"] == "0.32.0"
    assert out["capacity"]["witness"] is None  # only with --engine-check


def test_a_requested_modelled_version_gives_its_figures(dspark_exe: str, tiny_models: Path) -> None:
    """MLA on CPU with fp8: 0.32.0 sizes it, 0.33.0 refuses the dtype (CpuPlatform.get_attn_backend_cls)."""
    argv = [
        "validate",
        "--model",
        str(tiny_models / "mla-deepseek-v3"),
        "--engine",
        "vllm",
        "--platform",
        "cpu",
        "--kv-cache-memory",
        "55555555",
        "--json",
        "--",
        "--max-model-len",
        "1500",
        "--kv-cache-dtype",
        "fp8",
    ]
    rc32, out32, _ = dspark(dspark_exe, *argv[:-5], "--engine-version", "0.32.0", *argv[-5:])
    rc33, out33, _ = dspark(dspark_exe, *argv[:-5], "--engine-version", "0.33.0", *argv[-5:])
    assert out32 is not None and out33 is not None
    assert (rc32, out32["engine_version"]["source"], out32["capacity"]["engine_version"]) == (0, "flag", "0.32.0")
    assert (rc33, out33["engine_version"]["modelled"], out33["capacity"]["engine_version"]) == (1, "0.33.0", "0.33.0")
    assert "cpu_kv_cache_dtype" in {f["code"] for f in out33["findings"]}


def test_an_unmodelled_version_warns_naming_both(dspark_exe: str, tiny_models: Path) -> None:
    rc, out, err = dspark(dspark_exe, *dense(tiny_models), DSPARK_ENGINE_VERSION="0.34.0")
    assert rc == 0 and out is not None, err
    assert out["engine_version"] == {"modelled": "0.33.0", "installed": None, "requested": "0.34.0", "source": "env"}
    (finding,) = [f for f in out["findings"] if f["code"] == "engine-version-not-modelled"]
    assert finding["level"] == "warn" and "0.34.0" in finding["message"] and "0.33.0" in finding["message"]


def test_a_version_that_is_not_one_exits_2_listing_the_modelled(dspark_exe: str, tiny_models: Path) -> None:
    rc, _, err = dspark(dspark_exe, *dense(tiny_models, "--engine-version", "abc"))
    assert rc == 2
    assert "not a version" in err and "0.32.0, 0.33.0" in err


@pytest.mark.parametrize(("which", "version"), [("vllm", "0.32.0"), ("vllm033", "0.33.0")])
def test_engine_check_runs_the_installed_planner(
    which: str, version: str, dspark_exe: str, tiny_models: Path, vllm_python: str, vllm033_python: str
) -> None:
    python = vllm_python if which == "vllm" else vllm033_python
    argv = [
        "validate",
        "--model",
        str(tiny_models / "hybrid-qwen3-next"),
        "--engine",
        "vllm",
        "--platform",
        "cpu",
        "--kv-cache-memory",
        "100000000",
        "--engine-check",
        "--json",
        "--",
        "--max-model-len",
        "2000",
    ]
    rc, out, err = dspark(dspark_exe, *argv, DSPARK_ENGINE_PYTHON=python)
    assert rc == 0 and out is not None, err
    witness = out["capacity"]["witness"]
    assert (witness["engine_version"], witness["agrees"], witness["budget_source"]) == (version, True, "pinned")
    assert (witness["kv_pool_tokens"], f"{witness['max_concurrency']:.2f}") == (
        out["capacity"]["kv_pool_tokens"],
        f"{out['capacity']['max_concurrency']:.2f}",
    )
    assert "witness-agrees" in {f["code"] for f in out["findings"]}


def test_start_runs_the_witness_with_the_argv_check_and_launches_on_it_for_an_unmodelled_version(
    dspark_exe: str, tiny_models: Path, vllm_python: str
) -> None:
    """An unmodelled version (here asked for) starts only on the installed planner's figure."""
    argv = [
        "start",
        "--model",
        str(tiny_models / "dense-qwen3"),
        "--engine",
        "vllm",
        "--platform",
        "cpu",
        "--kv-cache-memory",
        "1GiB",
        "--dry-run",
        "--json",
        "--",
        "--max-model-len",
        "2048",
    ]
    rc, out, err = dspark(dspark_exe, *argv, DSPARK_ENGINE_PYTHON=vllm_python, DSPARK_ENGINE_VERSION="0.34.0")
    assert rc == 0 and out is not None, err
    assert out["engine_check"]["ok"] and out["engine_check"]["engine_version"] == "0.32.0"
    witness = out["capacity"]["witness"]
    assert (witness["engine_version"], witness["kv_pool_tokens"]) == ("0.32.0", 1_048_576)
    codes = {f["code"] for f in out["findings"]}
    assert {"engine-version-not-modelled", "witness-agrees"} <= codes


def test_sglang_start_launches_an_unmodelled_version_on_sglangs_own_sizing(dspark_exe: str, sglang_python: str) -> None:
    """SGLang 0.5.10 asked for, 0.5.23 installed: its own memory-pool resolution vouches for the pool."""
    argv = [
        "start",
        "--model",
        str(FIXTURES / "model-qwen3-32b"),
        "--engine",
        "sglang",
        "--hardware",
        "h200",
        "--dry-run",
        "--json",
        "--",
        "--context-length",
        "32768",
    ]
    rc, out, err = dspark(dspark_exe, *argv, DSPARK_ENGINE_PYTHON=sglang_python, DSPARK_ENGINE_VERSION="0.5.10")
    assert rc == 0 and out is not None, err
    witness = out["capacity"]["witness"]
    assert (witness["engine_version"], witness["agrees"]) == ("0.5.23", True)
    assert witness["kv_pool_tokens"] == out["capacity"]["kv_pool_tokens"]
    assert "--max-total-tokens" in out["argv"]


def test_start_refuses_an_unmodelled_version_nothing_vouches_for(
    dspark_exe: str, vllm_python: str, tiny_models: Path, tmp_path: Path
) -> None:
    """A DeepSeek-V3.2-shaped model: its indexer cache is a spec the witness does not hand vLLM's planner, so
    nothing vouches for an unmodelled version's pool: exit 1, unless --force."""
    config = json.loads((tiny_models / "mla-deepseek-v3" / "config.json").read_text())
    config.update(
        architectures=["DeepseekV32ForCausalLM"],
        model_type="deepseek_v32",
        index_head_dim=128,
        index_n_heads=4,
        index_topk=64,
    )
    model = tmp_path / "v32"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    argv = [
        "start",
        "--model",
        str(model),
        "--engine",
        "vllm",
        "--platform",
        "cpu",
        "--kv-cache-memory",
        "100000000",
        "--dry-run",
        "--",
        "--max-model-len",
        "2000",
    ]
    rc, _, err = dspark(dspark_exe, *argv, DSPARK_ENGINE_PYTHON=vllm_python, DSPARK_ENGINE_VERSION="0.34.0")
    assert rc == 1
    assert "0.34.0 is not modelled" in err and "--force" in err
    forced, _, err = dspark(
        dspark_exe, *argv[:-3], "--force", *argv[-3:], DSPARK_ENGINE_PYTHON=vllm_python, DSPARK_ENGINE_VERSION="0.34.0"
    )
    assert forced == 0, err
