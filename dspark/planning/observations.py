"""A recipe's measured pools against the plan: which observations describe this plan, and what they say. Pure.

An observation is the engine's own figure for one deployment: one engine version, one KV pin, one GPU, one set of
the settings that size the pool (window, parallel layout, KV dtype, prefill budget, speculative tokens, prefix
caching). It counts for a plan only when the plan asks for the same; otherwise it is shown, not applied. An
observation that records no engine version or pin takes the recipe's (`engine_version`, `kv_cache`), its other
settings are the recipe's, and its hardware is the recipe's `hardware` profile.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from dspark.capacity import CapacitySummary, ObservedPool
from dspark.config.knobs import slot_knobs
from dspark.config.settings import recipe_value
from dspark.core.findings import Finding
from dspark.core.units import format_size
from dspark.engines import pool_pins
from dspark.engines.version import normalize
from dspark.hardware.profiles import get_profile, is_profile

if TYPE_CHECKING:
    from dspark.config.recipes import Recipe
    from dspark.config.settings import ResolvedSettings

# The settings that size the pool: an observation made under other values says nothing about this plan's pool.
# The pin and memory fractions first (the ones an observation may record itself), then the layout and budgets.
# The engines' pins and shares are their own knobs (the knob table's slots), named here through the table.
_PINS = slot_knobs("kv_pin")
_FRACTIONS = slot_knobs("kv_share")
_BYTE_PINS = frozenset(knob for knob, unit in pool_pins() if unit == "bytes")
POOL_KNOBS = (*_PINS, *_FRACTIONS, "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype",
              "max_num_batched_tokens", "num_speculative_tokens", "enable_prefix_caching")
POOL_METRICS = ("kv_pool_tokens", "full_contexts")


class PlanIdentity(NamedTuple):
    """What an observation must match: the engine version planned for, the GPU planned against, and the recipe's
    own settings (no flags, no environment), which an observation that records nothing else was taken with."""

    engine_version: str  # the version asked for (X.Y.Z), not the modelled stand-in
    gpu_name: str | None  # None: no GPU (the CPU build)
    recipe_settings: ResolvedSettings | None = None


def observations(recipe: Recipe | None, settings: ResolvedSettings, metric: str, seats: int | None = None) -> list[Any]:
    """The recipe's observations of `metric` for this window and seat count (any pin, version or hardware)."""
    if recipe is None:
        return []
    window = settings.max_model_len.value
    return [
        o
        for o in recipe.observations
        if o.metric == metric and (o.max_model_len in (None, window)) and (seats is None or o.seats in (None, seats))
    ]


def _shown(name: str, value: object) -> str:
    if value is None:
        return "none"
    return format_size(value) if name in _BYTE_PINS and isinstance(value, int) else str(value)


def measured_with(recipe: Recipe, obs: Any, own: ResolvedSettings | None = None) -> dict[str, object]:
    """The engine version, pool settings and GPU an observation was measured with (the recipe's where it is silent).

    own: the recipe's settings as resolved without flags or environment (defaults included); without them, the
    values the recipe itself writes.
    """
    pool: dict[str, object] = {
        name: getattr(own, name).value if own is not None else recipe_value(recipe, name) for name in POOL_KNOBS
    }
    pinned = getattr(obs, "kv_cache_memory", None)
    if pinned is not None:  # the observation's own pin replaces the recipe's, in whichever unit that was
        pool |= {pin: pinned if pin in _BYTE_PINS else None for pin in _PINS}  # its pin is in bytes
    if getattr(obs, "max_model_len", None) is not None:
        pool["max_model_len"] = obs.max_model_len
    gpu = get_profile(recipe.hardware).gpus[0].name if recipe.hardware and is_profile(recipe.hardware) else None
    version = getattr(obs, "engine_version", None) or recipe.engine_version
    return {"engine_version": normalize(version) if version else None, "gpu": gpu, **pool}


def mismatches(recipe: Recipe, obs: Any, settings: ResolvedSettings, plan: PlanIdentity) -> list[str]:
    """Why an observation does not describe this plan, one phrase per difference; empty when it does."""
    taken = measured_with(recipe, obs, plan.recipe_settings)
    out: list[str] = []
    version = taken["engine_version"]
    if version is not None and version != plan.engine_version:
        out.append(f"measured with {recipe.engine} {version}, planned for {plan.engine_version}")
    pinned = any(taken[pin] is not None and taken[pin] == getattr(settings, pin).value for pin in _PINS)
    for name in POOL_KNOBS:
        theirs, ours = taken[name], getattr(settings, name)
        if pinned and name in _FRACTIONS:
            continue  # the same pin sizes the pool exactly: the memory fractions no longer do
        if theirs != ours.value:
            out.append(f"measured with {name} {_shown(name, theirs)}, planned with {_shown(name, ours.value)} "
                       f"({ours.source})")
    gpu = taken["gpu"]
    if gpu is not None and gpu != plan.gpu_name:
        out.append(f"measured on {gpu} ({recipe.hardware}), planned for {plan.gpu_name or 'no GPU'}")
    return out


def matching_observations(recipe: Recipe | None, settings: ResolvedSettings, metric: str, seats: int | None,
               plan: PlanIdentity) -> list[Any]:
    """The observations of `metric` that describe this very plan (window, seats, version, pin and GPU)."""
    if recipe is None:
        return []
    return [o for o in observations(recipe, settings, metric, seats) if not mismatches(recipe, o, settings, plan)]


def with_observed_pool(cap: CapacitySummary, recipe: Recipe | None, settings: ResolvedSettings,
                  plan: PlanIdentity) -> CapacitySummary:
    """The engine's own logged pool beside the prediction, where one applies; the safe default follows the lower."""
    pools = matching_observations(recipe, settings, "kv_pool_tokens", cap.max_num_seqs, plan)
    contexts = matching_observations(recipe, settings, "full_contexts", cap.max_num_seqs, plan)
    if not pools and not contexts:
        return cap
    window = max(1, cap.max_model_len)
    seats = max(1, cap.max_num_seqs)
    pool = min(int(o.value) for o in pools) if pools else None
    concurrency = min(float(o.value) for o in contexts) if contexts else (pool or 0) / window
    # The observed pool over the seats; with only the contexts logged, the pool they stand for.
    held = pool if pool is not None else math.floor(concurrency * window)
    sources = list(dict.fromkeys(str(o.source) for o in (*pools, *contexts)))
    observed = ObservedPool(
        kv_pool_tokens=pool, max_concurrency=concurrency,
        safe_max_num_seqs=max(1, math.floor(concurrency + 1e-9)),
        avg_context_at_max_num_seqs=min(held // seats, cap.max_model_len), source="; ".join(sources),
        predicted_safe_max_num_seqs=cap.safe_max_num_seqs,
    )
    return replace(cap, observed=observed, safe_max_num_seqs=min(cap.safe_max_num_seqs, observed.safe_max_num_seqs))


def observed_with(recipe: Recipe | None, obs: Any, engine: str) -> str:
    """`vllm 0.32.0`, or `vllm version unknown`: the engine version an observation was taken with."""
    version = getattr(obs, "engine_version", None) or (recipe.engine_version if recipe is not None else None)
    return f"{engine} {version}" if version else f"{engine} version unknown"


def _figure(obs: Any) -> str:
    return (f"KV pool {int(obs.value):,} tokens" if obs.metric == "kv_pool_tokens"
            else f"{obs.value:.2f} full contexts")


def observation_findings(cap: CapacitySummary, recipe: Recipe | None, settings: ResolvedSettings,
                         plan: PlanIdentity) -> list[Finding]:
    """Applied observations that disagree with the prediction (naming both engine versions), and the ones shown but
    not applied, with why."""
    if recipe is None:
        return []
    out: list[Finding] = []
    predicted_with = f"{cap.engine} {cap.engine_version}"
    for metric in POOL_METRICS:
        for obs in observations(recipe, settings, metric, cap.max_num_seqs):
            why = mismatches(recipe, obs, settings, plan)
            if why:
                out.append(Finding(
                    "info", "observation-not-applied",
                    f"observed {_figure(obs)} ({obs.source}) not applied: {'; '.join(why)}; an observation counts "
                    "only for the engine version, KV pin, settings and GPU it was measured with",
                ))
            elif metric == "kv_pool_tokens" and int(obs.value) != cap.kv_pool_tokens:
                pool, taken = int(obs.value), observed_with(recipe, obs, cap.engine)
                out.append(Finding(
                    "warn", "observed-pool-differs",
                    f"observed KV pool {pool:,} tokens ({obs.source}; {taken}) vs predicted {cap.kv_pool_tokens:,} "
                    f"({predicted_with}; {cap.kv_pool_tokens - pool:+,} tokens, {_percent(cap.kv_pool_tokens, pool)}): "
                    "the safe default follows the lower",
                ))
            elif metric == "full_contexts" and f"{obs.value:.2f}" != f"{cap.max_concurrency:.2f}":
                out.append(Finding(
                    "warn", "observed-contexts-differ",
                    f"observed {obs.value:.2f} full contexts ({obs.source}; {observed_with(recipe, obs, cap.engine)})"
                    f" vs predicted {cap.max_concurrency:.2f} ({predicted_with}): the safe default follows the lower",
                ))
    return out


def _percent(predicted: float, observed: float) -> str:
    """The prediction's difference from the observation, in percent of the observation."""
    return f"{100 * (predicted - observed) / observed:+.1f}%" if observed else "n/a"
