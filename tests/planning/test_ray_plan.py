"""The Ray launch without a cluster: one runtime setting, vLLM's argv under Ray, refusals, per-node judgements."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dspark.core.errors import RefusedError, SettingsError
from dspark.engines.serve_config import ServeConfig
from dspark.engines.vllm.adapter import VllmEngine
from dspark.hardware.ray_nodes import ClusterView, RayNode, RayUnavailable, probe_here
from dspark.hardware.snapshot import load_snapshot
from dspark.planning.ray_plan import on_ray_cluster
from dspark.planning.start import StartRequest, plan_start
from dspark.planning.validate import ValidateRequest, request_settings

PROBES = Path(__file__).resolve().parents[1] / "fixtures" / "probes"
RAY_ENV = {"DSPARK_DISTRIBUTED_RUNTIME": "ray"}


def _request(env: dict[str, str] | None = None, *, recipe: str = "flash-next-vllm",
             engine_flags: tuple[str, ...] = (), **flags: object) -> ValidateRequest:
    return ValidateRequest(recipe=recipe, env=env or {}, engine_flags=engine_flags, flags=flags)


def _no_cluster(address: str | None) -> ClusterView:
    raise RayUnavailable(f"no Ray cluster answers at {address or 'auto'}")


def test_the_backend_flag_and_the_setting_are_one_and_must_agree() -> None:
    by_flag = request_settings(_request(engine_flags=("--distributed-executor-backend", "ray")))
    assert (by_flag.distributed_runtime.value, by_flag.distributed_runtime.source) == ("ray", "flag")
    assert request_settings(_request(engine_flags=("--distributed-executor-backend=mp",))).distributed_runtime.value \
        == "native"
    with pytest.raises(SettingsError, match="DSPARK_DISTRIBUTED_RUNTIME='native' says otherwise"):
        request_settings(_request({"DSPARK_DISTRIBUTED_RUNTIME": "native"},
                                  engine_flags=("--distributed-executor-backend", "ray")))
    with pytest.raises(SettingsError, match=r"--distributed-executor-backend: invalid choice: 'rayy'"):
        request_settings(_request(engine_flags=("--distributed-executor-backend", "rayy")))


def test_vllm_under_ray_gets_the_backend_and_no_native_multi_node_flags() -> None:
    config = ServeConfig(engine="vllm", model="m", max_num_seqs=4, tensor_parallel_size=2, nnodes=2,
                         master_addr="10.0.0.1", master_port=29500, distributed_runtime="ray",
                         extra_args=("--distributed-executor-backend", "ray", "--enforce-eager"))
    argv = VllmEngine(console=True).build_plan(config, None).argv
    assert argv.count("--distributed-executor-backend") == 1
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    for flag in ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"):
        assert flag not in argv
    native = VllmEngine(console=True).build_plan(
        dataclasses.replace(config, distributed_runtime="native", extra_args=("--distributed-executor-backend", "mp")),
        None).argv
    assert "--nnodes" in native and native[native.index("--distributed-executor-backend") + 1] == "mp"


def test_a_dry_run_with_no_cluster_plans_here_and_says_the_cluster_was_not_checked() -> None:
    request = _request(RAY_ENV)
    report = on_ray_cluster(request, request_settings(request), dry_run=True, inspect=_no_cluster)
    (missed,) = [f for f in report.findings if f.code == "ray-cluster-not-checked"]
    assert missed.level == "warn" and "no Ray cluster answers at auto" in missed.message


def test_a_real_start_with_no_cluster_is_refused() -> None:
    request = _request({**RAY_ENV, "RAY_ADDRESS": "127.0.0.1:1"})
    with pytest.raises(RefusedError, match=r"refusing to start on Ray: no Ray cluster answers at 127\.0\.0\.1:1"):
        on_ray_cluster(request, request_settings(request), dry_run=False, inspect=_no_cluster)


def test_a_closed_port_is_reported_quickly_by_the_real_inspector() -> None:
    # Ray's own client retries for minutes; the look before it answers at once.
    pytest.importorskip("ray", reason="the ray package is a test extra")
    request = _request({**RAY_ENV, "RAY_ADDRESS": "127.0.0.1:9"})
    with pytest.raises(RefusedError, match=r"no Ray cluster answers at 127\.0\.0\.1:9"):
        plan_start(StartRequest(validate=request))


@pytest.mark.parametrize(("recipe", "env", "flags", "message"), [
    ("flash-next-sglang", RAY_ENV, {}, r"sglang has no Ray backend.*"),
    ("flash-next-vllm", {**RAY_ENV, "DSPARK_PLATFORM": "cpu"}, {}, r"vLLM's CPU build has no Ray backend"),
    ("flash-next-vllm", RAY_ENV, {"node_rank": 1}, r"node_rank 1 \(flag\): under Ray one `dspark start` runs"),
])
def test_where_ray_cannot_run_it_is_a_usage_error(recipe: str, env: dict[str, str], flags: dict[str, Any],
                                                   message: str) -> None:
    request = _request(env, recipe=recipe, **flags)
    with pytest.raises(SettingsError, match=message) as caught:
        on_ray_cluster(request, request_settings(request), dry_run=True, inspect=_no_cluster)
    if recipe.endswith("sglang"):
        assert "--nnodes, --node-rank, --dist-init-addr" in str(caught.value.hint)


def test_a_node_that_is_not_the_plans_gpu_is_warned_and_still_judged() -> None:
    idle = load_snapshot(PROBES / "h200-idle.json")
    other = dataclasses.replace(idle, gpus=tuple(dataclasses.replace(g, name="NVIDIA L40S", free_bytes=40 << 30,
                                                                     total_bytes=48 << 30) for g in idle.gpus))
    view = ClusterView("127.0.0.1:6379", (
        RayNode("a" * 32, "127.0.0.1", "h1", gpus=1, local=True, snapshot=idle),
        RayNode("b" * 32, "127.0.0.1", "h2", gpus=1, snapshot=idle),
        RayNode("c" * 32, "127.0.0.1", "h3", gpus=1, snapshot=other),
    ))
    request = _request(RAY_ENV)
    report = on_ray_cluster(request, request_settings(request), dry_run=True, inspect=lambda _: view)
    codes = {(f.code, f.message.split(":", 1)[0]) for f in report.findings}
    assert ("ray-node-other-gpu", "Ray node cccccccc (h3, 127.0.0.1)") in codes
    assert ("does-not-fit", "Ray node cccccccc (h3, 127.0.0.1)") in codes  # ranks may land there: judged too
    assert report.verdict == "fail"
    assert report.hardware.gpus[0].name == "NVIDIA H200"  # planned on the plan's GPU model only


def test_the_engine_must_start_on_a_node_with_a_gpu_for_ray() -> None:
    idle = load_snapshot(PROBES / "h200-idle.json")
    view = ClusterView("127.0.0.1:6379", (
        RayNode("a" * 32, "127.0.0.1", "head", gpus=0, local=True, snapshot=idle),
        RayNode("b" * 32, "127.0.0.1", "w1", gpus=1, snapshot=idle),
        RayNode("c" * 32, "127.0.0.1", "w2", gpus=1, snapshot=idle),
    ))
    # vLLM's default Ray executor places its workers anywhere; the older one (V2 switched off) needs one here.
    request = _request(RAY_ENV)
    report = on_ray_cluster(request, request_settings(request), dry_run=True, inspect=lambda _: view)
    assert not [f for f in report.findings if f.code == "ray-driver-without-gpu"]
    assert report.verdict != "fail"
    request = _request({**RAY_ENV, "VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "0"})
    report = on_ray_cluster(request, request_settings(request), dry_run=True, inspect=lambda _: view)
    (driver,) = [f for f in report.findings if f.code == "ray-driver-without-gpu"]
    assert driver.level == "fail" and driver.message.startswith("Ray node aaaaaaaa (head, 127.0.0.1) (here)")


def test_the_probe_answers_from_the_nodes_own_hardware_file() -> None:
    answer = probe_here({"DSPARK_HARDWARE": str(PROBES / "h200-100gib-held.json"), "CUDA_VISIBLE_DEVICES": ""})
    assert answer["snapshot"]["gpus"][0]["free_bytes"] == load_snapshot(PROBES / "h200-100gib-held.json").gpus[
        0].free_bytes
    assert "README.md: not valid JSON" in probe_here({"DSPARK_HARDWARE": str(PROBES.parent / "k8s" / "README.md")})[
        "error"]
