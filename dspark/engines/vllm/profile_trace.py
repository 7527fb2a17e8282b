"""The activation peak of vLLM's profile run as the installed release computes it, traced on this host, cached.

dspark_inside.vllm.profile_peak runs, in the engine's interpreter, the release's own model code for the
profile run's dummy batch (max_num_batched_tokens tokens, then the dummy sampler batch) on the meta device and
counts the bytes of the tensors alive at each op (its docstring says what is stood in for). This module builds
its request, keeps each answer in a cache keyed by everything the peak depends on (the model's config.json,
the release, the engine arguments that shape the batch, the dtype and the device's facts), and turns the
answer into the torch peak increase Worker.determine_available_memory charges. The request names torch's cuBLAS
workspace for the device, which the tool allocates where the run's first cuBLAS GEMM is.

Measured against the H200 probe (vLLM 0.25.0, tests/device/results/2026-12-01, `python -m
benchmarks.profile_peak_vs_gpu`, docs/profile-trace.md): on the three eager rows (Qwen3-8B dense, Qwen3-30B-A3B
MoE, Gemma-3-12B) the traced peak is the engine's torch peak increase to within 2 KiB, and what the forward
leaves for the sampler is the worker's to the byte on every row (17, three of them shapes first traced before
their GPU run). Compiled (the
default), the profile run also compiles, and Inductor's compile-time buffers are not traced: the compiled rows'
peaks are 32 MiB to 1 GiB from the trace, so a compiled plan keeps the heuristic (apply_trace says so).

Cache: `$DSPARK_DATA_DIR/profile-traces/<key>.json` (dspark's data directory, dspark.runtime.boot_store), one
small JSON file per key, written atomically; a file that cannot be read is ignored and traced again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspark.engines.inside import InsideFailure, Runner, run_inside
from dspark.engines.vllm.kv_types import KVBudget
from dspark.runtime.boot_store import data_dir

FORMAT = "dspark-profile-trace"
VERSION = 2  # of the tool's accounting (2: the cuBLAS workspace at the first GEMM); a new one makes caches stale
TOOL = "vllm.profile_peak"
MAX_FILE_BYTES = 64 << 10
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class DeviceFacts:
    """What the traced platform answers for the GPU (the facts the release's layers read from it)."""

    name: str
    capability: tuple[int, int]
    total_bytes: int
    sm_count: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "capability": list(self.capability), "total_bytes": self.total_bytes,
                "sm_count": self.sm_count}


@dataclass(frozen=True)
class TracedPeak:
    """The trace's figures (bytes above what was allocated before the profile run) and where they came from."""

    key: str
    engine_version: str
    runner: str
    forward_peak_bytes: int
    kept_bytes: int
    sampler_peak_bytes: int | None
    peak_bytes: int
    sampler: str
    cached: bool = False

    def torch_peak_increase(self) -> int:
        """What the worker measures: the traced peak (the cuBLAS workspace included where the first GEMM is)."""
        return self.peak_bytes


def cublas_workspace_bytes(capability: tuple[int, int]) -> int:
    """torch's default cuBLAS workspace for one handle (CUBLAS_WORKSPACE_CONFIG unset).

    32 MiB from compute capability 9.0 (the H200's probe: torch peak increase - traced peak = 32 MiB + 2 KiB on
    every eager row, and the sampler's start on every row whose forward runs a cuBLAS GEMM); below, torch's
    ":4096:2:16:8" (8 MiB + 128 KiB), not measured here.
    """
    return 32 << 20 if capability >= (9, 0) else (4096 * 2 + 16 * 8) << 10


def trace_request(config: Mapping[str, Any], *, max_num_batched_tokens: int, max_num_seqs: int,
                  max_model_len: int, dtype: str = "auto", kv_cache_dtype: str = "auto",
                  device: DeviceFacts, extra_engine_args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The tool's request: the model's config.json, the EngineArgs that shape the profile batch, the device."""
    engine_args: dict[str, Any] = {
        "max_num_batched_tokens": max_num_batched_tokens, "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len, "dtype": dtype, "kv_cache_dtype": kv_cache_dtype,
        **dict(extra_engine_args or {}),
    }
    return {"config": dict(config), "engine_args": engine_args, "device": device.to_json(),
            "cublas_workspace_bytes": cublas_workspace_bytes(device.capability)}


def engine_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The VLLM_* variables of the environment the tool runs in (the runner's choice, the sampler's, ...)."""
    return {k: v for k, v in sorted((os.environ if env is None else env).items()) if k.startswith("VLLM_")}


def cache_key(request: Mapping[str, Any], engine_version: str, env: Mapping[str, str] | None = None) -> str:
    """16 hex digits of the SHA-256 of everything the peak depends on (the request, the release, the tool and
    the engine's VLLM_* environment)."""
    canonical = json.dumps({"format": FORMAT, "version": VERSION, "engine_version": engine_version,
                            "request": request, "engine_env": engine_environment(env)},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the traces are kept: profile-traces/ in dspark's data directory."""
    return data_dir(env) / "profile-traces"


def _from_answer(key: str, answer: Mapping[str, Any], *, cached: bool) -> TracedPeak:
    """The figures of an answer (or of a cached one); ValueError when it is not one."""
    def whole(name: str, optional: bool = False) -> Any:
        value = answer.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} is not a byte count: {value!r}")
        return value

    peak = TracedPeak(
        key=key, engine_version=str(answer.get("engine_version", "")), runner=str(answer.get("runner", "")),
        forward_peak_bytes=whole("forward_peak_bytes"), kept_bytes=whole("kept_bytes"),
        sampler_peak_bytes=whole("sampler_peak_bytes", optional=True), peak_bytes=whole("peak_bytes"),
        sampler=str(answer.get("sampler", "")), cached=cached,
    )
    if peak.peak_bytes < peak.forward_peak_bytes:
        raise ValueError("peak_bytes is below the forward's peak")
    return peak


def _read(path: Path, key: str) -> TracedPeak:
    """The cached trace in `path`; ValueError or OSError when the file is not the trace of `key`."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{size:,} bytes is past the {MAX_FILE_BYTES:,}-byte bound")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not a profile trace of this format")
    if data.get("key") != key:
        raise ValueError(f"it holds the trace of key {data.get('key')!r}")
    return _from_answer(key, data, cached=True)


def load(key: str, env: Mapping[str, str] | None = None) -> tuple[TracedPeak | None, str | None]:
    """(the cached trace, None), (None, None) when there is none, (None, why) when the file is not one."""
    path = cache_dir(env) / f"{key}.json"
    if not path.exists():
        return None, None
    try:
        return _read(path, key), None
    except (OSError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        return None, f"the cached profile trace {path} is ignored: {exc}"


def save(peak: TracedPeak, env: Mapping[str, str] | None = None) -> Path:
    """Write the trace atomically (temporary file in the same directory, fsync, os.replace); its path."""
    folder = cache_dir(env)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{peak.key}.json"
    data = {"format": FORMAT, "version": VERSION, "key": peak.key, "engine_version": peak.engine_version,
            "runner": peak.runner, "forward_peak_bytes": peak.forward_peak_bytes, "kept_bytes": peak.kept_bytes,
            "sampler_peak_bytes": peak.sampler_peak_bytes, "peak_bytes": peak.peak_bytes, "sampler": peak.sampler}
    import tempfile  # noqa: PLC0415 - only a write needs it

    fd, name = tempfile.mkstemp(prefix=f".{peak.key}.", suffix=".tmp", dir=folder)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, sort_keys=True, indent=1) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)  # readers see the old file or the new one, never half of one
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def _figures(key: str, answer: object, engine_version: str) -> TracedPeak:
    """The figures of the tool's answer for this release; ValueError saying why there are none."""
    if not isinstance(answer, dict) or not answer.get("ok"):
        why = answer.get("error") if isinstance(answer, dict) else f"an answer that is not an object: {answer!r}"
        raise ValueError(f"the profile trace gave no figures: {why}")
    if str(answer.get("engine_version")) != engine_version:
        raise ValueError(f"the profile trace ran vLLM {answer.get('engine_version')}, not {engine_version}: "
                         "its figures are not this release's")
    try:
        return _from_answer(key, answer, cached=False)
    except ValueError as exc:
        raise ValueError(f"the profile trace's answer is not usable: {exc}") from None


def traced_peak(python: str, request: Mapping[str, Any], engine_version: str, *,
                env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S,
                runner: Runner | None = None) -> tuple[TracedPeak | None, str | None]:
    """The cached trace for the request, else the tool's (then cached); (None, why) when there is none.

    engine_version: the installed release the python runs (part of the key: a cached trace of another release
    is never used for this one); env: the environment the tool runs in (default: this process's).
    """
    key = cache_key(request, engine_version, env)
    cached, problem = load(key, env)
    if cached is not None:
        return cached, None
    try:
        answer = run_inside(python, TOOL, dict(request), timeout, runner=runner, env=env)
    except InsideFailure as failure:
        return None, f"the profile trace did not run in {python}: {failure.detail} {failure.last(2)}".strip()
    try:
        peak = _figures(key, answer, engine_version)
    except ValueError as exc:
        return None, str(exc)
    try:
        save(peak, env)
    except OSError as exc:
        return peak, f"the profile trace could not be cached: {exc}" if problem is None else problem
    return peak, problem


# ---------------------------------------------------------------------------------------------
# At planning time (opt-in: DSPARK_PROFILE_TRACE=1): an eager CUDA plan's activation peak from the trace
# ---------------------------------------------------------------------------------------------

TRACE_ENV = "DSPARK_PROFILE_TRACE"
DEFAULT_SM_COUNT = 132  # H100 / H200 SXM; only the V1 sampler's Triton buffer reads it (min(seats, SMs) rows)


@dataclass(frozen=True)
class TraceAsk:
    """What the plan resolved that shapes the profile batch."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    dtype: str
    kv_cache_dtype: str


@dataclass(frozen=True)
class TraceOutcome:
    """The worker's torch peak increase from the trace (None: the heuristic stands) and the words for the plan."""

    activation_bytes: int | None
    words: str


def with_traced_activation(terms: tuple[tuple[str, int], ...], assumptions: tuple[str, ...],
                           traced: int) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...], int]:
    """The estimate's terms and assumptions with the traced activation peak in place of the heuristic's.

    Returns the new terms, the assumptions without the heuristic's activation line, and traced - heuristic
    (what the KV budget loses).
    """
    heuristic = dict(terms).get("activation_peak")
    if heuristic is None:
        raise ValueError("the estimate has no activation_peak term")
    new_terms = tuple((name, traced if name == "activation_peak" else value) for name, value in terms)
    kept = tuple(a for a in assumptions if not a.startswith("activation peak ("))  # the estimate's own line
    return new_terms, kept, traced - heuristic


def plan_tracer(config_path: str, device: DeviceFacts, engine_version: str, env: Mapping[str, str]
                ) -> Callable[[TraceAsk], TraceOutcome]:
    """The trace of an eager plan's profile run by the installed vLLM, when it is `engine_version` (cached)."""

    def trace(ask: TraceAsk) -> TraceOutcome:
        from dspark.core.errors import DsparkError  # noqa: PLC0415
        from dspark.engines import engine_spec  # noqa: PLC0415 - the registry, only when a plan asks
        from dspark.engines.interpreter import find_engine_python, installed_version  # noqa: PLC0415
        from dspark.engines.version import normalize  # noqa: PLC0415

        stays = "activation peak stays the heuristic:"
        spec = engine_spec("vllm")
        try:
            python = find_engine_python(spec.adapter(), None, env)
        except DsparkError as exc:
            return TraceOutcome(None, f"{stays} no vLLM to trace the profile run with ({exc.message})")
        raw = installed_version(spec, python)
        installed = normalize(raw) if raw else None
        if installed != engine_version:
            return TraceOutcome(None, f"{stays} the installed vLLM is {installed or 'absent'}, the plan's "
                                      f"{engine_version}")
        try:
            config = json.loads(Path(config_path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return TraceOutcome(None, f"{stays} {config_path} could not be read again ({exc})")
        request = trace_request(config, max_num_batched_tokens=ask.max_num_batched_tokens,
                                max_num_seqs=ask.max_num_seqs, max_model_len=ask.max_model_len, dtype=ask.dtype,
                                kv_cache_dtype=ask.kv_cache_dtype, device=device)
        peak, problem = traced_peak(python, request, engine_version, env=env)
        if peak is None:
            return TraceOutcome(None, f"{stays} {problem}")
        cublas = cublas_workspace_bytes(device.capability)
        where = "cached" if peak.cached else "run"
        return TraceOutcome(peak.torch_peak_increase(), (
            f"activation peak (traced: vLLM {engine_version}'s own profile run, eager, {peak.runner.upper()} "
            f"runner, {where} on this host) = {peak.peak_bytes:,} B, torch's cuBLAS workspace ({cublas:,} B) "
            "included" + ("; the V2 runner's sampling after its logits is not traced" if peak.runner == "v2" else "")
            + (f"; {problem}" if problem else "")))

    return trace


def apply_trace(budget: KVBudget, trace: Callable[[TraceAsk], TraceOutcome], ask: TraceAsk, *,
                compiled: bool, parallel: int, speculative: bool) -> tuple[KVBudget, int, str]:
    """The estimated budget on the traced activation peak where the trace is the engine's (eager, one rank, no
    drafter); else the budget as it was. Returns the budget, what it lost (bytes) and the words for the plan."""
    stays = "activation peak stays the heuristic:"
    if compiled:
        return budget, 0, (f"{stays} the plan is compiled, and the profile run compiles too (Inductor's "
                           "compile-time buffers are not the eager run's peak the trace gives)")
    if parallel != 1 or speculative:
        return budget, 0, f"{stays} the trace covers one rank without a drafter"
    outcome = trace(ask)
    if outcome.activation_bytes is None:
        return budget, 0, outcome.words
    terms, assumptions, lost = with_traced_activation(budget.terms, budget.assumptions, outcome.activation_bytes)
    traced = KVBudget(budget.bytes - lost, budget.source, budget.how, (*assumptions, outcome.words), terms)
    return traced, lost, outcome.words
