"""`dspark observations list | show KEY | clear [KEY]`: the boots `start --watch` and `sweep` recorded.

Each record is one plan's engine boot as the engine printed it (its KV pool and memory figures), under the
plan's key (dspark.planning.boot_records); `validate` of the same plan uses it. Unreadable files are warnings on
stderr (and under "warnings" with --json), never a failure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from dspark.core.errors import InputError
from dspark.runtime import boot_store
from dspark.runtime.boot_store import BootRecord


def _warn(warnings: list[str]) -> None:
    for line in warnings:
        print(f"dspark: warning: {line}", file=sys.stderr)


def _row(record: BootRecord) -> tuple[str, ...]:
    ident = record.identity
    model = ident.get("model", {}) if isinstance(ident.get("model"), dict) else {}
    device = ident.get("device", {}) if isinstance(ident.get("device"), dict) else {}
    settings = ident.get("settings", {}) if isinstance(ident.get("settings"), dict) else {}
    where = str(device.get("name") or device.get("platform") or "?")
    return (record.key, f"{record.engine} {record.engine_version}", str(model.get("architecture", "?")), where,
            str(settings.get("max_num_seqs", "?")), str(record.max_model_len or settings.get("max_model_len", "?")),
            f"{record.pool_tokens:,}", str(record.boots), record.recorded_at)


def observations_list(*, as_json: bool = False, out: TextIO | None = None,
                      env: Mapping[str, str] | None = None) -> int:
    """Every recorded boot (newest first): key, engine, model, device, seats, window, pool, boots, when."""
    stream = out if out is not None else sys.stdout
    records, warnings = boot_store.list_records(env)
    folder = boot_store.store_dir(env)
    if as_json:
        stream.write(json.dumps({"store": str(folder), "records": [r.to_json() for r in records],
                                 "warnings": warnings}, indent=2) + "\n")
        _warn(warnings)
        return 0
    _warn(warnings)
    if not records:
        stream.write(f"no recorded boots in {folder} (`dspark start --watch` and `dspark sweep` record them)\n")
        return 0
    rows = [("KEY", "ENGINE", "MODEL", "DEVICE", "SEATS", "WINDOW", "POOL", "BOOTS", "RECORDED"),
            *(_row(r) for r in records)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        stream.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")
    stream.write(f"\n{len(records)} record(s) in {folder}; `dspark observations show KEY` prints one\n")
    return 0


def _checked(key: str) -> str:
    if not boot_store.is_key(key):
        raise InputError(f"observation key {key!r}: not a record key (16 hex digits)",
                         hint="`dspark observations list` shows the keys")
    return key


def observations_show(key: str, *, as_json: bool = False, out: TextIO | None = None,
                      env: Mapping[str, str] | None = None) -> int:
    """One record: what its key was made of, the engine's pool line and its memory terms."""
    stream = out if out is not None else sys.stdout
    record, problem = boot_store.load(_checked(key), env)
    if problem is not None:
        raise InputError(problem, hint=f"`dspark observations clear {key}` removes it")
    if record is None:
        raise InputError(f"no recorded boot {key} in {boot_store.store_dir(env)}",
                         hint="`dspark observations list` shows the keys")
    if as_json:
        stream.write(json.dumps(record.to_json(), indent=2) + "\n")
        return 0
    lines = [
        f"record {record.key}: {record.engine} {record.engine_version}, {record.boots} boot(s), "
        f"last {record.recorded_at}",
        f"  KV pool: {record.pool_tokens:,} tokens"
        + (f" ({record.max_concurrency:.2f}x for {record.max_model_len:,} tokens per request)"
           if record.max_concurrency is not None and record.max_model_len else "")
        + (f"; before the last drift {record.previous_pool_tokens:,}" if record.previous_pool_tokens else ""),
    ]
    lines += [f"  {name}: {value:g}" for name, value in record.terms.items()]
    lines.append("  keyed by:")
    lines += [f"    {name}: {_text(value)}" for name, value in record.identity.items()]
    stream.write("\n".join(lines) + "\n")
    return 0


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)


def observations_clear(key: str | None = None, *, as_json: bool = False, out: TextIO | None = None,
                       env: Mapping[str, str] | None = None) -> int:
    """Remove one record (KEY) or all of them; says how many went."""
    stream = out if out is not None else sys.stdout
    removed = boot_store.clear(_checked(key) if key is not None else None, env)
    folder = boot_store.store_dir(env)
    if as_json:
        stream.write(json.dumps({"store": str(folder), "removed": removed}) + "\n")
    elif key is not None and not removed:
        stream.write(f"no recorded boot {key} in {folder}\n")
    else:
        stream.write(f"removed {removed} recorded boot(s) from {folder}\n")
    return 0
