"""`python -m dspark_inside.vllm.argv_check`: an argv judged by the installed vLLM's own serve parser
(shapes.ArgvCheckRequest -> ArgvCheckAnswer); with a witness request, vLLM's planner too, one engine import."""

from __future__ import annotations

import argparse

from dspark_inside import checks, protocol
from dspark_inside.shapes import ArgvCheckAnswer, ArgvCheckRequest


def parser() -> tuple[argparse.ArgumentParser, str]:
    """`vllm serve`'s parser, wherever this release builds it, and the release's version."""
    import vllm  # noqa: PLC0415 - only importable in the engine's interpreter

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415
    except ImportError:  # vLLM <= 0.11 kept it in vllm.utils
        from vllm.utils import FlexibleArgumentParser  # noqa: PLC0415
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: PLC0415 - 0.33+
    except ImportError:
        try:
            from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: PLC0415
        except ImportError:  # vLLM before the launchers package
            from vllm.entrypoints.openai.cli_args import make_arg_parser  # noqa: PLC0415
    root = FlexibleArgumentParser(prog="vllm")
    serve = root.add_subparsers().add_parser("serve", prog="vllm serve")
    make_arg_parser(serve)
    return serve, str(getattr(vllm, "__version__", "unknown"))


def answer(request: ArgvCheckRequest) -> ArgvCheckAnswer:
    """The check, and the witness when asked for (imported only then)."""
    from dspark_inside.vllm import witness  # noqa: PLC0415

    return checks.argv_check("vllm", parser, request, witness.answer)


if __name__ == "__main__":
    raise SystemExit(protocol.serve(answer))
