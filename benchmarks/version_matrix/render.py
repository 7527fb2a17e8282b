"""Render the matrix results (results/*.json) as the Markdown tables in docs/version-matrix.md.

Usage: python benchmarks/version_matrix/render.py [--write docs/version-matrix.md]
(prints the tables; with --write, replaces each <!-- NAME --> ... <!-- /NAME --> block of that page)
"""

from __future__ import annotations

import argparse
import json
import re
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


def _no_paths(text: object) -> str:
    """An engine's message without this checkout's paths (they say where the matrix ran, not what failed)."""
    return re.sub(r"\(?/\S*/\.engines-matrix/[^)\s]*\)?", "", str(text))


def _release_key(name: str) -> tuple[str, tuple[int, ...]]:
    engine, _, version = name.partition(" ")
    return engine, tuple(int(x) for x in version.split("."))


def _figure(tokens: object, concurrency: object) -> str:
    return f"{tokens:,}, {concurrency}x" if isinstance(tokens, int) else "-"


def _start_equal(row: dict[str, Any]) -> str:
    """Whether what start pinned is the witness's figure (and, where the engine served, the engine's line)."""
    witness = row.get("witness") or {}
    if witness.get("error") or witness.get("kv_pool_tokens") is None:
        forced = "--force" in row["command"].split() and row["pinned"] == row["launch_tokens"] == row["parsed_pin"]
        return "forced: launched on dspark's own figure (no witness)" if forced else "no witness figure"
    w = (witness["kv_pool_tokens"], f"{witness['max_concurrency']:.2f}")
    checks = [w == (row["launch_tokens"], row["launch_concurrency"]), row["pinned"] == row["parsed_pin"]]
    if row["pinned_flag"] == "--max-total-tokens":
        checks.append(row["pinned"] == w[0])
    else:
        checks.append(row["pinned"] == row["budget_bytes"])
    if row["mode"] == "exec":
        if row.get("engine_tokens") is None:
            found = re.search(r"\w+Error: .*", str(row.get("engine_error") or "").split("\n...\n")[0])
            return f"the engine refused: {_one_line(found.group(0) if found else 'no KV line', 110)}"
        checks += [w == (row["engine_tokens"], row["engine_concurrency"]), row.get("engine_pin") == row["pinned"]]
    return "yes" if all(checks) else "**no**"


def start_table(report: dict[str, Any]) -> list[str]:
    """Release x case: `dspark start`'s detected version, the witness's figure, the pin, the engine's own line."""
    lines = ["| release | case | how | detected (figures of) | findings | witness: tokens, concurrency | pinned "
             "(the release's parser read) | engine's own line | equal |", "|---|---|---|---|---|---|---|---|---|"]
    for release in sorted(report, key=_release_key):
        for cid, row in sorted(report[release].items()):
            if row.get("error") is not None:
                error = row["error"]
                message = str(error.get("message") if isinstance(error, dict) else error)
                _, vouch, after = message.partition("could not vouch for the pool: ")
                if vouch:  # the usual refusal of an unmodelled release: say what the witness lacked
                    message = f"not modelled and the witness cannot run: {after}"
                message = _no_paths(message)
                lines.append(f"| {release} | {cid} | {row['mode']} | | | | | | start refused (exit "
                             f"{row.get('exit_code', '?')}): {_one_line(message, 150)} |")
                continue
            detected = row["detected"]
            codes = [c for c in row["findings"] if c.startswith(("engine-version", "witness", "launch-on"))]
            witness = row.get("witness") or {}
            failed = f"error: {_one_line(_no_paths(witness.get('error')))}"
            wit = (_figure(witness["kv_pool_tokens"], f"{witness['max_concurrency']:.2f}")
                   if witness.get("kv_pool_tokens") is not None else failed)
            pinned = f"{row['pinned_flag']} {row['pinned']:,} ({row['parsed_pin']:,})" if row["pinned"] else "none"
            engine = (_figure(row.get("engine_tokens"), row.get("engine_concurrency"))
                      + (f"; pin {row['engine_pin']:,}" if row.get("engine_pin") else "")
                      if row["mode"] == "exec" else "cannot serve here")
            device = "VLLM_TARGET_DEVICE" in row.get("engine_env", {})
            how = row["mode"] + ("; VLLM_TARGET_DEVICE=cpu" if device else "")
            lines.append(f"| {release} | {cid} | {how} | {detected['installed']} ({detected['modelled']}) | "
                         f"{', '.join(codes)} | {wit} | {pinned} | {engine} | {_start_equal(row)} |")
    return lines


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _pool(row: dict[str, Any]) -> str:
    if row.get("max_total_num_tokens") is None:
        return f"refused: {_one_line(row.get('error'), 120)}"
    return f"{row['max_total_num_tokens']:,} / {row['max_running_requests']} seats (f {row['mem_fraction_static']})"


def _difference(row: dict[str, Any]) -> str:
    mine, theirs = row.get("dspark_tokens"), row.get("max_total_num_tokens")
    if mine is None or theirs is None:
        return "no figure to compare"
    if mine == theirs and row.get("dspark_max_running_requests") == row.get("max_running_requests"):
        return "equal"
    seats = ("" if row.get("dspark_max_running_requests") == row.get("max_running_requests")
             else f"; seats {row.get('dspark_max_running_requests')} vs {row.get('max_running_requests')}")
    return f"**{theirs - mine:+,}** ({(theirs - mine) / mine:+.2%}){seats}"


_CASE_ORDER = ("seed-6", "seed-16", "seed-32", "dense-default", "hybrid-default", "hybrid-nextn-default")


def sglang_table(report: dict[str, Any]) -> list[str]:
    """Release x case: the release's own sizing (the witness) against dspark's pure model (0.5.23)."""
    lines = ["| release | case | sizing | witness: pool / seats (mem fraction) | dspark (0.5.23 model) "
             "| witness - dspark |", "|---|---|---|---|---|---|"]
    for release in sorted(report, key=_ver):
        rows = report[release]
        if "_runner" in rows:
            lines.append(f"| {release} | (all) | not driven | {_one_line(rows['_runner'], 120)} | | |")
            continue
        order = {c: i for i, c in enumerate(_CASE_ORDER)}
        for cid in sorted(rows, key=lambda c: (order.get(c.split("+")[0], 99), c)):
            row = rows[cid]
            case = cid.replace("+extra-buffer", " + extra_buffer, SPEC_V2")
            path = row.get("sizing_path") or "-"
            if row.get("stood_in"):
                path += " (sgl_kernel stood in)"
            dspark = f"{row['dspark_tokens']:,} / {row['dspark_max_running_requests']}" if row.get(
                "dspark_tokens") is not None else str(row.get("dspark_error"))
            lines.append(f"| {release} | {case} | {path} | {_pool(row)} | {dspark} | {_difference(row)} |")
    return lines


def _seed_solutions() -> dict[str, dict[str, Any]]:
    """Per release: the solved free memory (auto fraction) and fraction (118 GiB free) per seat count."""
    free: dict[str, Any] = {}
    fraction: dict[str, Any] = {}
    for path in sorted(RESULTS.glob("seed_sglang*.json")):
        target = fraction if "fraction" in path.name else free
        for release, rows in json.loads(path.read_text()).items():
            target[release] = {r["seats"]: r for r in rows if "error" not in r}
    return {"free": free, "fraction": fraction}


def seed_table(report: dict[str, Any]) -> list[str]:
    """Release: default fraction on a GB10, GDN state, cell, pools at 118 GiB free, and the solved inputs."""
    solved = _seed_solutions()
    lines = ["| release | default `mem_fraction_static` (GB10) | GDN state per request | cell | pool at 118 GiB free, "
             "26 GiB loaded: 6 / 16 / 32 seats | free memory the pools need: 16 / 32 seats | fraction they need at "
             "118 GiB: 16 / 32 |", "|---|---|---|---|---|---|---|"]
    for release in sorted(report, key=_ver):
        rows = report[release]
        seed = {n: rows.get(f"seed-{n}") or {} for n in (6, 16, 32)}
        flagged = ""
        if seed[16].get("max_total_num_tokens") is None and rows.get("seed-16+extra-buffer"):
            seed = {n: rows.get(f"seed-{n}+extra-buffer") or {} for n in (6, 16, 32)}
            flagged = " (with `--mamba-scheduler-strategy extra_buffer`, `SGLANG_ENABLE_SPEC_V2=1`: refuses without)"
        if seed[16].get("max_total_num_tokens") is None:
            lines.append(f"| {release} | | | | not sized: {_one_line(seed[16].get('error'), 100)} | | |")
            continue
        pools = " / ".join(f"{seed[n]['max_total_num_tokens']:,}" for n in (6, 16, 32)) + flagged
        free = solved["free"].get(release, {})
        need = (" / ".join(f"{free[n]['free_before'] / (1 << 30):.2f} GiB" for n in (16, 32))
                if all(n in free for n in (16, 32)) else "not searched")
        frac = solved["fraction"].get(release, {})
        fneed = (" / ".join(f"{frac[n]['mem_fraction_static']:.3f}" for n in (16, 32))
                 if all(n in frac for n in (16, 32)) else "not searched")
        lines.append(f"| {release} | {seed[16]['mem_fraction_static']} | {seed[16]['mamba_cache_per_req']:,} B | "
                     f"{seed[16]['cell_size']:,} B | {pools} | {need} | {fneed} |")
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
              "PLANNER_TABLE": planner_table(_load("planner")), "SOURCE_TABLE": source_table(args.matrix_dir),
              "SGLANG_TABLE": sglang_table(_load("sglang")), "SEED_SGLANG_TABLE": seed_table(_load("sglang")),
              "SGLANG_ALL_PROBES_TABLE": sglang_table(_load("sglang_all_probes")),
              "START_TABLE": start_table(_load("start"))}
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
