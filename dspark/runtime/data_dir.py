"""Where dspark keeps what it records (dspark.runtime.boot_store's records), and whether it holds any: what a plan
asks on every `validate`, without loading the store's record type."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DATA_DIR_ENV = "DSPARK_DATA_DIR"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """dspark's data directory: $DSPARK_DATA_DIR, else $XDG_DATA_HOME/dspark, else ~/.local/share/dspark.

    Each variable is read from `env` (a request's environment), else from this process's: a request that carries
    a partial environment still finds the user's store, not another one.
    """
    def var(name: str) -> str:
        value = env.get(name) if env is not None else None
        return (value if value is not None else os.environ.get(name, "")).strip()

    if own := var(DATA_DIR_ENV):
        return Path(own).expanduser()
    xdg = var("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "dspark"


def store_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the records are."""
    return data_dir(env) / "observations"


def has_records(env: Mapping[str, str] | None = None) -> bool:
    """Whether the store holds any record file (a fresh machine's has none): one directory read, no hashing."""
    try:
        with os.scandir(store_dir(env)) as entries:
            return any(e.name.endswith(".json") and not e.name.startswith(".") for e in entries)
    except OSError:
        return False
