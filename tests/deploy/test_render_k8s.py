"""`dspark render k8s`: manifests that the LWS CRD and the Kubernetes client accept whole, whose pods resolve to the
validated plan with the right rank under the variables LeaderWorkerSet sets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dspark.cli import main
from dspark.deploy.kubernetes import (
    ENGINE_START_S,
    K8sPlan,
    ready_delay_s,
    render,
    to_yaml,
)
from dspark.engines import engine_spec
from tests.deploy.k8s_checks import pod_specs, round_trip_losses, schema_errors, unknown_keys, unmounted_paths

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "registry.example/dspark-vllm:1"


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any dspark setting, LWS variable or token, plus `extra`."""
    drop = ("DSPARK_", "LWS_", "MAX_NUM_SEQS", "HF_TOKEN")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env | extra


def _render(args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            env: dict[str, str] | None = None) -> tuple[int, str, str]:
    for name in list(os.environ):
        if name.startswith(("DSPARK_", "LWS_")) or name in ("MAX_NUM_SEQS", "HF_TOKEN"):
            monkeypatch.delenv(name)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    rc = main(["render", "k8s", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def _objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = {o["kind"]: o for o in objects}
    assert len(kinds) == len(objects), [o["kind"] for o in objects]
    return kinds


def _container(pod_template: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_template["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _check_all(objects: list[dict[str, Any]]) -> None:
    """The CRD schema for the LWS (and no key it does not declare); a lossless client round trip for the rest."""
    models = {"Deployment": "V1Deployment", "Service": "V1Service", "ConfigMap": "V1ConfigMap"}
    for obj in objects:
        if obj["kind"] == "LeaderWorkerSet":
            assert schema_errors(obj) == []
            assert unknown_keys(obj) == []
            template = obj["spec"]["leaderWorkerTemplate"]
            for part in ("leaderTemplate", "workerTemplate"):
                assert round_trip_losses(template[part], "V1PodTemplateSpec") == [], part
        else:
            assert round_trip_losses(obj, models[obj["kind"]]) == [], obj["kind"]
            if obj["kind"] == "Deployment":
                assert round_trip_losses(obj["spec"]["template"], "V1PodTemplateSpec") == []
    for pod in pod_specs(objects):
        assert unmounted_paths(pod) == []


def test_two_node_recipe_renders_a_leader_worker_set_the_crd_and_client_accept(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, _ = _render(["flash-next-vllm", "--image", IMAGE], capsys, monkeypatch)
    assert rc == 0
    objects = _objects(out)
    assert [o["kind"] for o in objects] == ["LeaderWorkerSet", "Service"]
    _check_all(objects)
    lws = _by_kind(objects)["LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = _container(template["leaderTemplate"]), _container(template["workerTemplate"])
    assert leader["image"] == worker["image"] == IMAGE
    assert leader["command"] == worker["command"] == ["dspark", "start", "flash-next-vllm"]
    assert leader["env"] == worker["env"]  # rank and peers come only from the variables LWS sets per pod
    # TP 2 over 2 nodes: one GPU per pod.
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    spec = engine_spec("vllm")
    assert leader["ports"] == [{"name": "http", "containerPort": spec.default_port, "protocol": "TCP"}]
    assert leader["readinessProbe"]["httpGet"] == {"path": spec.health_path, "port": "http"}
    assert "ports" not in worker and "readinessProbe" not in worker  # workers run headless
    service = _by_kind(objects)["Service"]
    assert service["spec"]["ports"][0]["port"] == spec.default_port
    assert service["spec"]["selector"].items() <= template["leaderTemplate"]["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= template["workerTemplate"]["metadata"]["labels"].items()


def test_seats_shm_and_readiness_come_from_the_plan_and_the_engine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, _ = _render(["flash-next-vllm", "--image", IMAGE, "--max-num-seqs", "5", "--json"], capsys, monkeypatch)
    assert rc == 0
    (lws,) = [o for o in json.loads(out)["items"] if o["kind"] == "LeaderWorkerSet"]
    pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MAX_NUM_SEQS"] == "5"
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{engine_spec('vllm').shm_bytes_per_gpu >> 30}Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]
    # The recipe's weights estimate (49,202,186,752 B over TP 2) read at the assumed pace, after the engine's start.
    delay = pod["containers"][0]["readinessProbe"]["initialDelaySeconds"]
    assert delay == ready_delay_s(49_202_186_752 // 2) > ENGINE_START_S


def test_the_hf_token_is_a_secret_reference_never_a_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, _ = _render(["flash-next-vllm", "--image", IMAGE, "--hf-secret", "my-hf:hf_key"], capsys, monkeypatch,
                         env={"HF_TOKEN": "hf_do_not_print_me"})
    assert rc == 0
    assert "hf_do_not_print_me" not in out
    for obj in _objects(out):
        if obj["kind"] == "LeaderWorkerSet":
            for part in ("leaderTemplate", "workerTemplate"):
                env = _container(obj["spec"]["leaderWorkerTemplate"][part])["env"]
                (token,) = [e for e in env if e["name"] == "HF_TOKEN"]
                assert token == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                    "name": "my-hf", "key": "hf_key", "optional": True}}}


def test_a_plan_on_one_node_renders_a_deployment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, _ = _render(["flash-next-vllm", "--image", IMAGE, "--nnodes", "1", "--hardware", "h200:2"],
                         capsys, monkeypatch)
    assert rc == 0
    objects = _objects(out)
    assert [o["kind"] for o in objects] == ["Deployment", "Service"]
    _check_all(objects)
    container = _container(_by_kind(objects)["Deployment"]["spec"]["template"])
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"  # TP 2 on the one node
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DSPARK_NNODES"] == "1"  # the command-line choice travels; the hardware it was planned on does not
    assert "DSPARK_HARDWARE" not in env


def test_a_plan_that_does_not_fit_is_refused_not_rendered(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, err = _render(["flash-next-vllm", "--image", IMAGE, "--kv-cache-memory", "200GiB"], capsys, monkeypatch)
    assert rc == 1
    assert out == ""
    assert "refusing to render" in err


def test_bad_names_and_missing_image_are_usage_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, _, err = _render(["flash-next-vllm", "--image", IMAGE, "--name", "Bad_Name"], capsys, monkeypatch)
    assert rc == 2
    assert "'Bad_Name' is not a Kubernetes name" in err
    rc, _, err = _render(["flash-next-vllm"], capsys, monkeypatch)
    assert rc == 2
    assert "--image" in err


def test_a_ray_plan_is_not_rendered_and_native_travels_to_the_pods(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, _, err = _render(["flash-next-vllm", "--image", IMAGE, "--", "--distributed-executor-backend", "ray"],
                         capsys, monkeypatch)
    assert rc == 2
    assert "distributed_runtime 'ray' (flag): the rendered pods span nodes with the engine's native" in err
    rc, out, _ = _render(["flash-next-vllm", "--image", IMAGE], capsys, monkeypatch,
                         env={"DSPARK_DISTRIBUTED_RUNTIME": "native"})
    assert rc == 0
    lws = _by_kind(_objects(out))["LeaderWorkerSet"]
    env = _container(lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"])["env"]
    assert {"name": "DSPARK_DISTRIBUTED_RUNTIME", "value": "native"} in env


def test_a_typo_in_the_manifest_would_be_caught() -> None:
    """The checks above can fail: an unknown key, a key the client drops, a value of the wrong type."""
    plan = K8sPlan(name="x", image="i", engine="vllm", nodes=2, gpus_per_node=1, seats=4, port=8000,
                   health_path="/health", ready_delay_s=10, shm_bytes=1 << 30)
    lws, service = render(plan)
    lws["spec"]["leaderWorkerTemplate"]["restartPolicyy"] = "RecreateGroupOnPodRestart"
    assert unknown_keys(lws) == [".spec.leaderWorkerTemplate.restartPolicyy"]
    lws["spec"]["leaderWorkerTemplate"]["size"] = "2"
    assert any("size" in e for e in schema_errors(lws))
    service["spec"]["ports"][0]["targetPortt"] = 8000
    assert round_trip_losses(service, "V1Service") == ["lost .spec.ports[0].targetPortt"]
    pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    pod["spec"]["containers"][0]["readinessProbe"]["initialDelay"] = 5
    assert round_trip_losses(pod, "V1PodTemplateSpec") == [
        "lost .spec.containers[0].readinessProbe.initialDelay"]


def _pod_dry_run(container: dict[str, Any], lws_env: dict[str, str], recipe_dir: Path | None = None) -> dict[str, Any]:
    """Run the pod's own command as `dspark start --dry-run --json`, in the pod's environment plus LWS's variables."""
    command = list(container["command"])
    assert command[:2] == ["dspark", "start"]
    if recipe_dir is not None:  # the ConfigMap's mount point, here a folder holding its data
        command = [str(recipe_dir / Path(a).name) if a.startswith("/etc/dspark/") else a for a in command]
    cut = command.index("--") if "--" in command else len(command)
    argv = [sys.executable, "-m", "dspark", *command[1:cut], "--dry-run", "--json", *command[cut:]]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    proc = subprocess.run(argv, env=_clean_env(**env, **lws_env), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _lws_vars(rank: int, size: int = 2) -> dict[str, str]:
    # As LWS sets them: the leader's stable DNS name, the group size and this pod's index (0 for the leader).
    return {"LWS_LEADER_ADDRESS": "flash-next-0.flash-next.default", "LWS_GROUP_SIZE": str(size),
            "LWS_WORKER_INDEX": str(rank)}


def _same_plan(leader: dict[str, Any], worker: dict[str, Any]) -> None:
    assert leader["capacity"] == worker["capacity"]
    per_rank = {"node_rank"}
    assert {k: v for k, v in leader["settings"].items() if k not in per_rank} == {
        k: v for k, v in worker["settings"].items() if k not in per_rank}
    assert leader["settings"]["node_rank"] == {"value": 0, "source": "env:LWS_WORKER_INDEX"}
    assert worker["settings"]["node_rank"] == {"value": 1, "source": "env:LWS_WORKER_INDEX"}
    assert leader["settings"]["nnodes"] == {"value": 2, "source": "env:LWS_GROUP_SIZE"}
    assert leader["settings"]["master_addr"] == {"value": "flash-next-0.flash-next.default",
                                                 "source": "env:LWS_LEADER_ADDRESS"}


def test_pod_commands_resolve_to_the_validated_plan_with_each_pods_rank(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, _ = _render(["flash-next-vllm", "--image", IMAGE, "--json"], capsys, monkeypatch)
    assert rc == 0
    (lws,) = [o for o in json.loads(out)["items"] if o["kind"] == "LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    leader = _pod_dry_run(_container(template["leaderTemplate"]), _lws_vars(0))
    worker = _pod_dry_run(_container(template["workerTemplate"]), _lws_vars(1))
    _same_plan(leader, worker)
    validated = subprocess.run([sys.executable, "-m", "dspark", "validate", "flash-next-vllm", "--json"],
                               env=_clean_env(), capture_output=True, text=True, timeout=120, check=True)
    assert leader["capacity"] == json.loads(validated.stdout)["capacity"]
    assert leader["settings"]["max_num_seqs"]["value"] == json.loads(validated.stdout)["settings"]["max_num_seqs"][
        "value"]
    # vLLM's native multi-node flags: the worker's own rank, headless; the leader serves.
    lead_argv, work_argv = " ".join(leader["argv"]), " ".join(worker["argv"])
    assert "--nnodes 2 --node-rank 0 --master-addr flash-next-0.flash-next.default" in lead_argv
    assert "--nnodes 2 --node-rank 1 --master-addr flash-next-0.flash-next.default --headless" in work_argv
    assert "--headless" not in lead_argv
    assert "--host 0.0.0.0 --port 8000" in lead_argv


def test_sglang_pods_from_a_recipe_file_get_the_same_treatment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = tmp_path / "my-sglang.yaml"
    recipe.write_text((ROOT / "dspark" / "data" / "recipes" / "flash-next-sglang.yaml").read_text()
                      .replace("name: flash-next-sglang", "name: my-sglang"))
    rc, out, _ = _render([str(recipe), "--image", IMAGE, "--name", "flash-next", "--", "--trust-remote-code"],
                         capsys, monkeypatch)
    assert rc == 0
    objects = _objects(out)
    assert [o["kind"] for o in objects] == ["ConfigMap", "LeaderWorkerSet", "Service"]
    _check_all(objects)
    config_map, lws, _ = objects
    assert config_map["data"] == {"my-sglang.yaml": recipe.read_text()}
    template = lws["spec"]["leaderWorkerTemplate"]
    leader_c = _container(template["leaderTemplate"])
    assert leader_c["command"] == ["dspark", "start", "/etc/dspark/my-sglang.yaml", "--", "--trust-remote-code"]
    spec = engine_spec("sglang")
    assert leader_c["ports"][0]["containerPort"] == spec.default_port
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for file_name, text in config_map["data"].items():
        (mounted / file_name).write_text(text)
    leader = _pod_dry_run(leader_c, _lws_vars(0), mounted)
    worker = _pod_dry_run(_container(template["workerTemplate"]), _lws_vars(1), mounted)
    _same_plan(leader, worker)
    work_argv = " ".join(worker["argv"])
    assert "--nnodes 2 --node-rank 1 --dist-init-addr flash-next-0.flash-next.default:" in work_argv
    assert "--trust-remote-code" in work_argv


def test_yaml_header_is_comments_then_documents() -> None:
    plan = K8sPlan(name="x", image="i", engine="vllm", nodes=1, gpus_per_node=1, seats=4, port=8000,
                   health_path="/health", ready_delay_s=10, shm_bytes=512 << 20, summary=("one", "two"))
    text = to_yaml(render(plan), plan.summary)
    assert text.startswith("# one\n# two\n---\n")
    assert [o["kind"] for o in _objects(text)] == ["Deployment", "Service"]
    assert "sizeLimit: 512Mi" in text


# --- issue 26 item 1 and issue 27 point 3: secrets as Secret references; manifests that run as rendered ---

RECIPE_SECRETS = {"HF_TOKEN": "hf_recipe_tok1", "OPENAI_API_KEY": "sk-recipe-key2",
                  "HTTPS_PROXY": "http://proxyuser:pw-recipe3@proxy.example:3128", "DB_PASSWORD_X": "pw-recipe4"}
ARG_SECRETS = ("sk-recipe-five", "sk-recipe-six")
FLAG_SECRETS = ("sk-flag-seven", "sk-flag-eight")
PLANTED = (*RECIPE_SECRETS.values(), "pw-recipe3", *ARG_SECRETS, *FLAG_SECRETS)


def _secret_recipe(tmp_path: Path) -> Path:
    text = (ROOT / "dspark" / "data" / "recipes" / "flash-next-vllm.yaml").read_text().replace(
        "name: flash-next-vllm", "name: my-vllm")
    env = "".join(f"  {k}: {v!r}\n" for k, v in RECIPE_SECRETS.items())
    recipe = tmp_path / "my-vllm.yaml"
    recipe.write_text(f"# HF_TOKEN={RECIPE_SECRETS['HF_TOKEN']} (a comment repeating a secret)\n{text}"
                      f"env:\n{env}  NCCL_DEBUG: WARN\nengine_args: [--api-key, {', '.join(ARG_SECRETS)}]\n")
    return recipe


def _secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for e in container["env"] if "valueFrom" in e}


def _as_kubernetes_runs_it(container: dict[str, Any], secrets: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The container with its Secret references resolved and $(VAR) expanded in its command, as the kubelet
    does: env entries become values, and the command holds the variables' values."""
    env = {e["name"]: e["value"] if "value" in e else secrets[(e["valueFrom"]["secretKeyRef"]["name"],
                                                                e["valueFrom"]["secretKeyRef"]["key"])]
           for e in container["env"]}
    command = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["command"]]
    return {**container, "command": command, "env": [{"name": k, "value": v} for k, v in env.items()]}


def test_secrets_of_a_recipe_and_of_engine_flags_are_secret_references_never_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = _secret_recipe(tmp_path)
    for form in (["--json"], []):  # YAML last: its objects are checked below
        rc, out, err = _render([str(recipe), "--image", IMAGE, "--name", "flash-next", *form, "--", "--api-key",
                                *FLAG_SECRETS], capsys, monkeypatch)
        assert rc == 0, err
        assert [s for s in PLANTED if s in out or s in err] == []
    objects = _objects(out)
    _check_all(objects)
    config_map, lws, _ = objects
    shipped = yaml.safe_load(config_map["data"]["my-vllm.yaml"])
    assert shipped["env"] == {"NCCL_DEBUG": "WARN"}  # the non-secret variable stays in the recipe
    assert "engine_args" not in shipped
    template = lws["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        container = _container(template[part])
        refs = _secret_refs(container)
        assert [e["name"] for e in container["env"]].count("HF_TOKEN") == 1
        assert refs["HF_TOKEN"] == ("hf-token", "token")
        for name in ("OPENAI_API_KEY", "HTTPS_PROXY", "DB_PASSWORD_X"):
            assert refs[name] == ("flash-next-secrets", name)
        flags = container["command"][container["command"].index("--") + 1:]
        # The recipe's --api-key first (where its engine_args were), the command line's after it (it wins).
        assert flags == ["--api-key", "$(ENGINE_API_KEY)", "$(ENGINE_API_KEY_2)",
                         "--api-key", "$(ENGINE_API_KEY_3)", "$(ENGINE_API_KEY_4)"]
        assert set(re.findall(r"\$\((\w+)\)", " ".join(flags))) <= refs.keys()
    assert "kubectl create secret generic flash-next-secrets --from-literal=OPENAI_API_KEY=..." in err
    assert "--from-literal=api-key-4=..." in err
    # At run time the recipe sets no HF_TOKEN or key of its own: the engine reads what the Secrets hold.
    secrets = {("hf-token", "token"): "hf_from_the_secret", **{("flash-next-secrets", k): f"from-secret-{k}"
                                                                for k in (*RECIPE_SECRETS, "api-key", "api-key-2",
                                                                          "api-key-3", "api-key-4")}}
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (mounted / "my-vllm.yaml").write_text(config_map["data"]["my-vllm.yaml"])
    leader = _pod_dry_run(_as_kubernetes_runs_it(_container(template["leaderTemplate"]), secrets), _lws_vars(0),
                          mounted)
    assert leader["env"] == {"NCCL_DEBUG": "WARN"}  # nothing overrides the pod's HF_TOKEN and keys
    argv = " ".join(leader["argv"])
    assert "--api-key *** *** --api-key *** ***" in argv
    assert "from-secret" not in json.dumps(leader)


def test_a_model_directory_is_mounted_where_the_plan_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text((ROOT / "tests" / "fixtures" / "configs" / "qwen3-32b.json").read_text())
    base = ["--model", str(model), "--hardware", "h200:1", "--image", IMAGE]
    cases: list[tuple[list[str], dict[str, Any], bool]] = [
        ([], {"hostPath": {"path": str(model), "type": "Directory"}}, True),
        (["--model-pvc", "models"], {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}}, False),
        (["--model-host-path", "/data/qwen3"], {"hostPath": {"path": "/data/qwen3", "type": "Directory"}}, False),
    ]
    for extra, source, noted in cases:
        rc, out, err = _render([*base, *extra], capsys, monkeypatch)
        assert rc == 0, err
        objects = _objects(out)
        _check_all(objects)
        pod = _by_kind(objects)["Deployment"]["spec"]["template"]["spec"]
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == str(model)]
        assert mount["readOnly"] is True
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert {k: v for k, v in volume.items() if k != "name"} == source
        assert {"name": "DSPARK_MODEL", "value": str(model)} in pod["containers"][0]["env"]
        assert ("mounted from the same directory on each node" in err) is noted
    rc, _, err = _render([*base, "--model-pvc", "m", "--model-host-path", "/m"], capsys, monkeypatch)
    assert rc == 2
    assert "--model-pvc and --model-host-path both given" in err
    rc, _, err = _render([*base, "--model-host-path", "data/m"], capsys, monkeypatch)
    assert rc == 2
    assert "not an absolute path" in err


def test_a_hub_model_gets_its_download_cache_mounted_at_hf_home(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for extra, source in (([], {"emptyDir": {}}),
                          (["--model-pvc", "hf-cache"], {"persistentVolumeClaim": {"claimName": "hf-cache",
                                                                                     "readOnly": False}})):
        rc, out, err = _render(["flash-next-vllm", "--image", IMAGE, *extra], capsys, monkeypatch)
        assert rc == 0, err
        lws = _by_kind(_objects(out))["LeaderWorkerSet"]
        for part in ("leaderTemplate", "workerTemplate"):
            pod = lws["spec"]["leaderWorkerTemplate"][part]["spec"]
            env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
            (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == env["HF_HOME"]]
            assert "readOnly" not in mount  # the engine downloads into it
            (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
            assert {k: v for k, v in volume.items() if k != "name"} == source


def test_other_paths_the_pod_reads_are_mounted_and_the_check_can_fail(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, err = _render(["flash-next-vllm", "--image", IMAGE, "--", "--chat-template", "/opt/templates/qwen.jinja"],
                           capsys, monkeypatch)
    assert rc == 0, err
    _check_all(_objects(out))  # includes: no path unmounted
    assert "/opt/templates/qwen.jinja: read by the pod, mounted from the same path on each node" in err
    plan = K8sPlan(name="x", image="i", engine="vllm", nodes=1, gpus_per_node=1, seats=4, port=8000,
                   health_path="/health", ready_delay_s=10, shm_bytes=1 << 30,
                   env={"DSPARK_MODEL": "/models/x", "HTTPS_PROXY": "http://proxy:3128/"},
                   engine_flags=("--speculative-config", '{"model": "/drafters/d"}'))
    (pod,) = pod_specs(render(plan))
    assert unmounted_paths(pod) == ["dspark: /drafters/d", "dspark: /models/x"]


def test_the_gpu_product_the_plan_was_validated_for_is_a_node_selector(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def selector(*args: str) -> tuple[dict[str, str] | None, str]:
        rc, out, err = _render(["flash-next-vllm", "--image", IMAGE, *args], capsys, monkeypatch)
        assert rc == 0, err
        objects = _objects(out)
        _check_all(objects)
        specs = pod_specs(objects)
        assert all(s.get("nodeSelector") == specs[0].get("nodeSelector") for s in specs)
        limits = specs[0]["containers"][0]["resources"]["limits"]
        return specs[0].get("nodeSelector"), limits["nvidia.com/gpu"]

    assert selector() == ({"nvidia.com/gpu.product": "NVIDIA-GB10"}, "1")  # the recipe's gb10x2 profile
    assert selector("--nnodes", "1", "--hardware", "h200:2") == ({"nvidia.com/gpu.product": "NVIDIA-H200"}, "2")
    assert selector("--gpu-product", "NVIDIA-H200-SHARED") == ({"nvidia.com/gpu.product": "NVIDIA-H200-SHARED"},
                                                               "1")
    assert selector("--gpu-product", "") == (None, "1")
    rc, _, err = _render(["flash-next-vllm", "--image", IMAGE, "--gpu-product", "NVIDIA H200"], capsys, monkeypatch)
    assert rc == 2
    assert "is not a label value" in err


@pytest.mark.parametrize(
    ("names", "label"),
    [(["NVIDIA H200"] * 8, "NVIDIA-H200"), (["NVIDIA H100 80GB HBM3"], "NVIDIA-H100-80GB-HBM3"),
     (["Tesla T4"], "Tesla-T4"), (["NVIDIA  GeForce RTX 5090"], "NVIDIA-GeForce-RTX-5090"),
     (["NVIDIA H200", "NVIDIA H100 80GB HBM3"], None), ([], None), (["x" * 64], None), (["NVIDIA (H200)"], None)],
)
def test_gpu_product_label_is_the_nvml_name_as_feature_discovery_writes_it(names: list[str],
                                                                           label: str | None) -> None:
    from dspark.deploy.kubernetes import gpu_product_label  # noqa: PLC0415 - new here: the rest runs on older code

    assert gpu_product_label(names) == label
