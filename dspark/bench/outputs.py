"""Where results go: destinations checked before a run, a lock per destination, files written whole (or a set).

A bench or sweep can run for hours; an --out that cannot be written must fail before the first request, not
after the last. Two runs sharing an --out or --out-dir must not overwrite each other silently: each holds an
flock on a lock file beside its destination for the whole run, and the second is refused naming the first.
The atomic rename never replaces anything but a regular file (`--out /dev/null` as root would destroy it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from dspark.core.errors import InputError

_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _fix(option: str) -> str:
    return f"give {option} a path to a regular file in a directory you can write, e.g. {option} results/bench.json"


def _writable_ancestor(path: Path, option: str, shown: Path) -> None:
    """The nearest existing ancestor of `path` must be a directory this process can write (and enter)."""
    here = path
    while True:
        try:
            st = here.stat()
            break
        except (FileNotFoundError, NotADirectoryError):
            if here.parent == here:
                return
            here = here.parent
        except OSError as exc:
            raise InputError(f"{option} {shown}: cannot look at {here}: {exc.strerror}", hint=_fix(option)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{option} {shown}: {here} is {_kind(st.st_mode)}, not a directory", hint=_fix(option))
    if not os.access(here, os.W_OK | os.X_OK):
        raise InputError(f"{option} {shown}: the directory {here} is not writable by this user", hint=_fix(option))


def check_regular(path: Path, option: str, shown: Path | None = None) -> None:
    """`path` is absent or a regular file (following links); else InputError naming what it is."""
    shown = shown if shown is not None else path
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # absent (an ancestor that is a file: _writable_ancestor says)
        return
    except OSError as exc:
        raise InputError(f"{option} {shown}: cannot look at it: {exc.strerror}", hint=_fix(option)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{option} {shown}: is {_kind(st.st_mode)}; dspark writes results only to regular files",
                         hint=_fix(option))


def check_out_file(path: Path, option: str = "--out") -> None:
    """Before a run: the file can be written where it is (an empty path, a directory, a device, a FIFO, a parent
    that is a file or not writable are InputErrors naming the path and the fix)."""
    if str(path) in ("", "."):
        raise InputError(f"{option} {str(path)!r}: an empty path names no file", hint=_fix(option))
    _writable_ancestor(path.parent, option, path)
    check_regular(path, option)


def check_out_dir(path: Path, files: tuple[str, ...], option: str = "--out-dir") -> None:
    """Before a run: `path` is (or can be made) a writable directory, and the named files in it are absent or
    regular files."""
    if str(path) == "":
        raise InputError(f"{option} '': an empty path names no directory", hint=f"give {option} a directory")
    try:
        st = path.stat()
    except FileNotFoundError:
        _writable_ancestor(path, option, path)
        return
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot look at it: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{option} {path}: is {_kind(st.st_mode)}, not a directory",
                         hint=f"give {option} a directory (it is created when absent)")
    _writable_ancestor(path, option, path)
    for name in files:
        check_regular(path / name, option, path / name)


def _holder(lock: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(lock.read_text().strip() or "0")
        if pid:
            return f" (pid {pid})"
    return ""


@contextlib.contextmanager
def exclusive(lock: Path, what: str) -> Iterator[None]:
    """Hold an flock on `lock` while inside; InputError when another process holds it. The lock file is
    removed on the way out (while still locked, so a later run makes a fresh one)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise InputError(f"{what}: cannot lock {lock}: {exc.strerror}") from None
            raise InputError(f"{what} is in use by another dspark run{_holder(lock)}: two runs would overwrite "
                             "each other's results", hint="wait for it to finish, or choose another path") from None
        try:  # the file may have been removed by its previous holder between open and lock: lock the new one
            same = os.fstat(fd).st_ino == lock.stat().st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def lock_beside(path: Path) -> Path:
    """The lock file of an output file: a hidden file beside it."""
    return path.parent / f".{path.name}.lock"


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


def _staged(path: Path, raw: bytes) -> Path:
    """`raw` in a temporary file beside `path`, flushed to disk, with the mode a plain open() would give it."""
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
    return Path(tmp)


def write_set(files: Mapping[Path, str | bytes]) -> None:
    """Write every file whole: each staged beside its destination and flushed first, then all renamed in one
    go, so the set is never a mix of two runs (and a failure before the renames leaves the old set).

    A destination that is not a regular file (a device, a FIFO, a directory) is refused, never replaced.
    The files get the mode a plain open() would give them (0666 less the umask; a replaced file keeps its own).
    """
    staged: dict[Path, Path] = {}
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            check_regular(path, "output")
            staged[path] = _staged(path, data.encode("utf-8") if isinstance(data, str) else data)
        for path, tmp in staged.items():
            check_regular(path, "output")  # once more just before the rename: nothing special is replaced
            tmp.replace(path)
    except BaseException:
        for tmp in staged.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write the file whole or not at all: a temporary file beside it, fsync, then rename over it."""
    write_set({path: data})
