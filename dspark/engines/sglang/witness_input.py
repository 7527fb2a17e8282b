"""What dspark hands SGLang's own sizing for the witness (dspark_inside.sglang.witness): pure."""

from __future__ import annotations

from collections.abc import Sequence

from dspark.engines.argv import strip_options
from dspark.engines.sglang.options import parse_sglang_flags
from dspark.engines.sglang.sizing_types import SglangCapacity


class WitnessNotPossibleError(ValueError):
    """SGLang's sizing needs a model directory and free-memory readings; without them there is nothing to run."""


def sglang_witness_request(cap: SglangCapacity, argv: Sequence[str], *, user_pinned: bool) -> dict[str, object]:
    """The launch flags (SGLang's parser reads them) and the memory readings dspark sized with.

    The pool pin dspark adds itself (--max-total-tokens = its own figure) is left out, so that SGLang profiles
    the pool rather than echo the pin; a pin the user gave stays.
    """
    if cap.free_before_load_bytes is None or cap.free_after_load_bytes is None:
        raise WitnessNotPossibleError("no free-memory readings to size with")
    if parse_sglang_flags(argv).model_path is None:
        raise WitnessNotPossibleError("SGLang's sizing reads the model directory's config.json")
    flags = list(argv if user_pinned else strip_options(argv, {"--max-total-tokens": 1}))
    return {
        "engine": "sglang",
        "argv": flags,
        "gpu_mib": int(cap.gpu_capacity_mib) if cap.gpu_capacity_mib is not None else 0,
        "integrated": cap.gpu_capacity_mib is None,  # nvidia-smi's [N/A]: unified memory
        "free_before": cap.free_before_load_bytes,
        "free_after": cap.free_after_load_bytes,
        "capability": list(cap.compute_capability or (9, 0)),
        "context_len": cap.context_len,
    }
