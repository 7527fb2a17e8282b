"""Stand-in modules for torchvision, installed into sys.modules before SGLang is imported.

SGLang releases up to 0.5.2x import torchvision at module level (image decoding and transforms for
multimodal models); the package index's torchvision is a CUDA build that breaks CPU torch. The stand-ins are
the product witness's (dspark/engines/_witness_sglang.py), loaded by path: that file runs in an engine's
interpreter, where dspark is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

WITNESS = Path(__file__).resolve().parents[2] / "dspark" / "engines" / "_witness_sglang.py"


def install() -> None:
    """Put the stand-ins in sys.modules (idempotent)."""
    spec = importlib.util.spec_from_file_location("_dspark_witness_sglang", WITNESS)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {WITNESS}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.shim_torchvision()
