"""The engine's interpreter, found and asked without importing the engine: which python runs it, which version.

find_engine_python: explicit > DSPARK_ENGINE_PYTHON > this interpreter > the engine command's shebang.
installed_version: the distribution's version in that interpreter's environment (metadata, no engine import).
Runner: how a child process is run (tests pass their own).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

from dspark.core.errors import EngineNotInstalledError, SettingsError

if TYPE_CHECKING:
    import subprocess

    from dspark.engines.spec import AnyEngineSpec, Engine


Runner = Callable[[Sequence[str], str, float], "subprocess.CompletedProcess[str]"]


def run_captured(argv: Sequence[str], stdin: str, timeout: float) -> subprocess.CompletedProcess[str]:
    import subprocess  # noqa: PLC0415 - a plan that starts nothing (validate) never loads it

    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def _check_interpreter(candidate: str, where: str) -> None:
    """A named interpreter must be a file this user may run: a directory (the virtualenv itself) or a file without
    the execute bit is a wrong setting, refused as one (exit 2), never an internal error when it is run."""
    path = Path(candidate) if Path(candidate).exists() else Path(shutil.which(candidate) or candidate)
    if path.is_dir():
        hint = next((f"did you mean {where} {path / sub}?" for sub in ("bin/python", "bin/python3")
                     if (path / sub).is_file()), f"give the python executable, e.g. {path / 'bin' / 'python'}")
        raise SettingsError(f"{where} {candidate!r} is a directory, not a python interpreter", hint=hint)
    if not os.access(path, os.X_OK):
        raise SettingsError(f"{where} {candidate!r} is not executable (no execute permission for this user)",
                            hint=f"give the python of the engine's virtualenv, or `chmod +x {path}` if it is one")


def find_engine_python(engine: Engine, explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The interpreter that runs the engine: explicit > DSPARK_ENGINE_PYTHON > this one > the console script's."""
    env = os.environ if env is None else env
    named = explicit if explicit is not None else env.get("DSPARK_ENGINE_PYTHON")
    if named is not None and not named.strip():
        where = "--engine-python" if explicit is not None else "DSPARK_ENGINE_PYTHON"
        # Set but empty is a broken script or compose file, not "look for it": said, as for every setting.
        raise SettingsError(f"{where}={named!r}: empty; expected the python of the engine's virtualenv",
                            hint=f"unset {where} to use this interpreter or the engine's command on PATH")
    candidate = named
    if candidate:
        where = "--engine-python" if explicit is not None else "DSPARK_ENGINE_PYTHON"
        parts = Path(candidate).parts
        if len(candidate) > 4000 or any(len(part.encode()) > 255 for part in parts) or "\x00" in candidate:
            raise SettingsError(f"{where}: {candidate[:60]!r}… ({len(candidate):,} characters) is not a path a file "
                                "can have (too long, or a NUL byte)",
                                hint="point it at the python of the engine's virtualenv")
        if not Path(candidate).exists() and shutil.which(candidate) is None:
            raise EngineNotInstalledError(
                f"engine interpreter {candidate!r} does not exist",
                hint="point --engine-python / DSPARK_ENGINE_PYTHON at the python of the engine's virtualenv",
            )
        _check_interpreter(candidate, where)
        return candidate
    if find_spec(engine.module) is not None:
        return sys.executable
    script = shutil.which(engine.name)
    if script is not None:
        first = Path(script).read_text(errors="replace").splitlines()[:1]
        if first and first[0].startswith("#!"):
            return first[0][2:].strip().split()[0]
    raise EngineNotInstalledError(
        f"{engine.name} is not installed in this interpreter and no `{engine.name}` command is on PATH",
        hint=f"install it (pip install 'dspark[{engine.name}]') or set DSPARK_ENGINE_PYTHON to its python",
    )


_VERSION_PROBE = (
    "import importlib.metadata as m, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def installed_version(spec: AnyEngineSpec, python: str, runner: Runner = run_captured) -> str | None:
    """The engine's distribution version in `python`'s environment, without importing the engine.

    This interpreter: importlib.metadata. A virtualenv's python: its site-packages' dist-info METADATA
    (no process started); otherwise importlib.metadata in that interpreter (~0.1 s). None: not installed.
    """
    if python == sys.executable:
        return _metadata_version(spec.distributions)
    found = _dist_info_version(Path(python), spec.distributions)
    if found is not None:
        return found
    import subprocess  # noqa: PLC0415 - see run_captured

    try:
        proc = runner([python, "-c", _VERSION_PROBE, *spec.distributions], "", 30.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    return lines[0] if proc.returncode == 0 and lines else None


def _metadata_version(distributions: Sequence[str]) -> str | None:
    from importlib import metadata  # noqa: PLC0415

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _dist_info_version(python: Path, distributions: Sequence[str]) -> str | None:
    """Version: from <venv>/lib/python*/site-packages/<dist>-*.dist-info/METADATA beside a venv's bin/python."""
    root = python.parent.parent
    if not (root / "pyvenv.cfg").is_file():
        return None
    for name in distributions:
        stem = name.replace("-", "_")
        for meta in sorted(root.glob(f"lib/python3*/site-packages/{stem}-*.dist-info/METADATA")):
            for line in meta.read_text(errors="replace").splitlines()[:20]:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
    return None
