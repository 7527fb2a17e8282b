"""vLLM on a Ray cluster: what its Ray executors need (vllm/v1/executor/, 0.32.0)."""

from __future__ import annotations

from collections.abc import Mapping

from dspark.engines.spec import RaySupport

DISTRIBUTED_EXECUTOR_BACKEND = "--distributed-executor-backend"
V2_EXECUTOR_ENV = "VLLM_USE_RAY_V2_EXECUTOR_BACKEND"


def driver_needs_gpu(env: Mapping[str, str]) -> bool:
    """RayDistributedExecutor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) wants a GPU worker on the node it starts on.

    RayExecutorV2, the default (envs.py reads the variable as int, default 1), calls initialize_ray_cluster with
    require_gpu_on_driver=False; the older executor refuses with "Current node has no GPU available".
    """
    raw = env.get(V2_EXECUTOR_ENV, "1").strip()
    return raw.lstrip("+-").isdigit() and int(raw) == 0


RAY = RaySupport(
    # initialize_ray_cluster places one bundle of the platform's ray_device_key per rank; the CPU platform
    # declares none and is refused there ("current platform cpu does not support ray", seen with 0.32.0's CPU build).
    platforms=("cuda",),
    driver_needs_gpu=driver_needs_gpu,
    why_not_platform="vLLM's CPU build has no Ray backend (its CPU platform declares no Ray device, and the "
    "engine stops with 'current platform cpu does not support ray')",
)
