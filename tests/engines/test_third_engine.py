"""docs/architecture.md's "Adding an engine" walked for real: a stub third engine, `toy`, added the way a real
one is (its package under dspark/engines/, its tools under dspark_inside/, one line in the registry, the recipe
schemas regenerated), in a copy of dspark, and driven through the real CLI (`python -m dspark`).

"Adding an engine release" too: toyserve 0.4.0 (release-0.4.0.patch, a patch of the toy's package only) takes a
larger share of memory and renames --pool-tokens to --kv-tokens; each release's figures and the former name for
an older install are checked.

The toy's files are tests/fixtures/toy_engine/: `engine/` (dspark.engines.toy: its knob, flag reader, capacity
model, hooks, adapter, log lines, spec), `inside/` (dspark_inside.toy: argv_check and witness, run by run_inside)
and `toyserve/`, the fake engine its interpreter (this Python) imports: its parser and its planner.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from dspark.engines import ENGINE_NAMES, engine_spec, foreign_knobs

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "toy_engine"
MODEL = REPO / "tests" / "fixtures" / "model-qwen3-32b"  # 64 layers, hidden 5120, no weights files
REGISTRY = Path("dspark/engines/__init__.py")
GENERATED = (Path("dspark/config/recipe_core_schema.py"), Path("dspark/data/recipe.schema.json"))
TOY_DIRS = (Path("dspark/engines/toy"), Path("dspark/_inside_root/dspark_inside/toy"))
BYTES_PER_TOKEN = 2 * 64 * 5120 * 2  # the toy's arithmetic: K and V of every layer, 2 bytes each


@dataclass(frozen=True)
class Tree:
    """A copy of dspark with the toy added (src), the fake engine's site (site), and a working folder (data)."""

    src: Path
    site: Path
    data: Path

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("DSPARK_", "LWS_")) and k not in ("MAX_NUM_SEQS", "PYTHONPATH")}
        return {**keep, "PYTHONPATH": os.pathsep.join([str(self.src), str(self.site)]),
                "DSPARK_DATA_DIR": str(self.data), **extra}

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, check=False,
                              env=self.env(**env), cwd=self.data)

    def dspark(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "dspark", *args, **env)

    def validate_json(self, *args: str, **env: str) -> dict[str, object]:
        proc = self.dspark("validate", "--engine", "toy", "--model", str(MODEL), "--hardware", "h200", "--json",
                           *args, **env)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        out: dict[str, object] = json.loads(proc.stdout)
        return out


def _add_registry_line(text: str) -> str:
    """The one line: "toy" as the last entry of ENGINE_NAMES (one engine a line)."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ENGINE_NAMES = ("))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(")"))
    return "".join([*lines[:end], '    "toy",\n', *lines[end:]])


def _files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _install_toyserve(root: Path, version: str) -> Path:
    """A site folder where the engine's interpreter finds toyserve: its package and its distribution's metadata."""
    site = root / f"site-{version}"
    shutil.copytree(FIXTURE / "toyserve", site / "toyserve")
    (site / f"toyserve-{version}.dist-info").mkdir()
    (site / f"toyserve-{version}.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: toyserve\nVersion: {version}\n")
    return site


def _dspark_with_the_toy(root: Path) -> Path:
    """The checklist's steps 1 to 3 on a copy of dspark: the toy's two packages and the registry line."""
    src = root / "src"
    shutil.copytree(REPO / "dspark", src / "dspark", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(FIXTURE / "engine", src / TOY_DIRS[0])
    shutil.copytree(FIXTURE / "inside", src / TOY_DIRS[1])
    registry = src / REGISTRY
    registry.write_text(_add_registry_line(registry.read_text()))
    return src


def _regenerate_schemas(tree: Tree) -> None:
    """Step 4: the recipe schemas, from the registry."""
    written = tree.run("-m", "dspark.config.recipe_schema", "--write")
    assert written.returncode == 0, written.stderr


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    root = tmp_path_factory.mktemp("third_engine")
    made = Tree(_dspark_with_the_toy(root), _install_toyserve(root, "0.3.0"), root / "data")
    made.data.mkdir()
    found = made.run("-c", "import dspark, toyserve; print(dspark.__file__, toyserve.__version__)")
    assert found.stdout.split() == [str(made.src / "dspark" / "__init__.py"), "0.3.0"], found.stderr  # the copy
    # Before the schemas are regenerated, a recipe naming the toy is refused by the checked-in schema.
    recipe = made.data / "toy.yaml"
    recipe.write_text(f"name: toy-recipe\nengine: toy\nmodel:\n  path: {MODEL}\ncontext:\n  max_model_len: 8192\n")
    stale = made.dspark("validate", str(recipe), "--hardware", "h200")
    assert stale.returncode == 2 and "expected one of: vllm, sglang (got 'toy')" in stale.stderr, stale.stderr
    _regenerate_schemas(made)
    return made


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    """The toy with its release 0.4.0 added ("Adding an engine release": release-0.4.0.patch), 0.4.0 installed."""
    root = tmp_path_factory.mktemp("third_engine_release")
    made = Tree(_dspark_with_the_toy(root), _install_toyserve(root, "0.4.0"), root / "data")
    made.data.mkdir()
    applied = subprocess.run(["git", "apply", "-p1", str(FIXTURE / "release-0.4.0.patch")], cwd=made.src,
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr
    _regenerate_schemas(made)
    return made


def test_the_toy_is_its_own_packages_and_one_registry_line(tree: Tree) -> None:
    before, after = _files(REPO / "dspark"), _files(tree.src / "dspark")
    added = sorted(set(after) - set(before))
    assert set(before) <= set(after)
    assert added and all(any(d.relative_to("dspark") in p.parents for d in TOY_DIRS) for p in added), added
    changed = sorted(p for p in before if before[p] != after[p])
    assert changed == sorted(p.relative_to("dspark") for p in (REGISTRY, *GENERATED)), changed
    diff = list(difflib.unified_diff(before[REGISTRY.relative_to("dspark")].decode().splitlines(),
                                     after[REGISTRY.relative_to("dspark")].decode().splitlines(), lineterm="", n=0))
    edits = [ln for ln in diff[2:] if ln[:1] in "+-"]
    assert edits == ['+    "toy",']
    for generated in GENERATED:  # regenerated, not edited: they differ by the toy's name in the engine enum only
        path = generated.relative_to("dspark")
        without = re.sub(r""",\s*['"]toy['"]""", "", after[path].decode())
        assert without == before[path].decode() != after[path].decode(), generated


def test_nothing_outside_the_toy_names_it() -> None:
    """The generic code needed no edit for the toy: no file of dspark names it."""
    named = [str(p) for p in (REPO / "dspark").rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and re.search(rb"\btoy", p.read_bytes(), re.IGNORECASE)]
    assert named == []


def test_validate_gives_the_toys_figures_and_settings(tree: Tree) -> None:
    pinned = tree.validate_json("--toy-pin", "50000", "--max-model-len", "8192")
    capacity, settings = pinned["capacity"], pinned["settings"]
    assert isinstance(capacity, dict) and isinstance(settings, dict)
    assert (capacity["engine"], capacity["engine_version"]) == ("toy", "0.3.0")
    assert (capacity["kv_pool_tokens"], capacity["kv_budget_source"]) == (50000, "pinned")
    assert capacity["kv_bytes_per_token"] == BYTES_PER_TOKEN
    assert capacity["max_concurrency"] == 50000 / 8192
    assert settings["toy_pin"] == {"value": 50000, "source": "flag"}
    assert settings["max_num_seqs"] == {"value": 50000 // 8192, "source": "computed"}  # the safe default
    assert pinned["argv"] == ["python3", "-m", "toyserve", "--model", str(MODEL), "--slots", str(50000 // 8192),
                              "--pool-tokens", "50000", "--context", "8192"]
    # Unpinned: half of what the weights leave of the GPU, in the toy's bytes per token.
    estimated = tree.validate_json("--max-model-len", "8192")
    gpus, model = estimated["hardware"], estimated["model"]
    assert isinstance(gpus, dict) and isinstance(model, dict)
    free = gpus["gpus"][0]["free_bytes"]
    pool = (free - model["weights_per_gpu_bytes"]) * 50 // 100 // BYTES_PER_TOKEN  # toyserve 0.3.0: half
    figures = estimated["capacity"]
    assert isinstance(figures, dict)
    assert (figures["kv_pool_tokens"], figures["kv_budget_source"]) == (pool, "estimate")
    assert pool > 0
    # The environment variable, and the engine's own flags after -- (its flag reader: flag_knobs).
    from_env = tree.validate_json("--max-model-len", "1024", DSPARK_TOY_PIN="4K")
    assert from_env["settings"]["toy_pin"] == {"value": 4096, "source": "env:DSPARK_TOY_PIN"}  # type: ignore[index]
    pasted = tree.validate_json("--", "--slots", "5", "--context", "4096", "--pool-tokens", "30000")
    assert {k: pasted["settings"][k] for k in ("max_num_seqs", "max_model_len", "toy_pin")} == {  # type: ignore[index]
        "max_num_seqs": {"value": 5, "source": "flag"}, "max_model_len": {"value": 4096, "source": "flag"},
        "toy_pin": {"value": 30000, "source": "flag"}}


def test_a_bad_toy_value_and_the_toys_knob_elsewhere_are_refused(tree: Tree) -> None:
    for bad in ("0", "-5", "many"):
        proc = tree.dspark("validate", "--engine", "toy", "--model", str(MODEL), "--toy-pin", bad)
        assert proc.returncode == 2 and f"--toy-pin {bad!r}" in proc.stderr, proc.stderr
        assert "expected a positive number of tokens" in proc.stderr and "Traceback" not in proc.stderr
    # The engines already there refuse the new knob (the registry's foreign_knobs), pointing at their own pin.
    for engine, instead in (("vllm", "kv_cache_memory_bytes"), ("sglang", "max_total_tokens")):
        proc = tree.dspark("validate", "--engine", engine, "--model", str(MODEL), "--toy-pin", "4096")
        assert proc.returncode == 2, proc.stderr
        assert f"toy_pin from the command line does not apply to {engine}" in proc.stderr
        assert f"use {instead} for {engine}" in proc.stderr
    # And the toy refuses theirs.
    proc = tree.dspark("validate", "--engine", "toy", "--model", str(MODEL), "--kv-cache-memory", "8GiB")
    assert proc.returncode == 2 and "kv_cache_memory_bytes from the command line does not apply to toy" in proc.stderr


def test_explain_and_help_show_the_toys_knob(tree: Tree) -> None:
    explain = tree.dspark("validate", "--engine", "toy", "--model", str(MODEL), "--hardware", "h200",
                          "--toy-pin", "20000", "--max-model-len", "8192", "--explain")
    assert explain.returncode == 0, explain.stderr
    assert re.search(r"^toy_pin +20000 +flag$", explain.stdout, re.MULTILINE), explain.stdout
    shown = tree.dspark("validate", "--help")
    assert shown.returncode == 0
    assert "[vllm|sglang|toy]" in shown.stdout
    assert re.search(r"--toy-pin TOKENS +Toy's KV pool in tokens", shown.stdout), shown.stdout
    assert "DSPARK_TOY_PIN" in shown.stdout


def test_start_dry_run_gives_the_toys_argv_judged_by_its_own_parser(tree: Tree) -> None:
    args = ("start", "--engine", "toy", "--model", str(MODEL), "--hardware", "h200", "--max-model-len", "8192",
            "--dry-run", "--", "--slots", "8", "--pool-tokens", "70000")
    proc = tree.dspark(*args)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "engine parser (0.3.0) accepted the argv: slots=8, pool_tokens=70000" in proc.stdout
    assert f"exec: {sys.executable} -m toyserve --model {MODEL} --slots 8 --pool-tokens 70000 --context 8192" \
        in proc.stdout
    assert "toy 0.3.0's own planner agrees on dspark's pin: 70,000 tokens" in proc.stdout  # its witness, same run
    # A flag toyserve's parser does not take: its own parser (dspark_inside.toy.argv_check) says so.
    rejected = tree.dspark(*args, "--bogus", "3")
    assert rejected.returncode != 0
    assert "the installed toy 0.3.0 rejects this argv: toyserve: error: unrecognized arguments: --bogus 3" \
        in rejected.stderr


def test_engine_check_runs_the_toys_witness_in_its_interpreter(tree: Tree) -> None:
    checked = tree.validate_json("--max-model-len", "8192", "--engine-check")
    capacity = checked["capacity"]
    assert isinstance(capacity, dict)
    assert capacity["witness"] == {**capacity["witness"], "engine_version": "0.3.0", "agrees": True,
                                   "kv_pool_tokens": capacity["kv_pool_tokens"]}
    # Without the fake engine in its interpreter, the check says so instead of agreeing.
    broken = tree.run("-m", "dspark", "validate", "--engine", "toy", "--model", str(MODEL), "--hardware", "h200",
                      "--json", "--engine-check", DSPARK_ENGINE_PYTHON=str(tree.data / "no-python"))
    assert broken.returncode != 0 and "does not exist" in broken.stderr, broken.stderr


def test_a_recipe_names_the_toy_once_the_schemas_are_regenerated(tree: Tree) -> None:
    proc = tree.dspark("validate", str(tree.data / "toy.yaml"), "--hardware", "h200", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["engine"], out["capacity"]["max_model_len"]) == ("toy", 8192)


def test_the_generated_environment_doc_lists_the_toys_knob_and_flags(tree: Tree) -> None:
    proc = tree.run("-c", "from dspark.config.environment_doc import environment_md; print(environment_md())")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split(" | ")[0]: line for line in proc.stdout.splitlines() if line.startswith("| `")}
    assert rows["| `DSPARK_TOY_PIN`"] == ("| `DSPARK_TOY_PIN` | toy_pin | `--toy-pin` | Toy `--pool-tokens` | — | "
                                         "a positive number of tokens |")
    assert "Toy `--slots`" in rows["| `MAX_NUM_SEQS`"] and "vllm or sglang or toy" in rows["| `DSPARK_ENGINE`"]


def test_the_shipped_engines_refuse_exactly_their_specs_foreign_knobs() -> None:
    """foreign_knobs derives nothing new for two engines that list each other's knobs: move-first."""
    for name in ENGINE_NAMES:
        assert foreign_knobs(name) == engine_spec(name).foreign_knobs


def test_the_release_touches_only_the_toys_package(tree: Tree, released: Tree) -> None:
    patched = re.findall(r"^\+\+\+ b/(\S+)", (FIXTURE / "release-0.4.0.patch").read_text(), re.MULTILINE)
    assert patched and all(Path(p).parent == TOY_DIRS[0] for p in patched), patched
    before, after = _files(tree.src), _files(released.src)
    assert set(before) == set(after)
    changed = sorted(str(p) for p in before if before[p] != after[p])
    assert changed == sorted(patched)


def test_each_release_is_planned_by_its_own_facts(released: Tree) -> None:
    for asked, share in ((None, 75), ("0.3.0", 50), ("0.4.0", 75)):
        out = released.validate_json("--max-model-len", "8192", *(("--engine-version", asked) if asked else ()))
        versions, gpus, model, capacity = out["engine_version"], out["hardware"], out["model"], out["capacity"]
        assert isinstance(versions, dict) and isinstance(gpus, dict) and isinstance(model, dict)
        assert isinstance(capacity, dict)
        assert versions["modelled"] == (asked or "0.4.0")
        assert asked or versions["installed"] == "0.4.0"  # nothing asked: the installed release is planned for
        left = gpus["gpus"][0]["free_bytes"] - model["weights_per_gpu_bytes"]
        assert capacity["kv_pool_tokens"] == left * share // 100 // BYTES_PER_TOKEN, asked


def test_start_sets_the_new_flag_and_an_older_install_gets_its_former_name(released: Tree) -> None:
    args = ("start", "--engine", "toy", "--model", str(MODEL), "--hardware", "h200", "--max-model-len", "8192",
            "--toy-pin", "50000", "--dry-run")
    new = released.dspark(*args)
    assert new.returncode == 0, new.stderr + new.stdout
    assert "engine parser (0.4.0) accepted the argv" in new.stdout
    assert re.search(r"^exec: .* -m toyserve .*--kv-tokens 50000 ", new.stdout, re.MULTILINE), new.stdout
    older = replace(released, site=released.src.parent / "site-0.3.0")
    _install_toyserve(released.src.parent, "0.3.0")
    old = older.dspark(*args)
    assert old.returncode == 0, old.stderr + old.stdout
    assert "engine parser (0.3.0) accepted the argv" in old.stdout
    assert re.search(r"^exec: .* -m toyserve .*--pool-tokens 50000 ", old.stdout, re.MULTILINE), old.stdout
