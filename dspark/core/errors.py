"""The error types the core raises; the CLI maps each to one exit code (docs/exit-codes.md)."""

from __future__ import annotations

import re
from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes users' scripts rely on."""

    OK = 0
    REFUSED = 1  # does not fit, or refused (danger band, failing verdict)
    USAGE = 2  # bad input: flags, files, environment values
    INTERNAL = 3  # a bug in dspark or an engine that behaved unexpectedly
    INTERRUPTED = 130  # Ctrl-C (SIGINT), as shells report 128 + 2


class DsparkError(Exception):
    """Base of every error dspark expects; carries its exit code and an optional hint."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if self.hint is None else f"{self.message}\n  hint: {self.hint}"

    @property
    def code(self) -> str:
        """A stable name for scripts: the class name in snake case (settings_error, refused_error, ...)."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()


class InputError(DsparkError):
    """Bad input from the user: a file, key, value or flag; names what and how to fix it."""

    exit_code = ExitCode.USAGE


class ArchitectureError(InputError):
    """A model config dspark cannot turn into layers (unknown model_type, missing field)."""


class RecipeError(InputError):
    """A recipe file that does not parse or validate."""


class SettingsError(InputError):
    """A malformed setting from the command line or the environment."""


class EngineArgError(InputError):
    """An argv the installed engine's own parser rejects."""


class HardwareError(DsparkError):
    """The hardware could not be read (NVML absent or failing) and no fallback applies."""

    exit_code = ExitCode.USAGE


class RefusedError(DsparkError):
    """A launch dspark refuses: it does not fit, or would wedge a unified-memory host."""

    exit_code = ExitCode.REFUSED


class MissingExtraError(InputError):
    """A command needs an optional dependency (one of dspark's extras, e.g. [plot], [hub]) that is not installed."""


class EngineNotInstalledError(InputError):
    """The engine (or its interpreter) needed for a check or launch cannot be found."""
