"""The project documents itself: no citation of files it does not ship, links that resolve, a quickstart CI runs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dspark.cli import main
from dspark.config.knobs import ENV_NAMES, KNOBS
from dspark.config.settings import OTHER_DSPARK_ENV
from dspark.hardware.select import host_snapshot
from dspark.hardware.snapshot import dumps_snapshot
from dspark.hardware.unified import HostMemory

ROOT = Path(__file__).resolve().parents[1]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if (ROOT / line).is_file()]


def test_nothing_cites_files_the_project_does_not_ship() -> None:
    unshipped = re.compile(r"DESIGN\.md|referenc[e]/|anchors\.md")  # spelled so it does not match itself
    url = re.compile(r"https?://\S+")  # web addresses (the vendored CRD links the Kubernetes API docs)
    hits = [
        f"{path}:{n}"
        for path in _tracked()
        for n, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), start=1)
        if unshipped.search(url.sub("", line))
    ]
    assert hits == []


def test_relative_links_in_the_docs_resolve() -> None:
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_code_paths_named_in_the_docs_exist() -> None:
    stale = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for path in re.findall(r"`((?:dspark|tests|scripts|launch)/[^`\s:]*)`", doc.read_text()):
            if not (ROOT / path).exists():
                stale.append(f"{doc.relative_to(ROOT)}: {path}")
    assert stale == []


def test_every_environment_variable_is_documented() -> None:
    text = (ROOT / "docs" / "environment.md").read_text()
    missing = [name for name in (*ENV_NAMES, *OTHER_DSPARK_ENV) if f"`{name}`" not in text]
    assert missing == []


def test_ci_runs_the_readme_quickstart_test_line() -> None:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block is not None
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).strip().splitlines()]
    assert len(lines) == 2
    assert "pip install" in lines[0] and lines[0].endswith("dspark validate")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert ci == [lines[1]]
    script = (ROOT / lines[1]).read_text()
    assert "pip install" in script and "'.[test]'" in script  # it installs the test extras itself
    assert "install-engines.sh" in script  # and the engines


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith(("DSPARK_", "VLLM_"))]:
        monkeypatch.delenv(name)


def _validate_json(*argv: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["validate", "--json", *argv])
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def test_the_docs_say_what_vllms_cpu_build_does_with_the_gdn_state(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """CpuPlatform.check_and_update_config resets the state to float32 on hosts *with* AVX512-BF16."""
    wrong = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = " ".join(doc.read_text().split())
        wrong += [f"{doc.relative_to(ROOT)}: {m.group(0)}"
                  for m in re.finditer(r"without\s+AVX512-BF16[^.;]*float32", text, re.I)]
    assert wrong == []
    _clean(monkeypatch)
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text((ROOT / "tests/fixtures/configs/qwen3-next-80b-a3b-instruct.json").read_text())
    dtypes = {}
    memory = HostMemory(total_bytes=1 << 40, available_bytes=1 << 40)
    for flags in ("avx512f avx512_bf16", "avx512f"):
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"flags\t: {flags}\n")
        host = tmp_path / "host.json"
        host.write_text(dumps_snapshot(host_snapshot(lambda: memory, cpuinfo=cpuinfo)))
        document = _validate_json("--model", str(model), "--engine", "vllm", "--platform", "cpu", "--hardware",
                                  str(host), "--kv-cache-memory", "4GiB")
        dtypes[flags] = document["capacity"]["details"]["mamba_state_dtypes"][1]
    assert dtypes == {"avx512f avx512_bf16": "float32", "avx512f": "bfloat16"}  # without: the model's bf16


def test_the_readmes_graph_capture_example_is_the_tools_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    """min(6 seats x (1 + 4 spec) x 2, 512) = 60, and vLLM captures the largest listed size below it: 56."""
    example = re.search(r"default recipe's (\d+) × (\d+) × 2 = (\d+) → (\d+)", (ROOT / "README.md").read_text())
    assert example is not None
    seats, query, bound, captured = (int(g) for g in example.groups())
    _clean(monkeypatch)
    cap = _validate_json("--hardware", "gb10x2")["capacity"]
    assert (cap["max_num_seqs"], 1 + cap["details"]["num_speculative_tokens"]) == (seats, query)
    assert bound == min(seats * query * 2, 512)
    assert cap["cudagraph_max_capture_size"] == captured < bound


def _environment_rows() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "environment.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[1] != "setting":
            rows[cells[1]] = cells
    return rows


def test_environment_md_names_only_flags_dspark_has() -> None:
    """Each row's "dspark flag" is an option of `dspark validate` that sets that setting, or "—" when none does."""
    import click  # noqa: PLC0415

    from dspark.cli.plan import validate  # noqa: PLC0415

    options = {p.name: p.opts[0] for p in validate.params if isinstance(p, click.Option)}
    rows = _environment_rows()
    assert set(rows) == {"recipe", *(k.name for k in KNOBS)}
    wrong = {}
    for name, cells in rows.items():
        if name == "recipe":
            continue
        shown = cells[2].strip("`")
        actual = options.get(name, "—")
        if shown != actual:
            wrong[name] = (shown, actual)
    assert wrong == {}


def test_environment_md_engine_flags_set_their_setting() -> None:
    """Each engine flag the table lists, given after --, sets that setting in the engine's flag reader."""
    from dspark.engines import engine_spec  # noqa: PLC0415
    from dspark.engines.pasted_flags import flag_values_from_engine_flags, parse_engine_flags  # noqa: PLC0415

    samples = {"served_model_name": "m", "tensor_parallel_size": "2", "pipeline_parallel_size": "2",
               "max_model_len": "4096", "kv_cache_dtype": "fp8_e4m3", "kv_cache_memory_bytes": "1000000",
               "max_total_tokens": "1000", "gpu_memory_utilization": "0.5", "mem_fraction_static": "0.5",
               "max_num_seqs": "3", "max_num_batched_tokens": "4096", "host": "0.0.0.0", "port": "9001",
               "distributed_runtime": "ray"}
    checked = 0
    for name, cells in _environment_rows().items():
        for part in filter(None, (p.strip() for p in cells[3].split(";"))):
            if part == "—":
                continue
            engine = {"vLLM": "vllm", "SGLang": "sglang"}[part.split()[0]]
            for flag in re.findall(r"`(--[a-z-]+)`", part):
                argv = [flag] if name == "enable_prefix_caching" else [flag, samples[name]]
                spec = engine_spec(engine)
                values = flag_values_from_engine_flags(spec, parse_engine_flags(spec, tuple(argv)))
                assert name in values, (engine, flag, values)
                checked += 1
    assert checked >= 20
