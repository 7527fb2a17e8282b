"""CUDA-graph memory as vLLM 0.25/0.26's V1 model runner estimates it (pure).

Source (vLLM 0.25.0; 0.26.0's is the same on CUDA, it moves ROCm's capture stream only):
GPUModelRunner.profile_cudagraph_memory (vllm/v1/worker/gpu_model_runner.py), called by
Worker.determine_available_memory (vllm/v1/worker/gpu_worker.py) inside memory_profiling, and the capture
descriptors of CudagraphDispatcher.initialize_cudagraph_keys / get_capture_descs (vllm/v1/cudagraph_dispatcher.py).
Per runtime mode (PIECEWISE first, then FULL; descriptors largest first) the runner captures only the first two
descriptors into a temporary pool and reads the device's free memory around each capture:

    shared[mode]    = sample 0 (the largest size: the pool's first fill plus the first graph)
    per_graph[mode] = max(sample 1, 1 MiB) x (descriptors - 1)
    estimate        = max(shared over modes) + sum(per_graph over modes)

FULL and PIECEWISE share the pool at runtime ("the pool overlays their memory"), hence the max. The descriptors:
a PIECEWISE mixed mode (FULL_AND_PIECEWISE, PIECEWISE) captures every capture size; a FULL decode routine
(FULL_AND_PIECEWISE, FULL_DECODE_ONLY) the sizes q <= x <= q x max_num_seqs (q = 1 + speculative tokens); mode
FULL captures every size as FULL. dspark reproduces that arithmetic exactly; what it cannot run is the capture,
so the two samples per mode come from a model of what the H200 recorded per architecture class
(tests/device/results/2026-12-01, the worker's own samples; docs/gpu-truth.md):

    sample 1 (one more graph in a warm pool) = per-layer bytes x decoder layers, by class and mode
    sample 0 (first capture, largest size)   = sample 1 + the pool's first fill (a constant) + BYTES_PER_TOKEN_LAYER
                                               _HIDDEN x size x layers x hidden

The first-fill slope (1.13 B per token, layer and hidden unit) is read from the GDN-hybrid pair alone (64 -> 216
tokens); the MoE row's intercept with it is the GDN rows' (33.8 and 35.3 MiB), and with it the MoE class predicts
a start it was not read from (Qwen3-30B-A3B at 128 seats, 35 + 19 graphs up to 256 tokens: 307.6 MiB, the engine
printed 0.30 GiB). The per-graph figures are what each recorded class measured, so the three recorded graph rows
are in-sample; a class not recorded (a dense model on the V1 runner) takes the MoE figures, said as an assumption.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MiB = 1 << 20

GraphClass = Literal["moe", "hybrid", "hybrid_spec"]

# Recorded per class on the H200 with 0.25.0 (second samples, MiB per decoder layer): MoE (Qwen3-30B-A3B, 48
# layers) PIECEWISE 6 MiB, FULL 2 MiB; GDN hybrid (Qwen3.5-27B, 64 layers) 10 and 4 MiB; the same with MTP
# drafting 3 tokens (FULL graphs of 4-token decode) 10 and 12 MiB.
PER_GRAPH_MIB_PER_LAYER: dict[GraphClass, dict[str, float]] = {
    "moe": {"PIECEWISE": 6 / 48, "FULL": 2 / 48},
    "hybrid": {"PIECEWISE": 10 / 64, "FULL": 4 / 64},
    "hybrid_spec": {"PIECEWISE": 10 / 64, "FULL": 12 / 64},
}
# The pool's first fill beyond the first graph, at no tokens (MiB): PIECEWISE 34.5 (MoE 33.8, GDN 35.3 by the
# intercepts), FULL 20 (MoE 20.3 at 16 tokens, GDN 21.8 at 32; the MTP FULL sample is below the PIECEWISE one).
FIRST_FILL_MIB = {"PIECEWISE": 34.5, "FULL": 20.0}
# Growth of the first fill with the largest size: GDN 0.355 MiB a token (64 -> 216 tokens, 64 layers x 5,120),
# 1.13 B per token, layer and hidden unit; the MoE start at 256 tokens (not read for it) agrees to 1%.
BYTES_PER_TOKEN_LAYER_HIDDEN = 1.13
MIN_PER_GRAPH = 1 * MiB  # profile_cudagraph_memory: "Use at least 1 MiB per graph for driver overhead"


@dataclass(frozen=True)
class ModeEstimate:
    """One runtime mode's part of the estimate: its descriptors, both samples, and what it adds."""

    mode: str  # "PIECEWISE" or "FULL"
    sizes: tuple[int, ...]  # the descriptors' token counts, largest first
    first_capture: int  # sample 0, bytes
    per_graph: int  # sample 1 (at least 1 MiB), bytes

    @property
    def per_graph_total(self) -> int:
        """per_graph x (descriptors - 1): what the runner adds beyond the shared first capture."""
        return self.per_graph * (len(self.sizes) - 1)


@dataclass(frozen=True)
class GraphMemoryEstimate:
    """profile_cudagraph_memory's return value, with its parts."""

    bytes: int
    modes: tuple[ModeEstimate, ...]
    graph_class: GraphClass
    assumption: str


def capture_descriptors(
    sizes: Sequence[int], cudagraph_mode: str, max_num_seqs: int, decode_query_len: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """get_capture_descs: (mode, token counts largest first) for PIECEWISE then FULL, modes without any left out."""
    mode = cudagraph_mode.upper()
    mixed = {"FULL_AND_PIECEWISE": "PIECEWISE", "PIECEWISE": "PIECEWISE", "FULL": "FULL"}.get(mode)
    out: dict[str, set[int]] = {"PIECEWISE": set(), "FULL": set()}
    if mixed is not None:
        out[mixed] |= set(sizes)
    if mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):  # decode_mode FULL with a separate routine
        top = decode_query_len * max_num_seqs
        out["FULL"] |= {x for x in sizes if decode_query_len <= x <= top}
    return tuple((m, tuple(sorted(out[m], reverse=True))) for m in ("PIECEWISE", "FULL") if out[m])


def graph_class(is_hybrid: bool, num_speculative_tokens: int) -> GraphClass:
    """The recorded class whose samples apply: GDN/Mamba hybrids (with or without drafting), else the MoE's."""
    if is_hybrid:
        return "hybrid_spec" if num_speculative_tokens > 0 else "hybrid"
    return "moe"


def _samples(cls: GraphClass, mode: str, largest: int, layers: int, hidden: int) -> tuple[int, int]:
    per_graph = max(MIN_PER_GRAPH, round(PER_GRAPH_MIB_PER_LAYER[cls][mode] * layers * MiB))
    fill = FIRST_FILL_MIB[mode] * MiB + BYTES_PER_TOKEN_LAYER_HIDDEN * largest * layers * hidden
    return per_graph + round(fill), per_graph


def profile_cudagraph_memory(
    *,
    sizes: Sequence[int],
    cudagraph_mode: str,
    max_num_seqs: int,
    num_speculative_tokens: int,
    layers: int,
    hidden_size: int,
    is_hybrid: bool,
    is_moe: bool,
) -> GraphMemoryEstimate:
    """The V1 runner's CUDA-graph estimate for these capture sizes (0 when nothing is captured)."""
    cls = graph_class(is_hybrid, num_speculative_tokens)
    descs = capture_descriptors(sizes, cudagraph_mode, max_num_seqs, 1 + num_speculative_tokens)
    modes = []
    for mode, mode_sizes in descs:
        first, per_graph = _samples(cls, mode, mode_sizes[0], layers, hidden_size)
        modes.append(ModeEstimate(mode, mode_sizes, first, per_graph))
    total = max((m.first_capture for m in modes), default=0) + sum(m.per_graph_total for m in modes)
    parts = ", ".join(f"{m.mode}={len(m.sizes)} (largest={m.sizes[0]})" for m in modes)
    assumption = (
        f"CUDA-graph memory = vLLM's profile_cudagraph_memory ({parts or 'nothing captured'}): the largest "
        "capture of each mode + (graphs - 1) x one more graph; the samples modelled from the H200's recorded "
        f"{cls.replace('_', ' + ')} class (per layer, per token)"
        + ("" if is_moe or is_hybrid else "; a dense model takes the MoE class's figures (not measured)")
    )
    return GraphMemoryEstimate(total, tuple(modes), cls, assumption)
