"""launch/compose.spark-pair-ray.yaml: its `serve` service's environment gives a Ray plan that vLLM's own parser
accepts (the installed CPU build's parser; no cluster answers here, so the dry run says the nodes went unchecked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "launch" / "compose.spark-pair-ray.yaml"


def _resolved(value: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message} with `variables`."""
    def one(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3)
        if name in variables:
            return variables[name]
        assert op == ":-", f"{name} is required by the compose file: {rest}"
        return rest
    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, value)


def test_the_ray_pair_services_start_ray_then_dspark_on_the_head() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    head = [_resolved(a, {"SPARK_HEAD_ADDR": "10.0.0.1"}) for a in services["ray-head"]["entrypoint"]]
    assert head[:4] == ["ray", "start", "--head", "--block"] and "10.0.0.1" in head
    worker = [_resolved(a, {"SPARK_HEAD_ADDR": "10.0.0.1", "SPARK_NODE_ADDR": "10.0.0.2"})
              for a in services["ray-worker"]["entrypoint"]]
    assert worker[worker.index("--address") + 1] == "10.0.0.1:6379"
    env = services["serve"]["environment"]
    assert env["DSPARK_DISTRIBUTED_RUNTIME"] == "ray"
    assert _resolved(env["RAY_ADDRESS"], {"SPARK_HEAD_ADDR": "10.0.0.1"}) == "10.0.0.1:6379"


@pytest.mark.engine
def test_the_serve_environment_gives_an_argv_vllms_parser_accepts(vllm_python: str) -> None:
    serve = yaml.safe_load(COMPOSE.read_text())["services"]["serve"]["environment"]
    env = {k: _resolved(str(v), {"SPARK_HEAD_ADDR": "127.0.0.1"}) for k, v in serve.items()}
    env["RAY_ADDRESS"] = "127.0.0.1:9"  # nothing answers there: the dry run plans here and says so
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DSPARK_", "RAY_")) and k != "MAX_NUM_SEQS"}
    base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', '')}"
    proc = subprocess.run(["bash", str(ROOT / "launch" / "entrypoint.sh"), "--dry-run", "--json"],
                          env={**base, **env, "DSPARK_ENGINE_PYTHON": vllm_python}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["engine_check"]["ok"] is True
    assert plan["engine_check"]["parsed"]["distributed_executor_backend"] == "ray"
    assert "--nnodes" not in plan["argv"] and "--master-addr" not in plan["argv"]
    assert any(f["code"] == "ray-cluster-not-checked" for f in plan["findings"])
