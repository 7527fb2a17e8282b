"""A Ray cluster as dspark plans against it: its alive nodes, the GPUs Ray schedules there, each node's own probe.

The probe runs as a Ray task pinned to each node (node affinity) that claims no GPU and no CPU, so it reserves
nothing the engine will ask for. It reads the node's own `DSPARK_HARDWARE` when the node's environment sets one
(a saved probe or a profile: how a node is planned against on purpose, and how the tests give each node its own
hardware), else every GPU of the node through NVML: the empty CUDA_VISIBLE_DEVICES that Ray gives a task
claiming no GPU (releases before 2.50, or with RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1) is ignored.

Importing this module does not import ray: `inspect_cluster` does (the optional `ray` extra). What start makes
of the nodes (the tightest GPU sizes the pool, every node judged by name) is dspark.planning.ray_plan.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dspark.core.errors import DsparkError
from dspark.hardware import HardwareSnapshot

RAY_ADDRESS_ENV = "RAY_ADDRESS"
PROBE_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0


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
            from dspark.hardware.ray_nodes import probe_here  # noqa: PLC0415
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


def _join(ray: Any, address: str | None, namespace: str) -> str:
    """ray.init as a driver of the cluster at `address` ("auto": the local one); the address joined."""
    target = address or "auto"
    _reachable(target)
    try:
        ray.init(address=target, namespace=namespace, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"could not join the Ray cluster at {target}: {exc}",
                             hint=f"start one (`ray start --head`) or set {RAY_ADDRESS_ENV} to its address") from None
    return target


def inspect_cluster(address: str | None, timeout: float = PROBE_TIMEOUT_S) -> ClusterView:
    """Connect as a Ray driver, list the alive nodes, probe each where it is, disconnect; RayUnavailable if none."""
    ray = _import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    target = _join(ray, address, "dspark-probe")
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


# ---- where an engine's ranks run (the sweep's check of a Ray launch) -----------------------------------------

@dataclass(frozen=True)
class Placement:
    """One placement group as the cluster records it: what vLLM's Ray executor reserves, one bundle per rank."""

    group_id: str
    state: str  # PENDING, CREATED, RESCHEDULING or REMOVED
    gpu_nodes: tuple[str, ...]  # the node id of each bundle that reserves a GPU, in bundle order ("": unplaced)
    gpus: float  # the GPUs its bundles reserve

    @property
    def live(self) -> bool:
        """Still reserving (or waiting for) its resources."""
        return self.state != "REMOVED"


def placement_of(group_id: str, info: Mapping[str, Any]) -> Placement:
    """A Placement from one entry of ray.util.placement_group_table()."""
    bundles = info.get("bundles")
    bundles = bundles if isinstance(bundles, dict) else {}
    nodes = info.get("bundles_to_node_id")
    nodes = nodes if isinstance(nodes, dict) else {}
    gpu = {i: float((b or {}).get("GPU", 0)) for i, b in bundles.items()}
    placed = tuple(str(nodes.get(i) or "") for i in sorted(gpu) if gpu[i] > 0)
    return Placement(group_id=str(group_id), state=str(info.get("state", "?")), gpu_nodes=placed,
                     gpus=sum(gpu.values()))


class RayPlacements:
    """A driver connection to the cluster that lists its placement groups; a context manager (disconnects)."""

    def __init__(self, address: str | None) -> None:
        self.ray = _import_ray()
        self.address = _join(self.ray, address, "dspark-sweep")

    def groups(self) -> dict[str, Placement]:
        """Every placement group the cluster knows, by id."""
        from ray.util import placement_group_table  # noqa: PLC0415

        try:
            table = placement_group_table()
        except (RuntimeError, ConnectionError, OSError) as exc:
            raise RayUnavailable(f"the Ray cluster at {self.address} did not list its placement groups: {exc}",
                                 hint="is the cluster still up? `ray status` on its head") from None
        return {str(k): placement_of(k, v) for k, v in table.items()}

    def __enter__(self) -> RayPlacements:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.ray.shutdown()
