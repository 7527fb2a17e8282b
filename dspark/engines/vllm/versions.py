"""The vLLM releases dspark models, and what changes between them, as named facts (no arithmetic here).

Each field says where a release computes differently from the one before; the capacity code asks the
fact, never the version string, so the next release is one more entry here plus the code its new facts need.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VllmRelease:
    """What one vLLM release does that KV sizing depends on."""

    version: str


RELEASES: dict[str, VllmRelease] = {
    "0.32.0": VllmRelease("0.32.0"),
}
MODELLED_VERSIONS = tuple(RELEASES)  # oldest first
