"""Findings and the verdict they add up to; the memory checks that refuse a launch. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Level = Literal["info", "warn", "fail"]
Verdict = Literal["ok", "warn", "fail"]

GIB = 1 << 30
# Unified memory (2x DGX Spark): an idle free-memory level between these hung both boxes (DESIGN.md §2).
DANGER_BAND_BYTES = (int(0.8 * GIB), int(4.2 * GIB))


@dataclass(frozen=True)
class Finding:
    """One observation about the plan: level, a stable code for scripts, and a sentence for people."""

    level: Level
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        """As printed under "findings"."""
        return {"level": self.level, "code": self.code, "message": self.message}


def verdict_of(findings: Iterable[Finding]) -> Verdict:
    """fail if any finding fails, warn if any warns, else ok."""
    levels = {f.level for f in findings}
    if "fail" in levels:
        return "fail"
    return "warn" if "warn" in levels else "ok"


def gib(n: int | float) -> str:
    """Bytes as GiB with two decimals."""
    return f"{n / GIB:.2f} GiB"


def idle_free_findings(free_bytes: int, need_bytes: int, *, unified: bool, where: str) -> list[Finding]:
    """Does the engine fit in free memory, and on unified memory, is the idle remainder outside the danger band?"""
    rest = free_bytes - need_bytes
    if rest < 0:
        return [Finding("fail", "does-not-fit",
                        f"{where}: the engine needs about {gib(need_bytes)} but only {gib(free_bytes)} is free "
                        f"({gib(-rest)} short); lower the KV pin, max_model_len or seats, or free memory")]
    low, high = DANGER_BAND_BYTES
    if unified and rest <= high:
        band = "below" if rest < low else "inside"
        return [Finding("fail", "unified-memory-danger-band",
                        f"{where}: predicted idle free memory {gib(rest)} is {band} the {gib(low)}–{gib(high)} band "
                        "that hung both DGX Sparks (unified memory: the host starves, not just the GPU); "
                        f"shrink the footprint by at least {gib(high - rest)}")]
    return [Finding("info", "fits", f"{where}: needs about {gib(need_bytes)} of {gib(free_bytes)} free; "
                    f"{gib(rest)} left idle")]
