"""Start-up cost of `dspark validate` against a bare interpreter that imports dspark's own dependencies.

The floor is `python -c "import click, pydantic, yaml, psutil, pynvml, rich"`: the least any dspark command
could cost. Each figure is the median wall time of N fresh subprocesses, the kinds interleaved so that a busy
machine slows all alike. The goal is a ratio of 2 or less. `dspark validate --json` and `dspark validate` (its
table, drawn by rich) run bare: the default recipe, on a machine without NVIDIA GPUs against the built-in
profile, with the DSPARK_* variables removed from their environment so that the shipped default is measured.
A third reference, the floor plus one one-field pydantic model, shows what pydantic's model machinery (which
`import pydantic` alone does not load, and every recipe needs) adds to the floor. Both run with bytecode caches,
as an installed package has them (pip compiles at install; the floor's packages are compiled): the children
run without PYTHONDONTWRITEBYTECODE, and a first untimed run writes dspark's __pycache__.

  python benchmarks/startup.py [-n 15] [--importtime]

--importtime also prints the 25 slowest imports of one `dspark validate --json` (python -X importtime), the
place to look when the ratio grows.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR = [sys.executable, "-c", "import click, pydantic, yaml, psutil, pynvml, rich"]
ONE_MODEL = [sys.executable, "-c", "import click, pydantic, yaml, psutil, pynvml, rich\n"
             "class A(pydantic.BaseModel):\n    x: int = 1\nA(x=2)"]
VALIDATE = [sys.executable, "-m", "dspark", "validate", "--json"]
TABLE = [sys.executable, "-m", "dspark", "validate"]


def clean_env() -> dict[str, str]:
    """This environment without DSPARK_* settings, writing bytecode, with this checkout first on the import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one fresh subprocess. Exit 0 or 1 (a plan that fits or one that
    does not: on a machine whose GPU is smaller than the recipe's) is measured; any other exit is an error path
    and stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, check=False)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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
    first, _ = run_timed(VALIDATE, env)  # once first: __pycache__ written, page cache warm, as for what follows
    kinds = {"floor": FLOOR, "one_model": ONE_MODEL, "json": VALIDATE, "table": TABLE}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.n):
        for kind, argv in kinds.items():
            w, c = run_timed(argv, env)
            wall[kind].append(w)
            cpu[kind].append(c)
    med = {k: statistics.median(v) for k, v in wall.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    labels = {"floor": "floor (import click, pydantic, yaml, psutil, pynvml, rich)",
              "one_model": "floor + one pydantic model", "json": "dspark validate --json",
              "table": "dspark validate (table)"}
    print(f"first dspark validate --json of this run (slower when it writes dspark's bytecode): {first:.3f} s")
    print(f"median of {args.n} fresh processes each: wall s (min-max), CPU s (user + system)")
    for kind, label in labels.items():
        v = wall[kind]
        print(f"  {label:<60} {med[kind]:.3f} ({min(v):.3f}-{max(v):.3f}), CPU {cpu_med[kind]:.3f}")
    for kind in ("json", "table"):
        print(f"ratio {labels[kind]} / floor: wall {med[kind] / med['floor']:.2f}, "
              f"CPU {cpu_med[kind] / cpu_med['floor']:.2f} (goal: 2.00 or less)")
    print(f"ratio dspark validate --json / (floor + one pydantic model): wall {med['json'] / med['one_model']:.2f}, "
          f"CPU {cpu_med['json'] / cpu_med['one_model']:.2f}")
    if args.importtime:
        print("slowest imports (cumulative) of one dspark validate --json:")
        print("\n".join(slowest_imports(env)))


if __name__ == "__main__":
    main()
