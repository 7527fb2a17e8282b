"""A Ray cluster as dspark plans against it: its alive nodes, the GPUs Ray schedules there, each node's own probe.

The probe runs as a Ray task pinned to each node (node affinity) that claims no GPU and no CPU, so it reserves
nothing the engine will ask for. It reads the node's own `DSPARK_HARDWARE` when the node's environment sets one
(a saved probe or a profile: how a node is planned against on purpose, and how the tests give each node its own
hardware), else every GPU of the node through NVML: the empty CUDA_VISIBLE_DEVICES that Ray gives a task
claiming no GPU (releases before 2.50, or with RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1) is ignored.

Importing this module does not import ray: `inspect_cluster` does (the optional `ray` extra). `on_ray_cluster`
plans a validated report against the probed nodes: the tightest GPU sizes the pool, and every node is judged
by name.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dspark.core.errors import DsparkError, RefusedError, SettingsError
from dspark.core.findings import Finding
from dspark.hardware import HardwareSnapshot
from dspark.planning.findings import idle_free_findings, reconcile

if TYPE_CHECKING:
    from dspark.config.settings import ResolvedSettings
    from dspark.planning.validate import ValidateRequest, ValidationReport

RAY_ADDRESS_ENV = "RAY_ADDRESS"
PROBE_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
# validate's own memory findings for this node (and peers by file): replaced by one judgement per Ray node.
_NODE_CODES = frozenset({"fits", "does-not-fit", "unified-memory-danger-band", "not-enough-gpus", "per-node"})


class RayUnavailable(DsparkError):
    """No Ray cluster could be reached from here (or the ray package is missing)."""


@dataclass(frozen=True)
class RayNode:
    """One alive node: what Ray schedules there, and what the node's own probe read (or why it could not)."""

    node_id: str
    address: str
    hostname: str
    gpus: int  # the GPUs Ray can hand out there
    local: bool = False  # the node this `dspark start` runs on, where the engine starts
    snapshot: HardwareSnapshot | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        """How messages name the node: Ray's node id (short), host name and address."""
        return f"Ray node {self.node_id[:8]} ({self.hostname}, {self.address})"


@dataclass(frozen=True)
class ClusterView:
    """The alive nodes of one cluster, as probed."""

    address: str
    nodes: tuple[RayNode, ...]


# ---- on each node ---------------------------------------------------------------------------------------------

def probe_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the node probe reads GPUs with.

    An empty CUDA_VISIBLE_DEVICES is what Ray gives a task that claims no GPU, not the node's choice: dropped, so
    every GPU of the node is read. A list set before `ray start` is the node's own restriction and stays.
    """
    env = dict(environ)
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        del env["CUDA_VISIBLE_DEVICES"]
    return env


def probe_here(environ: Mapping[str, str] | None = None, pynvml_module: Any | None = None) -> dict[str, Any]:
    """This node's snapshot as JSON ({"snapshot": ...}) or why there is none ({"error": ...})."""
    from dspark.hardware.nvml import NvmlSource  # noqa: PLC0415 - runs in the node's Ray worker
    from dspark.hardware.select import resolve_hardware  # noqa: PLC0415
    from dspark.hardware.snapshot import snapshot_to_dict  # noqa: PLC0415

    env = probe_environ(os.environ if environ is None else environ)
    spec = env.get("DSPARK_HARDWARE", "").strip() or None
    try:
        snapshot = resolve_hardware(spec, default_profile=None, origin="DSPARK_HARDWARE",
                                    nvml_factory=lambda: NvmlSource(pynvml_module, environ=env))
    except DsparkError as exc:
        return {"error": exc.message, "hostname": socket.gethostname()}
    return {"snapshot": snapshot_to_dict(snapshot), "hostname": socket.gethostname()}


def _probe_task() -> Callable[[], dict[str, Any]]:
    """The task body, made in a closure so Ray ships it by value: a node without dspark can still say so."""

    def probe() -> dict[str, Any]:
        import socket  # noqa: PLC0415
        import sys  # noqa: PLC0415

        try:
            from dspark.deploy.ray_cluster import probe_here  # noqa: PLC0415
        except ImportError as exc:
            return {"missing": f"{type(exc).__name__}: {exc}", "python": sys.executable,
                    "hostname": socket.gethostname()}
        return probe_here()

    return probe


# ---- on the node that starts the engine ---------------------------------------------------------------------

def _import_ray() -> Any:
    try:
        import ray  # noqa: PLC0415
    except ImportError:
        raise RayUnavailable(
            "the ray package is not installed here: dspark talks to the Ray cluster with Ray's own client",
            hint="pip install 'dspark[ray]' (the same Ray version as the cluster's), or set the runtime to native",
        ) from None
    return ray


def _reachable(address: str) -> None:
    """A bounded look at the cluster's address before Ray's own client (which retries for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and ray:// addresses are Ray's to resolve
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RayUnavailable(f"no Ray cluster answers at {address} ({exc})",
                             hint=f"start it (`ray start --head`), or point {RAY_ADDRESS_ENV} at its head") from None


def inspect_cluster(address: str | None, timeout: float = PROBE_TIMEOUT_S) -> ClusterView:
    """Connect as a Ray driver, list the alive nodes, probe each where it is, disconnect; RayUnavailable if none."""
    ray = _import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    target = address or "auto"
    _reachable(target)
    try:
        ray.init(address=target, namespace="dspark-probe", log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"could not join the Ray cluster at {target}: {exc}",
                             hint=f"start one (`ray start --head`) or set {RAY_ADDRESS_ENV} to its address") from None
    try:
        local = ray.get_runtime_context().get_node_id()
        alive = [n for n in ray.nodes() if n.get("Alive")]
        task = ray.remote(num_cpus=0, num_gpus=0, max_retries=0)(_probe_task())
        refs = {n["NodeID"]: task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote() for n in alive}
        nodes = [_node(ray, n, refs[n["NodeID"]], local=n["NodeID"] == local, timeout=timeout) for n in alive]
        return ClusterView(address=target, nodes=tuple(nodes))
    finally:
        ray.shutdown()


def _node(ray: Any, info: Mapping[str, Any], ref: Any, *, local: bool, timeout: float) -> RayNode:
    from dspark.hardware.snapshot import snapshot_from_dict  # noqa: PLC0415

    node = RayNode(node_id=str(info["NodeID"]), address=str(info.get("NodeManagerAddress", "?")),
                   hostname=str(info.get("NodeManagerHostname", "?")),
                   gpus=int(info.get("Resources", {}).get("GPU", 0)), local=local)
    try:
        answer = ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        return replace(node, error=f"its probe did not answer within {timeout:.0f} s")
    except ray.exceptions.RayError as exc:
        return replace(node, error=f"its probe failed: {str(exc).strip().splitlines()[-1]}")
    if "missing" in answer:
        return replace(node, error=(
            f"dspark cannot be imported by the Python its Ray workers run ({answer['python']}: {answer['missing']}); "
            "install dspark in the environment that node's `ray start` runs from, then restart Ray there"))
    if "error" in answer:
        return replace(node, error=f"its probe read no hardware: {answer['error']}")
    try:
        snapshot = snapshot_from_dict(answer["snapshot"])
    except (TypeError, ValueError) as exc:
        return replace(node, error=f"its probe's snapshot is unreadable ({exc}): is its dspark a different version?")
    return replace(node, snapshot=snapshot)


# ---- planning against the probed nodes (pure) ----------------------------------------------------------------

def gpu_model(view: ClusterView) -> str | None:
    """The plan's GPU model: this node's, else the one most of the cluster's schedulable GPUs are."""
    probed = [n for n in view.nodes if n.snapshot is not None and n.gpus > 0 and n.snapshot.gpus]
    for node in probed:
        if node.local and node.snapshot is not None:
            return node.snapshot.gpus[0].name
    counts: dict[str, int] = {}
    for node in probed:
        if node.snapshot is not None:
            counts[node.snapshot.gpus[0].name] = counts.get(node.snapshot.gpus[0].name, 0) + node.gpus
    return max(counts, key=lambda k: counts[k]) if counts else None


def _holds(node: RayNode, model: str | None) -> bool:
    return node.snapshot is not None and node.gpus > 0 and any(g.name == model for g in node.snapshot.gpus)


def require_gpus(view: ClusterView, world: int, parts: str) -> str:
    """The plan's GPU model when the cluster schedules at least `world` GPUs of it; RefusedError naming each node."""
    model = gpu_model(view)
    have = sum(n.gpus for n in view.nodes if _holds(n, model))
    if model is None or have < world:
        per_node = "; ".join(f"{n.label}: {n.gpus} GPU(s)" + (f" ({n.snapshot.gpus[0].name})" if n.snapshot and
                                                                 n.snapshot.gpus else "") for n in view.nodes)
        raise RefusedError(
            f"refusing to start: the plan needs {world} GPU(s) ({parts}) of {model or 'one model'} on the Ray "
            f"cluster at {view.address}, which schedules {have}: {per_node}",
            hint="add nodes with that GPU (or give Ray their GPUs: `ray start --num-gpus N`), or lower the parallel "
            "sizes",
        )
    return model


def cluster_snapshot(view: ClusterView, model: str) -> HardwareSnapshot:
    """One snapshot for the capacity: the GPUs of the nodes holding the plan's model, the tightest first."""
    holders = [n for n in view.nodes if _holds(n, model)]
    tightest = min(holders, key=lambda n: min(g.free_bytes for g in n.snapshot.gpus) if n.snapshot else 0)
    assert tightest.snapshot is not None  # noqa: S101 - _holds checked it
    gpus = sorted((g for n in holders if n.snapshot for g in n.snapshot.gpus if g.name == model),
                  key=lambda g: g.free_bytes)
    return replace(
        tightest.snapshot, gpus=tuple(gpus), nodes=len(holders),
        description=f"Ray cluster at {view.address}, {len(holders)} node(s) with {model} probed where they are; "
        f"planned against the tightest GPU, on {tightest.label} ({tightest.snapshot.description})",
    )


def node_findings(view: ClusterView, model: str, *, footprint: int | None, world: int, pinned: bool,
                  driver_needs_gpu: bool) -> list[Finding]:
    """One judgement per node, each naming it: unprobed, not scheduled, another GPU model, fits or does not."""
    out: list[Finding] = []
    for node in view.nodes:
        label = node.label + (" (here)" if node.local else "")
        if node.local and driver_needs_gpu and node.gpus < 1:
            out.append(Finding("fail", "ray-driver-without-gpu",
                               f"{label}: the engine starts here, but Ray schedules no GPU on this node and the "
                               "engine's Ray executor, as configured, needs one of its workers where it starts; run "
                               "dspark start on a GPU node of the cluster"))
        if node.gpus < 1:  # no rank goes there: what its probe found does not matter
            out.append(Finding("info", "ray-node-no-gpu", f"{label}: Ray schedules no GPU there; no rank goes there"))
            continue
        if node.error is not None or node.snapshot is None:
            out.append(Finding("fail", "ray-node-unprobed", f"{label}: {node.error or 'not probed'}"))
            continue
        snapshot = node.snapshot
        if not _holds(node, model):
            out.append(Finding("warn", "ray-node-other-gpu",
                               f"{label}: {len(snapshot.gpus)} × {snapshot.gpus[0].name}, not the plan's {model}; "
                               "a placement group does not see GPU models, so ranks may land there too"))
        if len(snapshot.gpus) < node.gpus:
            out.append(Finding("fail", "ray-gpus-unseen",
                               f"{label}: Ray schedules {node.gpus} GPU(s) there but the node's probe reads "
                               f"{len(snapshot.gpus)} ({snapshot.description})"))
        if footprint is not None:
            out += _fits(node, label, footprint=footprint, ranks=min(node.gpus, world), pinned=pinned)
    return out


def _fits(node: RayNode, label: str, *, footprint: int, ranks: int, pinned: bool) -> list[Finding]:
    """Every GPU Ray may hand a rank on this node must hold one (Ray does not see memory other processes hold)."""
    assert node.snapshot is not None  # noqa: S101 - node_findings checked it
    gpus = node.snapshot.gpus
    if node.snapshot.unified:
        # One pool per node: the ranks placed here all draw on the host's memory.
        return idle_free_findings(min(g.free_bytes for g in gpus), footprint * ranks, unified=True,
                                  where=f"{label}: {gpus[0].name} (unified memory, {ranks} rank(s))", pinned=pinned)
    out: list[Finding] = []
    for g in gpus:
        out += idle_free_findings(g.free_bytes, footprint, unified=False, where=f"{label}: GPU {g.index} {g.name}",
                                  pinned=pinned)
    return out


# ---- start's entry point ---------------------------------------------------------------------------------------

Inspector = Callable[[str | None], ClusterView]
Validator = Callable[..., "ValidationReport"]


def on_ray_cluster(request: ValidateRequest, settings: ResolvedSettings, *, dry_run: bool,
                   inspect: Inspector = inspect_cluster, validator: Validator | None = None) -> ValidationReport:
    """The plan validated against every node of the Ray cluster where it is; SettingsError where Ray cannot run.

    A dry run with no cluster in reach is validated as usual, with a warning that the cluster was not checked.
    """
    from dspark.engines import engine_spec  # noqa: PLC0415
    from dspark.engines.flags import data_parallel_of, parse_engine_flags  # noqa: PLC0415
    from dspark.planning.validate import validate as validate_request  # noqa: PLC0415

    validate: Validator = validator or validate_request
    engine = settings.engine.value
    spec = engine_spec(engine)
    runtime = settings.distributed_runtime
    if spec.ray is None:
        raise SettingsError(
            f"{engine} has no Ray backend (distributed_runtime 'ray' from {runtime.source})",
            hint=f"{engine} spans nodes with its own flags ({spec.multi_node_flags}): set parallel.runtime: native "
            "(or DSPARK_DISTRIBUTED_RUNTIME=native) and run `dspark start --node-rank R` on each node",
        )
    if (settings.platform.value or "cuda") not in spec.ray.platforms:
        raise SettingsError(f"{spec.ray.why_not_platform} (distributed_runtime 'ray' from {runtime.source})",
                            hint="set the runtime to native, or run on GPUs")
    if settings.node_rank.value != 0:
        raise SettingsError(
            f"node_rank {settings.node_rank.value} ({settings.node_rank.source}): under Ray one `dspark start` runs, "
            "on a node of the cluster, and Ray places every rank",
            hint="run it once (node_rank 0); the other nodes only need `ray start --address HEAD:PORT`",
        )
    data_parallel, _ = data_parallel_of(engine, parse_engine_flags(engine, request.engine_flags))
    tp, pp = settings.tensor_parallel_size.value, settings.pipeline_parallel_size.value
    world = tp * pp * data_parallel
    parts = f"TP {tp} × PP {pp}" + (f" × DP {data_parallel}" if data_parallel > 1 else "")
    try:
        view = inspect(request.env.get(RAY_ADDRESS_ENV) or None)
    except RayUnavailable as exc:
        if not dry_run:
            raise RefusedError(f"refusing to start on Ray: {exc.message}", hint=exc.hint) from None
        report = validate(request)
        missed = Finding("warn", "ray-cluster-not-checked",
                         f"{exc.message}: the nodes of the Ray cluster were not checked (a real start probes each "
                         "one, and refuses without a cluster)")
        return replace(report, findings=(*report.findings, missed))
    model = require_gpus(view, world, parts)
    snapshot = cluster_snapshot(view, model)
    planned = validate(request, hardware_resolver=lambda *_: snapshot)
    findings = [f for f in planned.findings if f.code not in _NODE_CODES]
    if settings.hardware.layer in ("flag", "env"):
        findings.append(Finding("info", "ray-hardware-ignored",
                                f"hardware {settings.hardware.value!r} ({settings.hardware.source}) is not used: "
                                "each Ray node was probed where it is (set DSPARK_HARDWARE in a node's environment "
                                "before its `ray start` to plan that node against a saved probe)"))
    pinned = settings.kv_cache_memory_bytes.value is not None or settings.max_total_tokens.value is not None
    findings += node_findings(view, model, footprint=planned.footprint_bytes, world=world, pinned=pinned,
                              driver_needs_gpu=spec.ray.driver_needs_gpu({**request.env, **planned.serve.env}))
    return replace(planned, findings=tuple(reconcile(findings)))
