"""vLLM CUDA-graph capture sizes as 0.32.0 builds them (pure).

Source: VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py) and
CompilationConfig.adjust_cudagraph_sizes_for_spec_decode (vllm/config/compilation.py).
Graphs are captured only on CUDA-alike platforms: the CPU platform's support_static_graph_mode() is
False, so VllmConfig sets cudagraph_mode NONE and CpuPlatform.check_and_update_config empties the list;
--enforce-eager does the same on CUDA (max 0, no sizes). Both "what would be captured on CUDA" and
"what applies here" are reported, so a CPU rehearsal still shows the GPU plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# _set_cudagraph_sizes: 1024 on is_device_capability_family(100) (SM 10.x: B200/B300), else 512.
DEFAULT_MAX_GRAPH_SIZE = 512
BLACKWELL_DC_MAX_GRAPH_SIZE = 1024


class CaptureSizeError(ValueError):
    """vLLM would refuse the capture settings (its own ValueError, predicted)."""


@dataclass(frozen=True)
class CaptureSizes:
    """One capture plan: the sizes (ascending) and the largest, 0 and () when nothing is captured."""

    max_capture_size: int
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class VllmGraphPlan:
    """CUDA-graph capture for a vLLM launch: what CUDA would capture, and what applies on this platform."""

    on_cuda: CaptureSizes  # what a CUDA launch with these settings captures (eager aside)
    applied: CaptureSizes  # what this launch captures: empty on CPU and with --enforce-eager
    reason: str  # why `applied` differs from `on_cuda`, "" when it does not
    notes: tuple[str, ...] = ()
    cudagraph_mode: str = "FULL_AND_PIECEWISE"  # compilation_config.cudagraph_mode, upper case
    compiled: bool = True  # torch.compile runs (off with --enforce-eager and on CPU here; cudagraph_mode NONE keeps it)


def _ceiling(compute_capability: tuple[int, int] | None, blackwell_ceiling: int) -> int:
    blackwell = compute_capability is not None and compute_capability[0] == 10
    return blackwell_ceiling if blackwell else DEFAULT_MAX_GRAPH_SIZE


def default_max_capture_size(
    max_num_seqs: int, num_speculative_tokens: int, compute_capability: tuple[int, int] | None,
    blackwell_ceiling: int = BLACKWELL_DC_MAX_GRAPH_SIZE,
) -> int:
    """min(seats x (1 + spec) x 2, 512, or 1024 on SM 10.x): the cap before max_num_batched_tokens.

    blackwell_ceiling: the SM 10.x ceiling (0.25/0.26: 512 there too, no device family case)."""
    ceiling = _ceiling(compute_capability, blackwell_ceiling)
    decode_query_len = 1 + num_speculative_tokens  # VllmConfig.uniform_decode_query_len
    return min(max_num_seqs * decode_query_len * 2, ceiling)


def _request_counts(max_reqs: int, ceiling: int) -> list[int]:
    """request_counts() inside _set_cudagraph_sizes: a request-count grid up to max_reqs."""
    max_reqs = min(max_reqs, ceiling)
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += list(range(8, min(max_reqs + 1, 256), 8))
    counts += list(range(256, max_reqs + 1, 16))
    return sorted({*counts, max_reqs})


def _default_grid(max_size: int, max_num_tokens: int, performance_mode: str) -> list[int]:
    """The token grid: 1,2,4 (or 1..32 for interactivity), step 8 below 256, step 16 above."""
    if performance_mode == "interactivity":
        sizes = list(range(1, min(max_size, 32) + 1))
    else:
        sizes = [i for i in (1, 2, 4) if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    if max_num_tokens <= max_size and max_num_tokens not in sizes:
        sizes.append(max_num_tokens)  # 2026-04-29 (#40734): the prefill budget itself is captured
    return sizes


def vllm_capture_sizes(
    *,
    max_num_seqs: int,
    num_speculative_tokens: int,
    max_num_batched_tokens: int,
    compute_capability: tuple[int, int] | None,
    performance_mode: str = "balanced",
    max_cudagraph_capture_size: int | None = None,
    cudagraph_capture_sizes: Sequence[int] | None = None,
    add_uniform_decode: bool = True,
    blackwell_ceiling: int = BLACKWELL_DC_MAX_GRAPH_SIZE,
) -> CaptureSizes:
    """compilation_config.cudagraph_capture_sizes and its max after VllmConfig._set_cudagraph_sizes (0.32.0).

    add_uniform_decode False and blackwell_ceiling 512: 0.25/0.26, whose default sizes are the token grid (and
    max_num_batched_tokens) only, under min(seats x (1 + spec) x 2, 512) on every device.
    """
    ceiling = _ceiling(compute_capability, blackwell_ceiling)
    max_size = max_cudagraph_capture_size
    uniform_decode_sizes: list[int] = []
    if max_size is None:
        decode_query_len = 1 + num_speculative_tokens
        max_size = default_max_capture_size(max_num_seqs, num_speculative_tokens, compute_capability,
                                            blackwell_ceiling)
        if add_uniform_decode and decode_query_len > 1:
            # Speculative decoding: every uniform decode batch (n requests x query length) is appended,
            # so dispatch always finds an exact multiple of the query length.
            uniform_decode_sizes = sorted(
                {
                    n * decode_query_len
                    for n in _request_counts(max_num_seqs, ceiling)
                    if n * decode_query_len <= max_size
                }
            )
        elif add_uniform_decode and max_num_seqs <= max_size:
            uniform_decode_sizes = [max_num_seqs]
    max_size = min(max_num_batched_tokens, max_size)
    if max_size < 1:
        raise CaptureSizeError("Maximum cudagraph size should be greater than or equal to 1 when using cuda graph.")
    if cudagraph_capture_sizes is not None:
        if not cudagraph_capture_sizes:
            raise CaptureSizeError("cudagraph_capture_sizes should contain at least one element")
        sizes = sorted({s for s in cudagraph_capture_sizes if s <= max_num_batched_tokens})
    else:
        grid = _default_grid(max_size, max_num_batched_tokens, performance_mode)
        grid += [s for s in uniform_decode_sizes if s <= max_num_batched_tokens]
        sizes = sorted(set(grid))
    valid_max = sizes[-1] if sizes else 0
    if (
        max_cudagraph_capture_size is not None
        and max_cudagraph_capture_size != valid_max
        and cudagraph_capture_sizes is not None
    ):
        raise CaptureSizeError(
            f"customized max_cudagraph_capture_size(={max_cudagraph_capture_size}) should be "
            f"consistent with the max value of cudagraph_capture_sizes(={valid_max})"
        )
    # A user max alone is truncated to the largest size kept ("Truncating max_cudagraph_capture_size").
    return CaptureSizes(max_capture_size=valid_max, sizes=tuple(sizes))


def round_for_spec_decode(capture: CaptureSizes, num_speculative_tokens: int) -> CaptureSizes:
    """CompilationConfig.adjust_cudagraph_sizes_for_spec_decode: V1 runner, FULL decode graphs only."""
    multiple = 1 + num_speculative_tokens
    if not capture.sizes or multiple <= 1:
        return capture

    def up(size: int) -> int:
        return -(-size // multiple) * multiple

    rounded = sorted({up(s) for s in capture.sizes if up(s) <= capture.max_capture_size})
    if not rounded and multiple <= capture.max_capture_size:
        rounded = [multiple]
    if not rounded:
        raise CaptureSizeError(
            f"No valid cudagraph sizes after rounding to multiple of {multiple} (num_speculative_tokens + 1)"
        )
    return CaptureSizes(max_capture_size=rounded[-1], sizes=tuple(rounded))


def vllm_graph_plan(
    *,
    platform: Literal["cpu", "cuda"],
    enforce_eager: bool,
    max_num_seqs: int,
    num_speculative_tokens: int,
    max_num_batched_tokens: int,
    compute_capability: tuple[int, int] | None,
    performance_mode: str = "balanced",
    max_cudagraph_capture_size: int | None = None,
    cudagraph_capture_sizes: Sequence[int] | None = None,
    cudagraph_mode: str | None = None,
    model_runner: Literal["v1", "v2"] = "v2",
    add_uniform_decode: bool = True,
    blackwell_ceiling: int = BLACKWELL_DC_MAX_GRAPH_SIZE,
) -> VllmGraphPlan:
    """Capture sizes for CUDA, and what applies given the platform, --enforce-eager and cudagraph_mode."""
    on_cuda = vllm_capture_sizes(
        max_num_seqs=max_num_seqs,
        num_speculative_tokens=num_speculative_tokens,
        max_num_batched_tokens=max_num_batched_tokens,
        compute_capability=compute_capability,
        performance_mode=performance_mode,
        max_cudagraph_capture_size=max_cudagraph_capture_size,
        cudagraph_capture_sizes=cudagraph_capture_sizes,
        add_uniform_decode=add_uniform_decode,
        blackwell_ceiling=blackwell_ceiling,
    )
    notes: list[str] = []
    mode = (cudagraph_mode or "FULL_AND_PIECEWISE").upper()
    full_decode = mode in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
    if model_runner == "v1" and full_decode and num_speculative_tokens > 0:
        # V1 runner only; V2 rounds per descriptor in v1/worker/gpu/cudagraph_utils.py instead.
        on_cuda = round_for_spec_decode(on_cuda, num_speculative_tokens)
        notes.append(f"V1 model runner: sizes rounded up to multiples of {1 + num_speculative_tokens}")
    none = CaptureSizes(max_capture_size=0, sizes=())
    if platform == "cpu":
        return VllmGraphPlan(on_cuda, none, "CPU platform captures no CUDA graphs", tuple(notes), mode, False)
    if enforce_eager:
        return VllmGraphPlan(on_cuda, none, "--enforce-eager disables CUDA graphs", tuple(notes), mode, False)
    if mode == "NONE":
        return VllmGraphPlan(on_cuda, none, "cudagraph_mode NONE", tuple(notes), mode)
    return VllmGraphPlan(on_cuda, on_cuda, "", tuple(notes), mode)
