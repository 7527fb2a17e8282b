"""A launch plan is a value (argv + environment); executing it is one tiny function with a seam."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from dspark.core.redact import REDACTED, is_secret_name, printable, redact_argv, redact_env

# Redaction lives in dspark.core.redact (pure); re-exported for callers that only need a plan.
__all__ = ["REDACTED", "ExecFn", "LaunchPlan", "exec_plan", "is_secret_name", "redact_argv", "redact_env"]


@dataclass(frozen=True)
class LaunchPlan:
    """What to execute: argv[0] is resolved on PATH; env_overlay is added to the inherited environment."""

    engine: str
    argv: tuple[str, ...]
    env_overlay: dict[str, str] = field(default_factory=dict)
    node_rank: int = 0
    description: str = ""

    def full_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment the engine will see: the base (default os.environ) plus the overlay."""
        env = dict(os.environ if base is None else base)
        env.update(self.env_overlay)
        return env

    def shell_line(self) -> str:
        """A copy-pasteable command line with secrets redacted and control characters shown as escapes."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in redact_env(self.env_overlay).items())
        cmd = shlex.join(redact_argv(self.argv))
        return printable(f"{env} {cmd}" if env else cmd)

    def to_json(self) -> dict[str, object]:
        """The plan as printed by --json and --dry-run: secrets redacted."""
        return {
            "engine": self.engine,
            "argv": redact_argv(self.argv),
            "env": redact_env(self.env_overlay),
            "node_rank": self.node_rank,
        }


ExecFn = Callable[[str, list[str], dict[str, str]], object]


def exec_plan(plan: LaunchPlan, execvpe: ExecFn = os.execvpe) -> NoReturn:
    """Replace this process with the engine (signals and PID 1 then belong to the engine)."""
    sys.stdout.flush()
    sys.stderr.flush()
    execvpe(plan.argv[0], list(plan.argv), plan.full_env())
    # Only reached when a test injects an execvpe that returns.
    raise SystemExit(0)
