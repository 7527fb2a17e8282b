"""`python -m dspark_inside.sglang.sizing`: SGLang's own sizing (sglang.witness.run_case) on each of a list of
cases, every figure it resolved (shapes.SglangSizingCase list -> a list of run_case's dicts, in order): the
tests and the version matrix hold dspark's model of SGLang to these."""

from __future__ import annotations

import os
from typing import Any

from dspark_inside import protocol
from dspark_inside.sglang import witness
from dspark_inside.shapes import SglangSizingCase


def answer(cases: list[SglangSizingCase]) -> list[dict[str, Any]]:
    """run_case on each case, each in the process's environment plus its own `env` (SGLang writes SGLANG_*)."""
    witness.prepare()
    environ = dict(os.environ)
    out = []
    for case in cases:
        os.environ.clear()
        os.environ.update(environ)
        os.environ.update(case.get("env", {}))
        out.append(witness.run_case(case))
    return out


if __name__ == "__main__":
    raise SystemExit(protocol.serve(answer))
