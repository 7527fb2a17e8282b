"""Recorded boots against the plan: the key a plan's boots are stored under, a record turned into the plan's
figures, and a started engine's log turned into a record (drift said when it moved).

A record counts for a plan only when everything that changes the engine's memory is the same: the engine and
its release, the model (a hash of its architecture as dspark reads it, and its weights per GPU), the GPU (name
and total memory) or the CPU host, every setting the capacity model reads (window, seats, batched tokens, KV
dtype, TP/PP, utilisation or memory fraction, pins, speculation), the engine flags its package names as memory
flags (dtype, eager, graph sizes...), whether dspark's budget was pinned or estimated, and the host. The key is
the start of the SHA-256 of those values; the store (dspark.runtime.boot_store) keeps one file per key.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dspark.capacity.result import CapacityInputs, CapacityResult
from dspark.core.errors import InputError
from dspark.core.findings import Finding
from dspark.runtime.data_dir import has_records

if TYPE_CHECKING:
    from dspark.engines.spec import AnyEngineSpec
    from dspark.hardware import GpuInfo, HardwareSnapshot
    from dspark.model.architecture import ModelArchitecture
    from dspark.model.weights import WeightBytes
    from dspark.runtime.boot_store import BootRecord
    from dspark.runtime.engine_log import KvPoolLine

LABEL = "observed on this host"
_NOT_KEYED = frozenset({"model", "recipe_env"})  # the model is keyed by its architecture; the env never is


class BootKey:
    """The key a plan's boots are recorded under, and the values it was made of; built when first read (a plan
    whose store holds no record never hashes anything: hashlib's OpenSSL import alone is a tenth of validate's
    start-up)."""

    def __init__(self, build: Callable[[], Mapping[str, Any]]) -> None:
        self._build = build

    @functools.cached_property
    def identity(self) -> Mapping[str, Any]:
        """The plan's values the key is made of (JSON values)."""
        return self._build()

    @functools.cached_property
    def key(self) -> str:
        """The first 16 hex digits of the identity's SHA-256."""
        import hashlib  # noqa: PLC0415 - only a store with records, or a boot to record, needs a digest

        return hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """JSON's own values (tuples as lists, other objects as text), so that the key is stable and storable."""
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def model_hash(arch: ModelArchitecture, weights: WeightBytes | None) -> str:
    """The model as dspark reads its config (where it was read from aside) and its weights per GPU."""
    fields = {k: v for k, v in dataclasses.asdict(arch).items() if k != "source"}
    text = json.dumps([fields, weights.per_gpu_bytes if weights else None], default=str, sort_keys=True)
    import hashlib  # noqa: PLC0415 - see BootKey

    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_key(spec: AnyEngineSpec, options: Any, inputs: CapacityInputs, predicted: CapacityResult, *,
             arch: ModelArchitecture, weights: WeightBytes | None, hardware: HardwareSnapshot,
             gpu: GpuInfo | None, engine_version: str) -> BootKey:
    """The key of this plan's boots (see the module's docstring for what it is made of), built when first read."""
    return BootKey(lambda: _identity(spec, options, inputs, predicted, arch=arch, weights=weights,
                                     hardware=hardware, gpu=gpu, engine_version=engine_version))


def _identity(spec: AnyEngineSpec, options: Any, inputs: CapacityInputs, predicted: CapacityResult, *,
              arch: ModelArchitecture, weights: WeightBytes | None, hardware: HardwareSnapshot,
              gpu: GpuInfo | None, engine_version: str) -> Mapping[str, Any]:
    settings = {k: v for k, v in dataclasses.asdict(inputs).items() if k not in _NOT_KEYED}
    summary = predicted.summary
    device: dict[str, Any] = {"platform": inputs.platform, "cpu_arch": hardware.cpu_arch}
    if gpu is not None:
        device |= {"name": gpu.name, "total_bytes": gpu.total_bytes}
    identity: Mapping[str, Any] = _plain({
        "engine": spec.name,
        "engine_version": engine_version,
        "model": {"architecture": arch.architecture, "model_type": arch.model_type,
                  "config_sha256": model_hash(arch, weights)},
        "device": device,
        "settings": settings,
        "engine_flags": dict(spec.memory_flags(options)),
        "budget": {"source": summary.kv_budget_source,
                   "pinned_bytes": summary.kv_budget_bytes if summary.kv_budget_source == "pinned" else None},
        "host": os.uname().nodename,
    })
    return identity


def lookup(key: BootKey, env: Mapping[str, str]) -> tuple[BootRecord | None, list[Finding]]:
    """The record of this key, if the store has a readable one; an unreadable one is a warning finding."""
    if not has_records(env):
        return None, []
    from dspark.runtime import boot_store  # noqa: PLC0415 - a store that holds no record is never read

    record, problem = boot_store.load(key.key, env)
    if problem is not None:
        return None, [Finding("warn", "boot-record-unreadable",
                              f"{problem}; `dspark observations clear {key.key}` removes it")]
    if record is not None and record.identity != key.identity:
        return None, [Finding("warn", "boot-record-unreadable",
                              f"the boot record {key.key} was made for another plan (a key collision); "
                              f"`dspark observations clear {key.key}` removes it")]
    return record, []


def _pool_at(at_pin: Callable[[int], CapacityResult], value: int) -> tuple[int, CapacityResult | None]:
    try:
        result = at_pin(value)
    except InputError:  # a budget too small to hold anything the accounting takes
        return 0, None
    return result.summary.kv_pool_tokens, result


def reproduce_pool(record: BootRecord, predicted: CapacityResult, at_pin: Callable[[int], CapacityResult],
                   pin_unit: str) -> CapacityResult | None:
    """The engine's accounting at the pin that gives the recorded pool, or None where no pin gives it exactly.

    pin_unit "tokens": the recorded pool is the pin. "bytes": the smallest budget whose pool is the recorded one,
    found from the bytes per token and then by bisection over the (monotone) accounting.
    """
    target = record.pool_tokens
    if target <= 0:
        return None
    if pin_unit == "tokens":
        pool, result = _pool_at(at_pin, target)
        return result if pool == target else None
    per_token = max(1, predicted.summary.kv_bytes_per_token)
    guess = target * per_token
    pool, result = _pool_at(at_pin, guess)
    if pool == target:
        return result
    lo = hi = guess
    for _ in range(64):  # widen until pool(lo) < target <= pool(hi)
        if _pool_at(at_pin, hi)[0] >= target:
            break
        lo, hi = hi, hi * 2
    for _ in range(64):
        if lo == 0 or _pool_at(at_pin, lo)[0] < target:
            break
        hi, lo = lo, lo // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        pool, result = _pool_at(at_pin, mid)
        if pool == target:
            return result
        lo, hi = (mid, hi) if pool < target else (lo, mid)
    pool, result = _pool_at(at_pin, hi)
    return result if pool == target else None


def apply_record(record: BootRecord, predicted: CapacityResult, at_pin: Callable[[int], CapacityResult],
                 pin_unit: str, key: BootKey) -> CapacityResult:
    """The plan's figures on the recorded boot: the pool (and the budget that holds it) equal the engine's.

    The findings stay the prediction's (its start-up gates, against the unpinned request), less its estimate
    note; the footprint stays the prediction's (the engine sizes itself the same way each boot).
    """
    found = reproduce_pool(record, predicted, at_pin, pin_unit)
    summary = predicted.summary
    when = record.recorded_at or "an earlier boot"
    said = (f"{LABEL} (exact): {record.engine} {record.engine_version} printed a KV pool of "
            f"{record.pool_tokens:,} tokens at its boot of {when} (record {key.key}, {record.boots} boot(s))")
    if "available_kv_gib" in record.terms:
        said += f"; its available KV memory {record.terms['available_kv_gib']:.2f} GiB"
    estimate = f"{summary.kv_pool_tokens:,} tokens ({summary.kv_budget_source})"
    diff = record.pool_tokens - summary.kv_pool_tokens
    note = (f"KV budget and pool {LABEL}: {record.pool_tokens:,} tokens, recorded {when} (record {key.key}); "
            f"dspark's own figure is {estimate}, {diff:+,} tokens off"
            + (f" ({diff / summary.kv_pool_tokens:+.2%})" if summary.kv_pool_tokens else ""))
    findings = [f for f in predicted.findings if f.code != "kv-budget-estimate"]
    if found is not None:
        said += "; the budget is the smallest that holds that pool in the engine's accounting (exact to the block)"
        observed = replace(found.summary, kv_budget_source="observed", kv_budget_assumptions=(said,))
        findings.append(Finding("info", "kv-budget-observed", note))
        return CapacityResult(observed, tuple(findings), predicted.footprint_bytes, found.detail)
    concurrency = (record.max_concurrency if record.max_concurrency is not None
                   and record.max_model_len == summary.max_model_len
                   else record.pool_tokens / max(1, summary.max_model_len))
    observed = replace(summary, kv_pool_tokens=record.pool_tokens, max_concurrency=concurrency,
                       kv_budget_source="observed", kv_budget_assumptions=(said,),
                       avg_context_at_max_num_seqs=record.pool_tokens // max(1, summary.max_num_seqs))
    findings.append(Finding("warn", "kv-budget-observed",
                            f"{note}; no budget in dspark's accounting gives that pool exactly, so the pool is the "
                            "engine's and the figures around it are dspark's"))
    return CapacityResult(observed, tuple(findings), predicted.footprint_bytes, predicted.detail)


def record_boot(key: BootKey, kv: KvPoolLine, terms: Mapping[str, float], *, engine: str, engine_version: str,
                env: Mapping[str, str], clock: Callable[[], float] = time.time) -> tuple[BootRecord, list[str]]:
    """Store what this boot's engine printed under the plan's key; the lines to show (drift from the record).

    A boot whose pool equals the record's adds its terms and counts; one whose pool differs replaces the pool,
    keeps the old one as previous_pool_tokens, and is said as drift.
    """
    from dspark.runtime import boot_store  # noqa: PLC0415 - only a started engine records its boot
    from dspark.runtime.boot_store import BootRecord  # noqa: PLC0415

    old, problem = boot_store.load(key.key, env)
    lines = [f"dspark: warning: {problem}; it is replaced"] if problem else []
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))
    kept = {k: float(v) for k, v in list(terms.items())[:boot_store.MAX_TERMS]}
    record = BootRecord(key=key.key, identity=key.identity, engine=engine, engine_version=engine_version,
                        pool_tokens=kv.pool_tokens, max_model_len=kv.max_model_len,
                        max_concurrency=kv.max_concurrency, terms=kept, recorded_at=stamp)
    if old is not None and old.identity == key.identity:
        if old.pool_tokens == kv.pool_tokens:
            record = replace(record, boots=old.boots + 1, previous_pool_tokens=old.previous_pool_tokens,
                             terms={**old.terms, **kept})
        else:
            diff = kv.pool_tokens - old.pool_tokens
            lines.append(
                f"dspark: drift: the engine's KV pool is {kv.pool_tokens:,} tokens; the record of this plan "
                f"({old.recorded_at}, {old.boots} boot(s)) held {old.pool_tokens:,} ({diff:+,} tokens, "
                f"{diff / max(1, old.pool_tokens):+.2%}); the record now holds this boot's"
                + _term_drift(old.terms, kept))
            record = replace(record, boots=old.boots + 1, previous_pool_tokens=old.pool_tokens)
    path = boot_store.save(record, env)
    if old is None:
        lines.append(f"dspark: recorded this boot's KV pool ({kv.pool_tokens:,} tokens) and memory figures in "
                     f"{path}: the next `dspark validate` of this plan uses them")
    return record, lines


class BootRecorder:
    """supervise.watch_plan's on_boot: records the boot when the pool line is read; at the engine's end, adds the
    terms printed after it (graph capture) to the same record, without counting a second boot."""

    def __init__(self, key: BootKey, *, engine: str, engine_version: str, env: Mapping[str, str]) -> None:
        self.key = key
        self.engine = engine
        self.engine_version = engine_version
        self.env = env
        self.record: BootRecord | None = None

    def __call__(self, log: Any) -> list[str]:
        """log: the EngineLog (kv_pool, terms())."""
        from dspark.runtime import boot_store  # noqa: PLC0415 - only a started engine records its boot

        kv, terms = log.kv_pool, log.terms()
        if kv is None:
            return []
        try:
            if self.record is None:
                self.record, lines = record_boot(self.key, kv, terms, engine=self.engine,
                                                 engine_version=self.engine_version, env=self.env)
                return lines
            merged = {**self.record.terms, **terms}
            if merged != dict(self.record.terms):
                self.record = replace(self.record, terms=merged)
                boot_store.save(self.record, self.env)
        except (OSError, boot_store.RecordError) as exc:  # a store that cannot be written never stops the engine
            where = boot_store.store_dir(self.env)
            return [f"dspark: warning: this boot was not recorded in {where}: {exc}"]
        return []


def _term_drift(old: Mapping[str, float], new: Mapping[str, float]) -> str:
    moved = [f"{k} {old[k]:g} -> {new[k]:g}" for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]
    return f" (the engine's terms moved: {', '.join(moved)})" if moved else ""
