"""The model a plan is for: its layers (config.json or a recipe's inline config), drafter and weights per GPU.

The edge between validate and the model's files: reads config.json and safetensors headers through
dspark.model.modeldir, and turns them into the pure values the capacity arithmetic takes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dspark.config.settings import ResolvedSettings
from dspark.core.errors import InputError
from dspark.model.architecture import Drafter, ModelArchitecture, parse_config, parse_drafter
from dspark.model.weights import WeightBytes, drafter_weight_bytes, weight_bytes, weights_from_checkpoint_total

if TYPE_CHECKING:  # the recipe models (pydantic) load only when a recipe is used
    from dspark.config.recipes import Recipe
    from dspark.engines.spec import AnyEngineSpec


def model_architecture(settings: ResolvedSettings, recipe: Recipe | None) -> tuple[ModelArchitecture, Any]:
    """The model's layers (and safetensors headers if any): from its directory, else the recipe's inline config."""
    from dspark.model.modeldir import load_config, read_safetensors_headers, resolve_model  # noqa: PLC0415

    ref = settings.model.value
    if ref is None:
        raise InputError("no model to plan for", hint="pass --model DIR (a directory holding config.json) or a recipe")
    on_disk: dict[str, Any] | None = None
    headers = None
    source = ref
    try:
        location = resolve_model(ref)
    except InputError:
        if recipe is None or recipe.model.config is None:
            raise
        location = None
    if location is not None:
        on_disk = load_config(location)
        headers = read_safetensors_headers(location)
        source = str(location.config_path)
    config = recipe.model.resolve_config(on_disk) if recipe is not None else on_disk
    if config is None:  # pragma: no cover - resolve_model raised above
        raise InputError(f"no config.json for model {ref!r}")
    if location is None and recipe is not None:
        source = f"{recipe.source}:model.config"
    return parse_config(config, source), headers


def drafter_of(
    engine: AnyEngineSpec, settings: ResolvedSettings, recipe: Recipe | None, options: Any, arch: ModelArchitecture
) -> Drafter | None:
    """The speculative drafter: from the recipe, or the pasted engine flags (method + model)."""
    method, draft_ref = engine.drafter_flags(options)
    draft_config = None
    if recipe is not None and recipe.speculative is not None:
        method = method or recipe.speculative.method
        draft_ref = draft_ref or recipe.speculative.draft_model
        draft_config = recipe.speculative.draft_config
    if not method:
        return None
    method = str(method).lower()
    if method in ("nextn", "qwen3_next_mtp", "deepseek_mtp", "qwen3_5_mtp"):
        method = "mtp"
    if method == "mtp":
        return parse_drafter(None, "mtp", target=arch)
    if draft_ref:
        from dspark.model.modeldir import load_config, resolve_model  # noqa: PLC0415

        try:
            draft_config = load_config(resolve_model(draft_ref))
        except InputError:
            if draft_config is None:
                raise
    if draft_config is None:
        return None  # e.g. ngram: no layers of its own
    return parse_drafter(draft_config, method, draft_ref or "<recipe speculative.draft_config>", target=arch)


def weights_of(arch: ModelArchitecture, headers: Any, drafter: Drafter | None, settings: ResolvedSettings,
             recipe: Recipe | None, *, vision: bool = True) -> WeightBytes | None:
    """Weights per GPU: the model's (with its MTP layers when MTP drafts, its vision tower unless the engine
    leaves it out) plus a separate drafter's."""
    tp, pp = settings.tensor_parallel_size.value, settings.pipeline_parallel_size.value
    mtp = drafter is not None and drafter.method == "mtp"
    weights = weight_bytes(arch, headers, tp=tp, pp=pp, include_mtp=mtp, include_vision=vision)
    if weights is not None and not weights.exact and recipe is not None and recipe.model.weights_bytes is not None:
        # The recipe's stored total (the checkpoint index) outranks the estimate; the estimate only splits it.
        weights = weights_from_checkpoint_total(arch, recipe.model.weights_bytes, tp=tp, pp=pp, include_mtp=mtp,
                                                source=f"{recipe.source}: model.weights_bytes") or weights
    if weights is None and recipe is not None and recipe.model.weights_bytes is not None:
        total = recipe.model.weights_bytes
        weights = WeightBytes(total_bytes=total, per_gpu_bytes=total // (tp * pp), exact=False,
                              source=f"{recipe.source}: model.weights_bytes", notes=(), tp=tp, pp=pp)
    if weights is None or drafter is None or drafter.method == "mtp":
        return weights
    extra = drafter_weight_bytes(drafter, tp=tp)
    if extra is None:
        return weights
    return replace(weights, total_bytes=weights.total_bytes + extra.total_bytes,
                   per_gpu_bytes=weights.per_gpu_bytes + extra.per_gpu_bytes, exact=weights.exact and extra.exact,
                   notes=(*weights.notes, f"plus the {drafter.method} drafter: {extra.per_gpu_bytes:,} B per GPU"))


def draft_ref(engine: AnyEngineSpec, options: Any, recipe: Recipe | None) -> str | None:
    """The drafter's model reference: the pasted engine flags' first, else the recipe's."""
    ref = engine.drafter_flags(options)[1]
    if ref is None and recipe is not None and recipe.speculative is not None:
        ref = recipe.speculative.draft_model
    return ref if isinstance(ref, str) else None
