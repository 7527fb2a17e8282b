"""Run inside the ENGINE's interpreter: parse an argv with the engine's own argument parser.

Usage: <engine python> _argv_check.py vllm|sglang  < JSON list of serve arguments (no program name),
       or {"argv": [...], "witness": {...}} to also run the engine's own KV planner (_witness.py) in this
       same process, so that the engine is imported once.
Prints one line `DSPARK_ARGV_CHECK {json}` with ok, error (argparse's message), version and the
values that differ from the parser's defaults; with a witness request also `DSPARK_WITNESS {json}`.
Imports nothing from dspark: it runs where dspark may not be installed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

# Run by path, this file's folder would lead sys.path, and dspark/engines/vllm.py would shadow the real engine.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

MARKER = "DSPARK_ARGV_CHECK "


def _vllm_parser() -> tuple[argparse.ArgumentParser, str]:
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


def _sglang_parser() -> tuple[argparse.ArgumentParser, str]:
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415

    try:
        from sglang.version import __version__ as version  # noqa: PLC0415
    except ImportError:
        version = "unknown"
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, str(version)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _run_witness(request: dict[str, Any]) -> None:
    """_witness.py beside this file, loaded by path (this folder is off sys.path), its answer on stdout."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("_dspark_witness", _HERE / "_witness.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_HERE / '_witness.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    answer = module.witness(request)
    sys.stdout.write(module.MARKER + json.dumps(answer) + "\n")


def main() -> int:
    engine = sys.argv[1]
    payload = json.loads(sys.stdin.read())
    argv = payload["argv"] if isinstance(payload, dict) else payload
    witness_request = payload.get("witness") if isinstance(payload, dict) else None
    captured = io.StringIO()
    result: dict[str, Any] = {"ok": False, "engine": engine}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # engines log on import; keep stdout for our line
            parser, version = _vllm_parser() if engine == "vllm" else _sglang_parser()
        result["version"] = version
        defaults = {a.dest: a.default for a in parser._actions}
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(sys.stderr):
            ns = parser.parse_args(argv)
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
    sys.stdout.write(MARKER + json.dumps(result) + "\n")
    if witness_request is not None and not result.get("import_error"):
        _run_witness(witness_request)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
