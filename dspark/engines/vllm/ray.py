"""vLLM on a Ray cluster: what its Ray executor needs (vllm/v1/executor/ray_utils.py, 0.32.0)."""

from __future__ import annotations

from dspark.engines.base import RaySupport

DISTRIBUTED_EXECUTOR_BACKEND = "--distributed-executor-backend"

RAY = RaySupport(
    # initialize_ray_cluster places one bundle of the platform's ray_device_key per rank; the CPU platform
    # declares none and is refused there ("current platform cpu does not support ray").
    platforms=("cuda",),
    # It also refuses a driver node without that device: "Current node has no GPU available".
    driver_needs_gpu=True,
    why_not_platform="vLLM's CPU build has no Ray backend (its CPU platform declares no Ray device, and the "
    "engine stops with 'current platform cpu does not support ray')",
)
