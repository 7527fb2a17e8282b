"""Files users hand to dspark, read with bounds: regular files only, each kind of file with its own size limit.

Every read of user input goes through here (recipes, config.json, weight indexes, safetensors headers, saved
probes, prompts and workloads, calibration files). A FIFO or a device given as one of these would block the
read forever or fill memory (/dev/zero); a file far larger than its kind ever is (a 50 MB recipe) would take
minutes and gigabytes to parse. Both are bad input: InputError (exit 2) naming the file, what it is, the limit
and the fix, never a hang, a MemoryError or a traceback.

The file is opened with O_NONBLOCK, so that opening a FIFO with no writer returns at once, and fstat of the open
descriptor (not of the path: no race with a swapped file) must say it is a regular file before a byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO, NamedTuple

from dspark.core.errors import InputError

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


class FileKind(NamedTuple):
    """What a file is to dspark (named in messages) and the most bytes a real one of its kind holds."""

    noun: str  # "recipe file", "model config", ...: "<path>: recipe file not found"
    limit_bytes: int
    hint: str = ""  # how to make a good one, added to the refusal


# Limits far above the largest real file of each kind, far below what would take minutes or gigabytes to parse.
RECIPE = FileKind("recipe file", 1 * MIB)  # the shipped ones are under 8 KiB
MODEL_CONFIG = FileKind("model config", 16 * MIB, "pass the model directory holding its config.json")
WEIGHT_INDEX = FileKind("weight index", 64 * MIB, "the index of a real checkpoint is a few MiB of tensor names")
SNAPSHOT = FileKind("hardware file", 4 * MIB, "make it with `dspark probe --json > FILE` on the machine it describes")
PROMPTS = FileKind("prompts file", 1 * GIB, "a JSONL file, one request per line")
CALIBRATION = FileKind("calibration file", 256 * MIB, "a `dspark bench --json` output or a sweep.json")
# The safetensors format caps its JSON header at 100 MB (safetensors' MAX_HEADER_SIZE); the tensor data after it
# is never read, so the file itself has no limit.
SAFETENSORS_HEADER = FileKind("safetensors file", 100_000_000, "the format caps its header at 100 MB")
KINDS = (RECIPE, MODEL_CONFIG, WEIGHT_INDEX, SNAPSHOT, PROMPTS, CALIBRATION, SAFETENSORS_HEADER)

_SPECIAL = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_SHOWN_PATH = 160  # characters of a path a message shows (an over-long one is cut, with its length)


def shown_path(path: str | os.PathLike[str]) -> str:
    """The path as messages show it: whole, or its start and length when it is longer than a line."""
    text = os.fspath(path)
    if len(text) <= _SHOWN_PATH:
        return text
    return f"{text[:_SHOWN_PATH // 2]}… ({len(text):,} characters)"


def _error(kind: FileKind, path: str | os.PathLike[str], problem: str, error: type[InputError],
           hint: str | None = None) -> InputError:
    return error(f"{shown_path(path)}: {problem}", hint=hint if hint is not None else kind.hint or None)


def _open_error(kind: FileKind, path: str | os.PathLike[str], exc: OSError, error: type[InputError]) -> InputError:
    """The refusal for a file that does not open, by its cause."""
    if exc.errno == errno.ENOENT:
        return _error(kind, path, f"{kind.noun} not found", error)
    if exc.errno == errno.ENAMETOOLONG:
        return _error(kind, path, f"file name too long for the operating system ({len(os.fspath(path)):,} "
                                  "characters; a name may have at most 255 bytes per component)", error,
                      hint="pass a shorter path (a symbolic link or a copy of the file)")
    if exc.errno == errno.ELOOP:
        return _error(kind, path, "symbolic links loop (or nest too deep) and lead to no file", error,
                      hint="point the link at the file itself")
    if exc.errno == errno.ENXIO:
        return _error(kind, path, f"is a socket or a device with nothing behind it, not a regular file; a "
                                  f"{kind.noun} must be a regular file", error)
    if exc.errno == errno.EISDIR:
        return _error(kind, path, f"is a directory, not a {kind.noun}", error)
    return _error(kind, path, f"cannot read the {kind.noun} ({exc.strerror or exc})", error)


def _check_regular(kind: FileKind, path: str | os.PathLike[str], mode: int, error: type[InputError]) -> None:
    """InputError unless `mode` (from fstat of the open file) is a regular file's."""
    for test, what in _SPECIAL:
        if test(mode):
            if what == "a directory":
                raise _error(kind, path, f"is a directory, not a {kind.noun}", error)
            raise _error(kind, path, f"is {what}, not a regular file; a {kind.noun} must be a regular file",
                         error, hint="give a regular file (save what the pipe or device gives to a file first)")


@contextmanager
def open_regular(path: str | os.PathLike[str], kind: FileKind, *,
                 error: type[InputError] = InputError) -> Iterator[tuple[BinaryIO, int]]:
    """The opened file and its size, once fstat says it is a regular file; InputError (`error`) otherwise.

    The size is not checked against the kind's limit: a safetensors file is far larger than its header, which
    is all that is read of it. read_regular checks it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _open_error(kind, path, exc, error) from None
    except ValueError:  # a NUL byte in the path
        os_free = os.fspath(path).replace("\x00", "\\0")
        raise _error(kind, os_free, "the path holds a NUL byte, which no file name can", error) from None
    try:
        info = os.fstat(fd)
        _check_regular(kind, path, info.st_mode, error)
        # O_NONBLOCK has no effect on a regular file; cleared all the same, so that reads block as usual.
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        try:
            yield handle, info.st_size
        except OSError as exc:
            raise _error(kind, path, f"cannot read the {kind.noun} ({exc.strerror or exc})", error) from None


def read_regular(path: str | os.PathLike[str], kind: FileKind, *, error: type[InputError] = InputError,
                 limit_bytes: int | None = None) -> bytes:
    """The whole file, a regular one of at most the kind's limit (or `limit_bytes`); InputError naming it."""
    limit = kind.limit_bytes if limit_bytes is None else limit_bytes
    with open_regular(path, kind, error=error) as (handle, size):
        if size > limit:
            raise _too_large(kind, path, f"{size:,} bytes", limit, error)
        data = handle.read(limit + 1)  # a file that grew since fstat is cut at the limit, not read whole
    if len(data) > limit:
        raise _too_large(kind, path, "more", limit, error)
    return data


def _too_large(kind: FileKind, path: str | os.PathLike[str], size: str, limit: int,
               error: type[InputError]) -> InputError:
    return _error(kind, path, f"is {size} than a {kind.noun} may be ({format_limit(limit)})" if size == "more"
                  else f"is {size}, more than a {kind.noun} may be ({format_limit(limit)})", error)


def format_limit(limit: int) -> str:
    """A limit for messages: 1 MiB, 16 MiB, 100,000,000 bytes."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit:,} bytes"


def read_text(path: str | os.PathLike[str], kind: FileKind, *, error: type[InputError] = InputError) -> str:
    """The file as UTF-8 text (read_regular's checks, then the encoding); InputError naming it."""
    data = read_regular(path, kind, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(kind, path, f"is not UTF-8 text (byte {exc.start})", error) from None


def exists_for_reading(path: str | os.PathLike[str]) -> bool:
    """Whether there is something at `path` for the reader to read or refuse: False only when nothing is there.

    Path.exists() raises on a name too long for the OS and says False for a link loop; here both are True, so
    that the reader's refusal names the cause instead of a "not found" or an internal error."""
    try:
        os.stat(path)  # noqa: PTH116 - path may be str or bytes-like, and stat's own errors are the answer
    except FileNotFoundError:
        return os.path.lexists(path)  # a dangling link: the reader says it leads nowhere
    except NotADirectoryError:
        return False
    except OSError:
        return True
    except ValueError:  # a NUL byte in the name
        return True
    return True
