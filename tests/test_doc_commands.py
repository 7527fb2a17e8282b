"""Every command line in README.md and docs/ runs as the page says, on a machine with no engine and no GPU.

The lines are the fenced shell blocks' commands. A line that cannot run here says why in its comment, and only
with these marks (docs/testing.md): `[needs engine]`, `[needs GPU]`, `[needs engine, GPU]`, `[installs]` (it
changes the environment: pip, the test script); a comment line holding only a mark applies to its whole block.
`[exit N]` says the line exits N here; otherwise it must exit 0. A CPU-platform line runs twice, planned for an x86
host with AVX-512 and for one with AVX2 only, whatever CPU runs the suite; `[exit N on AVX2-only]` says what it
exits on the second (otherwise as on the first). Placeholders (DIR, RECIPE) are filled with a
tiny model directory and the default recipe. Every dspark line without a mark is run, in-process, in a scratch
directory, with NVML absent, no engine interpreter and a fixed host memory; what it pipes into or redirects
to is not run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from dspark.cli import main
from dspark.core.constants import DEFAULT_RECIPE
from dspark.hardware.nvml import NvmlUnavailable
from dspark.hardware.select import resolve_hardware
from dspark.hardware.unified import HostMemory

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKS = {"needs engine", "needs GPU", "needs engine, GPU", "installs"}
COMMANDS = re.compile(r"^(dspark|python3?|pip|scripts/|benchmarks/|launch/)")
PROMPT = re.compile(r"^[\w.-]*\$ ")  # a shell prompt naming the host the line runs on (spark-a$ dspark start ...)
SECONDS = 120
# A Qwen3-shaped model small enough for any host: the README's `--model DIR` stands for the user's own.
TINY = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512,
        "vocab_size": 1000, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


@dataclass(frozen=True)
class Line:
    where: str  # file:line
    command: str
    mark: str | None  # why it is not run here
    exit_code: int
    avx2_exit_code: int  # on an x86 host without AVX-512 or AMX (vLLM's CPU build refuses fp8 KV there)


def _lines() -> list[Line]:
    out: list[Line] = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            if block.group(1) not in ("", "bash", "sh", "shell", "console"):
                continue
            start = text[: block.start(2)].count("\n") + 1
            out += _block_lines(doc, start, block.group(2))
    return out


def _block_lines(doc: Path, start: int, body: str) -> list[Line]:
    lines: list[Line] = []
    block_mark: str | None = None
    pending = ""
    for offset, raw in enumerate(body.splitlines()):
        if raw.rstrip().endswith("\\"):  # a continued command
            pending += raw.rstrip()[:-1] + " "
            continue
        full, pending = PROMPT.sub("", pending + raw), ""
        command, _, comment = full.partition(" #") if not full.lstrip().startswith("#") else ("", "", full)
        marks = re.findall(r"\[([^\]]+)\]", comment)
        mark = next((m for m in marks if m in MARKS), None)
        exit_code = next((int(m.split()[1]) for m in marks if re.fullmatch(r"exit \d+", m)), 0)
        avx2_exit = next((int(m.split()[1]) for m in marks if re.fullmatch(r"exit \d+ on AVX2-only", m)), exit_code)
        if not command.strip():
            block_mark = mark or block_mark
            continue
        if COMMANDS.match(command.strip()) or COMMANDS.match(_without_env(command.strip())):
            where = f"{doc.relative_to(ROOT)}:{start + offset}"
            lines.append(Line(where, command.strip(), mark or block_mark, exit_code, avx2_exit))
    return lines


def _without_env(command: str) -> str:
    return re.sub(r"^([A-Z_][A-Z0-9_]*=\S*\s+)+", "", command)


LINES = _lines()
RUN = [line for line in LINES if line.mark is None]
# The ISA flags vLLM's CPU build branches on (hardware/select.py), per host the pages' CPU lines are run for.
ISA = {"avx512": ("avx512_bf16", "avx512f"), "avx2": ()}
RUN_ISA = [(line, isa) for line in RUN for isa in ISA if isa == "avx512" or "--platform cpu" in line.command]


def test_the_docs_have_command_lines_to_run() -> None:
    assert len(RUN) >= 8
    assert {line.where.split(":")[0] for line in RUN} >= {"README.md"}


def test_a_prompt_does_not_hide_a_command() -> None:
    lines = _block_lines(ROOT / "x.md", 1, "spark-a$ dspark start r --node-rank 0   # [needs engine, GPU]\n"
                                          "$ dspark validate\nspark-b$ ray start --head\n")
    assert [(ln.command, ln.mark) for ln in lines] == [("dspark start r --node-rank 0", "needs engine, GPU"),
                                                       ("dspark validate", None)]


@pytest.mark.parametrize("line", [ln for ln in LINES if ln.mark is None], ids=[ln.where for ln in RUN])
def test_unmarked_lines_are_dspark_commands(line: Line) -> None:
    """Anything but dspark (pip, scripts, benchmarks) changes or needs more than this machine: it must say so."""
    for part in line.command.split("&&"):
        if not _without_env(part.strip()).startswith("dspark"):
            assert part.strip().startswith("pip install"), f"{line.where}: mark it ({', '.join(sorted(MARKS))})"


class _Hang(BaseException):
    """Raised by the alarm; not an Exception, so dspark's error boundary cannot turn it into exit 3."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def _argv(command: str, tmp: Path) -> tuple[dict[str, str], list[str]]:
    """The environment assignments and dspark's argv of one command, placeholders filled, `> FILE` dropped."""
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "dspark", command
    for cut in (">", "|"):  # what the line redirects to or pipes into (kubectl apply, a file) is not run here
        if cut in words:
            words = words[: words.index(cut)]
    filled = {"DIR": str(tmp / "model"), "RECIPE": DEFAULT_RECIPE}
    argv = [filled.get(w, w) for w in words[1:]]
    argv = [w.strip("[]") if w.startswith("[") or w.endswith("]") else w for w in argv]  # optional parts: given
    return env, argv


def test_the_readmes_fp8_cpu_example_says_what_an_avx2_host_does() -> None:
    (fp8,) = [ln for ln in RUN if "--platform cpu" in ln.command and "--kv-cache-dtype fp8" in ln.command]
    assert (fp8.exit_code, fp8.avx2_exit_code) == (0, 1)
    assert len([isa for line, isa in RUN_ISA if line == fp8]) == 2


@pytest.mark.parametrize(("line", "isa"), RUN_ISA, ids=[f"{ln.where}-{isa}" for ln, isa in RUN_ISA])
def test_documented_command_exits_as_the_page_says(line: Line, isa: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from dspark.commands import probe as probe_module  # noqa: PLC0415
    from dspark.hardware import select as select_module  # noqa: PLC0415
    from dspark.planning import validate as validate_module  # noqa: PLC0415

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(TINY))
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k in ("MAX_NUM_SEQS", "CUDA_VISIBLE_DEVICES") or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(tmp_path / "no-engine" / "python"))

    class Absent:
        def snapshot(self) -> Any:
            raise NvmlUnavailable("no NVML here")

    def no_gpu(spec: str | None, default_profile: str = "gb10x2", origin: str = "--hardware") -> Any:
        return resolve_hardware(spec, default_profile=default_profile, nvml_factory=Absent, origin=origin)

    monkeypatch.setattr(validate_module, "_resolve_hw", no_gpu)
    monkeypatch.setattr(probe_module, "resolve_hardware", no_gpu)
    monkeypatch.setattr(select_module, "read_host_memory",
                        lambda: HostMemory(total_bytes=32 << 30, available_bytes=24 << 30))
    # The verdict follows the ISA planned for, never that of the CPU running the suite.
    monkeypatch.setattr(select_module, "read_cpu_flags", lambda cpuinfo=None: ISA[isa])
    for part in line.command.split("&&"):
        if not _without_env(part.strip()).startswith("dspark"):
            continue  # pip install: this checkout is installed already
        env, argv = _argv(part.strip(), tmp_path)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, SECONDS)
        try:
            code = main(argv)
        except _Hang:
            pytest.fail(f"{line.where}: no answer within {SECONDS} s: {part}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        out, err = capsys.readouterr()
        shown = f"{line.where}: {part}\nexit {code}\nstdout: {out[-1500:]}\nstderr: {err[-1500:]}"
        assert code == (line.avx2_exit_code if isa == "avx2" else line.exit_code), shown
