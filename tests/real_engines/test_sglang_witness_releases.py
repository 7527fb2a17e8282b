"""The SGLang witness on releases older than the modelled one, in their own interpreters (the version matrix's).

Marked ``matrix``: deselected by default (CI does not install the releases); `python -m pytest -m matrix` runs
them where benchmarks/version_matrix/install.sh installed each release (``.engines-matrix/sglang-X``, or
$DSPARK_MATRIX_DIR), and fails naming the environment that is missing. 0.5.18 has no
``override_platform`` (its probes are rebound) and sizes through KVCacheConfigurator; 0.5.12 sizes through the
ModelRunner mixin and refuses the seed recipe's flags until given the ones its refusal names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark.engines.inside import run_inside

pytestmark = [pytest.mark.engine, pytest.mark.matrix]

ROOT = Path(__file__).resolve().parents[2]
MATRIX = Path(os.environ.get("DSPARK_MATRIX_DIR", ROOT / ".engines-matrix"))
GIB = 1 << 30
GB10_MIB = 124_610


def _python(release: str) -> str:
    python = MATRIX / f"sglang-{release}" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"SGLang {release}'s environment {python} is not installed (benchmarks/version_matrix/"
                    f"install.sh sglang installs it)", pytrace=False)
    return str(python)


def _seed_cases(tmp_path: Path, seats: tuple[int, ...], extra: tuple[str, ...] = (),
                env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    recipe = yaml.safe_load((ROOT / "dspark/data/recipes/flash-next-sglang.yaml").read_text())
    (tmp_path / "config.json").write_text(json.dumps(recipe["model"]["config"]))
    return [{"id": f"seed-{n}", "argv": [*extra, "--model-path", str(tmp_path), "--tp-size", "2",
                                         "--context-length", "262144", "--max-running-requests", str(n),
                                         "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "4",
                                         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5",
                                         "--skip-tokenizer-init"],
             "gpu_mib": GB10_MIB, "free_before": 118 * GIB, "free_after": 92 * GIB, "capability": [12, 1],
             "integrated": True, "env": env or {}} for n in seats]


def _witness(python: str, cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {rec["id"]: rec for rec in run_inside(python, "sglang.sizing", cases, 600)}
    assert len(out) == len(cases)
    return out


def test_0518_sizes_through_its_configurator_with_its_probes_rebound(tmp_path: Path) -> None:
    got = _witness(_python("0.5.18"), _seed_cases(tmp_path, (16, 32)))
    a, b = got["seed-16"], got["seed-32"]
    assert a["error"] is None, a.get("traceback")
    assert a["sizing_path"] == "configurator"
    assert a["attention_backend"] == "triton"  # what a CUDA SM12x answers; a CPU host would not reach it
    # Each seat more holds 5 draft tokens of intermediate GDN state: the pool falls by that many cells.
    per_seat = 5 * a["mamba_cache_per_req"] / a["cell_size"]
    assert abs((a["max_total_num_tokens"] - b["max_total_num_tokens"]) - 16 * per_seat) <= 1
    assert (a["max_running_requests"], b["max_running_requests"]) == (16, 32)


def test_0512_names_what_it_refuses_then_sizes_through_the_mixin(tmp_path: Path) -> None:
    python = _python("0.5.12")
    refused = _witness(python, _seed_cases(tmp_path, (16,)))["seed-16"]
    assert refused["error"] is not None
    assert "--mamba-scheduler-strategy extra_buffer" in refused["error"]
    got = _witness(python, _seed_cases(tmp_path, (16, 32), ("--mamba-scheduler-strategy", "extra_buffer"),
                                       {"SGLANG_ENABLE_SPEC_V2": "1"}))
    a, b = got["seed-16"], got["seed-32"]
    assert a["error"] is None, a.get("traceback")
    assert a["sizing_path"] == "mixin"
    assert a["cell_size"] == 12_288  # 12 full-attention layers x 2 KV heads / TP 2 x 256 x 2 (K, V) x 2 bytes
    assert 0 < b["max_total_num_tokens"] < a["max_total_num_tokens"]
