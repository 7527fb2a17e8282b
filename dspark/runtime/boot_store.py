"""The store of what started engines measured: one JSON file per plan key, under the user's data directory.

`dspark start --watch` and `dspark sweep` write a record when an engine prints its KV pool (its own memory
figures beside it); `dspark validate` reads the record of its plan's key; `dspark observations` lists and clears
them. Where: `$DSPARK_DATA_DIR/observations/`, else `$XDG_DATA_HOME/dspark/observations/`, else
`~/.local/share/dspark/observations/`. Each file is written atomically (a temporary file in the same directory,
then os.replace), holds only figures, flag values dspark reads as memory settings and names (never the
environment or argv values), and is bounded in size; a file that cannot be read, is not JSON, or is not a record
of this format is a warning to its reader, never a crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Where the store is, and whether it holds anything: in their own module, which a plan reads without this one.
from dspark.runtime.data_dir import DATA_DIR_ENV, data_dir, has_records, store_dir

__all__ = ["DATA_DIR_ENV", "FORMAT", "MAX_FILE_BYTES", "MAX_TERMS", "MAX_TEXT", "VERSION", "BootRecord",
           "RecordError", "clear", "data_dir", "has_records", "is_key", "list_records", "load", "read_record",
           "record_from_json", "save", "store_dir"]

FORMAT = "dspark-boot-record"
VERSION = 1
MAX_FILE_BYTES = 64 << 10  # a record is some hundreds of bytes; anything past this is not one
MAX_TERMS = 64
MAX_TEXT = 512
_KEY = re.compile(r"^[0-9a-f]{16}$")


def is_key(text: str) -> bool:
    """A record key: 16 lower-case hex digits (the start of the plan's SHA-256)."""
    return bool(_KEY.match(text))


@dataclass(frozen=True)
class BootRecord:
    """One engine boot as the engine itself reported it, for one plan key.

    identity: what the key was made of (engine, release, model config hash, hardware, memory settings, host),
    shown by `dspark observations show`. pool_tokens / max_model_len / max_concurrency: the engine's KV-pool
    line. terms: its memory figures by term (GiB as printed). boots: how many boots this record has seen;
    previous_pool_tokens: the pool the record held before the last boot that changed it (drift).
    """

    key: str
    identity: Mapping[str, Any]
    engine: str
    engine_version: str
    pool_tokens: int
    max_model_len: int | None
    max_concurrency: float | None
    terms: Mapping[str, float] = field(default_factory=dict)
    recorded_at: str = ""
    boots: int = 1
    previous_pool_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The file's content."""
        return {"format": FORMAT, "version": VERSION, "key": self.key, "engine": self.engine,
                "engine_version": self.engine_version, "recorded_at": self.recorded_at, "boots": self.boots,
                "pool_tokens": self.pool_tokens, "max_model_len": self.max_model_len,
                "max_concurrency": self.max_concurrency, "previous_pool_tokens": self.previous_pool_tokens,
                "terms": dict(self.terms), "identity": dict(self.identity)}


class RecordError(ValueError):
    """A file in the store that is not a readable record of this format (the reader warns and goes on)."""


def _int(value: object, name: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RecordError(f"{name} is not a non-negative whole number")
    return value


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value))


def _plain(value: object, depth: int = 0) -> bool:
    """JSON of scalars, short strings, and lists or objects of them, a few levels deep (what identity holds)."""
    if isinstance(value, str):
        return len(value) <= MAX_TEXT
    if _scalar(value):
        return True
    if depth >= 3:
        return False
    if isinstance(value, list):
        return len(value) <= MAX_TERMS and all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) <= MAX_TERMS and all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def record_from_json(data: object) -> BootRecord:
    """A record from a file's JSON value; RecordError for anything else (another format, version, shape)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordError("not a dspark boot record")
    if data.get("version") != VERSION:
        raise RecordError(f"record format version {data.get('version')!r}; this dspark reads version {VERSION}")
    key = data.get("key")
    if not isinstance(key, str) or not is_key(key):
        raise RecordError("its key is not 16 hex digits")
    terms = data.get("terms", {})
    if (not isinstance(terms, dict) or len(terms) > MAX_TERMS
            or not all(isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
                       and math.isfinite(v) for k, v in terms.items())):
        raise RecordError("its terms are not names and numbers")
    identity = data.get("identity", {})
    if not isinstance(identity, dict) or not _plain(identity):
        raise RecordError("its identity is not plain values")
    concurrency = data.get("max_concurrency")
    if concurrency is not None and (not isinstance(concurrency, int | float) or isinstance(concurrency, bool)):
        raise RecordError("max_concurrency is not a number")
    texts = [data.get(k) for k in ("engine", "engine_version", "recorded_at")]
    if not all(isinstance(t, str) and len(t) <= MAX_TEXT for t in texts):
        raise RecordError("engine, engine_version or recorded_at is not text")
    return BootRecord(
        key=key, identity=identity, engine=str(texts[0]), engine_version=str(texts[1]),
        pool_tokens=_int(data.get("pool_tokens"), "pool_tokens") or 0,
        max_model_len=_int(data.get("max_model_len"), "max_model_len", optional=True),
        max_concurrency=float(concurrency) if concurrency is not None else None,
        terms={k: float(v) for k, v in terms.items()}, recorded_at=str(texts[2]),
        boots=_int(data.get("boots", 1), "boots") or 1,
        previous_pool_tokens=_int(data.get("previous_pool_tokens"), "previous_pool_tokens", optional=True),
    )


def read_record(path: Path) -> BootRecord:
    """One file of the store; RecordError (with why) when it is not a record this dspark reads."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise RecordError(f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise RecordError(f"larger than {MAX_FILE_BYTES:,} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RecordError(f"not JSON ({type(exc).__name__})") from None
    record = record_from_json(data)
    if path.stem != record.key:
        raise RecordError(f"holds key {record.key}, not its file name's")
    return record


def load(key: str, env: Mapping[str, str] | None = None) -> tuple[BootRecord | None, str | None]:
    """(the record of `key`, None) or (None, a warning naming the unreadable file); (None, None) when absent."""
    path = store_dir(env) / f"{key}.json"
    if not path.exists():
        return None, None
    try:
        return read_record(path), None
    except RecordError as exc:
        return None, f"the boot record {path} is ignored: {exc}"


def save(record: BootRecord, env: Mapping[str, str] | None = None) -> Path:
    """Write the record atomically (temporary file, fsync, os.replace), readable by the user only; its path."""
    if len(record.terms) > MAX_TERMS:
        record = dataclasses.replace(record, terms=dict(list(record.terms.items())[:MAX_TERMS]))
    text = json.dumps(record.to_json(), sort_keys=True, indent=1) + "\n"
    if len(text.encode()) > MAX_FILE_BYTES:
        raise RecordError(f"a record of {len(text):,} bytes is past the {MAX_FILE_BYTES:,}-byte bound")
    record_from_json(json.loads(text))  # never write what the reader would refuse
    folder = store_dir(env)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{record.key}.json"
    import tempfile  # noqa: PLC0415 - only a write needs it; validate only reads

    fd, name = tempfile.mkstemp(prefix=f".{record.key}.", suffix=".tmp", dir=folder)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)  # os.replace: readers see the old record or the new one, never half of one
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def list_records(env: Mapping[str, str] | None = None) -> tuple[list[BootRecord], list[str]]:
    """Every readable record (newest first) and a warning for each file that is not one."""
    folder = store_dir(env)
    records: list[BootRecord] = []
    warnings: list[str] = []
    if not folder.is_dir():
        return records, warnings
    for path in sorted(folder.glob("*.json")):
        try:
            records.append(read_record(path))
        except RecordError as exc:
            warnings.append(f"{path} is ignored: {exc}")
    records.sort(key=lambda r: r.recorded_at, reverse=True)
    return records, warnings


def clear(key: str | None = None, env: Mapping[str, str] | None = None) -> int:
    """Remove the record of `key` (or every record, and leftover temporary files, when None); how many went."""
    folder = store_dir(env)
    if not folder.is_dir():
        return 0
    paths = [folder / f"{key}.json"] if key is not None else [*folder.glob("*.json"), *folder.glob(".*.tmp")]
    removed = 0
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += path.suffix == ".json"
    return removed
