"""What `dspark validate` loads: only what a plan needs, so its start-up stays near its dependencies' own.

Run in a fresh interpreter (the test process has imported everything already). The cost itself is measured
by benchmarks/startup.py; this keeps the heavy modules that used to load for nothing from coming back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Modules a profile plan of the default recipe never needs, and what each one cost before it was left out.
NOT_FOR_VALIDATE = (
    "huggingface_hub.hf_api",  # snapshot download: a third of a second, for a model that is inline, not cached
    "huggingface_hub.file_download",
    "psutil",  # host memory: read only for a unified-memory GPU or the CPU build
    "httpx",  # the bench client and the supervisor
    "matplotlib",  # plots
    "numpy",
    "safetensors",
    "rich.console",  # tables: --json prints none
    "pydantic.main",  # pydantic's model machinery: recipes validate with pydantic-core from the checked-in schema
    "pydantic._internal._generate_schema",
    "difflib",  # "did you mean" hints, for input that is wrong
    "dspark.engines.vllm.deepseek_v4",  # DeepSeek-V4's caches, for that model only
    "dspark.engines.vllm.deepseek_v4_fit",
    "dspark.runtime.supervise",  # start --watch
    "dspark.bench",
    "dspark.advise",
    "dspark.deploy",
    "dspark.cli.bench",  # the other commands' click definitions: the command group loads only the one that runs
    "dspark.cli.probe",
    "dspark.cli.recipes",
    "dspark.cli.render",
    "dspark.hardware.unified",  # host memory: a profile plan reads none
    "dspark.runtime.engine_log",  # a started engine's log lines
    "dspark.engines.witness",  # --engine-check
    "dspark.runtime.boot_store",  # an empty store is one directory read (dspark.runtime.data_dir)
    "dspark.engines.vllm.graph_memory",  # the CUDA-graph profile of vLLM 0.25/0.26
)

_SCRIPT = """
import contextlib, io, json, sys
from dspark.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["validate", "--hardware", "h200", *sys.argv[1:]])
assert out.getvalue().strip()  # the plan was made and printed
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules_after_validate(*args: str) -> tuple[int, set[str]]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DSPARK_") and k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *(args or ("--json",))], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    return int(result["code"]), set(result["modules"])


def test_validate_of_the_default_recipe_loads_only_what_planning_needs() -> None:
    code, modules = _modules_after_validate()
    assert code == 0
    assert "dspark.planning.validate" in modules  # it did plan
    loaded = [m for m in NOT_FOR_VALIDATE if m in modules or any(k.startswith(m + ".") for k in modules)]
    assert not loaded, f"validate imported {loaded}: import them where they are used"


def test_the_table_off_a_terminal_loads_no_rich() -> None:
    """Piped, the table is drawn without rich (dspark.commands.plain_text): rich's console costs a sixth of the
    floor to import."""
    code, modules = _modules_after_validate("--explain")
    assert code == 0 and "dspark.commands.plain_text" in modules
    assert not [m for m in modules if m == "rich.console" or m.startswith("rich.table")]
