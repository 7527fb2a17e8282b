"""Stand-in modules for torchvision, installed into sys.modules before SGLang is imported.

SGLang releases up to 0.5.2x import torchvision at module level (image decoding and transforms for
multimodal models); the package index's torchvision is a CUDA build that breaks CPU torch. The stand-ins are
the product witness's (dspark_inside.sglang.witness): this runs in an engine's interpreter with dspark's
_inside_root on PYTHONPATH (dspark.engines.inside.INSIDE_ROOT), where dspark itself is not installed.
"""

from __future__ import annotations


def install() -> None:
    """Put the stand-ins in sys.modules (idempotent)."""
    from dspark_inside.sglang import witness  # noqa: PLC0415 - only in the engine's interpreter

    witness.shim_torchvision()
