"""Which engine version the figures model: --engine-version > DSPARK_ENGINE_VERSION > installed > newest modelled.

Pure: the installed version comes in as a value (detected at the edge, dspark.engines.interpreter.installed_version).
An unmodelled version is computed with the nearest modelled one and said so, never silently substituted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dspark.core.errors import InputError
from dspark.engines.release_matrix import matrix_entry

ENV_VAR = "DSPARK_ENGINE_VERSION"
_VERSION = r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[A-Za-z][0-9A-Za-z.+-]*|[+-][0-9A-Za-z.+-]*)?\s*"


@dataclass(frozen=True)
class EngineVersion:
    """The version asked for, where it came from, what is installed, and the modelled version the figures use."""

    engine: str
    requested: str
    source: Literal["installed", "flag", "env", "default"]
    installed: str | None
    modelled: str

    @property
    def exact(self) -> bool:
        """True when the figures model the requested version itself."""
        return self.requested == self.modelled

    def to_json(self) -> dict[str, object]:
        """{modelled, installed, requested, source} as --json prints it under engine_version."""
        return {"modelled": self.modelled, "installed": self.installed, "requested": self.requested,
                "source": self.source}

    def label(self) -> str:
        """`0.33.0`, or `0.34.0 (computed as 0.33.0: not modelled)` for a substitution."""
        if self.exact:
            return self.modelled
        return f"{self.requested} (computed as {self.modelled}: not modelled)"


def version_key(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string (local parts like +cpu and suffixes ignored); None if not one."""
    m = re.fullmatch(_VERSION, text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def normalize(text: str) -> str | None:
    """`0.32.0+cpu` -> `0.32.0`; None when the text is not a version."""
    key = version_key(text)
    return None if key is None else ".".join(map(str, key))


def nearest_modelled(requested: str, modelled: Sequence[str]) -> str:
    """The newest modelled version not above `requested`, else the oldest (modelled is oldest first)."""
    key = version_key(requested)
    below = [v for v in modelled if key is not None and (version_key(v) or (0, 0, 0)) <= key]
    return below[-1] if below else modelled[0]


def resolve_engine_version(
    engine: str,
    modelled: Sequence[str],
    *,
    flag: str | None,
    env: Mapping[str, str],
    installed: str | None,
) -> EngineVersion:
    """Apply the precedence; a value that is not X.Y[.Z] is an input error (exit 2) listing the modelled ones."""
    choices: list[tuple[Literal["flag", "env"], str | None]] = [("flag", flag), ("env", env.get(ENV_VAR))]
    for source, raw in choices:
        if raw is None:
            continue
        where = "--engine-version" if source == "flag" else ENV_VAR
        if not raw.strip():  # set but empty: a broken script or compose file, as for every setting
            raise InputError(f"{where}={raw!r}: empty; expected a version X.Y.Z",
                             hint=f"unset {where} to plan for the installed engine's version" if source == "env"
                             else "give a version, or leave the flag out")
        version = normalize(raw)
        if version is None:
            raise InputError(
                f"{where} {raw!r} is not a version (X.Y.Z)",
                hint=f"{engine} versions modelled: {', '.join(modelled)}",
            )
        return EngineVersion(engine, version, source, installed, _model_for(engine, version, modelled))
    if installed is not None:
        return EngineVersion(engine, installed, "installed", installed, _model_for(engine, installed, modelled))
    newest = modelled[-1]
    return EngineVersion(engine, newest, "default", None, newest)


def _model_for(engine: str, version: str, modelled: Sequence[str]) -> str:
    """The version itself when modelled; else the modelled release the version matrix found it equal to or
    compared it with (docs/version-matrix.md); else the nearest modelled."""
    if version in modelled:
        return version
    entry = matrix_entry(engine, version)
    if entry is not None and entry.compared_with in modelled:
        return entry.compared_with
    return nearest_modelled(version, modelled)
