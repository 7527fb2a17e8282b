"""Command line: parse, call one core function, map exceptions to exit codes (DESIGN.md §4)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from dspark import __version__
from dspark.errors import DsparkError, ExitCode


@contextmanager
def error_boundary(debug: bool) -> Iterator[None]:
    """The single place where exceptions become messages and exit codes; tracebacks only with --debug."""
    try:
        yield
    except DsparkError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        raise SystemExit(130) from None
    except click.exceptions.Exit:
        raise
    except click.ClickException:
        raise
    except Exception as exc:  # noqa: BLE001 - the boundary: anything unexpected is an internal error
        if debug:
            traceback.print_exc()
        else:
            click.echo(f"internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        raise SystemExit(int(ExitCode.INTERNAL)) from None


def run_core(ctx: click.Context, func: Callable[..., int | None], *args: Any, **kwargs: Any) -> None:
    """Call one core function inside the error boundary and exit with its code."""
    debug = bool(ctx.find_root().params.get("debug"))
    with error_boundary(debug):
        code = func(*args, **kwargs)
    ctx.exit(int(code or 0))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dspark")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Validate and launch vLLM / SGLang with the engine's own capacity arithmetic."""


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the snapshot as one JSON object.")
@click.option(
    "--hardware",
    metavar="FILE|PROFILE",
    help="A file saved by `dspark probe --json`, or a built-in profile (gb10x2, h200, ...).",
)
@click.pass_context
def probe(ctx: click.Context, as_json: bool, hardware: str | None) -> None:
    """Show the GPUs and memory dspark plans against."""
    from dspark.commands.probe import probe as probe_core  # noqa: PLC0415 - keep CLI start-up light

    run_core(ctx, probe_core, hardware=hardware, as_json=as_json)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; click usage errors exit 2."""
    try:
        cli.main(args=argv, prog_name="dspark", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.INTERNAL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
