"""`python -m dspark_inside.sglang.argv_check`: an argv judged by the installed SGLang's own parser
(shapes.ArgvCheckRequest -> ArgvCheckAnswer); with a witness request, SGLang's sizing too, one engine import."""

from __future__ import annotations

import argparse

from dspark_inside import checks, protocol
from dspark_inside.shapes import ArgvCheckAnswer, ArgvCheckRequest


def parser() -> tuple[argparse.ArgumentParser, str]:
    """ServerArgs' parser, as `sglang serve` builds it, and the release's version."""
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415 - only importable in the engine's interpreter

    try:
        from sglang.version import __version__ as version  # noqa: PLC0415
    except ImportError:
        version = "unknown"
    built = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(built)
    return built, str(version)


def answer(request: ArgvCheckRequest) -> ArgvCheckAnswer:
    """The check, and the witness when asked for (imported only then)."""
    from dspark_inside.sglang import witness  # noqa: PLC0415

    return checks.argv_check("sglang", parser, request, witness.answer)


if __name__ == "__main__":
    raise SystemExit(protocol.serve(answer))
