"""Findings and the verdict they add up to: memory fit per node, seats, observations against predictions. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from dspark.config.knobs import slot_knobs
from dspark.core.findings import Finding, Level, gib
from dspark.core.words import seats as seat_count

if TYPE_CHECKING:
    from dspark.capacity import CapacitySummary
    from dspark.config.settings import ResolvedSettings
    from dspark.hardware import HardwareSnapshot
    from dspark.model.architecture import ModelArchitecture

GIB = 1 << 30
# Unified memory (2x DGX Spark): an idle free-memory level between these hung both boxes (docs/deployment.md).
DANGER_BAND_BYTES = (int(0.8 * GIB), int(4.2 * GIB))


def idle_free_findings(
    free_bytes: int, need_bytes: int, *, unified: bool, where: str, pinned: bool = False
) -> list[Finding]:
    """Does the engine fit in free memory, and on unified memory, is the idle remainder outside the danger band?"""
    rest = free_bytes - need_bytes
    if rest < 0:
        # Under a pin the KV pool is a fixed size: the window and seats only divide it, they do not shrink it.
        fix = ("lower the KV pin (--kv-cache-memory), shrink the weights per GPU (more TP, a smaller quantization) "
               "or free memory" if pinned else
               f"lower {' / '.join(slot_knobs('kv_share'))}, or pin a smaller KV pool, or free memory")
        return [Finding("fail", "does-not-fit",
                        f"{where}: the engine needs about {gib(need_bytes)} but only {gib(free_bytes)} is free "
                        f"({gib(-rest)} short); {fix}")]
    low, high = DANGER_BAND_BYTES
    if unified and rest <= high:
        band = "below" if rest < low else "inside"
        return [Finding("fail", "unified-memory-danger-band",
                        f"{where}: predicted idle free memory {gib(rest)} is {band} the {gib(low)}–{gib(high)} band "
                        "that hung both DGX Sparks (unified memory: the host starves, not just the GPU); "
                        f"shrink the footprint by at least {gib(high - rest)}")]
    return [Finding("info", "fits", f"{where}: needs about {gib(need_bytes)} of {gib(free_bytes)} free; "
                    f"{gib(rest)} left idle")]


def gpus_per_node(settings: ResolvedSettings, data_parallel: int = 1) -> int:
    """GPUs one node gives the engine: TP × PP × DP replicas, spread over the nodes."""
    world = settings.tensor_parallel_size.value * settings.pipeline_parallel_size.value * data_parallel
    return max(1, world // max(1, settings.nnodes.value))


def data_parallel_findings(data_parallel: int, dp_attention: bool, seats: int) -> list[Finding]:
    """What DP > 1 means for the figures: per-replica pools and seats, and the GPUs it takes.

    dp_attention: the engine runs the DP ranks inside the TP group (EngineSpec.data_parallel says so; SGLang's
    --enable-dp-attention is the one there is).
    """
    if data_parallel <= 1:
        return []
    if dp_attention:
        return [Finding("info", "data-parallel",
                        f"DP attention over {data_parallel} ranks inside the TP group: --max-running-requests "
                        f"{seats} is split between them (about {max(1, seats // data_parallel)} per rank; "
                        "pool_configurator divides by attn_dp_size)")]
    return [Finding("info", "data-parallel",
                    f"data parallel {data_parallel}: {data_parallel} engine replicas, each on its own GPUs with its "
                    f"own KV pool and {seat_count(seats)} (the figures above are per replica; the server runs up to "
                    f"{data_parallel * seats} requests at once)")]


def memory_findings(
    footprint: int | None, hw: HardwareSnapshot, settings: ResolvedSettings, peers: tuple[HardwareSnapshot, ...] = (),
    *, data_parallel: int = 1,
) -> list[Finding]:
    """Each node's fit: this one, then every peer whose saved probe was given; a note for nodes not seen."""
    if footprint is None or not hw.gpus:
        return []
    out = _node_fit(footprint, hw, settings, label="", data_parallel=data_parallel)
    nodes = max(hw.nodes, settings.nnodes.value)
    for rank, peer in enumerate(peers, start=1):
        out += _node_fit(footprint, peer, settings, label=f"node {rank} ({peer.hostname}): ",
                         data_parallel=data_parallel)
    unseen = nodes - 1 - len(peers)
    if unseen > 0 and hw.source != "profile":
        out.append(Finding("info", "per-node",
                           f"checked this node only; {unseen} other node(s) must have as much free memory "
                           "(pass each one's saved probe with --peer-hardware FILE)"))
    elif unseen > 0:
        out.append(Finding("info", "per-node", f"the profile describes {hw.nodes} identical node(s); each was "
                           "checked as this one"))
    return out


def _node_fit(
    footprint: int, hw: HardwareSnapshot, settings: ResolvedSettings, *, label: str, data_parallel: int = 1
) -> list[Finding]:
    need = gpus_per_node(settings, data_parallel)
    if settings.platform.value == "cpu":
        # The CPU build runs its TP ranks as processes (OMP thread groups) of one host: they share its memory.
        ranks = f" x {need} ranks" if need > 1 else ""
        return idle_free_findings(hw.gpus[0].free_bytes, footprint * need, unified=False,
                                  where=f"{label}{hw.gpus[0].name}{ranks}",
                                  pinned=any(pin.value is not None for pin in settings.pool_pin_settings))
    if len(hw.gpus) < need:
        return [Finding("fail", "not-enough-gpus", f"{label}{hw.description} has {len(hw.gpus)} GPU(s); the plan "
                        f"needs {need} per node")]
    pinned = any(pin.value is not None for pin in settings.pool_pin_settings)
    if hw.unified:
        # One pool per node: every GPU of the node draws on the host's memory.
        free = min(g.free_bytes for g in hw.gpus[:need])
        return idle_free_findings(free, footprint * need, unified=True,
                                  where=f"{label}{hw.gpus[0].name} (unified memory)", pinned=pinned)
    out: list[Finding] = []
    for g in hw.gpus[:need]:
        out += idle_free_findings(g.free_bytes, footprint, unified=False, where=f"{label}GPU {g.index} {g.name}",
                                  pinned=pinned)
    return out


def weights_findings(
    weights_total: int | None, weights_per_gpu: int | None, hw: HardwareSnapshot, settings: ResolvedSettings,
    heads: int,
) -> list[Finding]:
    """Weights that alone exceed a GPU: no KV setting helps; name the tensor-parallel size that would hold them."""
    if weights_per_gpu is None or weights_total is None or not hw.gpus or hw.unified:
        return []
    total = min(g.total_bytes for g in hw.gpus)
    if weights_per_gpu <= total:
        return []
    tp, pp = settings.tensor_parallel_size.value, settings.pipeline_parallel_size.value
    # TP sizes the engines accept divide the attention heads; leave a tenth of the GPU for KV and runtime.
    fits = [k for k in (1, 2, 4, 8, 16, 32, 64)
            if k > tp and heads % k == 0 and weights_total / (k * pp) <= 0.9 * total]
    fix = f"--tp {fits[0]} ({fits[0] * pp} GPUs) would hold them" if fits else "no TP size up to 64 holds them"
    return [Finding("fail", "weights-do-not-fit",
                    f"the weights alone need {gib(weights_per_gpu)} per GPU at TP={tp}, PP={pp}, more than the "
                    f"{gib(total)} a {hw.gpus[0].name} has: no KV or memory-utilization setting can help; {fix}")]


# Engine refusals whose advice (raise gpu_memory_utilization, shorten the window) cannot help when the weights
# alone overflow the GPU; weights-do-not-fit says what can.
_MOOT_WHEN_WEIGHTS_OVERFLOW = frozenset({"no_kv_memory", "max_model_len_does_not_fit", "auto_fit_failed",
                                         "startup_free_memory", "does-not-fit"})


# Engine refusals that already say the pool cannot hold one full-window request.
_ENGINE_SAYS_BELOW_ONE_CONTEXT = frozenset({"max_model_len_does_not_fit", "no_kv_memory", "auto_fit_failed"})


def drop_contradictions(findings: Iterable[Finding]) -> list[Finding]:
    """Findings that do not contradict each other: no "fits" beside a failure, no advice that cannot help."""
    out = list(findings)
    codes = {f.code for f in out}
    if "weights-do-not-fit" in codes:
        out = [f for f in out if f.code not in _MOOT_WHEN_WEIGHTS_OVERFLOW]
    if codes & _ENGINE_SAYS_BELOW_ONE_CONTEXT:
        # The engine's own refusal says the same, with the window it would fit: one judgement, not two.
        out = [f for f in out if f.code != "pool-below-one-context"]
    if any(f.level == "fail" for f in out):
        out = [f for f in out if f.code != "fits"]
    return out


def seat_findings(cap: CapacitySummary, settings: ResolvedSettings, arch: ModelArchitecture) -> list[Finding]:
    seats = cap.max_num_seqs
    out: list[Finding] = []
    asked = settings.max_num_seqs.value
    if seats < asked:
        out.append(Finding("warn", "seats-capped-by-engine",
                           f"{seat_count(asked)} asked ({settings.max_num_seqs.source}) but the engine will run at "
                           f"most {seats}; the figures below are for {seats}"))
    # An engine that refuses the plan (e.g. a pool of exactly one context, less the block the engine keeps
    # back) serves no seat: "every seat can hold a full context" would contradict the refusal printed with it.
    refused = bool(cap.details.get("refusals"))
    if cap.max_concurrency < 1:
        out.append(_below_one_context(cap))
    elif refused:
        pass  # the refusal says what would fit instead
    elif seats > cap.safe_max_num_seqs:
        out.append(Finding("warn", "seats-above-safe", _above_safe(cap, seats)))
    else:
        observed = cap.observed
        both = (f" (predicted {cap.max_concurrency:.2f} full contexts, observed {observed.max_concurrency:.2f})"
                if observed is not None else "")
        out.append(Finding(
            "info", "seats-safe",
            f"{seat_count(seats)} ≤ {cap.safe_max_num_seqs} safe{both}: every seat can hold a full "
            f"{cap.max_model_len:,}-token context at once; nothing is ever preempted",
        ))
    if cap.cudagraph_max_capture_size > 0:
        out.append(Finding("info", "cudagraph-capture",
                           f"largest CUDA graph captured: batch {cap.cudagraph_max_capture_size} "
                           f"({len(cap.cudagraph_capture_sizes)} sizes); raising seats spends graph memory, not KV"))
    elif settings.platform.value == "cpu":
        out.append(Finding("info", "cudagraph-capture", "CUDA graphs do not apply on the CPU build: nothing is "
                           "captured, and seats cost no graph memory"))
    else:
        out.append(Finding("info", "cudagraph-capture", "no CUDA graphs are captured (eager mode or graphs turned "
                           "off): every decode step launches its kernels one by one"))
    if cap.typical_context_seats is not None and cap.typical_context is not None:
        kept = cap.prefix_cache_reserve
        reserve = f" plus {kept:,} tokens kept for cached prefixes" if kept else ""
        level: Level = "warn" if cap.typical_context_seats < seats else "info"
        out.append(Finding(level, "typical-context-seats",
                           f"at a typical {cap.typical_context:,} tokens per request{reserve}, the engine seats "
                           f"{cap.typical_context_seats} at once ({seats} configured)"))
    if cap.expert_coverage is not None and arch.moe is not None:
        out.append(
            Finding(
                "info",
                "expert-coverage",
                f"one decode step at {seat_count(seats)} touches ~{cap.expert_coverage:.0%} of the "
                f"{arch.moe.num_experts} experts (top-{arch.moe.top_k}, uniform routing)",
            )
        )
    return out


def _above_safe(cap: CapacitySummary, seats: int) -> str:
    """More seats than full contexts: the sentence quotes the pool the safe default follows, and the other beside it."""
    window = f"{cap.max_model_len:,}"
    predicted = f"{cap.kv_pool_tokens:,} tokens, {cap.max_concurrency:.2f} full contexts"
    obs = cap.observed
    held = min(cap.max_concurrency, obs.max_concurrency if obs is not None else cap.max_concurrency)
    if seats <= held:  # the pool holds them all; another limit set the safe default below it
        return (f"{seat_count(seats)}: the pool holds {held:.2f} full contexts of {window} tokens, but the safe "
                f"default is {cap.safe_max_num_seqs} (the engine's other per-seat limits)")
    if obs is None or obs.max_concurrency >= cap.max_concurrency:
        beside = "" if obs is None else f" (observed {obs.max_concurrency:.2f} full contexts: {obs.source})"
        return (f"{seat_count(seats)} but the {'predicted ' if obs else ''}pool ({cap.kv_pool_tokens:,} tokens) holds "
                f"{cap.max_concurrency:.2f} full contexts of {window} tokens{beside}: safe default "
                f"{cap.safe_max_num_seqs}; with every seat busy, requests must average "
                f"≤ {cap.avg_context_at_max_num_seqs:,} tokens or the engine preempts (recomputes) some")
    pool = f" ({obs.kv_pool_tokens:,} tokens)" if obs.kv_pool_tokens is not None else ""
    about = "" if obs.kv_pool_tokens is not None else "about "
    return (f"{seat_count(seats)} but the observed pool{pool} holds {obs.max_concurrency:.2f} full contexts of "
            f"{window} tokens ({obs.source}; predicted {predicted}): safe default {cap.safe_max_num_seqs}; with every "
            f"seat busy, requests must average ≤ {about}{obs.avg_context_at_max_num_seqs:,} tokens or the engine "
            "preempts (recomputes) some")


def _below_one_context(cap: CapacitySummary) -> Finding:
    """A pool that cannot hold one full-window request fails on every engine; the fix caps the window to it."""
    from dspark.engines import engine_spec  # noqa: PLC0415 - the engine's own name for the window flag

    dest = engine_spec(cap.engine).pinned.get("max_model_len", "max_model_len")
    engine_flag = "--" + dest.replace("_", "-")
    also = "" if engine_flag == "--max-model-len" else f", {engine_flag} to {cap.engine}"
    return Finding(
        "fail", "pool-below-one-context",
        f"the KV pool holds {cap.kv_pool_tokens:,} tokens, {cap.max_concurrency:.2f} of one "
        f"{cap.max_model_len:,}-token context: a request that fills the window cannot be held; cap the context "
        f"to what the pool holds (--max-model-len {cap.kv_pool_tokens}{also}) or give the pool more memory",
    )
