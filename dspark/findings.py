"""Findings and the verdict they add up to: memory fit per node, seats, observations against predictions. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from dspark.architecture import ModelArchitecture
    from dspark.capacity import CapacitySummary
    from dspark.hardware import HardwareSnapshot
    from dspark.recipes import Recipe
    from dspark.settings import ResolvedSettings

Level = Literal["info", "warn", "fail"]
Verdict = Literal["ok", "warn", "fail"]

GIB = 1 << 30
# Unified memory (2x DGX Spark): an idle free-memory level between these hung both boxes (DESIGN.md §2).
DANGER_BAND_BYTES = (int(0.8 * GIB), int(4.2 * GIB))


@dataclass(frozen=True)
class Finding:
    """One observation about the plan: level, a stable code for scripts, and a sentence for people."""

    level: Level
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        """As printed under "findings"."""
        return {"level": self.level, "code": self.code, "message": self.message}


def verdict_of(findings: Iterable[Finding]) -> Verdict:
    """fail if any finding fails, warn if any warns, else ok."""
    levels = {f.level for f in findings}
    if "fail" in levels:
        return "fail"
    return "warn" if "warn" in levels else "ok"


def gib(n: int | float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / GIB:.2f} GiB"


def idle_free_findings(free_bytes: int, need_bytes: int, *, unified: bool, where: str) -> list[Finding]:
    """Does the engine fit in free memory, and on unified memory, is the idle remainder outside the danger band?"""
    rest = free_bytes - need_bytes
    if rest < 0:
        return [Finding("fail", "does-not-fit",
                        f"{where}: the engine needs about {gib(need_bytes)} but only {gib(free_bytes)} is free "
                        f"({gib(-rest)} short); lower the KV pin, max_model_len or seats, or free memory")]
    low, high = DANGER_BAND_BYTES
    if unified and rest <= high:
        band = "below" if rest < low else "inside"
        return [Finding("fail", "unified-memory-danger-band",
                        f"{where}: predicted idle free memory {gib(rest)} is {band} the {gib(low)}–{gib(high)} band "
                        "that hung both DGX Sparks (unified memory: the host starves, not just the GPU); "
                        f"shrink the footprint by at least {gib(high - rest)}")]
    return [Finding("info", "fits", f"{where}: needs about {gib(need_bytes)} of {gib(free_bytes)} free; "
                    f"{gib(rest)} left idle")]


def gpus_per_node(settings: ResolvedSettings) -> int:
    world = settings.tensor_parallel_size.value * settings.pipeline_parallel_size.value
    return max(1, world // max(1, settings.nnodes.value))


def memory_findings(
    footprint: int | None, hw: HardwareSnapshot, settings: ResolvedSettings, peers: tuple[HardwareSnapshot, ...] = ()
) -> list[Finding]:
    """Each node's fit: this one, then every peer whose saved probe was given; a note for nodes not seen."""
    if footprint is None or not hw.gpus:
        return []
    out = _node_fit(footprint, hw, settings, label="")
    nodes = max(hw.nodes, settings.nnodes.value)
    for rank, peer in enumerate(peers, start=1):
        out += _node_fit(footprint, peer, settings, label=f"node {rank} ({peer.hostname}): ")
    unseen = nodes - 1 - len(peers)
    if unseen > 0 and hw.source != "profile":
        out.append(Finding("info", "per-node",
                           f"checked this node only; {unseen} other node(s) must have as much free memory "
                           "(pass each one's saved probe with --peer-hardware FILE)"))
    elif unseen > 0:
        out.append(Finding("info", "per-node", f"the profile describes {hw.nodes} identical node(s); each was "
                           "checked as this one"))
    return out


def _node_fit(footprint: int, hw: HardwareSnapshot, settings: ResolvedSettings, *, label: str) -> list[Finding]:
    need = gpus_per_node(settings)
    if len(hw.gpus) < need:
        return [Finding("fail", "not-enough-gpus", f"{label}{hw.description} has {len(hw.gpus)} GPU(s); the plan "
                        f"needs {need} per node")]
    if hw.unified:
        # One pool per node: every GPU of the node draws on the host's memory.
        free = min(g.free_bytes for g in hw.gpus[:need])
        return idle_free_findings(free, footprint * need, unified=True,
                                  where=f"{label}{hw.gpus[0].name} (unified memory)")
    out: list[Finding] = []
    for g in hw.gpus[:need]:
        out += idle_free_findings(g.free_bytes, footprint, unified=False, where=f"{label}GPU {g.index} {g.name}")
    return out


def seat_findings(cap: CapacitySummary, settings: ResolvedSettings, arch: ModelArchitecture) -> list[Finding]:
    seats = cap.max_num_seqs
    out: list[Finding] = []
    asked = settings.max_num_seqs.value
    if seats < asked:
        out.append(Finding("warn", "seats-capped-by-engine",
                           f"{asked} seats asked ({settings.max_num_seqs.source}) but the engine will run at most "
                           f"{seats}; the figures below are for {seats}"))
    if seats > cap.safe_max_num_seqs:
        predicted_safe = math.floor(cap.max_concurrency + 1e-9)
        why = "" if predicted_safe <= cap.safe_max_num_seqs else ", lowered to what the engine's log showed"
        out.append(Finding(
            "warn", "seats-above-safe",
            f"{seats} seats but the pool holds {cap.max_concurrency:.2f} full contexts of {cap.max_model_len:,} "
            f"tokens (safe default {cap.safe_max_num_seqs}{why}): with every seat busy, requests must average "
            f"≤ {cap.avg_context_at_max_num_seqs:,} tokens or the engine preempts (recomputes) some",
        ))
    else:
        out.append(
            Finding(
                "info",
                "seats-safe",
                f"{seats} seats ≤ {cap.safe_max_num_seqs} safe: every seat can hold a full "
                f"{cap.max_model_len:,}-token context at once; nothing is ever preempted",
            )
        )
    out.append(
        Finding(
            "info",
            "cudagraph-capture",
            f"largest CUDA graph captured: batch {cap.cudagraph_max_capture_size} "
            f"({len(cap.cudagraph_capture_sizes)} sizes); raising seats spends graph memory, not KV",
        )
    )
    if cap.typical_context_seats is not None and cap.typical_context is not None:
        kept = cap.prefix_cache_reserve
        reserve = f" plus {kept:,} tokens kept for cached prefixes" if kept else ""
        level: Level = "warn" if cap.typical_context_seats < seats else "info"
        out.append(Finding(level, "typical-context-seats",
                           f"at a typical {cap.typical_context:,} tokens per request{reserve}, the pool seats "
                           f"{cap.typical_context_seats} at once ({seats} configured)"))
    if cap.expert_coverage is not None and arch.moe is not None:
        out.append(
            Finding(
                "info",
                "expert-coverage",
                f"one decode step at {seats} seats touches ~{cap.expert_coverage:.0%} of the "
                f"{arch.moe.num_experts} experts (top-{arch.moe.top_k}, uniform routing)",
            )
        )
    return out


def observations(
    recipe: Recipe | None, settings: ResolvedSettings, metric: str, seats: int | None = None
) -> list[Any]:
    if recipe is None:
        return []
    window = settings.max_model_len.value
    return [
        o
        for o in recipe.observations
        if o.metric == metric and (o.max_model_len in (None, window)) and (seats is None or o.seats in (None, seats))
    ]


def observed_with(recipe: Recipe | None, obs: Any, engine: str) -> str:
    """`vllm 0.32.0`, or `vllm version unknown`: the engine version an observation was taken with."""
    version = getattr(obs, "engine_version", None) or (recipe.engine_version if recipe is not None else None)
    return f"{engine} {version}" if version else f"{engine} version unknown"


def observation_findings(cap: CapacitySummary, recipe: Recipe | None, settings: ResolvedSettings) -> list[Finding]:
    """Observations that disagree with the prediction, each naming both engine versions."""
    out: list[Finding] = []
    predicted_with = f"{cap.engine} {cap.engine_version}"
    for obs in observations(recipe, settings, "kv_pool_tokens", cap.max_num_seqs):
        if int(obs.value) != cap.kv_pool_tokens:
            out.append(
                Finding(
                    "warn",
                    "observed-pool-differs",
                    f"observed KV pool {int(obs.value):,} tokens "
                    f"({obs.source}; {observed_with(recipe, obs, cap.engine)}) vs predicted "
                    f"{cap.kv_pool_tokens:,} ({predicted_with}): the safe default follows the lower",
                )
            )
    for obs in observations(recipe, settings, "full_contexts", cap.max_num_seqs):
        if f"{obs.value:.2f}" != f"{cap.max_concurrency:.2f}":
            out.append(
                Finding(
                    "warn",
                    "observed-contexts-differ",
                    f"observed {obs.value:.2f} full contexts ({obs.source}; {observed_with(recipe, obs, cap.engine)})"
                    f" vs predicted {cap.max_concurrency:.2f} ({predicted_with}): the safe default follows the lower",
                )
            )
    return out


def with_observed_safe_seats(
    cap: CapacitySummary, recipe: Recipe | None, settings: ResolvedSettings
) -> CapacitySummary:
    """Where the engine's own log disagrees with the prediction, the safe default follows the lower."""
    safe = cap.safe_max_num_seqs
    for obs in observations(recipe, settings, "full_contexts", cap.max_num_seqs):
        safe = min(safe, max(1, math.floor(obs.value + 1e-9)))
    for obs in observations(recipe, settings, "kv_pool_tokens", cap.max_num_seqs):
        safe = min(safe, max(1, int(obs.value) // max(1, cap.max_model_len)))
    return cap if safe == cap.safe_max_num_seqs else replace(cap, safe_max_num_seqs=safe)
