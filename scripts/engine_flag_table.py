"""Run inside an ENGINE's interpreter: print its serve parser's option strings and how many values each takes.

Usage: <engine python> scripts/engine_flag_table.py vllm|sglang > dspark/data/engine_flags/<engine>-<version>.json

dspark resolves abbreviations and refuses flags the engine does not know from these tables
(dspark/engines/parser_flags.py); tests/real_engines/test_parser_flag_tables.py checks each table against the
engine's parser. Imports nothing from dspark. The parser is built as `vllm serve` and `sglang serve` build theirs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]


def _vllm() -> tuple[argparse.ArgumentParser, str]:
    import vllm  # noqa: PLC0415 - only importable in the engine's interpreter
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415

    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser  # noqa: PLC0415 - 0.33+
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: PLC0415
    serve = FlexibleArgumentParser(prog="vllm").add_subparsers().add_parser("serve", prog="vllm serve")
    make_arg_parser(serve)
    return serve, str(vllm.__version__)


def _sglang() -> tuple[argparse.ArgumentParser, str]:
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415
    from sglang.version import __version__  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, str(__version__)


def _values(action: argparse.Action) -> Any:
    """0 for a flag that takes no value, else argparse's nargs (None: exactly one)."""
    if action.nargs == 0:
        return 0
    return 1 if action.nargs is None else action.nargs


def table(engine: str) -> dict[str, Any]:
    with contextlib.redirect_stdout(sys.stderr):
        parser, version = _vllm() if engine == "vllm" else _sglang()
    # Every string argparse matches an argument against (hidden ones too: vLLM 0.33 registers --no-enable-x
    # without showing it), as its abbreviation search reads them.
    options = {s: _values(a) for s, a in parser._option_string_actions.items() if s not in ("-h", "--help")}
    return {"engine": engine, "version": version, "allow_abbrev": parser.allow_abbrev,
            "python": ".".join(map(str, sys.version_info[:3])), "options": dict(sorted(options.items()))}


if __name__ == "__main__":
    json.dump(table(sys.argv[1]), sys.stdout, indent=0)
    sys.stdout.write("\n")
