"""A snapshot as JSON: `dspark probe --json > peer.json` on one node, `--hardware peer.json` on another."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dspark.core.errors import InputError
from dspark.core.files import SNAPSHOT
from dspark.core.jsonfile import read_json_file
from dspark.hardware import GpuInfo, GpuProcess, HardwareSnapshot

FORMAT = "dspark.hardware-snapshot/1"  # written into every file; a file without it is still read

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError


@functools.cache
def _adapter() -> TypeAdapter[HardwareSnapshot]:
    from pydantic import TypeAdapter  # noqa: PLC0415
    # Built on first use: validating a saved probe is rare, and building it costs start-up time.
    return TypeAdapter(HardwareSnapshot)
# Keys each level accepts: a typo in a hand-edited file must not be silently ignored.
_KEYS: dict[str, frozenset[str]] = {
    "snapshot": frozenset(f.name for f in dataclasses.fields(HardwareSnapshot)) | {"format"},
    "gpu": frozenset(f.name for f in dataclasses.fields(GpuInfo)),
    "process": frozenset(f.name for f in dataclasses.fields(GpuProcess)),
}


def snapshot_to_dict(snapshot: HardwareSnapshot) -> dict[str, Any]:
    """The snapshot as a JSON-ready dict: the dataclass fields, tuples as lists, plus "format"."""
    data: dict[str, Any] = {"format": FORMAT}
    data.update(_jsonable(dataclasses.asdict(snapshot)))
    return data


def _jsonable(value: Any) -> Any:
    # asdict keeps tuples; JSON (and the saved-file format) has lists. No pydantic here: it is start-up time.
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def snapshot_from_dict(data: object) -> HardwareSnapshot:
    """The snapshot a dict describes; TypeError/ValueError naming the first problems otherwise."""
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise ValueError(f"format is {fmt!r}, this dspark reads {FORMAT!r}")
    _check_keys(data)
    payload = {k: v for k, v in data.items() if k != "format"}
    from pydantic import ValidationError  # noqa: PLC0415 - pydantic loads only when a probe file is read

    try:
        snapshot = _adapter().validate_python(payload)
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None
    _check_figures(snapshot)
    return snapshot


def dumps_snapshot(snapshot: HardwareSnapshot) -> str:
    """The snapshot as one JSON object (indented, one trailing newline not included)."""
    return json.dumps(snapshot_to_dict(snapshot), indent=2)


def save_snapshot(snapshot: HardwareSnapshot, path: Path) -> None:
    """Write the snapshot to `path` as JSON."""
    path.write_text(dumps_snapshot(snapshot) + "\n")


def load_snapshot(path: Path) -> HardwareSnapshot:
    """A saved probe as a snapshot of source "file"; InputError naming the file and the problem."""
    hint = "make it with `dspark probe --json > FILE` on the machine it describes"
    data = read_json_file(path, SNAPSHOT, what="hardware file", hint=hint)
    try:
        saved = snapshot_from_dict(data)
    except (TypeError, ValueError) as exc:
        problem = f"hardware file {path} is not a dspark hardware snapshot: {exc}"
        raise InputError(problem, hint=hint) from None
    return dataclasses.replace(saved, source="file", description=f"saved probe {path} ({saved.description})")


def _check_keys(data: dict[str, Any]) -> None:
    """Reject unknown keys at each level, naming where they are."""
    _unknown("", data, _KEYS["snapshot"])
    gpus = data.get("gpus")
    for i, gpu in enumerate(gpus if isinstance(gpus, list) else []):
        if isinstance(gpu, dict):
            _unknown(f"gpus.{i}.", gpu, _KEYS["gpu"])
            procs = gpu.get("processes")
            for j, proc in enumerate(procs if isinstance(procs, list) else []):
                if isinstance(proc, dict):
                    _unknown(f"gpus.{i}.processes.{j}.", proc, _KEYS["process"])


def _unknown(where: str, data: dict[str, Any], allowed: frozenset[str]) -> None:
    """ValueError when `data` has keys outside `allowed`."""
    extra = sorted(set(data) - allowed)
    if extra:
        raise ValueError(f"unknown key {', '.join(where + k for k in extra)}")


def _describe(exc: ValidationError) -> str:
    """Pydantic's errors as "gpus.0.total_bytes: Input should be a valid integer" lines (first three)."""
    errors = exc.errors()
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in errors[:3]]
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "; ".join(parts) + more


# Bounds on a saved probe's figures: far above any machine (an EiB of memory, 1,024 nodes as --nnodes allows).
MAX_FIGURE = 1 << 60
MAX_NODES = 1024
MAX_GPUS = 64


def _figure(value: float) -> str:
    """A figure for a message: whole, or its size in bits when it is far too long to print (10**400)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a {value.bit_length():,}-bit number"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _numbers(snapshot: HardwareSnapshot) -> list[tuple[str, float]]:
    """Every number in the snapshot, named by its key (gpus.0.total_bytes, gpus.0.processes.1.used_bytes)."""
    found: list[tuple[str, float]] = []

    def walk(prefix: str, value: object) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(f"{prefix}{f.name}", getattr(value, f.name))
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                walk(f"{prefix}.{i}" if not dataclasses.is_dataclass(item) else f"{prefix}.{i}.", item)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            found.append((prefix, value))

    walk("", snapshot)
    return found


def _check_figures(snapshot: HardwareSnapshot) -> None:
    """Figures a planner could not use: no GPUs, negative bytes, free above total."""
    if not snapshot.gpus:
        raise ValueError("gpus is empty")
    if not 1 <= snapshot.nodes <= MAX_NODES:
        raise ValueError(f"nodes is {_figure(snapshot.nodes)}, must be from 1 to {MAX_NODES}")
    if len(snapshot.gpus) > MAX_GPUS:
        raise ValueError(f"gpus lists {len(snapshot.gpus)} GPUs, more than a node holds (at most {MAX_GPUS})")
    for where, value in _numbers(snapshot):
        if abs(value) > MAX_FIGURE:
            raise ValueError(f"{where} is {_figure(value)}, beyond any real figure (at most {MAX_FIGURE:,})")
    for i, gpu in enumerate(snapshot.gpus):
        for name in ("total_bytes", "free_bytes", "used_bytes", "reserved_bytes"):
            if getattr(gpu, name) < 0:
                raise ValueError(f"gpus.{i}.{name} is negative")
        if gpu.total_bytes == 0:
            raise ValueError(f"gpus.{i}.total_bytes is 0")
        if gpu.free_bytes > gpu.total_bytes:
            raise ValueError(f"gpus.{i}.free_bytes {gpu.free_bytes} exceeds total_bytes {gpu.total_bytes}")
