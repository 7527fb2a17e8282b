"""Where results go: checked before the run, locked against a second run, never a special file, written as a set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dspark.bench.outputs import check_out_dir, check_out_file, exclusive, write_atomic, write_set
from dspark.cli import main
from dspark.core.errors import InputError
from tests.bench.fake_server import FakeConfig, FakeServer
from tests.bench.helpers import HERE, in_thread

ROOT = HERE.parents[1]
ARGS = ["--requests", "2", "--concurrency", "1", "--max-tokens", "2", "--input-len", "4", "--no-progress",
        "--sample-interval", "0.05"]


def _bad_destinations(tmp: Path) -> dict[str, tuple[str, str]]:
    """name -> (--out value, what the error must say); made under tmp."""
    (tmp / "a-file").write_text("x")
    (tmp / "a-dir").mkdir()
    os.mkfifo(tmp / "a-fifo")
    (tmp / "null").symlink_to("/dev/null")  # the rename would replace only the link: safe to try on main too
    return {
        "parent-is-a-file": (str(tmp / "a-file" / "r.json"), "a-file is a regular file, not a directory"),
        "grandparent-is-a-file": (str(tmp / "a-file" / "sub" / "r.json"), "is a regular file, not a directory"),
        "a-directory": (str(tmp / "a-dir"), "is a directory"),  # click's own words: exit 2 too
        "a-fifo": (str(tmp / "a-fifo"), "is a FIFO"),
        "a-device": (str(tmp / "null"), "is a character device"),
        "empty": ("", "an empty path names no file"),
    }


@pytest.mark.parametrize("name", ["parent-is-a-file", "grandparent-is-a-file", "a-directory", "a-fifo", "a-device",
                                  "empty"])
def test_a_bad_out_is_refused_before_any_request(name: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 11: these were found after the whole run (exit 3, results lost), or replaced."""
    value, says = _bad_destinations(tmp_path)[name]
    with in_thread(FakeServer()) as srv:
        rc = main(["bench", "--url", srv.url, *ARGS, "--out", value])
        sent = srv.state.requests
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and ("hint: give --out a path to a regular file" in err or name == "a-directory")
    assert sent == 0  # refused before the run
    assert (tmp_path / "null").is_symlink() and os.path.realpath(tmp_path / "null") == "/dev/null"


def test_an_unwritable_directory_is_refused_before_the_run(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # Root may write any ordinary directory; /proc/sys refuses even root a new file.
    locked = Path("/proc/sys") if os.geteuid() == 0 else tmp_path / "ro"
    if locked != Path("/proc/sys"):
        locked.mkdir(mode=0o555)
    with in_thread(FakeServer()) as srv:
        rc = main(["bench", "--url", srv.url, *ARGS, "--out", str(locked / "r.json")])
        sent = srv.state.requests
    err = capsys.readouterr().err
    assert rc == 2 and sent == 0, err
    assert f"the directory {locked} is not writable by this user" in err


def test_write_atomic_never_replaces_a_special_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="is a FIFO"):
        write_atomic(tmp_path / "fifo", "{}")
    assert (tmp_path / "fifo").is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]  # no temporary file left


def test_check_out_dir(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="is a regular file, not a directory"):
        check_out_dir(tmp_path / "f", ("sweep.json",))
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "sweep.json")
    with pytest.raises(InputError, match=r"sweep\.json: is a FIFO"):
        check_out_dir(tmp_path / "d", ("sweep.json",))
    check_out_dir(tmp_path / "new" / "deeper", ("sweep.json",))  # absent: created later
    check_out_file(tmp_path / "new" / "r.json")


def test_write_set_replaces_all_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.md"
    write_set({a: "old a", b: "old b"})
    real = Path.replace
    calls: list[Path] = []

    def failing(self: Path, target: Path) -> Path:
        calls.append(Path(target))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", failing)
    with pytest.raises(OSError):
        write_set({a: "new a", b: "new b"})
    monkeypatch.setattr(Path, "replace", real)
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.md"]


def test_the_lock_refuses_a_second_holder_and_is_removed(tmp_path: Path) -> None:
    lock = tmp_path / ".x.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from dspark.bench.outputs import exclusive\n"
        f"with exclusive(Path({str(lock)!r}), 'x'):\n    print('held', flush=True); time.sleep(30)")],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout's dspark
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(InputError, match=rf"x is in use by another dspark run \(pid {holder.pid}\)"), \
                exclusive(lock, "x"):
            pass
    finally:
        holder.kill()
        holder.wait()
    with exclusive(lock, "x"):  # its holder is gone: free again
        assert lock.exists()
    assert not lock.exists()


def test_two_benches_sharing_an_out_do_not_overwrite_each_other(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26 item 12: the second run overwrote the first's file silently."""
    out = tmp_path / "r.json"
    with in_thread(FakeServer(FakeConfig(token_delay=0.02))) as srv:
        first = subprocess.Popen(
            [sys.executable, "-m", "dspark", "bench", "--url", srv.url, "--requests", "8", "--concurrency", "2",
             "--max-tokens", "40", "--input-len", "4", "--no-progress", "--seed", "1", "--out", str(out)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        deadline = time.monotonic() + 60
        while srv.state.requests == 0 and time.monotonic() < deadline:  # the first is running
            time.sleep(0.05)
        rc = main(["bench", "--url", srv.url, *ARGS, "--seed", "2", "--out", str(out)])
        err = capsys.readouterr().err
        assert first.wait(120) == 0, first.stderr.read() if first.stderr else ""
    assert rc == 2, err
    assert f"--out {out} is in use by another dspark run (pid {first.pid})" in err
    assert json.loads(out.read_text())["prompt_source"].endswith("seed 1")  # the first run's, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
