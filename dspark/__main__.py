"""The `dspark` command and `python -m dspark`: dspark.cli.main, with the cyclic collector paused while it loads."""

import gc


def run() -> int:
    """Import the command line with the cyclic garbage collector paused, then run it.

    Loading click and dspark's command table allocates some ten thousand objects that live as long as the
    process, so each collection would walk them for nothing (docs/testing.md): they are frozen out of the
    collector's sight (gc.freeze) once loaded. The collector is back before any command runs; validate, and a
    start that execs, pause it again while they plan (dspark.cli.gc_paused). When the command returns, what it
    made is frozen too: the process is exiting, and the collections at interpreter exit would walk every object
    to free nothing (a twentieth of validate's instructions). Exit handlers still run, and what they make is
    collected as usual.
    """
    gc.disable()
    try:
        from dspark.cli import main  # noqa: PLC0415 - imported with the collector paused
        gc.freeze()  # what loading made lives as long as the process: no collection need walk it again
    finally:
        gc.enable()
    code = main()
    gc.freeze()  # the process exits now
    return code


if __name__ == "__main__":
    raise SystemExit(run())
