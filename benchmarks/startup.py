"""Start-up cost of `dspark validate --json` against a bare interpreter that imports dspark's own dependencies.

The floor is `python -c "import click, pydantic, yaml, psutil, pynvml, rich"`: the least any dspark command
could cost. Each figure is the median wall time of N fresh subprocesses, the two kinds interleaved so that a
busy machine slows both alike. The goal is a ratio of 2 or less. `dspark validate` runs bare (the default
recipe; on a machine without NVIDIA GPUs it plans against the built-in profile), with the DSPARK_* variables
removed from its environment so that the shipped default is what is measured. Both run with bytecode caches,
as an installed package has them (pip compiles at install; the floor's packages are compiled): the children
run without PYTHONDONTWRITEBYTECODE, and a first untimed run writes dspark's __pycache__.

  python benchmarks/startup.py [-n 15] [--importtime]

--importtime also prints the 25 slowest imports of one `dspark validate --json` (python -X importtime), the
place to look when the ratio grows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = [sys.executable, "-c", "import click, pydantic, yaml, psutil, pynvml, rich"]
VALIDATE = [sys.executable, "-m", "dspark", "validate", "--json"]


def clean_env() -> dict[str, str]:
    """This environment without DSPARK_* settings, writing bytecode, with this checkout first on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def wall_time(argv: Sequence[str], env: dict[str, str]) -> float:
    """Seconds one fresh subprocess takes; a non-zero exit fails the benchmark (it would measure an error path)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    return elapsed


def slowest_imports(env: dict[str, str], count: int = 25) -> list[str]:
    """The `count` imports with the largest cumulative time in one `dspark validate --json`."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *VALIDATE[1:]], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False)
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    return [f"{us / 1000:8.1f} ms {name}" for us, name in sorted(rows, reverse=True)[:count]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=15, help="fresh subprocesses of each kind (default 15)")
    parser.add_argument("--importtime", action="store_true", help="also list the slowest imports of validate")
    args = parser.parse_args()
    env = clean_env()
    wall_time(VALIDATE, env)  # once first: __pycache__ written, page cache warm, like the runs that follow
    floor: list[float] = []
    validate: list[float] = []
    for _ in range(args.n):
        floor.append(wall_time(FLOOR, env))
        validate.append(wall_time(VALIDATE, env))
    f, v = statistics.median(floor), statistics.median(validate)
    print(f"floor (import click, pydantic, yaml, psutil, pynvml, rich): median {f:.3f} s "
          f"(min {min(floor):.3f}, max {max(floor):.3f}) over {args.n}")
    print(f"dspark validate --json:                                   median {v:.3f} s "
          f"(min {min(validate):.3f}, max {max(validate):.3f}) over {args.n}")
    print(f"ratio: {v / f:.2f} (goal: 2.00 or less)")
    if args.importtime:
        print("slowest imports (cumulative) of one dspark validate --json:")
        print("\n".join(slowest_imports(env)))


if __name__ == "__main__":
    main()
