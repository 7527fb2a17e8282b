"""The engine-neutral halves of the argv check and the witness: each engine's tools hand them their parser or
planner (<engine>/argv_check.py, <engine>/witness.py)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from collections.abc import Callable
from typing import Any

from dspark_inside.shapes import ArgvCheckAnswer, ArgvCheckRequest, WitnessAnswer, WitnessRequest

Parser = Callable[[], "tuple[argparse.ArgumentParser, str]"]  # the engine's serve parser and its version
Planner = Callable[[Any], WitnessAnswer]  # the engine planner's figures for one witness request


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def argv_check(engine: str, parser_of: Parser, request: ArgvCheckRequest,
               witness: Planner | None = None) -> ArgvCheckAnswer:
    """The engine parser's verdict on request["argv"]; with request["witness"], the planner's answer beside it."""
    captured = io.StringIO()
    result: ArgvCheckAnswer = {"ok": False, "engine": engine}
    try:
        parser, version = parser_of()
        result["version"] = version
        defaults = {a.dest: a.default for a in parser._actions}
        with contextlib.redirect_stderr(captured):
            ns = parser.parse_args(request["argv"])
        result["ok"] = True
        result["non_default"] = {
            k: _jsonable(v) for k, v in vars(ns).items() if k not in defaults or defaults[k] != v
        }
        result["num_options"] = sum(1 for a in parser._actions if a.option_strings)
    except SystemExit:
        lines = [ln for ln in captured.getvalue().splitlines() if ln.strip()]
        result["error"] = lines[-1] if lines else "the engine's parser exited without a message"
    except ImportError as exc:
        result["error"] = f"cannot import the engine here: {exc}"
        result["import_error"] = True
    asked = request.get("witness")
    if asked is not None and witness is not None and not result.get("import_error"):
        try:
            result["witness"] = witness(asked)
        except BaseException as exc:  # noqa: BLE001 - an engine that exits while planning: the check still answers
            result["witness"] = {"ok": False, "error": f"the planner gave no answer: {type(exc).__name__}: {exc}"}
    return result


def witness(engine: str, planner: Planner, request: WitnessRequest) -> WitnessAnswer:
    """The engine's own figures for the request; errors (an engine refusal included) come back as text."""
    start = time.monotonic()
    answer: WitnessAnswer = {"ok": False, "engine": engine}
    try:
        answer.update(planner(request))
    except Exception as exc:  # noqa: BLE001 - the engine's refusal or a missing function is the answer
        answer["error"] = f"{type(exc).__name__}: {exc}"
    answer["seconds"] = round(time.monotonic() - start, 3)
    return answer
