"""Compare the functions SGLang sizes its pools with, release by release, against a reference release.

For releases the in-process runner cannot drive (dspark_inside.sglang.sizing needs runtime_context.override_platform),
this says whether the sizing arithmetic itself differs: each function's source, normalised by ast (comments,
docstrings and formatting dropped), is compared with the reference release's.
Usage: python benchmarks/version_matrix/sglang_source_diff.py [--matrix-dir DIR] [--reference 0.5.23]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# (file under sglang/srt, class or "", function): what turns free memory into max_total_num_tokens.
FUNCTIONS = (
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator", "_profile_available_bytes"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator", "_handle_max_mamba_cache"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator", "_calculate_mamba_ratio"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator", "_resolve_memory_pool_config"),
    ("mem_cache/kv_cache_configurator.py", "KVCacheConfigurator", "resolve_max_num_reqs"),
    ("model_executor/pool_configurator.py", "DefaultPoolConfigurator", "_compute_cell_size"),
    ("model_executor/pool_configurator.py", "DefaultPoolConfigurator", "calculate_pool_sizes"),
    ("configs/mamba_utils.py", "BaseLinearStateParams", "mamba_cache_per_req"),
    ("configs/mamba_utils.py", "Mamba2StateShape", "create"),
    ("server_args.py", "ServerArgs", "_handle_gpu_memory_settings"),
)


def _strip_docstrings(node: ast.AST) -> ast.AST:
    for child in ast.walk(node):
        body = getattr(child, "body", None)
        if (isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)):
            child.body = body[1:] or [ast.Pass()]
    return node


def function_source(site: Path, rel: str, cls: str, name: str) -> str | None:
    """The normalised source of cls.name in site/sglang/srt/rel, or None where the release has none."""
    path = site / "sglang" / "srt" / rel
    if not path.exists():
        return None
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return ast.unparse(_strip_docstrings(item))
    return None


def site_packages(env: Path) -> Path:
    """The release environment's site-packages."""
    return next((env / "lib").glob("python*/site-packages"))


def main() -> int:
    """One line per release: which sizing functions equal the reference's, differ, or are absent."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix-dir", default=str(ROOT / ".engines-matrix"))
    ap.add_argument("--reference", default="0.5.23")
    args = ap.parse_args()
    matrix = Path(args.matrix_dir)
    ref_site = site_packages(matrix / f"sglang-{args.reference}")
    reference = {f: function_source(ref_site, *f) for f in FUNCTIONS}
    envs = sorted(matrix.glob("sglang-0.*"), key=lambda p: tuple(int(x) for x in p.name.split("-")[1].split(".")))
    print(f"| release | {' | '.join(name for _, _, name in FUNCTIONS)} |")
    print("|---|" + "---|" * len(FUNCTIONS))
    for env in envs:
        site = site_packages(env)
        cells = []
        for f in FUNCTIONS:
            src = function_source(site, *f)
            cells.append("absent" if src is None else "same" if src == reference[f] else "differs")
        print(f"| {env.name.split('-')[1]} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
