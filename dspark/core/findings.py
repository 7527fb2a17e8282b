"""A finding (level, code, sentence) and the verdict findings add up to: the value every layer reports in. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Level = Literal["info", "warn", "fail"]
Verdict = Literal["ok", "warn", "fail"]


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
    """Bytes as GiB with two decimals, as findings state memory."""
    return f"{n / (1 << 30):.2f} GiB"
