"""What `dspark start` on a Ray cluster costs: a local loopback cluster of --nodes nodes (ray.cluster_utils), each
GPU node planned against a saved H200 probe through its own DSPARK_HARDWARE, then `dspark start flash-next-vllm
--dry-run --json` as a driver of it, --runs times. Prints the cluster's start time, each run's wall time (the
import, validate, joining the cluster, one probe task per node) and the peak memory of the Ray processes.

  python benchmarks/ray_local_cluster.py [--nodes 3] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "fixtures" / "probes" / "h200-idle.json"


def _ray_rss() -> int:
    total = 0
    for proc in psutil.process_iter(["cmdline", "memory_info"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["memory_info"] is not None and ("ray" in cmd or "raylet" in cmd or "gcs_server" in cmd):
            total += proc.info["memory_info"].rss
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, help="nodes; the last one has no GPU for Ray")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only, before Ray is imported
    from ray.cluster_utils import Cluster  # noqa: PLC0415

    common = {"num_cpus": 1, "object_store_memory": 80 << 20}
    start = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, "num_gpus": 1, "include_dashboard": False, "env_vars": {"DSPARK_HARDWARE": str(PROBE)}})
    try:
        for i in range(1, args.nodes):
            gpus = 1 if i < args.nodes - 1 else 0
            cluster.add_node(**common,  # type: ignore[arg-type]  # Ray types each keyword; common holds ints only
 num_gpus=gpus, env_vars={"DSPARK_HARDWARE": str(PROBE)} if gpus else {})
        cluster.wait_for_nodes()
        print(f"cluster of {args.nodes} nodes up in {time.monotonic() - start:.1f} s at {cluster.address}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_") and k != "MAX_NUM_SEQS"}
        env |= {"RAY_ADDRESS": cluster.address, "DSPARK_DISTRIBUTED_RUNTIME": "ray",
                "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")}
        with tempfile.TemporaryDirectory() as cwd:
            for run in range(args.runs):
                began, peak = time.monotonic(), 0
                proc = subprocess.Popen([sys.executable, "-m", "dspark", "start", "flash-next-vllm", "--dry-run",
                                         "--json"], env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
                while proc.poll() is None:
                    peak = max(peak, _ray_rss())
                    time.sleep(0.25)
                out, err = proc.communicate()
                if proc.returncode != 0:
                    print(err, file=sys.stderr)
                    return 1
                nodes = [f for f in json.loads(out)["findings"] if f["code"] in ("fits", "ray-node-no-gpu")]
                print(f"run {run + 1}: dry run {time.monotonic() - began:.1f} s, {len(nodes)} node judgements, "
                      f"peak RSS of Ray processes {peak / (1 << 30):.2f} GiB")
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]
    return 0


if __name__ == "__main__":
    sys.exit(main())
