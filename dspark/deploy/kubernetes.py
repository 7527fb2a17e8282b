"""Kubernetes objects for a validated plan: a LeaderWorkerSet when it spans nodes, else a Deployment; a Service.

Every pod runs `dspark start` with the plan's settings in its environment, so each pod validates its own node
before the engine starts. In a LeaderWorkerSet pod, the variables LWS sets (LWS_GROUP_SIZE, LWS_WORKER_INDEX,
LWS_LEADER_ADDRESS) give `dspark start` the node count, the pod's rank and the leader's address.

`render` is pure (a K8sPlan in, plain dicts out); `k8s_plan` derives the K8sPlan from a validation report
through the engine registry (port, health path, /dev/shm), never from an engine's name.

What the manifests never hold is a secret's value. A recipe's secret `env` (HF_TOKEN, *_API_KEY, *_TOKEN,
*_SECRET, anything with PASSWORD in it, a URL with credentials) and the values of secret engine flags
(`--api-key K1 K2`, from the recipe's engine_args or after `--`) become references to a Secret the user creates
(`secretKeyRef`); an engine flag's value is the container's variable, `--api-key $(ENGINE_API_KEY)`, which
Kubernetes expands from that reference. A recipe file with secrets is shipped in its ConfigMap without them, so
that nothing in it overrides the Secret at run time. What the pods need to run as rendered is in them: the
model's storage mounted where the plan reads the model, the GPU product the plan was validated for as a node
selector, the GPUs as limits, and /dev/shm sized for the engine.
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
from dspark.core.redact import is_secret_flag, is_secret_name, printable, redact_url

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
HF_TOKEN = "HF_TOKEN"  # noqa: S105 - a variable's name, not its value
SECRETS_SUFFIX = "-secrets"  # the Secret of the other secrets: <name>-secrets unless --secret-name
ENGINE_SECRET_PREFIX = "ENGINE_"  # noqa: S105 - `--api-key K` -> `--api-key $(ENGINE_API_KEY)`, from the Secret's key api-key
# NVIDIA GPU Feature Discovery (k8s-device-plugin) labels each node with the NVML name of its GPUs, spaces
# written '-': "NVIDIA H200" -> nvidia.com/gpu.product=NVIDIA-H200 (docs/deployment.md).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_LABEL_VALUE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]")
MODEL_VOLUME = "model"
HF_HOME = "HF_HOME"
HF_CACHE_DIR = "/var/cache/huggingface"  # HF_HOME in the pods when the model is a hub name (its download cache)
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
class Mount:
    """A volume and where the container sees it."""

    name: str
    path: str
    source: Mapping[str, Any]  # the volume's source: {"hostPath": ...}, {"persistentVolumeClaim": ...}, ...
    read_only: bool = True


@dataclass(frozen=True)
class SecretEnv:
    """A variable the container reads from a key of a Secret (never a value in the manifest)."""

    env: str
    secret: str
    key: str
    optional: bool = False


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
    secret_env: tuple[SecretEnv, ...] = ()  # the other secrets, each from its Secret (HF_TOKEN is hf_secret's)
    mounts: tuple[Mount, ...] = ()  # the model's storage and any other path the pod reads (beside shm, recipe)
    gpu_product: str | None = None  # the nvidia.com/gpu.product node label to select (None: no selector)
    notes: tuple[str, ...] = ()  # what the user must know or do (printed on stderr, never in the manifests)


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
    env.append({"name": HF_TOKEN, "valueFrom": {"secretKeyRef": {
        "name": plan.hf_secret, "key": plan.hf_secret_key, "optional": True}}})
    for ref in plan.secret_env:
        env.append({"name": ref.env, "valueFrom": {"secretKeyRef": {
            "name": ref.secret, "key": ref.key, "optional": ref.optional}}})
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
    for mount in plan.mounts:
        mounts.append({"name": mount.name, "mountPath": mount.path, **({"readOnly": True} if mount.read_only else {})})
        volumes.append({"name": mount.name, **mount.source})
    container["volumeMounts"] = mounts
    spec: dict[str, Any] = {"containers": [container], "volumes": volumes}
    if plan.gpu_product is not None:
        spec["nodeSelector"] = {GPU_PRODUCT_LABEL: plan.gpu_product}
    return spec


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

    def text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        # A recipe in a ConfigMap reads as the file it is (a literal block), where YAML allows one.
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)

    Dumper.add_representer(str, text)

    head = "".join(f"# {printable(line)}\n" for line in header)  # YAML escapes its scalars; comments are ours
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
    secret_name: str | None = None  # the Secret of the recipe's and flags' secrets (None: <name>-secrets)
    model_pvc: str | None = None  # a PersistentVolumeClaim holding the model (or the HF cache, for a hub name)
    model_host_path: str | None = None  # a directory on each node holding it
    gpu_product: str | None = None  # the nvidia.com/gpu.product to select (None: the plan's GPUs; "": none)


def gpu_product_label(names: Sequence[str]) -> str | None:
    """The nvidia.com/gpu.product value GPU Feature Discovery writes for GPUs of this NVML name (spaces as '-');
    None for no GPUs, GPUs of several names, or a name no label value can hold."""
    distinct = set(names)
    if len(distinct) != 1:
        return None
    value = "-".join(next(iter(distinct)).split())
    return value if _LABEL_VALUE.fullmatch(value) else None


def _is_option(arg: str) -> bool:
    from dspark.engines.argv import is_option  # noqa: PLC0415 - the engines package loads with the plan

    return is_option(arg)


def split_secret_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(args without secret flags, the secret flags with their values): `--api-key K1 K2`, `--hf-token=T`."""
    kept: list[str] = []
    moved: list[str] = []
    taking = False
    for arg in args:
        if taking and not _is_option(arg):
            moved.append(arg)
            continue
        taking = _is_option(arg) and is_secret_flag(arg.partition("=")[0])
        (moved if taking else kept).append(arg)
    return kept, moved


def secret_flag_refs(flags: Sequence[str], secret: str) -> tuple[tuple[str, ...], tuple[SecretEnv, ...]]:
    """The flags with each secret value replaced by `$(VAR)`, and the variables, each from a key of `secret`
    (`--api-key K1 K2` -> `--api-key $(ENGINE_API_KEY) $(ENGINE_API_KEY_2)`, keys api-key and api-key-2)."""
    out: list[str] = []
    refs: list[SecretEnv] = []
    flag: str | None = None
    taken: set[str] = set()

    def ref(name: str) -> str:
        base = name.lstrip("-").replace("_", "-").lower()
        key, n = base, 1
        while key in taken:
            n += 1
            key = f"{base}-{n}"
        taken.add(key)
        refs.append(SecretEnv(ENGINE_SECRET_PREFIX + key.replace("-", "_").replace(".", "_").upper(), secret, key))
        return f"$({refs[-1].env})"

    for arg in flags:
        if flag is not None and not _is_option(arg):
            out.append(ref(flag))
            continue
        name, eq, _ = arg.partition("=")
        flag = name if _is_option(arg) and is_secret_flag(name) else None
        out.append(name if flag is not None else arg)
        if flag is not None and eq:
            out.append(ref(flag))  # `--f $(VAR)`, never `--f=$(VAR)`: a text that reads as an assignment
    return tuple(out), tuple(refs)


def recipe_env_refs(env: Mapping[str, str], secret: str) -> tuple[SecretEnv, ...]:
    """A recipe's secret variables (HF_TOKEN aside: the pods read it from --hf-secret) as Secret references:
    secret names, and any value holding a URL with credentials (HTTPS_PROXY=http://user:pw@proxy)."""
    return tuple(SecretEnv(name, secret, name) for name, value in env.items()
                 if name != HF_TOKEN and (is_secret_name(name) or redact_url(value) != value))


def recipe_without_secrets(text: str, source: str, drop_env: Sequence[str], engine_args: Sequence[str]) -> str:
    """The recipe's YAML without the variables in drop_env and with these engine_args: what the ConfigMap
    holds when the recipe had secrets (its comments are not kept: a comment may repeat a secret)."""
    import yaml  # noqa: PLC0415

    data = yaml.safe_load(text)
    env = {k: v for k, v in (data.get("env") or {}).items() if k not in drop_env}
    if env:
        data["env"] = env
    else:
        data.pop("env", None)
    if engine_args:
        data["engine_args"] = list(engine_args)
    else:
        data.pop("engine_args", None)
    head = (f"# {Path(source).name} as `dspark render k8s` ships it: its secrets are not here, the pods read them "
            "from Secret references\n")
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True)


# An absolute path in a command argument or a variable's value (inside JSON too), never a URL's path.
_ABS_PATH = re.compile(r"(?<![\w.:/~$-])/[A-Za-z0-9._@+-]+(?:/[A-Za-z0-9._@+-]+)*")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def model_mounts(model: str, *, pvc: str | None, host_path: str | None,
                 recipe_env: Mapping[str, str]) -> tuple[list[Mount], dict[str, str], list[str]]:
    """Where the pods read the model: a directory path is mounted at that path; a hub name's download cache
    (HF_HOME) is. From --model-pvc, --model-host-path, else the node's own path (a directory) or an emptyDir
    (a download per pod). Returns (mounts, variables to set, notices)."""
    if pvc and host_path:
        raise InputError("--model-pvc and --model-host-path both given", hint="the model is in one place: pass one")
    if host_path is not None and not host_path.startswith("/"):
        raise InputError(f"--model-host-path {host_path!r}: not an absolute path", hint="name the node's directory")
    if pvc is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", pvc):
        raise InputError(f"--model-pvc {pvc!r} is not a PersistentVolumeClaim name",
                         hint="lower-case letters, digits, '-' and '.'")
    directory = model.startswith("/")
    path = model if directory else recipe_env.get(HF_HOME, HF_CACHE_DIR)
    env = {} if directory or HF_HOME in recipe_env else {HF_HOME: path}
    notes: list[str] = []
    if pvc:
        source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": pvc, "readOnly": directory}}
    elif host_path:
        source = {"hostPath": {"path": host_path, "type": "Directory" if directory else "DirectoryOrCreate"}}
    elif directory:
        source = {"hostPath": {"path": model, "type": "Directory"}}
        notes.append(f"model {model}: mounted from the same directory on each node (hostPath); "
                     "--model-pvc NAME or --model-host-path DIR says where it is instead")
    else:
        source = {"emptyDir": {}}
        notes.append(f"model {model}: each pod downloads it into an emptyDir at {HF_HOME}={path}; "
                     "--model-pvc NAME (or --model-host-path DIR) keeps one download for every start")
    return [Mount(MODEL_VOLUME, path, source, read_only=directory)], env, notes


def other_path_mounts(texts: Sequence[str], mounts: Sequence[Mount]) -> tuple[list[Mount], list[str]]:
    """Absolute paths the pod's command, variables or plan name outside every mount (a drafter, a chat
    template): each mounted from the same path on the node, with a notice."""
    roots = [RECIPE_DIR, SHM_PATH, *(m.path for m in mounts)]
    extra: list[Mount] = []
    notes: list[str] = []
    for text in texts:
        for path in _ABS_PATH.findall(text):
            if any(_under(path, root) for root in roots):
                continue
            roots.append(path)
            extra.append(Mount(f"path-{len(extra) + 1}", path, {"hostPath": {"path": path}}))
            notes.append(f"{path}: read by the pod, mounted from the same path on each node (hostPath)")
    return extra, notes


def k8s_plan(report: ValidationReport, options: RenderOptions) -> K8sPlan:
    """The K8sPlan of a validated report: its settings, seats, GPUs per node and the engine's serving facts."""
    from dspark.config.knobs import BY_NAME  # noqa: PLC0415
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
    if options.gpu_product and not _LABEL_VALUE.fullmatch(options.gpu_product):
        raise InputError(f"--gpu-product {options.gpu_product!r} is not a label value",
                         hint="as GPU Feature Discovery writes it: NVIDIA-H200 (letters, digits, '-', '_', '.')")
    data_parallel, dp_attention = data_parallel_of(spec, parse_engine_flags(spec, options.engine_flags))
    gpus = 0 if report.serve.platform == "cpu" else gpus_per_node(settings, 1 if dp_attention else data_parallel)
    env = {BY_NAME[name].env: _env_value(s.value) for name, s in settings.settings().items()
           if name in BY_NAME and name not in _PER_POD and s.layer in ("flag", "env") and s.value is not None}
    name = (manifest_name(options.name, "--name") if options.name else
            default_name(report.serve.served_model_name, report.recipe.name if report.recipe else None,
                         report.serve.model))
    secret = manifest_name(options.secret_name, "--secret-name") if options.secret_name else name + SECRETS_SUFFIX
    pod = _pod_inputs(report, options, secret, env)
    notes = list(pod.notes)
    if pod.refs:
        keys = " ".join(f"--from-literal={r.key}=..." for r in pod.refs)
        notes.append(f"the pods read {', '.join(r.env for r in pod.refs)} from Secret {secret!r}, which you "
                     f"create: kubectl create secret generic {secret} {keys}")
    product = _gpu_product(report, options, gpus, notes)
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
        env=pod.env,
        recipe_arg=pod.recipe_arg,
        recipe_file=pod.recipe_file,
        engine_flags=pod.engine_flags,
        hf_secret=options.hf_secret,
        hf_secret_key=options.hf_secret_key,
        replicas=options.replicas,
        summary=summary,
        secret_env=pod.refs,
        mounts=pod.mounts,
        gpu_product=product,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class _PodInputs:
    env: Mapping[str, str]
    recipe_arg: str | None
    recipe_file: tuple[str, str] | None
    engine_flags: tuple[str, ...]
    refs: tuple[SecretEnv, ...]
    mounts: tuple[Mount, ...]
    notes: tuple[str, ...]


def _pod_inputs(report: ValidationReport, options: RenderOptions, secret: str, env: Mapping[str, str]) -> _PodInputs:
    """What each pod starts from: the recipe (a shipped name, or the file without its secrets), the engine
    flags with Secret references for secret values, and the mounts of every path the pod reads."""
    from dspark.config.recipes import shipped_recipes_dir  # noqa: PLC0415

    recipe_arg: str | None = None
    recipe_file: tuple[str, str] | None = None
    env_refs: tuple[SecretEnv, ...] = ()
    moved_args: list[str] = []
    recipe_env: Mapping[str, str] = report.recipe.env if report.recipe is not None else {}
    if report.recipe is not None:
        source = Path(report.recipe.source)
        if source.parent.resolve() == shipped_recipes_dir().resolve():
            recipe_arg = report.recipe.name
        else:
            text = source.read_text()
            env_refs = recipe_env_refs(recipe_env, secret)
            kept_args, moved_args = split_secret_args(report.recipe.engine_args)
            dropped = [r.env for r in env_refs] + ([HF_TOKEN] if HF_TOKEN in recipe_env else [])
            if dropped or moved_args:
                text = recipe_without_secrets(text, report.recipe.source, dropped, kept_args)
            recipe_file = (source.name, text)
            recipe_arg = f"{RECIPE_DIR}/{source.name}"
    # The recipe's secret flags go first, where its engine_args were: a flag after `--` still wins.
    engine_flags, flag_refs = secret_flag_refs((*moved_args, *options.engine_flags), secret)
    mounts, model_env, notes = model_mounts(report.serve.model, pvc=options.model_pvc,
                                            host_path=options.model_host_path, recipe_env=recipe_env)
    env = {**env, **model_env}
    drafter = (report.serve.speculative or {}).get("model")
    extra, extra_notes = other_path_mounts(
        [*engine_flags, *env.values(), *([drafter] if isinstance(drafter, str) else [])], mounts)
    return _PodInputs(env, recipe_arg, recipe_file, engine_flags, env_refs + flag_refs, (*mounts, *extra),
                      (*notes, *extra_notes))


def _gpu_product(report: ValidationReport, options: RenderOptions, gpus: int, notes: list[str]) -> str | None:
    """The nvidia.com/gpu.product to select: --gpu-product (empty: none), else the plan's GPUs' name."""
    if gpus == 0:
        return None
    if options.gpu_product is not None:
        return options.gpu_product or None
    product = gpu_product_label([g.name for g in report.hardware.gpus])
    if product is None:
        notes.append("no GPU product node selector: the plan's GPUs have no single name a node label holds; "
                     "--gpu-product VALUE sets one")
    return product


def secret_values(report: ValidationReport, options: RenderOptions) -> set[str]:
    """The secret values the plan was given (the recipe's env and engine_args, the flags after `--`): never in
    the text printed, wherever they would appear (a recipe's comment, a served name)."""
    from dspark.core.redact import secret_argv_values, secret_env_values  # noqa: PLC0415

    values = secret_argv_values(options.engine_flags)
    if report.recipe is not None:
        values |= secret_env_values(report.recipe.env) | secret_argv_values(report.recipe.engine_args)
    return values


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
