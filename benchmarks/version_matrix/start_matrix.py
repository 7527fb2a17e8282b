"""`dspark start` across the release range: the version it detects, the witness's figure, what it pins, the engine.

Two ways, one row shape (results/start.json, rendered by render.py):
  exec : vLLM CPU releases 0.28.0-0.32.0. The real `dspark start --engine-python <release python> ... --json`
         (under `flock $DSPARK_ENGINE_LOCK`, default $TMPDIR/dspark-engine.lock), which execs the release's
         engine; its own KV line and its "non-default args" (the pin as the engine parsed it) are read from the
         log, then the process group is stopped. The process that printed the line is checked to be dspark's
         own (exec, not a child).
  seam : releases that cannot serve here (vLLM 0.33.0, SGLang): dspark's start core in this process with a
         capturing exec (start_command's `execute`), `--hardware PROFILE`; the argv check and the witness run in
         the release's interpreter as they do in a real start.
         vLLM 0.33.0's parser needs a device type: without one it is run again with VLLM_TARGET_DEVICE=cpu
         (both answers are kept). An SGLang release start refuses (nothing vouches for its pool) is run again
         with --force (case id + "-force").
A row: detected version, findings, the witness's answer, the launch figure, the pinned flag and the value the
release's parser read for it, and (exec) the engine's own line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vllm_harness import ENGINE_ENV, free_port, kill_group, parse_line

from dspark.engines.inside import INSIDE_ROOT
from dspark.runtime.launch import LaunchPlan

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# A machine-wide lock for real engine starts, so timing-sensitive work sharing a small host goes one at a time.
LOCK = os.environ.get("DSPARK_ENGINE_LOCK", str(Path(tempfile.gettempdir()) / "dspark-engine.lock"))
MTP2 = '{"method":"mtp","num_speculative_tokens":2}'
PINS = {"vllm": ("--kv-cache-memory-bytes", "kv_cache_memory_bytes"), "sglang": ("--max-total-tokens",
                                                                                  "max_total_tokens")}
# A raised exception's own line ("... ImportError: ..."), not a warning that quotes one nor the API server's
# closing "Engine core initialization failed" (which points back at the cause).
ERROR_LINE = re.compile(r"^(?!.* WARNING )(?!.*Engine core initialization failed).*\b\w+Error: ")
ARGS_PIN = re.compile(r"non-default args: .*'kv_cache_memory_bytes': (\d+)")


@dataclass(frozen=True)
class StartCase:
    """One `dspark start`: the model (a tiny model's name, or a directory), dspark's options, the engine flags."""

    id: str
    model: str
    options: tuple[str, ...]
    flags: tuple[str, ...] = ()
    recipe: str | None = None


# Real CPU starts: dense with fp8 and an odd pin, the hybrid with prefix caching (GDN align mode), MTP, MLA.
EXEC_CASES = (
    StartCase("dense-fp8-odd", "dense-qwen3", ("--kv-cache-memory", "123456789"),
              ("--max-model-len", "1000", "--kv-cache-dtype", "fp8")),
    StartCase("hybrid-prefix", "hybrid-qwen3-next", ("--kv-cache-memory", "100000000"), ("--max-model-len", "2000")),
    StartCase("hybrid-mtp2", "hybrid-qwen3-next", ("--kv-cache-memory", "100000000"),
              ("--max-model-len", "2000", "--speculative-config", MTP2)),
    StartCase("mla-default", "mla-deepseek-v3", ("--kv-cache-memory", "100000000"), ("--max-model-len", "2000")),
)
# Through the seam: the tiny hybrid on an H200 profile, and the seed recipes on the GB10 pair.
SEAM_VLLM = (
    StartCase("hybrid-h200", "hybrid-qwen3-next", ("--hardware", "h200", "--kv-cache-memory", "100000000"),
              ("--max-model-len", "2000")),
    StartCase("flash-next-gb10x2", "flash-next", ("--hardware", "gb10x2", "--master-addr", "10.0.0.1"),
              recipe="flash-next-vllm"),
)
SEAM_SGLANG = (
    StartCase("qwen3-32b-h200", str(ROOT / "tests/fixtures/model-qwen3-32b"), ("--hardware", "h200"),
              ("--context-length", "32768")),
    StartCase("flash-next-gb10x2", "flash-next", ("--hardware", "gb10x2", "--master-addr", "10.0.0.1"),
              recipe="flash-next-sglang"),
)


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without dspark's own settings (the case names every input), plus the engine's log env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_") and k != "MAX_NUM_SEQS"}
    return {**env, **ENGINE_ENV, **extra}


def _dspark_argv(case: StartCase, engine: str, python: str, models: Path, options: tuple[str, ...] = (),
                 flags: tuple[str, ...] = ()) -> list[str]:
    """`dspark start` arguments for a case (without the program name); a recipe's model is its inline config."""
    model = Path(case.model) if case.model.startswith("/") else models / case.model
    if case.recipe:
        import yaml  # noqa: PLC0415

        recipe = yaml.safe_load((ROOT / "dspark/data/recipes" / f"{case.recipe}.yaml").read_text())
        model = models / case.recipe
        model.mkdir(parents=True, exist_ok=True)
        (model / "config.json").write_text(json.dumps(recipe["model"]["config"]))
    head = [case.recipe] if case.recipe else []
    platform = ["--platform", "cpu"] if "--hardware" not in case.options else []
    engine_flags = (*case.flags, *flags)
    tail = ["--", *engine_flags] if engine_flags else []
    return [*head, "--engine-python", python, "--model", str(model), "--engine", engine, *platform, *case.options,
            *options, "--json", *tail]


def summarize(out: Mapping[str, Any], engine: str) -> dict[str, Any]:
    """What a row keeps of `dspark start --json`: version, findings, witness, launch figure, pin and its parse."""
    if "capacity" not in out:
        return {"error": out.get("error", "dspark printed no JSON")}
    cap = out["capacity"]
    flag, dest = PINS[engine]
    argv = list(out["argv"])
    return {
        "detected": out["engine_version"],
        "verdict": out["verdict"],
        "findings": {f["code"]: f["message"] for f in out["findings"]
                     if f["level"] != "info" or "witness" in f["code"]},
        "witness": cap.get("witness"),
        "launch_tokens": cap["kv_pool_tokens"],
        "launch_concurrency": f"{cap['max_concurrency']:.2f}",
        "budget_bytes": cap["kv_budget_bytes"],
        "budget_source": cap["kv_budget_source"],
        "pinned_flag": flag,
        "pinned": int(argv[argv.index(flag) + 1]) if flag in argv else None,
        "parsed_pin": out["engine_check"]["parsed"].get(dest),
        "parser_version": out["engine_check"]["engine_version"],
    }


def exec_start(python: str, models: Path, case: StartCase, timeout: float = 1500.0) -> dict[str, Any]:
    """The real `dspark start` under the engine lock: dspark's JSON, then the exec'd engine's own lines."""
    argv = ["flock", LOCK, sys.executable, "-m", "dspark", "start",
            *_dspark_argv(case, "vllm", python, models, ("--port", str(free_port())),
                          ("--enforce-eager", "--skip-tokenizer-init"))]
    env = _clean_env(PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out_path.open("w") as out, err_path.open("w") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, start_new_session=True, env=env,
                                    cwd=tempfile.gettempdir())
        row: dict[str, Any] = {"mode": "exec", "command": _shown(argv)}
        try:
            row["lock_wait_seconds"] = _wait_for_lock(proc)
            started = time.monotonic()  # the engine's time starts when flock has started dspark
            match = None
            while time.monotonic() - started < timeout and proc.poll() is None:
                match = parse_line(_engine_log(out_path.read_text(errors="replace"),
                                               err_path.read_text(errors="replace")))
                if match:
                    row["exec_proof"] = _became_engine(proc.pid)
                    break
                time.sleep(0.5)
        finally:
            kill_group(proc)
        text = out_path.read_text(errors="replace")
        log = _engine_log(text, err_path.read_text(errors="replace"))
        row["seconds"] = round(time.monotonic() - started, 1)
    first = text.splitlines()[0] if text.strip() else ""
    row.update(summarize(json.loads(first), "vllm") if first.startswith("{") else {"error": log[-2000:]})
    match = parse_line(log)
    if match is None:
        # The root cause comes first (the API server's own error closes the log); keep both.
        cause = next((ln for ln in log.splitlines() if ERROR_LINE.match(ln)), None)
        row["engine_error"] = (cause or "") + "\n...\n" + log[-1500:] if "error" not in row else None
        return row
    pin = ARGS_PIN.search(log)
    row.update(engine_line=match.group("line"), engine_tokens=int(match.group("tokens").replace(",", "")),
               engine_concurrency=match.group("conc"), engine_pin=int(pin.group(1)) if pin else None,
               engine_args_line=next((ln[-600:] for ln in log.splitlines() if "non-default args" in ln), None))
    if pin is None:
        row["log_head"] = log[:3000]
    return row


def _engine_log(stdout: str, stderr: str) -> str:
    """What the engine printed: stdout after dspark's own JSON line (which quotes the KV line it predicts)."""
    first, _, rest = stdout.partition("\n")
    return (rest if first.startswith("{") else stdout) + "\n" + stderr


def _wait_for_lock(proc: subprocess.Popen[str], limit: float = 7200.0) -> float:
    """Seconds until flock held the lock (it starts its command only then); others' engine work comes first."""
    import psutil  # noqa: PLC0415

    started = time.monotonic()
    while time.monotonic() - started < limit and proc.poll() is None and not psutil.Process(proc.pid).children():
        time.sleep(1.0)
    return round(time.monotonic() - started, 1)


def _became_engine(flock_pid: int) -> str:
    """The command line of flock's child, the process dspark ran as: after exec it is the engine's."""
    import psutil  # noqa: PLC0415

    children = psutil.Process(flock_pid).children()
    return " ".join(children[0].cmdline()[:4]) if children else "no child"


def _shown(argv: list[str]) -> str:
    """The command as run, with this checkout's paths shortened."""
    return " ".join(argv).replace(str(ROOT) + "/", "").replace(sys.executable, "python")


@contextmanager
def _environ(extra: Mapping[str, str]) -> Iterator[None]:
    """os.environ with extra values for the engine interpreter's subprocesses (the seam runs in this process)."""
    saved = dict(os.environ)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def seam_start(engine: str, python: str, models: Path, case: StartCase,
               engine_env: Mapping[str, str]) -> dict[str, Any]:
    """dspark's start in this process (its console entry point), with an exec that only records the plan."""
    import dspark.commands.start as commands  # noqa: PLC0415
    from dspark.cli import main  # noqa: PLC0415

    executed: list[LaunchPlan] = []
    original = commands.start_command

    def start_capturing(*args: Any, **kwargs: Any) -> int:
        return original(*args, **kwargs, execute=executed.append)

    argv = _dspark_argv(case, engine, python, models)
    row: dict[str, Any] = {"mode": "seam", "command": _shown(["dspark", "start", *argv]),
                           "engine_env": dict(engine_env)}
    stdout = io.StringIO()
    commands.start_command = start_capturing  # the CLI imports it at call time: its exec is this capture
    try:
        with _environ({**_clean_env(), **engine_env}), contextlib.redirect_stdout(stdout):
            code = main(["start", *argv])
    finally:
        commands.start_command = original
    first = stdout.getvalue().splitlines()[0] if stdout.getvalue().strip() else "{}"
    row.update(summarize(json.loads(first), engine), exit_code=code)
    row["executed"] = [_shown(list(p.argv)) for p in executed]
    return row


def start_part(matrix: Path, models: Path, vllm: list[str], vllm_seam: list[str], sglang: list[str],
               cases: set[str] | None) -> dict[str, Any]:
    """Every release's row per case: real starts for the CPU builds, the exec seam for the others."""
    report: dict[str, Any] = {}

    def wanted(case: StartCase) -> bool:
        return cases is None or case.id in cases

    for case in filter(wanted, EXEC_CASES):  # every release's first case before anyone's second
        for release in vllm:
            python = str(matrix / f"vllm-{release}" / "bin" / "python")
            report.setdefault(f"vllm {release}", {})[case.id] = row = exec_start(python, models, case)
            print("vllm", release, case.id, json.dumps(row)[:600], flush=True)
    for release in vllm_seam:
        python = str(matrix / f"vllm-{release}" / "bin" / "python")
        for case in filter(wanted, SEAM_VLLM):
            first = seam_start("vllm", python, models, case, {})
            row = first
            if "Failed to infer device type" in json.dumps(first.get("error")):
                # 0.33.0's parser needs a device type; the CPU platform's answers the parser's defaults.
                row = seam_start("vllm", python, models, case, {"VLLM_TARGET_DEVICE": "cpu"})
                row["without_device"] = first.get("error")
            report.setdefault(f"vllm {release}", {})[case.id] = row
            print("vllm", release, case.id, json.dumps(row)[:600], flush=True)
    shim = _torchvision_shim()
    for release in sglang:
        python = str(matrix / f"sglang-{release}" / "bin" / "python")
        for case in filter(wanted, SEAM_SGLANG):
            row = seam_start("sglang", python, models, case, {"PYTHONPATH": shim})
            rows = report.setdefault(f"sglang {release}", {})
            rows[case.id] = row
            print("sglang", release, case.id, json.dumps(row)[:600], flush=True)
            if "could not vouch" in json.dumps(row.get("error")):
                # Nothing vouches: start refuses unless forced; forced, the launch is on dspark's figures.
                forced = replace(case, id=f"{case.id}-force", options=(*case.options, "--force"))
                rows[forced.id] = seam_start("sglang", python, models, forced, {"PYTHONPATH": shim})
                print("sglang", release, forced.id, json.dumps(rows[forced.id])[:600], flush=True)
    return report


def _torchvision_shim() -> str:
    """A folder whose sitecustomize puts tv_shim's torchvision stand-ins in place in every interpreter started
    with it on PYTHONPATH: the matrix's SGLang environments lack torchvision (a declared SGLang dependency whose
    index build needs CUDA torch), and 0.5.19-0.5.22 import it at module level, so their parser would not load."""
    folder = Path(tempfile.mkdtemp(prefix="tv-shim-"))
    shutil.copy(HERE / "tv_shim.py", folder / "tv_shim.py")  # the folder holds only these two: nothing shadows
    (folder / "sitecustomize.py").write_text("import tv_shim\ntv_shim.install()\n")
    return os.pathsep.join([str(folder), str(INSIDE_ROOT)])
