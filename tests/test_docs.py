"""The project documents itself: no citation of files it does not ship, links that resolve, a quickstart CI runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from dspark.config.knobs import ENV_NAMES
from dspark.config.settings import OTHER_DSPARK_ENV

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
