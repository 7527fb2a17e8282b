"""Render the matrix results (results/engine.json, results/planner.json) as the Markdown tables in docs/.

Usage: python benchmarks/version_matrix/render.py [--write docs/version-matrix.md]
(prints the tables; with --write, replaces each <!-- NAME --> ... <!-- /NAME --> block of that page)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _one_line(text: object, width: int = 90) -> str:
    """An engine's message on one Markdown table line."""
    return " ".join(str(text).split())[:width].replace("|", "/")


def engine_table(report: dict[str, Any], witness: dict[str, Any]) -> list[str]:
    """Release x case: the real CPU engine's KV line against the witness and dspark's pure model."""
    lines = ["| release | case | engine: tokens, concurrency | witness | equal | dspark (pure model) | equal |",
             "|---|---|---|---|---|---|---|"]
    for release in sorted(report, key=lambda v: tuple(int(x) for x in v.split("."))):
        for cid, row in sorted(report[release].items()):
            if cid.startswith("_"):
                lines.append(f"| {release} | (runner) | {str(row)[:120]} | | no result |")
                continue
            engine = (f"{row['engine_tokens']:,}, {row['engine_concurrency']}x" if row.get("engine_tokens")
                      else f"refused: {_one_line(row.get('engine_error'))}")
            dspark = (f"{row['dspark_tokens']:,}, {row['dspark_concurrency']}x" if row.get("dspark_tokens")
                      else f"refused: {_one_line(row.get('dspark_error'))}")
            equal = (row.get("engine_tokens") == row.get("dspark_tokens")
                     and row.get("engine_concurrency") == row.get("dspark_concurrency"))
            w = witness.get(release, {}).get(cid, {})
            wit = (f"{w['witness_tokens']:,}, {w['witness_concurrency']}x" if w.get("witness_tokens")
                   else f"error: {_one_line(w.get('witness_error'))}" if w else "not run")
            w_equal = (w.get("witness_tokens") == row.get("engine_tokens")
                       and w.get("witness_concurrency") == row.get("engine_concurrency"))
            if row.get("engine_error"):  # nothing of the engine's to compare with: say so, not "no"
                w_mark = d_mark = "engine refused"
            else:
                w_mark, d_mark = ("yes" if w_equal else "**no**"), ("yes" if equal else "**no**")
            lines.append(f"| {release} | {cid} | {engine} | {wit} | {w_mark} | {dspark} | {d_mark} |")
    return lines


def _device(row: dict[str, Any]) -> str:
    """The device the release's code was told it runs on, and the GDN prefill kernel it then chose."""
    dev = row.get("device")
    if not dev:
        return ""
    where = f"{dev['name'].removeprefix('NVIDIA ')} SM{dev['capability'][0]}.{dev['capability'][1]} CUDA {dev['cuda']}"
    if row.get("gdn_prefill_backend"):
        return f"{where}: {row['gdn_prefill_backend']}"
    return f"{where}: (no GDN checkpoint export)"


def _same(row: dict[str, Any], prefix: str) -> bool:
    """Planner and dspark (or its fallback release) agree on tokens, printed concurrency, block and blocks."""
    return (row.get(f"{prefix}_tokens") == row.get("kv_pool_tokens")
            and f"{row.get(f'{prefix}_concurrency', -1):.2f}" == f"{row['max_concurrency']:.2f}"
            and row.get(f"{prefix}_block", row["block_size"]) == row["block_size"]
            and row.get(f"{prefix}_blocks", row["num_blocks"]) == row["num_blocks"])


def planner_table(report: dict[str, Any]) -> list[str]:
    """Release x GPU case: the release's own planner against dspark's pure model."""
    lines = ["| release | case | device: GDN prefill | planner: block, blocks, tokens, concurrency "
             "| dspark: block, blocks, tokens, concurrency | equal |", "|---|---|---|---|---|---|"]
    for release in sorted(report, key=lambda v: tuple(int(x) for x in v.split("."))):
        for cid, row in sorted(report[release].items()):
            if cid.startswith("_"):
                lines.append(f"| {release} | (runner) | | {str(row)[-120:]} | | no result |")
                continue
            if row.get("error"):
                lines.append(f"| {release} | {cid} | {_device(row)} | error: {_one_line(row['error'])} | | no result |")
                continue
            planner = (f"{row['block_size']}, {row['num_blocks']:,}, {row.get('kv_pool_tokens', 0):,}, "
                       f"{row['max_concurrency']:.2f}x")
            dspark = (f"{row.get('dspark_block', '?')}, {row.get('dspark_blocks', 0):,}, {row['dspark_tokens']:,}, "
                      f"{row['dspark_concurrency']:.2f}x" if "dspark_tokens" in row else "error")
            if "cuda_runtime" in row.get("dspark_how", ""):
                dspark += " (API: the CLI takes no CUDA runtime)"
            mark = "yes" if _same(row, "dspark") else "**no**"
            if row.get("fallback"):
                mark += f"; {row['fallback']}'s figure: " + ("equal" if _same(row, "fallback") else "**differs**")
            lines.append(f"| {release} | {cid} | {_device(row)} | {planner} | {dspark} | {mark} |")
    return lines


def source_table(matrix_dir: str) -> list[str]:
    """sglang_source_diff.py's table (it reads the installed SGLang environments)."""
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("sglang_source_diff.py")),
                           "--matrix-dir", matrix_dir],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip().splitlines()


def main() -> int:
    """Print the tables, or write them into the page's marked blocks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write")
    ap.add_argument("--matrix-dir", default=str(Path(__file__).resolve().parents[2] / ".engines-matrix"))
    args = ap.parse_args()
    tables = {"ENGINE_TABLE": engine_table(_load("engine"), _load("witness")),
              "PLANNER_TABLE": planner_table(_load("planner")), "SOURCE_TABLE": source_table(args.matrix_dir)}
    if not args.write:
        print("\n\n".join("\n".join(t) for t in tables.values()))
        return 0
    page = Path(args.write)
    text = page.read_text()
    for name, lines in tables.items():
        block = f"<!-- {name} -->\n" + "\n".join(lines) + f"\n<!-- /{name} -->"
        start, end = text.index(f"<!-- {name} -->"), text.index(f"<!-- /{name} -->") + len(f"<!-- /{name} -->")
        text = text[:start] + block + text[end:]
    page.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
