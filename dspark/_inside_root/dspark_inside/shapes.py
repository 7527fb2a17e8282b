"""The requests the tools read and the answers they write (protocol.py carries them), for mypy on both sides.

dspark imports these under TYPE_CHECKING only: at run time they are plain dicts, built by
dspark.engines.<engine>.witness_input / replay_input and read by dspark.engines.witness / dspark.advise.replay.
total=False: a key may be absent (an answer that failed early carries ok, error and seconds only).
"""

from __future__ import annotations

from typing import Any, TypedDict

# One layer of vLLM's KV specs: {"name", "class": FullAttentionSpec | SlidingWindowSpec | MLAAttentionSpec |
# MambaSpec, "block_size", "kwargs": the spec's constructor arguments, dtypes as names ("bfloat16", "fp8_e4m3")}.
VllmLayerSpec = TypedDict("VllmLayerSpec", {"name": str, "class": str, "block_size": int, "kwargs": dict[str, Any]})


class VllmPlannerRequest(TypedDict, total=False):
    """vLLM's planner request (vllm.kv_plan; the witness's, and the replay's `plan`): dspark's resolution."""

    engine: str  # "vllm"
    max_model_len: int
    auto_fit: bool
    budget_bytes: int  # the KV bytes per worker: dspark's pin or estimate
    num_gpu_blocks_override: int | None
    num_prefill_lookahead_tokens: int
    max_in_flight_tokens: int
    max_num_batched_tokens: int
    max_num_seqs: int
    disable_hybrid_kv_cache_manager: bool
    enable_prefix_caching: bool
    mamba_cache_mode: str
    tp: int
    pp: int
    kv_cache_layout: str  # "NHD": layer-outermost
    workers: list[list[VllmLayerSpec]]  # one list of layer specs per pipeline stage


class SglangSizingCase(TypedDict, total=False):
    """One launch for SGLang's own sizing (sglang.witness; the witness's request, a sizing case)."""

    engine: str  # "sglang"
    id: str
    argv: list[str]  # launch_server flags, --model-path (a directory with config.json) included
    gpu_mib: int
    free_before: int  # bytes free before the weights, dspark's reading
    free_after: int  # and after
    capability: list[int]  # [major, minor]
    integrated: bool  # unified memory (GB10-like): free memory is the host's MemAvailable
    env: dict[str, str]  # set for this case only (sizing tool)
    all_probes: bool  # rebind every platform probe, also where override_platform exists (the version matrix)


WitnessRequest = VllmPlannerRequest | SglangSizingCase


class WitnessAnswer(TypedDict, total=False):
    """The engine planner's figures (max_concurrency: the pool over the context length), or why there are none."""

    ok: bool
    engine: str | None
    engine_version: str
    kv_pool_tokens: int
    max_concurrency: float
    max_model_len: int
    num_blocks: int | None
    blocks_per_request: int  # vLLM
    max_running_requests: int  # SGLang
    kv_line: str  # the engine's own log line for these figures (vLLM)
    functions: list[str]  # the engine functions it called
    stood_in: list[str]  # modules this host lacks that stood in (SGLang)
    error: str
    seconds: float


class _ArgvCheckRequired(TypedDict):
    argv: list[str]  # the serve arguments, without the program name


class ArgvCheckRequest(_ArgvCheckRequired, total=False):
    """An argv for the engine's own parser; with `witness`, the planner also runs in the same process."""

    witness: WitnessRequest


class ArgvCheckAnswer(TypedDict, total=False):
    """The parser's verdict: error is argparse's last message line; import_error: the engine does not import."""

    ok: bool
    engine: str
    version: str
    non_default: dict[str, Any]  # the parsed values that differ from the parser's defaults
    num_options: int
    error: str
    import_error: bool
    witness: WitnessAnswer  # when the request had one


class ReplayRequest(TypedDict, total=False):
    """A workload for the engine's own scheduler (see each engine's replay_scheduler.py for `engine`)."""

    plan: VllmPlannerRequest  # vLLM: its planner builds the KVCacheConfig the scheduler runs on
    plans: dict[str, dict[str, int]]  # SGLang: dspark's pool per seat count ({max_total_tokens, ...})
    engine: dict[str, Any]  # the scheduler settings of the plan
    seats: list[int]
    requests: list[dict[str, Any]]  # [{prompt: [ids], max_tokens}]
    arrivals: dict[str, Any]  # {clients: N} (closed loop) | {times: [s, ...]} (open loop, one per request)
    warm: bool  # re-send every request after the cold pass ends, arriving the same way
    accepted_pattern: list[int]  # accepted draft tokens per decode step, cycled per request
    step_cost: dict[str, float]  # the advisor's step cost terms (step_cost.step_seconds)
    workers: int  # processes to spread the seat counts over (default: the CPUs; forked after the import)
    trace: bool  # SGLang: each pass also lists its prefill batches


class PassFigures(TypedDict, total=False):
    """One pass at one seat count: counters, and per request (in order) its times on the virtual clock."""

    requests: int
    steps: int
    wall_time_s: float
    prefill_time_s: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    preemptions: int
    kv_peak_fraction: float
    kv_mean_fraction: float  # over the virtual time
    running_peak: int
    arrival_s: list[float]
    first_token_s: list[float]  # when the engine sampled it
    first_token_hop_s: float  # and how much later the client has it (the step cost's arrival_hop_s)
    first_token_seen_s: list[float]  # when the client has it: through the API server (dspark_inside.frontend)
    finish_s: list[float]
    output_tokens: list[int]
    seconds: float
    cpu_seconds: float
    process: int


class SeatFigures(TypedDict, total=False):
    """The cold pass and, when asked, the warm one at one seat count; error: the engine's refusal."""

    seats: int
    cold: PassFigures
    warm: PassFigures | None
    error: str


class ReplayAnswer(TypedDict, total=False):
    """Every seat count's figures, the pool the scheduler ran on (kv), or the error."""

    ok: bool
    engine_version: str
    results: list[SeatFigures]
    kv: dict[str, Any] | None
    scheduler: str | None  # vLLM: its scheduler class
    batch_queue: int  # vLLM: batches in flight
    stood_in: list[str]  # SGLang
    error: str
    seconds: float
    setup_seconds: float
