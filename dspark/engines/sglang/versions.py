"""The SGLang releases dspark models (oldest first); the next one is a new entry plus the code its facts need."""

from __future__ import annotations

MODELLED_VERSIONS = ("0.5.23",)
