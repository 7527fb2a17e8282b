"""Kubernetes objects for a validated plan: a LeaderWorkerSet when it spans nodes, else a Deployment; a Service.

Every pod runs `dspark start` with the plan's settings in its environment, so each pod validates its own node
before the engine starts. In a LeaderWorkerSet pod, the variables LWS sets (LWS_GROUP_SIZE, LWS_WORKER_INDEX,
LWS_LEADER_ADDRESS) give `dspark start` the node count, the pod's rank and the leader's address.

`render` is pure (a K8sPlan in, plain dicts out); `k8s_plan` derives the K8sPlan from a validation report
through the engine registry (port, health path, /dev/shm), never from an engine's name.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark.core.errors import InputError, RefusedError, SettingsError

if TYPE_CHECKING:
    from dspark.planning.validate import ValidateRequest, ValidationReport

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
CONTAINER = "dspark"
SHM_VOLUME = "dshm"
RECIPE_VOLUME = "recipe"
RECIPE_DIR = "/etc/dspark"
GPU_RESOURCE = "nvidia.com/gpu"
SHM_PATH = "/dev/shm"  # noqa: S108 - the engine's shared-memory mount inside the pod, not a temp file of ours
# The names of the Secret and key the pods read HF_TOKEN from (names only: the token never enters a manifest).
DEFAULT_HF_SECRET, DEFAULT_HF_SECRET_KEY = "hf-token", "token"
# The server must answer on the pod's address for the Service and the readiness probe (SGLang's own default is
# 127.0.0.1); the pod's network namespace is what it opens to, not the node's.
LISTEN_ALL = "0.0.0.0"  # noqa: S104
NAME_KEY = "app.kubernetes.io/name"
COMPONENT_KEY = "app.kubernetes.io/component"
MANAGED_BY = {"app.kubernetes.io/managed-by": "dspark"}
SERVER, WORKER = "server", "worker"  # pods that serve HTTP (Deployment pods, LWS leaders) and LWS workers

# A start-up estimate for the readiness probe's first look: the engine's own start (profiling, CUDA-graph capture,
# torch.compile: ~75 s for an 8B model on an H200) plus this node's weights read at a cold-cache pace.
ENGINE_START_S = 120
WEIGHT_READ_BYTES_PER_S = 200_000_000
UNKNOWN_WEIGHTS_READY_S = 600
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 40  # LWS adds "-<group>-<index>" and a revision hash label to pod names built from it


@dataclass(frozen=True)
class K8sPlan:
    """What the manifests are made of, already decided: no engine knowledge is needed past this point."""

    name: str
    image: str
    engine: str  # a label, nothing branches on it
    nodes: int
    gpus_per_node: int  # 0: no nvidia.com/gpu (the CPU build)
    seats: int
    port: int
    health_path: str
    ready_delay_s: int
    shm_bytes: int
    env: Mapping[str, str] = field(default_factory=dict)  # the plan's explicit settings, as dspark variables
    recipe_arg: str | None = None  # what `dspark start` is given: a shipped recipe name, or the mounted file
    recipe_file: tuple[str, str] | None = None  # (file name, text) of a recipe file shipped in a ConfigMap
    engine_flags: tuple[str, ...] = ()
    hf_secret: str = DEFAULT_HF_SECRET
    hf_secret_key: str = DEFAULT_HF_SECRET_KEY
    replicas: int = 1
    summary: tuple[str, ...] = ()  # lines for the YAML header


def start_command(plan: K8sPlan) -> list[str]:
    """`dspark start [RECIPE] [-- ENGINE FLAGS]`: the same in every pod; rank and peers come from the pod's env."""
    command = ["dspark", "start"]
    if plan.recipe_arg is not None:
        command.append(plan.recipe_arg)
    if plan.engine_flags:
        command += ["--", *plan.engine_flags]
    return command


def pod_env(plan: K8sPlan) -> list[dict[str, Any]]:
    """The container's environment: seats, where to listen, the plan's settings, and the HF token by reference."""
    values = {"MAX_NUM_SEQS": str(plan.seats), "DSPARK_HOST": LISTEN_ALL, "DSPARK_PORT": str(plan.port),
              **plan.env}
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    # Never inline: the token stays in the Secret; optional so public models start without one.
    env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": plan.hf_secret, "key": plan.hf_secret_key, "optional": True}}})
    return env


def quantity(n_bytes: int) -> str:
    """Bytes as a Kubernetes quantity, rounded up to whole GiB (or MiB below one GiB)."""
    if n_bytes >= 1 << 30:
        return f"{math.ceil(n_bytes / (1 << 30))}Gi"
    return f"{max(1, math.ceil(n_bytes / (1 << 20)))}Mi"


def _labels(plan: K8sPlan, component: str | None = None) -> dict[str, str]:
    labels = {NAME_KEY: plan.name, **MANAGED_BY}
    if component is not None:
        labels[COMPONENT_KEY] = component
    return labels


def _pod_spec(plan: K8sPlan, *, serves: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": plan.image,
        "command": start_command(plan),
        "env": pod_env(plan),
    }
    if plan.gpus_per_node > 0:
        container["resources"] = {"limits": {GPU_RESOURCE: str(plan.gpus_per_node)}}
    if serves:
        container["ports"] = [{"name": "http", "containerPort": plan.port, "protocol": "TCP"}]
        container["readinessProbe"] = {
            "httpGet": {"path": plan.health_path, "port": "http"},
            "initialDelaySeconds": plan.ready_delay_s,
            "periodSeconds": 10,
            "failureThreshold": 3,
        }
    mounts: list[dict[str, Any]] = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]
    volumes: list[dict[str, Any]] = [
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": quantity(plan.shm_bytes)}}]
    if plan.recipe_file is not None:
        mounts.append({"name": RECIPE_VOLUME, "mountPath": RECIPE_DIR, "readOnly": True})
        volumes.append({"name": RECIPE_VOLUME, "configMap": {"name": _recipe_map_name(plan)}})
    container["volumeMounts"] = mounts
    return {"containers": [container], "volumes": volumes}


def _recipe_map_name(plan: K8sPlan) -> str:
    return f"{plan.name}-recipe"


def config_map(plan: K8sPlan) -> dict[str, Any]:
    """The recipe file the pods start from, when it is not one dspark ships."""
    assert plan.recipe_file is not None  # noqa: S101 - render only asks for it when there is one
    file_name, text = plan.recipe_file
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": _recipe_map_name(plan), "labels": _labels(plan)},
            "data": {file_name: text}}


def leader_worker_set(plan: K8sPlan) -> dict[str, Any]:
    """One group of `nodes` pods: the leader serves HTTP, the workers run headless; a failed pod recreates all."""
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": plan.name, "labels": _labels(plan)},
        "spec": {
            "replicas": plan.replicas,
            # The leader cannot become ready before its workers have joined: it must not wait for readiness.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": plan.nodes,
                # One rank lost stalls the others' collectives: restart the group, not the pod.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": {"labels": _labels(plan, SERVER)},
                                   "spec": _pod_spec(plan, serves=True)},
                "workerTemplate": {"metadata": {"labels": _labels(plan, WORKER)},
                                   "spec": _pod_spec(plan, serves=False)},
            },
        },
    }


def deployment(plan: K8sPlan) -> dict[str, Any]:
    """A one-node plan: a Deployment whose pods each hold the whole engine."""
    selector = _labels(plan, SERVER)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": plan.name, "labels": _labels(plan)},
        "spec": {
            "replicas": plan.replicas,
            "selector": {"matchLabels": selector},
            # A rolling update would need a second set of GPUs for the surge pod; stop the old pod first.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": selector}, "spec": _pod_spec(plan, serves=True)},
        },
    }


def service(plan: K8sPlan) -> dict[str, Any]:
    """The engine's HTTP port on the serving pods (LWS leaders or the Deployment's pods)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": plan.name, "labels": _labels(plan)},
        "spec": {
            "type": "ClusterIP",
            "selector": _labels(plan, SERVER),
            "ports": [{"name": "http", "port": plan.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def render(plan: K8sPlan) -> list[dict[str, Any]]:
    """The objects to apply, in order: the recipe's ConfigMap (if any), the workload, the Service."""
    objects = [config_map(plan)] if plan.recipe_file is not None else []
    objects.append(leader_worker_set(plan) if plan.nodes > 1 else deployment(plan))
    objects.append(service(plan))
    return objects


def to_yaml(objects: Sequence[Mapping[str, Any]], header: Sequence[str] = ()) -> str:
    """Multi-document YAML for `kubectl apply -f -`, after `# ` header lines."""
    import yaml  # noqa: PLC0415 - only the YAML form needs it

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # a label map used twice is written twice: no &anchors for people to follow

    head = "".join(f"# {line}\n" for line in header)
    docs = [yaml.dump(dict(obj), Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120)
            for obj in objects]
    return head + "---\n" + "---\n".join(docs)


def to_json(objects: Sequence[Mapping[str, Any]]) -> str:
    """One JSON object: a v1 List of the objects (kubectl applies it as it is)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=2)


def manifest_name(raw: str, origin: str) -> str:
    """A name usable for every object and pod (a DNS-1035 label of at most 40 characters), or InputError."""
    if not _DNS_LABEL.fullmatch(raw) or len(raw) > MAX_NAME:
        raise InputError(
            f"{origin} {raw!r} is not a Kubernetes name: lower-case letters, digits and '-', starting with a letter, "
            f"at most {MAX_NAME} characters",
            hint="pass --name NAME",
        )
    return raw


def default_name(*candidates: str | None) -> str:
    """The first candidate made into a Kubernetes name (lower case, '-' for anything else), else 'dspark'."""
    for raw in candidates:
        if not raw:
            continue
        text = re.sub(r"[^a-z0-9]+", "-", raw.rsplit("/", 1)[-1].lower()).strip("-")
        text = re.sub(r"^[^a-z]+", "", text)[:MAX_NAME].rstrip("-")
        if text:
            return text
    return "dspark"


def ready_delay_s(weights_per_node_bytes: int | None) -> int:
    """Seconds before the first readiness probe: the engine's start plus this node's weights read cold."""
    if weights_per_node_bytes is None:
        return UNKNOWN_WEIGHTS_READY_S
    return ENGINE_START_S + math.ceil(weights_per_node_bytes / WEIGHT_READ_BYTES_PER_S)


# Settings each pod decides for itself (its own GPUs, its rank and peers) or that the manifest sets apart.
_PER_POD = frozenset({"hardware", "node_rank", "master_addr", "host", "port", "max_num_seqs", "platform"})


def _env_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class RenderOptions:
    """What the manifests need beyond the plan: the image, names and overrides."""

    image: str
    name: str | None = None
    replicas: int = 1
    hf_secret: str = DEFAULT_HF_SECRET
    hf_secret_key: str = DEFAULT_HF_SECRET_KEY
    ready_delay_s: int | None = None  # None: estimated from the weights
    shm_bytes: int | None = None  # None: the engine's figure per GPU
    engine_flags: tuple[str, ...] = ()


def k8s_plan(report: ValidationReport, options: RenderOptions) -> K8sPlan:
    """The K8sPlan of a validated report: its settings, seats, GPUs per node and the engine's serving facts."""
    from dspark.config.knobs import BY_NAME  # noqa: PLC0415
    from dspark.config.recipes import shipped_recipes_dir  # noqa: PLC0415
    from dspark.engines.pasted_flags import data_parallel_of, parse_engine_flags  # noqa: PLC0415
    from dspark.planning.findings import gpus_per_node  # noqa: PLC0415

    if not options.image.strip():
        raise InputError("--image is empty", hint="name the image that holds dspark and the engine")
    if options.replicas < 1:
        raise InputError(f"--replicas {options.replicas}: must be at least 1")
    settings = report.settings
    runtime = settings.distributed_runtime
    if runtime.value != "native":
        raise SettingsError(
            f"distributed_runtime {runtime.value!r} ({runtime.source}): the rendered pods span nodes with the "
            "engine's native multi-node runtime, set up from the LeaderWorkerSet's variables",
            hint="render with DSPARK_DISTRIBUTED_RUNTIME=native (the pods then carry it too)",
        )
    spec = report.spec
    data_parallel, dp_attention = data_parallel_of(spec, parse_engine_flags(spec, options.engine_flags))
    gpus = 0 if report.serve.platform == "cpu" else gpus_per_node(settings, 1 if dp_attention else data_parallel)
    env = {BY_NAME[name].env: _env_value(s.value) for name, s in settings.settings().items()
           if name in BY_NAME and name not in _PER_POD and s.layer in ("flag", "env") and s.value is not None}
    recipe_arg: str | None = None
    recipe_file: tuple[str, str] | None = None
    if report.recipe is not None:
        source = Path(report.recipe.source)
        if source.parent.resolve() == shipped_recipes_dir().resolve():
            recipe_arg = report.recipe.name
        else:
            recipe_file = (source.name, source.read_text())
            recipe_arg = f"{RECIPE_DIR}/{source.name}"
    name = (manifest_name(options.name, "--name") if options.name else
            default_name(report.serve.served_model_name, report.recipe.name if report.recipe else None,
                         report.serve.model))
    weights_node = report.weights.per_gpu_bytes * max(1, gpus) if report.weights is not None else None
    cap = report.capacity
    summary = (
        f"dspark render k8s: {report.recipe.name if report.recipe else report.serve.model} on "
        f"{report.serve.engine}, {settings.nnodes.value} node(s) x {gpus} GPU(s), {report.serve.max_num_seqs} seats",
        f"validated against {report.hardware.description}: verdict {report.verdict}, KV pool "
        f"{cap.kv_pool_tokens:,} tokens, {cap.max_concurrency:.2f}x at {cap.max_model_len:,}",
        "each pod runs `dspark start`, which validates its own node before the engine starts",
    )
    return K8sPlan(
        name=name,
        image=options.image.strip(),
        engine=report.serve.engine,
        nodes=settings.nnodes.value,
        gpus_per_node=gpus,
        seats=report.serve.max_num_seqs,
        port=settings.port.value or spec.default_port,
        health_path=spec.health_path,
        ready_delay_s=options.ready_delay_s if options.ready_delay_s is not None else ready_delay_s(weights_node),
        shm_bytes=options.shm_bytes or spec.shm_bytes_per_gpu * max(1, gpus),
        env=env,
        recipe_arg=recipe_arg,
        recipe_file=recipe_file,
        engine_flags=options.engine_flags,
        hf_secret=options.hf_secret,
        hf_secret_key=options.hf_secret_key,
        replicas=options.replicas,
        summary=summary,
    )


def render_request(
    request: ValidateRequest, options: RenderOptions
) -> tuple[ValidationReport, K8sPlan, list[dict[str, Any]]]:
    """Validate the request and render its objects; RefusedError (exit 1) for a plan that does not fit, as
    `dspark start` refuses one."""
    from dspark.planning.validate import validate  # noqa: PLC0415 - rendering alone needs no planning stack

    report = validate(request)
    if report.verdict == "fail":
        reasons = "; ".join(f.message for f in report.findings if f.level == "fail")
        raise RefusedError(f"refusing to render: {reasons}",
                           hint="fix the plan (dspark validate shows the same findings)")
    plan = k8s_plan(report, options)
    return report, plan, render(plan)
