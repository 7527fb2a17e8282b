#!/usr/bin/env python3
"""An `ssh` look-alike for the peer tests: skips ssh's options, then runs the remote command line as sshd would
(in a session of its own, through `sh -c`) on this machine. Never a network."""

from __future__ import annotations

import contextlib
import os
import sys

WITH_VALUE = {"-o", "-F", "-p", "-i", "-l"}


def main(args: list[str]) -> None:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in WITH_VALUE else 1
    if i + 1 >= len(args):
        sys.exit("fake_ssh: no host or command")
    with open(os.environ["FAKE_SSH_LOG"], "a", encoding="utf-8") if "FAKE_SSH_LOG" in os.environ else (
            contextlib.nullcontext()) as log:
        if log is not None:
            log.write(repr(args) + "\n")
    with contextlib.suppress(PermissionError):  # already a session leader when started with start_new_session
        os.setsid()
    os.execvp("sh", ["sh", "-c", " ".join(args[i + 1:])])  # noqa: S606 - sshd runs the line in a shell


if __name__ == "__main__":
    main(sys.argv[1:])
