"""The bounded reader: regular files only, a size limit per kind, every refusal an InputError naming the file."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from dspark.advise.workload import load_workload
from dspark.bench.prompts import read_jsonl
from dspark.config.recipes import find_recipe, load_recipe
from dspark.core.errors import InputError, RecipeError
from dspark.core.files import (
    KINDS,
    MODEL_CONFIG,
    PROMPTS,
    RECIPE,
    SNAPSHOT,
    exists_for_reading,
    format_limit,
    read_regular,
    read_text,
    shown_path,
)
from dspark.core.jsonfile import read_json_file
from dspark.hardware.select import resolve_hardware
from dspark.hardware.snapshot import load_snapshot
from dspark.model.modeldir import load_config, resolve_model

SECONDS = 5  # a FIFO read would block forever: the alarm makes a hang fail the test instead


class _Hang(BaseException):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS)
    try:
        yield
    except _Hang:
        pytest.fail(f"blocked for {SECONDS} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _special(tmp_path: Path, what: str) -> Path:
    """A path that is not a regular file: a FIFO, a character device, a directory, a link loop, a dangling link."""
    path = tmp_path / f"{what}.x"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "device":
        return Path("/dev/zero")
    elif what == "dir":
        path.mkdir()
    elif what == "loop":
        path.symlink_to(path)
    elif what == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    elif what == "too-long":
        return tmp_path / ("x" * 300)
    elif what == "too-long-path":
        return tmp_path.joinpath(*["y" * 200] * 30)
    return path


SPECIALS = ("fifo", "device", "dir", "loop", "dangling", "too-long", "too-long-path")
SAYS = {"fifo": "is a FIFO (named pipe), not a regular file", "device": "is a character device, not a regular file",
        "dir": "is a directory", "loop": "symbolic links loop", "dangling": "not found",
        "too-long": "file name too long", "too-long-path": "file name too long"}


def _readers(tmp_path: Path) -> dict[str, Callable[[Path], Any]]:
    """Every public reader of a user file, each handed the path as a user would."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return {
        "recipe": load_recipe,
        "recipe-by-name": lambda p: find_recipe(str(p)),
        "config.json": read_json_file,
        "probe": load_snapshot,
        "--hardware": lambda p: resolve_hardware(str(p), default_profile="h200"),
        "prompts": read_jsonl,
        "workload": lambda p: load_workload(p, 16),
    }


@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("reader", ["recipe", "recipe-by-name", "config.json", "probe", "--hardware", "prompts",
                                    "workload"])
def test_every_reader_refuses_what_is_not_a_regular_file_at_once(tmp_path: Path, special: str, reader: str) -> None:
    path = _special(tmp_path, special)
    with pytest.raises(InputError) as info:
        _readers(tmp_path)[reader](path)
    message = str(info.value)
    assert SAYS[special] in message, message
    assert shown_path(path) in message
    assert len(message) < 600  # an over-long name is cut, not printed whole


def test_a_fifo_with_a_writer_is_refused_too(tmp_path: Path) -> None:
    """Opened with O_NONBLOCK and refused by fstat: the writer's data is never read."""
    path = tmp_path / "p.yaml"
    os.mkfifo(path)
    writer = threading.Thread(target=lambda: _write_fifo(path), daemon=True)
    writer.start()
    with pytest.raises(RecipeError, match="is a FIFO"):
        load_recipe(path)


def _write_fifo(path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no reader yet, or it is gone: the test does not need the data
    try:
        os.write(fd, b"name: x\n")
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.noun)
def test_each_kind_refuses_a_file_past_its_limit_without_reading_it(tmp_path: Path, kind: Any) -> None:
    path = tmp_path / "big"
    with path.open("wb") as handle:
        handle.truncate(kind.limit_bytes + 1)  # sparse: nothing is written, and nothing must be read
    with pytest.raises(InputError, match=rf"is {kind.limit_bytes + 1:,} bytes, more than a {kind.noun} may be "
                                         rf"\({format_limit(kind.limit_bytes)}\)"):
        read_regular(path, kind)
    path.write_bytes(b"x" * 10)
    assert read_regular(path, kind, limit_bytes=10) == b"x" * 10


def test_a_50_mb_recipe_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * 5_000_000)
    with pytest.raises(RecipeError, match=r"more than a recipe file may be \(1 MiB\)"):
        load_recipe(path)


def test_dev_zero_is_no_memory_error() -> None:
    with pytest.raises(RecipeError, match="/dev/zero: is a character device"):
        load_recipe("/dev/zero")


def test_text_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InputError, match=r"x\.json: is not UTF-8 text \(byte 7\)"):
        read_text(path, MODEL_CONFIG)


def test_a_nul_byte_in_a_path_is_an_input_error() -> None:
    with pytest.raises(InputError, match="NUL byte"):
        read_regular("a\x00b", SNAPSHOT)


def test_a_model_directory_whose_config_is_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(InputError, match=r"config\.json: is a FIFO"):
        load_config(resolve_model(str(tmp_path)))


def test_exists_for_reading_says_true_where_the_reader_has_a_cause_to_name(tmp_path: Path) -> None:
    assert not exists_for_reading(tmp_path / "none")
    assert not exists_for_reading(tmp_path / "none" / "deeper")
    for special in SPECIALS:  # each is there to be refused (Path.exists raises on too-long, says False on a loop)
        assert exists_for_reading(_special(tmp_path, special)), special


def test_limits_are_ordered_as_the_files_are() -> None:
    assert RECIPE.limit_bytes < SNAPSHOT.limit_bytes < MODEL_CONFIG.limit_bytes < PROMPTS.limit_bytes
