"""SGLang two-node plans from one shipped recipe, through `dspark start --dry-run`, checked by SGLang's parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("rank", [0, 1])
def test_flash_next_sglang_per_node_argv_is_accepted_by_sglang(sglang_python: str, rank: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MAX_NUM_SEQS" and not k.startswith("DSPARK_")}
    env.update({"DSPARK_ENGINE_PYTHON": sglang_python, "DSPARK_MASTER_ADDR": "10.0.0.1"})
    proc = subprocess.run(
        [sys.executable, "-m", "dspark", "start", "flash-next-sglang", "--hardware", "gb10x2",
         "--node-rank", str(rank), "--dry-run", "--json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    check = plan["engine_check"]
    assert check["ok"] is True
    assert check["engine_version"] == "0.5.23"
    parsed = check["parsed"]
    assert parsed["nnodes"] == 2
    assert parsed["tp_size"] == 2
    assert parsed["dist_init_addr"].startswith("10.0.0.1:")
    assert parsed.get("node_rank", 0) == rank
    assert parsed["max_running_requests"] == 16
    assert parsed["speculative_algorithm"] == "NEXTN"
    assert parsed["max_total_tokens"] == plan["capacity"]["kv_pool_tokens"]  # the validated pool, pinned
    argv = plan["argv"]
    assert argv[1:3] == ["-m", "sglang.launch_server"]
