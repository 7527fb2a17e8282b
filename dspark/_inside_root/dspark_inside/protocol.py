"""How a tool talks to dspark: the request is JSON on stdin; the answer is one stdout line, MARKER + JSON.

Everything else the tool (or the engine it imports) writes to stdout goes to stderr, down to the file
descriptor, so that the answer line is the only line on stdout.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

MARKER = "DSPARK_INSIDE "  # dspark.engines.inside reads it (tests/engines/test_inside.py holds the two equal)

R = TypeVar("R")
A = TypeVar("A")


def serve(answer: Callable[[Any], Any]) -> int:
    """Read the request on stdin, answer it with stdout sent to stderr, write the answer line; the exit status."""
    request = json.loads(sys.stdin.read())
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # engines log on import and print while they plan: onto stderr, C-level writes included
    result = answer(request)
    sys.stdout.flush()
    with os.fdopen(answer_fd, "w") as out:
        out.write(MARKER + json.dumps(result) + "\n")
    return 0


def each(answer_one: Callable[[R], A]) -> Callable[[R | list[R]], A | list[A]]:
    """An answer to one request that also answers a list of them with a list, in order (one engine import)."""

    def answer(request: R | list[R]) -> A | list[A]:
        return [answer_one(r) for r in request] if isinstance(request, list) else answer_one(request)

    return answer
