"""`dspark start` on a real local Ray cluster: every node probed where it is, the tightest one planned against.

One cluster of three nodes on loopback serves every test (Ray's own test utility, ray.cluster_utils.Cluster):
two nodes with one GPU each for Ray and one without. Each GPU node reads its hardware from the file its own
environment names (DSPARK_HARDWARE, set before the node starts, as on a real node); a test rewrites those files
to give the nodes the memory it needs. No engine starts: `--dry-run` stops after the plan.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dspark.hardware.snapshot import load_snapshot
from tests.bench.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
PROBES = ROOT / "tests" / "fixtures" / "probes"
IDLE = PROBES / "h200-idle.json"  # an idle H200: 139.80 GiB free
HELD = PROBES / "h200-100gib-held.json"  # the same GPU with 100 GiB held by another process: 39.29 GiB free
# Ray on one machine: every address on loopback (Ray's switch for single-host clusters), nothing on the network.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@dataclass
class RayCluster:
    address: str
    hardware: dict[str, Path]  # node name -> the file its DSPARK_HARDWARE names
    node_ids: dict[str, str]
    cluster: Any

    def give(self, node: str, probe: Path, *, free_gib: float | None = None) -> None:
        """Make `node` read `probe` from now on (optionally with another free figure)."""
        data = json.loads(probe.read_text())
        if free_gib is not None:
            for gpu in data["gpus"]:
                gpu["free_bytes"] = int(free_gib * (1 << 30))
        self.hardware[node].write_text(json.dumps(data))


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayCluster]:
    # Ray reads its loopback switch when first imported: tests/conftest.py sets it before any test runs.
    assert "ray" not in sys.modules or all(os.environ.get(k) == v for k, v in LOOPBACK.items()), \
        "ray was imported before its loopback switch was set"
    saved = {k: os.environ.get(k) for k in LOOPBACK}
    os.environ.update(LOOPBACK)
    from ray.cluster_utils import Cluster  # noqa: PLC0415 - after the loopback switch is set

    folder = tmp_path_factory.mktemp("ray-nodes")
    hardware = {name: folder / f"{name}.json" for name in ("head", "gpu")}
    for path in hardware.values():
        shutil.copy(IDLE, path)
    common: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 << 20}
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, "num_gpus": 1, "include_dashboard": False,
        # Ray before 2.50 gave a task that claims no GPU CUDA_VISIBLE_DEVICES=''; this asks 2.50+ for the same.
        "env_vars": {"DSPARK_HARDWARE": str(hardware["head"]), "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}})
    try:
        gpu = cluster.add_node(**common, num_gpus=1, env_vars={"DSPARK_HARDWARE": str(hardware["gpu"])})
        # A node without GPUs and without a saved probe: its probe finds no GPU here, which is no failure.
        cpu = cluster.add_node(**common, num_gpus=0)
        cluster.wait_for_nodes(timeout=120)  # a busy machine starts raylets slowly
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        head_id = cluster.head_node.node_id  # type: ignore[attr-defined]  # Optional in Ray's types; initialize_head set it
        yield RayCluster(address=cluster.address, hardware=hardware, cluster=cluster,
                         node_ids={"head": head_id, "gpu": gpu.node_id, "cpu": cpu.node_id})
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _start(cluster: RayCluster, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`dspark start ... --dry-run` as a driver of the cluster, in a clean environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DSPARK_", "LWS_", "RAY_")) and k not in (
        "MAX_NUM_SEQS", "HF_TOKEN")}
    base["PYTHONPATH"] = str(ROOT) + os.pathsep + base.get("PYTHONPATH", "")
    full = {**base, **LOOPBACK, "RAY_ADDRESS": cluster.address, "DSPARK_DISTRIBUTED_RUNTIME": "ray", **env}
    # Run from a folder of no code: Ray puts the driver's working directory on its workers' path, which on a real
    # cluster is this machine's folder, not the node's.
    return subprocess.run([sys.executable, "-m", "dspark", "start", *args, "--dry-run"], env=full,
                          cwd=cluster.hardware["head"].parent, capture_output=True, text=True, timeout=180,
                          check=False)


def _findings(out: dict[str, Any], code: str) -> list[str]:
    return [f["message"] for f in out["findings"] if f["code"] == code]


def test_a_tp2_plan_reports_each_nodes_memory_and_plans_on_the_tighter(ray_cluster: RayCluster) -> None:
    ray_cluster.give("head", IDLE)
    # Tighter, and still above what vLLM's start-up check wants free (0.92 of the GPU's 140.4 GiB).
    ray_cluster.give("gpu", IDLE, free_gib=132.0)
    proc = _start(ray_cluster, "flash-next-vllm", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    ids = {name: node_id[:8] for name, node_id in ray_cluster.node_ids.items()}
    fits = _findings(out, "fits")
    assert len(fits) == 2
    (head_fit,) = [m for m in fits if ids["head"] in m]
    (gpu_fit,) = [m for m in fits if ids["gpu"] in m]
    assert "of 139.80 GiB free" in head_fit and "(here)" in head_fit
    assert "of 132.00 GiB free" in gpu_fit
    (no_gpu,) = _findings(out, "ray-node-no-gpu")
    assert ids["cpu"] in no_gpu
    # Planned against the tighter node: its GPU first, and named.
    assert out["hardware"]["gpus"][0]["free_bytes"] == 132 << 30
    assert f"Ray node {ids['gpu']}" in out["hardware"]["description"]
    assert _findings(out, "per-node") == []  # validate's own per-node note is replaced by the nodes themselves
    argv = " ".join(out["argv"])
    assert "--tensor-parallel-size 2 --distributed-executor-backend ray" in argv
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--headless"):
        assert flag not in argv


def test_a_node_short_of_memory_is_refused_by_name(ray_cluster: RayCluster) -> None:
    ray_cluster.give("head", IDLE)
    ray_cluster.give("gpu", HELD)
    proc = _start(ray_cluster, "flash-next-vllm")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    held_free = load_snapshot(HELD).gpus[0].free_bytes / (1 << 30)
    # A dry run prints the plan, then says what a real start would refuse (issue 16's dry-run rule).
    assert "a real start would refuse: " in proc.stderr, proc.stderr
    refusal = proc.stderr.split("a real start would refuse: ", 1)[1]
    assert f"Ray node {ray_cluster.node_ids['gpu'][:8]}" in refusal
    assert f"only {held_free:.2f} GiB is free" in refusal
    assert ray_cluster.node_ids["head"][:8] not in refusal  # the node that fits is not blamed


def test_a_plan_needing_more_gpus_than_ray_schedules_is_refused_naming_each_node(ray_cluster: RayCluster) -> None:
    ray_cluster.give("head", IDLE)
    ray_cluster.give("gpu", IDLE)
    proc = _start(ray_cluster, "flash-next-vllm", "--tp", "4")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "needs 4 GPU(s) (TP 4 × PP 1) of NVIDIA H200" in proc.stderr
    assert "which schedules 2" in proc.stderr
    for name, count in (("head", 1), ("gpu", 1), ("cpu", 0)):
        assert f"Ray node {ray_cluster.node_ids[name][:8]} " in proc.stderr
        assert f"{ray_cluster.node_ids[name][:8]} (" in proc.stderr
        assert f"): {count} GPU(s)" in proc.stderr


def test_a_node_without_dspark_is_named_with_the_fix(ray_cluster: RayCluster, tmp_path: Path) -> None:
    # A node whose Python cannot import dspark: a package of that name that fails to import shadows it.
    shadow = tmp_path / "shadow" / "dspark"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'dspark'\", name='dspark')\n")
    ray_cluster.give("head", IDLE)
    ray_cluster.give("gpu", IDLE)
    bare = ray_cluster.cluster.add_node(num_cpus=1, num_gpus=1, object_store_memory=80 << 20,
                                        env_vars={"PYTHONPATH": str(shadow.parent)})
    try:
        ray_cluster.cluster.wait_for_nodes(timeout=120)
        proc = _start(ray_cluster, "flash-next-vllm")
    finally:
        ray_cluster.cluster.remove_node(bare)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"Ray node {bare.node_id[:8]}" in proc.stderr
    assert "dspark cannot be imported by the Python its Ray workers run" in proc.stderr
    assert "install dspark in the environment that node's `ray start` runs from" in proc.stderr


STANDIN = ROOT / "tests" / "deploy" / "ray_engine.py"


def _standin_python(folder: Path, engine_python: str) -> Path:
    """An engine interpreter for the sweep: vLLM's own (CPU build) for dspark's parser and witness checks, and for
    `-m vllm.entrypoints.cli.main serve ...` the Ray stand-in (this Python, which has the `ray` extra)."""
    wrapper = folder / "python"
    wrapper.write_text(f"#!{sys.executable}\n"
                       "import os, sys\n"
                       "if sys.argv[1:4] == ['-m', 'vllm.entrypoints.cli.main', 'serve']:\n"
                       f"    os.execv(sys.executable, [sys.executable, {str(STANDIN)!r}, *sys.argv[4:]])\n"
                       f"os.execv({engine_python!r}, [{engine_python!r}, *sys.argv[1:]])\n")
    wrapper.chmod(0o755)
    return wrapper


def _ray_sweep(cluster: RayCluster, tmp_path: Path, vllm_python: str, seats: tuple[int, ...],
               **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], list[dict[str, Any]]]:
    """`dspark sweep flash-next-vllm --seats ...` on the cluster with the stand-in engine: the process, sweep.json
    and the stand-in's record of each start."""
    python = _standin_python(tmp_path, vllm_python)
    pools: dict[str, int] = {}
    for n in seats:  # the pool dspark predicts at each seat count, for the stand-in to print as the engine would
        proc = _start(cluster, "flash-next-vllm", "--json", "--max-num-seqs", str(n), "--engine-python",
                      str(python))
        assert proc.returncode == 0, proc.stderr
        pools[str(n)] = json.loads(proc.stdout)["capacity"]["kv_pool_tokens"]
    record = tmp_path / "engines.jsonl"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DSPARK_", "LWS_", "RAY_")) and k not in (
        "MAX_NUM_SEQS", "HF_TOKEN")}
    base["PYTHONPATH"] = str(ROOT) + os.pathsep + base.get("PYTHONPATH", "")
    full = {**base, **LOOPBACK, "RAY_ADDRESS": cluster.address, "DSPARK_DISTRIBUTED_RUNTIME": "ray",
            "RAY_ENGINE_RECORD": str(record), "RAY_ENGINE_POOL": json.dumps(pools), **env}
    out_dir = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "dspark", "sweep", "flash-next-vllm",
                           "--seats", ",".join(map(str, seats)), "--engine-python", str(python),
                           "--port", str(free_port()), "--requests", "4", "--concurrency", "2", "--max-tokens", "4",
                           "--input-len", "16", "--primary", "wall_time", "--out-dir", str(out_dir), "--no-progress",
                           "--health-timeout", "240", "--stop-timeout", "10"],
                          env=full, cwd=tmp_path, capture_output=True, text=True, timeout=560, check=False)
    data = json.loads((out_dir / "sweep.json").read_text())
    starts = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return proc, data, starts


@pytest.mark.engine  # vLLM's CPU build checks the argv (its parser) before each start
@pytest.mark.timeout(600)
def test_a_sweep_on_a_ray_plan_restarts_the_head_engine_and_verifies_where_ray_placed_each_rank(
        ray_cluster: RayCluster, tmp_path: Path, vllm_python: str) -> None:
    ray_cluster.give("head", IDLE)
    ray_cluster.give("gpu", IDLE)
    proc, data, starts = _ray_sweep(ray_cluster, tmp_path, vllm_python, (2, 4))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert data["clean"] is True, [s["problems"] for s in data["settings"]]
    # One engine start per seat count, on the head, each placing its two ranks: one on each GPU node.
    assert [s["seats"] for s in starts] == [2, 4]
    assert starts[0]["pid"] != starts[1]["pid"]
    head, gpu = ray_cluster.node_ids["head"], ray_cluster.node_ids["gpu"]
    for start, setting in zip(starts, data["settings"], strict=True):
        assert sorted(w["node_id"] for w in start["workers"]) == sorted([head, gpu])
        # ... and the sweep saw the same from the cluster's placement groups, not from the engine
        assert setting["ray_nodes"] == [{"node_id": n, "ranks": 1} for n in sorted([head, gpu])]
        assert "--distributed-executor-backend ray" in " ".join(setting["argv"])
        assert setting["launch"]["seats_confirmed"] is True and setting["launch"]["mismatched"] == []
        assert setting["peers"] == []
    said = " ".join(proc.stderr.split())  # rich wraps stderr at the terminal's width
    assert "Ray placed 2 of 2 ranks" in said and "launch as planned on 2 Ray node(s)" in said


@pytest.mark.engine
@pytest.mark.timeout(600)
def test_a_ray_worker_group_outliving_its_engine_makes_the_setting_unclean(
        ray_cluster: RayCluster, tmp_path: Path, vllm_python: str) -> None:
    ray_cluster.give("head", IDLE)
    ray_cluster.give("gpu", IDLE)
    name = f"leak-{tmp_path.name}"
    try:
        proc, data, starts = _ray_sweep(ray_cluster, tmp_path, vllm_python, (2,), RAY_ENGINE_LEAK=name)
    finally:  # give the GPUs back to the cluster for the other tests
        import ray  # noqa: PLC0415 - the fixture set the loopback switch before Ray was first imported

        ray.init(address=ray_cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        try:
            ray.util.remove_placement_group(ray.util.get_placement_group(name))
        except ValueError:
            pass  # never created
        finally:
            ray.shutdown()
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (setting,) = data["settings"]
    (problem,) = setting["problems"]
    assert problem.startswith("Ray placement group ") and "still reserves 2 GPU(s)" in problem, problem
    assert len(starts) == 1 and setting["bench"] is not None  # benched, then found holding the GPUs
