"""Start on a Ray cluster: the plan validated against every node where it is, the tightest GPU sizing the pool.

dspark.hardware.ray_nodes reaches the cluster and probes each node; this module judges what came back: the GPUs
of the plan's model Ray can schedule, each node's fit by name, and the snapshot the capacity is planned on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from dspark.core.errors import RefusedError, SettingsError
from dspark.core.findings import Finding
from dspark.hardware import HardwareSnapshot
from dspark.hardware.ray_nodes import RAY_ADDRESS_ENV, ClusterView, RayNode, RayUnavailable, inspect_cluster
from dspark.planning.findings import drop_contradictions, idle_free_findings

if TYPE_CHECKING:
    from dspark.config.settings import ResolvedSettings
    from dspark.planning.validate import ValidateRequest, ValidationReport

# validate's own memory findings for this node (and peers by file): replaced by one judgement per Ray node.
_NODE_CODES = frozenset({"fits", "does-not-fit", "unified-memory-danger-band", "not-enough-gpus", "per-node"})


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


Inspector = Callable[[str | None], ClusterView]
Validator = Callable[..., "ValidationReport"]


def ray_ranks(request: ValidateRequest, settings: ResolvedSettings) -> tuple[int, str]:
    """The ranks the engine's Ray executor places (TP × PP × DP, one GPU each) and how they multiply, in words."""
    from dspark.engines import engine_spec  # noqa: PLC0415
    from dspark.engines.pasted_flags import data_parallel_of, parse_engine_flags  # noqa: PLC0415

    spec = engine_spec(settings.engine.value)
    data_parallel, _ = data_parallel_of(spec, parse_engine_flags(spec, request.engine_flags))
    tp, pp = settings.tensor_parallel_size.value, settings.pipeline_parallel_size.value
    return tp * pp * data_parallel, f"TP {tp} × PP {pp}" + (f" × DP {data_parallel}" if data_parallel > 1 else "")


def on_ray_cluster(request: ValidateRequest, settings: ResolvedSettings, *, dry_run: bool,
                   inspect: Inspector = inspect_cluster, validator: Validator | None = None) -> ValidationReport:
    """The plan validated against every node of the Ray cluster where it is; SettingsError where Ray cannot run.

    A dry run with no cluster in reach is validated as usual, with a warning that the cluster was not checked.
    """
    from dspark.engines import engine_spec  # noqa: PLC0415
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
    world, parts = ray_ranks(request, settings)
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
    pinned = any(pin.value is not None for pin in settings.pool_pin_settings)
    findings += node_findings(view, model, footprint=planned.footprint_bytes, world=world, pinned=pinned,
                              driver_needs_gpu=spec.ray.driver_needs_gpu({**request.env, **planned.serve.env}))
    return replace(planned, findings=tuple(drop_contradictions(findings)))
