"""Start-up cost of `dspark validate` against a bare interpreter that imports dspark's own dependencies.

The floor is `python -c "import click, pydantic, yaml, psutil, pynvml, rich"`: the least any dspark command
could cost. Each kind runs as N fresh subprocesses, the kinds interleaved so that a busy machine slows all
alike, and is reported as wall time and CPU time (user + system of the child, which other processes on a
shared machine disturb far less than wall time): the best of N (the least the machine let it cost) and the
median. The goal is a ratio to the floor of 2 or less, on the best CPU time and the best wall time. The load
average is printed before and after: figures taken under load are slower and noisier, the best of N least so;
the median of each round's own ratio (the kinds of a round run back to back) is printed too, as the figure a
load that comes and goes moves least.

`dspark validate --json` and `dspark validate` (its table, drawn by rich) run bare: the default recipe, against
this machine's GPUs or, without NVIDIA GPUs, the built-in profile, with the DSPARK_* variables removed from
their environment so that the shipped default is measured. A plan that does not fit (exit 1: a GPU smaller than
the recipe's) is measured like one that fits. A third reference, the floor plus one one-field pydantic model,
shows what pydantic's model machinery adds to the floor: `import pydantic` alone does not load it, and dspark's
recipes validate with pydantic-core from a checked-in schema, so a plan loads it only when that schema must be
built afresh (another pydantic-core release). The children import dspark from this checkout (it goes first on
PYTHONPATH), so the benchmark runs from a copy of the repository without installing dspark. They run with
bytecode caches, as an installed package has them (pip compiles at install; the floor's packages are compiled):
the children run without PYTHONDONTWRITEBYTECODE, and one untimed run of each kind first writes dspark's
__pycache__.

  python3 benchmarks/startup.py [-n 15] [--importtime] [--json]

--importtime also prints the 25 slowest imports of one `dspark validate --json` (python -X importtime), the
place to look when the ratio grows; --json prints the figures as one JSON object instead of the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
KINDS = {"floor": FLOOR, "one_model": ONE_MODEL, "json": VALIDATE, "table": TABLE}
LABELS = {"floor": "floor (import click, pydantic, yaml, psutil, pynvml, rich)",
          "one_model": "floor + one pydantic model", "json": "dspark validate --json",
          "table": "dspark validate (table)"}
GOAL = 2.0


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


def measure(n: int, env: dict[str, str]) -> dict[str, dict[str, list[float]]]:
    """N wall and CPU figures per kind, the kinds interleaved."""
    figures: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in KINDS}
    for _ in range(n):
        for kind, argv in KINDS.items():
            wall, cpu = run_timed(argv, env)
            figures[kind]["wall"].append(wall)
            figures[kind]["cpu"].append(cpu)
    return figures


def summary(figures: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """Best and median of each kind's wall and CPU seconds, and each one's ratio to the floor's."""
    out: dict[str, dict[str, float]] = {}
    for kind, by in figures.items():
        out[kind] = {f"{stat}_{what}": fn(by[what]) for what in ("wall", "cpu")
                     for stat, fn in (("best", min), ("median", statistics.median))}
    for row in out.values():
        for key in list(row):
            if not key.startswith("ratio"):
                row[f"ratio_{key}"] = row[key] / out["floor"][key]
    for kind, by in figures.items():  # each round ran every kind back to back, under much the same load
        for what in ("wall", "cpu"):
            out[kind][f"paired_ratio_{what}"] = statistics.median(
                mine / floor for mine, floor in zip(by[what], figures["floor"][what], strict=True))
    return out


def print_table(result: dict[str, object], stats: dict[str, dict[str, float]], n: int) -> None:
    """The figures for people."""
    print(f"{result['machine']}")
    print(f"load average (1, 5, 15 min) before {result['load_before']}, after {result['load_after']}")
    print(f"first dspark validate --json of this run (slower when it writes dspark's bytecode): "
          f"{result['first_s']:.3f} s")
    print(f"{n} fresh processes each, seconds: best of {n} (median), wall and CPU (user + system)")
    print(f"  {'':<60} {'wall':>15} {'CPU':>15}   ratio to the floor: wall, CPU (best; median)")
    for kind, label in LABELS.items():
        s = stats[kind]
        print(f"  {label:<60} {s['best_wall']:.3f} ({s['median_wall']:.3f})"
              f" {s['best_cpu']:.3f} ({s['median_cpu']:.3f})"
              f"   {s['ratio_best_wall']:.2f}, {s['ratio_best_cpu']:.2f}"
              f" ({s['ratio_median_wall']:.2f}, {s['ratio_median_cpu']:.2f})")
    for kind in ("json", "table"):
        s = stats[kind]
        ok = "met" if max(s["ratio_best_wall"], s["ratio_best_cpu"]) <= GOAL else "NOT met"
        print(f"{LABELS[kind]} / floor, best of {n}: wall {s['ratio_best_wall']:.2f}, CPU {s['ratio_best_cpu']:.2f}"
              f" (goal {GOAL:.2f} or less: {ok})")
    print(f"median of the {n} rounds' own ratios (each round runs every kind back to back, so a load that comes "
          "and goes weighs on both sides):")
    for kind in ("one_model", "json", "table"):
        s = stats[kind]
        print(f"  {LABELS[kind]:<60} wall {s['paired_ratio_wall']:.2f}, CPU {s['paired_ratio_cpu']:.2f}")
    one = stats["one_model"]
    print(f"dspark validate --json / (floor + one pydantic model), best of {n}: "
          f"wall {stats['json']['best_wall'] / one['best_wall']:.2f}, "
          f"CPU {stats['json']['best_cpu'] / one['best_cpu']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=15, help="fresh subprocesses of each kind (default 15)")
    parser.add_argument("--importtime", action="store_true", help="also list the slowest imports of validate")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("-n must be 1 or more")
    env = clean_env()
    load_before = [round(x, 2) for x in os.getloadavg()]
    first, _ = run_timed(VALIDATE, env)  # once first: __pycache__ written, page cache warm, as for what follows
    for argv in KINDS.values():
        run_timed(argv, env)
    figures = measure(args.n, env)
    stats = summary(figures)
    result: dict[str, object] = {
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()} ({sys.executable})",
        "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()],
        "first_s": round(first, 4), "n": args.n, "goal_ratio": GOAL,
        "kinds": {k: " ".join(a[1:]) for k, a in KINDS.items()},
        "figures": {k: {stat: round(v, 4) for stat, v in s.items()} for k, s in stats.items()},
    }
    if args.importtime:
        result["slowest_imports"] = slowest_imports(env)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print_table(result, stats, args.n)
    if args.importtime:
        print("slowest imports (cumulative) of one dspark validate --json:")
        print("\n".join(result["slowest_imports"]))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
