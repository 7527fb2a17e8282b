"""Parse many argvs with an engine's own argument parser, in one engine import (run by the engine's python).

Usage: <engine python> parse_many.py vllm|sglang < {"argvs": [[...], ...], "ints": ["1k", ...]}
Prints `DSPARK_PARSED {json}` once: {"defaults": {dest: default}, "argvs": [answer, ...], "ints": [answer, ...]}.
An argv's answer is {"ok": true, "values": {dest: value}} (every dest the parser set, dataclasses as dicts,
enums by name) or {"ok": false, "error": the parser's last message line}; an int's is {"ok": true, "value": n}
or {"ok": false, "error": ...}, from the engine's own human_readable_int. The parsers are the ones
dspark_inside.<engine>.argv_check builds (dspark_inside on PYTHONPATH: dspark.engines.inside.inside_env), so these
are the parsers `dspark start` checks an argv with.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import importlib
import io
import json
import sys
from collections.abc import Callable
from typing import Any

MARKER = "DSPARK_PARSED "


def _plain(value: Any) -> Any:
    """JSON-ready: dataclasses as dicts, enums by name, anything else JSON cannot hold as its repr."""
    if isinstance(value, enum.Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(sys.stderr):
            namespace = parser.parse_args(argv)
    except SystemExit:
        lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
        return {"ok": False, "error": lines[-1] if lines else "exit without a message"}
    except Exception as exc:  # the parser's own pre-pass raises ValueError / AssertionError on some argvs
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "values": {k: _plain(v) for k, v in vars(namespace).items()}}


def _int(reader: Callable[[str], int], text: str) -> dict[str, Any]:
    try:
        return {"ok": True, "value": reader(text)}
    except (ValueError, argparse.ArgumentTypeError) as exc:
        return {"ok": False, "error": str(exc)}


def _human_readable_int(engine: str) -> Callable[[str], int]:
    if engine == "vllm":
        from vllm.utils.argparse_utils import human_readable_int  # noqa: PLC0415 - the engine's interpreter only
    else:
        from sglang.srt.utils.common import human_readable_int  # noqa: PLC0415
    reader: Callable[[str], int] = human_readable_int
    return reader


def main() -> int:
    engine = sys.argv[1]
    check = importlib.import_module(f"dspark_inside.{engine}.argv_check")
    request = json.loads(sys.stdin.read())
    with contextlib.redirect_stdout(sys.stderr):
        parser, _version = check.parser()
        reader = _human_readable_int(engine)
    answer = {
        "defaults": {a.dest: _plain(a.default) for a in parser._actions},
        "argvs": [_parse(parser, list(argv)) for argv in request.get("argvs", [])],
        "ints": [_int(reader, text) for text in request.get("ints", [])],
    }
    sys.stdout.write(MARKER + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
