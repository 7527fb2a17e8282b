"""Two nodes from one recipe: `dspark start --node-rank 0` and `--node-rank 1` join over loopback (TP=2).

vLLM's native multi-node runtime on its CPU build (docs/testing.md): rank 1 runs headless; rank 0 prints the
KV line (KV heads split across the two ranks) and answers a completion. The pool must equal `dspark validate`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_start_e2e import Engine, _complete, _env, engines  # noqa: F401 - engines is a fixture
from vllm_harness import free_port, parse_line

pytestmark = pytest.mark.engine


def _recipe(tmp_path: Path, model: Path, master_port: int) -> Path:
    path = tmp_path / "two-node.yaml"
    path.write_text(
        f"""\
name: tiny-two-node
engine: vllm
model:
  path: {model}
parallel: {{tensor: 2, nodes: 2, master_addr: 127.0.0.1, master_port: {master_port}}}
context:
  max_model_len: 2048
kv_cache:
  memory: 268435456
engine_args: ["--enforce-eager", "--skip-tokenizer-init", "--dtype", "float16"]
"""
    )
    return path


def test_two_nodes_join_and_rank0_pool_matches_validate(
    tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str, engines: list[Engine]  # noqa: F811
) -> None:
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3", free_port())
    port = free_port()
    env0 = _env(vllm_python, MAX_NUM_SEQS="4", DSPARK_PORT=str(port), VLLM_CPU_OMP_THREADS_BIND="0")
    env1 = _env(vllm_python, MAX_NUM_SEQS="4", VLLM_CPU_OMP_THREADS_BIND="1")

    proc = subprocess.run([dspark_exe, "validate", str(recipe), "--json"], env=env0, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    predicted = json.loads(proc.stdout)
    assert predicted["capacity"]["details"]["tensor_parallel_size"] == 2

    # Each rank's plan is checked by the engine's own parser; rank 1 is headless.
    head = Engine([dspark_exe, "start", str(recipe), "--node-rank", "0"], env0)
    engines.append(head)
    worker = Engine([dspark_exe, "start", str(recipe), "--node-rank", "1"], env1)
    engines.append(worker)
    worker_exec = worker.wait_for(r"^exec: .*--headless", timeout=180).string
    assert "--node-rank 1" in worker_exec
    head_exec = head.wait_for(r"^exec: ", timeout=180).string
    assert "--headless" not in head_exec
    assert "--nnodes 2" in head_exec
    assert "--tensor-parallel-size 2" in head_exec

    kv = parse_line(head.wait_for(r"KV cache size: .*Maximum concurrency", timeout=400).string)
    assert kv is not None
    assert int(kv["tokens"].replace(",", "")) == predicted["capacity"]["kv_pool_tokens"]
    assert kv["conc"] == f"{predicted['capacity']['max_concurrency']:.2f}"

    head.wait_for(r"Application startup complete", timeout=300)
    answer = _complete(port)
    assert answer["usage"].get("completion_tokens") == 4, answer["events"]  # type: ignore[attr-defined]
    assert worker.proc.poll() is None  # the headless worker is still serving its half
