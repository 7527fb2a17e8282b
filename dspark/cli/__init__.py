"""Command line: parse, call one core function, map exceptions to exit codes (docs/exit-codes.md).

The group loads a command's module (dspark.cli.<module>) only when that command runs or its help is shown; the
options of every command are declared once in dspark.commands.options.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib import import_module
from typing import Any

import click

from dspark import __version__
from dspark.core.errors import DsparkError, ExitCode


def _emit_error(code: str, message: str, hint: str | None, exit_code: int, *, as_json: bool) -> None:
    """The error for people on stderr; with --json also exactly one JSON object on stdout.

    Messages quote inputs (a parser's rejection echoes the flags it was given): secrets are hidden and control
    characters shown as escapes (dspark.core.redact.shown)."""
    from dspark.core.redact import shown  # noqa: PLC0415 - loads only on an error

    message, hint = shown(message), (shown(hint) if hint else hint)
    click.echo(f"error: {message}" + (f"\n  hint: {hint}" if hint else ""), err=True)
    if as_json:
        error = {"code": code, "message": message, "hint": hint}
        click.echo(json.dumps({"error": error, "exit_code": exit_code}))


def _print_traceback() -> None:
    """The current exception's traceback on stderr (--debug); the module loads only then."""
    import traceback  # noqa: PLC0415

    traceback.print_exc()


@contextmanager
def error_boundary(debug: bool, *, as_json: bool = False) -> Iterator[None]:
    """The single place where exceptions become messages and exit codes; tracebacks only with --debug."""
    try:
        yield
    except DsparkError as exc:
        if debug:
            _print_traceback()
        _emit_error(exc.code, exc.message, exc.hint, int(exc.exit_code), as_json=as_json)
        raise SystemExit(int(exc.exit_code)) from None
    except KeyboardInterrupt:
        _emit_error("interrupted", "interrupted", None, int(ExitCode.INTERRUPTED), as_json=as_json)
        raise SystemExit(int(ExitCode.INTERRUPTED)) from None
    except click.exceptions.Exit:
        raise
    except click.ClickException:
        raise
    except Exception as exc:  # noqa: BLE001 - the boundary: anything unexpected is an internal error
        if debug:
            _print_traceback()
        _emit_error("internal_error", f"internal error: {type(exc).__name__}: {exc}",
                    None if debug else "run with --debug for the traceback", int(ExitCode.INTERNAL), as_json=as_json)
        raise SystemExit(int(ExitCode.INTERNAL)) from None


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a command plans and exits (validate; a start that execs).

    Such a command allocates some hundred thousand objects as it imports and plans, and frees few: every
    collection walks them all, a tenth of validate's CPU time spent finding nothing (docs/testing.md).
    Reference counting still frees what is dropped; the collector is back as it was when the block ends.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def run_core(ctx: click.Context, func: Callable[..., int | None], *args: Any, json_errors: bool = False,
             **kwargs: Any) -> None:
    """Call one core function inside the error boundary and exit with its code.

    `func` may be a closure that also builds its request, so a bad value found while building it is
    mapped like any other input error; `json_errors` makes a failure print one JSON object on stdout.
    """
    debug = bool(ctx.find_root().params.get("debug"))
    try:
        with error_boundary(debug, as_json=json_errors):
            code = func(*args, **kwargs)
    finally:
        if debug:
            _debug_notes()
    ctx.exit(int(code or 0))


def _debug_notes() -> None:
    """Under --debug, on stderr: which recipe schema path ran, when a recipe was loaded."""
    schema = sys.modules.get("dspark.config.recipe_schema")
    if schema is not None and schema.recipe_schema.cache_info().currsize:
        click.echo(schema.schema_path_note(), err=True)


class LazyGroup(click.Group):
    """A click group whose commands load on first use: `lazy` maps a command's name to the module defining it."""

    def __init__(self, *args: Any, lazy: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            command = getattr(import_module(self.lazy[cmd_name]), cmd_name)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy[cmd_name]}.{cmd_name} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


# Each command and the module that defines it (dspark/cli/<module>.py).
COMMAND_MODULES = {
    "advise": "dspark.cli.advise",
    "bench": "dspark.cli.bench",
    "observations": "dspark.cli.observations",
    "probe": "dspark.cli.probe",
    "profile": "dspark.cli.profile",
    "recipes": "dspark.cli.recipes",
    "render": "dspark.cli.render",
    "start": "dspark.cli.start",
    "sweep": "dspark.cli.sweep",
    "top": "dspark.cli.top",
    "validate": "dspark.cli.plan",
}


@click.group(cls=LazyGroup, lazy=COMMAND_MODULES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dspark")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Validate and launch vLLM / SGLang with the engine's own capacity arithmetic."""


def _remember_secrets(args: list[str]) -> None:
    """The secret values in this command line and environment, hidden from every error message."""
    from dspark.core.redact import remember, secret_argv_values, secret_env_values  # noqa: PLC0415 - light

    remember(secret_argv_values(args) | secret_env_values(os.environ))


def _cut_long_words(text: str) -> str:
    """A click message with any over-long word (a value or path of thousands of characters) cut to its start."""
    import re  # noqa: PLC0415 - only an error message needs it

    return re.sub(r"\S{200,}", lambda m: f"{m.group()[:60]}… ({len(m.group()):,} characters)", text)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; click usage errors exit 2 (one JSON object on stdout with --json)."""
    args = list(sys.argv[1:] if argv is None else argv)
    _remember_secrets(args)
    # Everything after the first `--` is the engine's own flags, kept verbatim (click would drop the `--`).
    engine_flags: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, engine_flags = args[:cut], args[cut + 1:]
    # --debug is a group option; accept it after the subcommand too (dspark validate --debug).
    if "--debug" in args:
        args = ["--debug", *(a for a in args if a != "--debug")]
    as_json = "--json" in args
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of raising it: keep it.
        rc = cli.main(args=args, prog_name="dspark", standalone_mode=False, obj={"engine_flags": engine_flags})
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        from dspark.core.redact import shown  # noqa: PLC0415 - loads only on an error

        exc.message = _cut_long_words(shown(exc.message))  # type: ignore[misc]  # click reads it back
        if as_json:
            _emit_error("usage_error", exc.format_message(), None, int(ExitCode.USAGE), as_json=True)
        else:
            exc.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Abort:
        _emit_error("interrupted", "interrupted", None, int(ExitCode.INTERRUPTED), as_json=as_json)
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:  # Ctrl-C while click itself was parsing
        _emit_error("interrupted", "interrupted", None, int(ExitCode.INTERRUPTED), as_json=as_json)
        return int(ExitCode.INTERRUPTED)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.INTERNAL)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
