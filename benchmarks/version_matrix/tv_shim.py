"""Stand-in modules for torchvision, installed into sys.modules before SGLang is imported.

SGLang releases up to 0.5.2x import torchvision at module level (image decoding and transforms for
multimodal models); the package index's torchvision is a CUDA build that breaks CPU torch. Sizing code
never touches it. transformers is imported first so that it records torchvision as absent.
"""

from __future__ import annotations

import sys
import types
from typing import Any

NAMES = ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
         "torchvision.transforms.v2", "torchvision.transforms.v2.functional", "torchvision.io",
         "torchvision.ops")


class _Any(type):
    """A class whose every attribute is another such class (InterpolationMode.BICUBIC and the like)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(name, (), {})


def install() -> None:
    """Put the stand-ins in sys.modules (idempotent)."""
    import transformers  # type: ignore[import-not-found]  # noqa: F401, PLC0415 - decides torchvision is absent before the stand-ins exist

    for name in NAMES:
        if name in sys.modules:
            continue
        mod = types.ModuleType(name)
        mod.__path__ = []

        def getattr_(attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Any(attr, (), {})

        mod.__getattr__ = getattr_  # type: ignore[method-assign]
        sys.modules[name] = mod
    _stub_image_processors()


def _stub_image_processors() -> None:
    """transformers 5.12 without torchvision makes AutoImageProcessor a placeholder whose every use raises;
    SGLang 0.5.18-0.5.20 register their multimodal processors with it at import time: let register pass."""
    from transformers.utils import import_utils  # type: ignore[import-not-found]  # noqa: PLC0415

    dummy = getattr(import_utils, "DummyObject", None)
    if dummy is None or getattr(dummy, "_matrix_patched", False):
        return
    original = dummy.__getattribute__

    def getattribute(cls: Any, key: str) -> Any:
        if key == "register":
            return lambda *a, **k: None
        return original(cls, key)

    dummy.__getattribute__ = getattribute
    dummy._matrix_patched = True
