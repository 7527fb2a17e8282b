"""`dspark start` end to end on the real vLLM CPU engine: exec, the engine's own lines, a completion, refusals.

Issue #3: `MAX_NUM_SEQS=12 dspark start` really execs vLLM (same PID); the engine's "non-default args" line
shows max_num_seqs 12 and the pinned KV; a completion answers; the engine's KV line equals `dspark validate`.
Also: `--max-num-seqs 3` beats the environment, and a start that does not fit never execs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from vllm_harness import ENGINE_ENV, free_port, kill_group, parse_line

pytestmark = pytest.mark.engine

KV_PIN = 1 << 30
# float16, not the model's bfloat16: on this CI VM the CPU advertises AMX, vLLM then picks its AMX attention
# kernel for bf16, and the worker dies with SIGILL on the first forward pass. fp16 takes the "vec" kernel;
# the KV pool is the same (2 bytes per element either way).


def _recipe(tmp_path: Path, model: Path, name: str = "tiny-dense") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"""\
name: {name}
engine: vllm
model:
  path: {model}
context:
  max_model_len: 2048
kv_cache:
  memory: {KV_PIN}
engine_args: ["--enforce-eager", "--skip-tokenizer-init", "--dtype", "float16"]
"""
    )
    return path


def _env(vllm_python: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MAX_NUM_SEQS" and not k.startswith("DSPARK_")}
    env.update(ENGINE_ENV)
    env.update({"DSPARK_ENGINE_PYTHON": vllm_python, "DSPARK_PLATFORM": "cpu"})
    env.update(extra)
    return env


class Engine:
    """A `dspark start` process and its merged output, read on a thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := regex.search(line):
                    return m
            if self.proc.poll() is not None:
                time.sleep(0.5)  # let the reader drain
                break
            time.sleep(0.5)
        tail = "\n".join(self.lines[-40:])
        pytest.fail(f"no line matching {pattern!r} (exit {self.proc.poll()}):\n{tail}", pytrace=False)

    def text(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        kill_group(self.proc)


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    started: list[Engine] = []
    yield started
    for engine in started:
        engine.stop()


def _validate(dspark_exe: str, recipe: Path, env: dict[str, str], *extra: str) -> dict[str, object]:
    proc = subprocess.run([dspark_exe, "validate", str(recipe), "--json", *extra], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _complete(port: int) -> dict[str, object]:
    """One streamed completion of token ids (the server has no tokenizer); returns the usage the server reports."""
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=120) as client:
        model = client.get(f"{base}/v1/models").json()["data"][0]["id"]
        body = {"model": model, "prompt": [1, 2, 3, 4], "max_tokens": 4, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        usage: dict[str, object] = {}
        chunks = 0
        events: list[object] = []
        with client.stream("POST", f"{base}/v1/completions", json=body) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[len("data: "):])
                events.append(event)
                chunks += bool(event.get("choices"))
                usage = event.get("usage") or usage
    return {"chunks": chunks, "usage": usage, "events": events}


def test_max_num_seqs_from_environment_execs_the_engine(
    tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str, engines: list[Engine]
) -> None:
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3")
    port = free_port()
    env = _env(vllm_python, MAX_NUM_SEQS="12", DSPARK_PORT=str(port))
    predicted = _validate(dspark_exe, recipe, env)
    assert predicted["settings"]["max_num_seqs"] == {"value": 12, "source": "env:MAX_NUM_SEQS"}  # type: ignore[index]

    engine = Engine([dspark_exe, "start", str(recipe)], env)
    engines.append(engine)
    engine.wait_for(r"^exec: ", timeout=120)
    # exec, not a child: the dspark process itself became the engine.
    cmdline = Path(f"/proc/{engine.proc.pid}/cmdline").read_bytes().split(b"\0")
    engine.wait_for(r"non-default args", timeout=120)
    assert any(b"vllm.entrypoints" in part for part in cmdline), cmdline

    args_line = engine.wait_for(r"non-default args: (\{.*\})", timeout=60).group(1)
    assert "'max_num_seqs': 12" in args_line
    assert f"'kv_cache_memory_bytes': {KV_PIN}" in args_line

    kv = engine.wait_for(r"KV cache size: .*Maximum concurrency", timeout=300)
    match = parse_line(kv.string)
    assert match is not None
    capacity = predicted["capacity"]
    assert int(match["tokens"].replace(",", "")) == capacity["kv_pool_tokens"]  # type: ignore[index]
    assert match["conc"] == f"{capacity['max_concurrency']:.2f}"  # type: ignore[index]

    engine.wait_for(r"Application startup complete", timeout=180)
    answer = _complete(port)
    assert answer["usage"].get("completion_tokens") == 4, answer["events"]  # type: ignore[attr-defined]
    # It streamed: at least one delta, at most one per token (vLLM's API server merges the deltas it has
    # queued when it falls behind, which a loaded 2-core machine makes happen).
    chunks = answer["chunks"]
    assert isinstance(chunks, int) and 1 <= chunks <= 4, answer["events"]
    assert "MAX_NUM_SEQS not set" not in engine.text()


def test_flag_beats_environment_in_the_checked_argv(tmp_path: Path, tiny_models: Path, vllm_python: str,
                                                    dspark_exe: str) -> None:
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3")
    env = _env(vllm_python, MAX_NUM_SEQS="12")
    proc = subprocess.run([dspark_exe, "start", str(recipe), "--max-num-seqs", "3", "--dry-run", "--json"], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["settings"]["max_num_seqs"] == {"value": 3, "source": "flag",
                                                "overridden": [{"source": "env:MAX_NUM_SEQS", "value": "12"}]}
    assert "MAX_NUM_SEQS=12 from the environment overridden by --max-num-seqs 3" in proc.stderr
    argv = plan["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "3"
    # The installed engine's own parser read the same value.
    assert plan["engine_check"]["parsed"]["max_num_seqs"] == 3
    assert plan["engine_check"]["engine_version"] == "0.32.0"


def test_default_seats_notice_when_nothing_sets_them(tmp_path: Path, tiny_models: Path, vllm_python: str,
                                                     dspark_exe: str) -> None:
    # Nothing sets the seats: the default is the computed safe count (capped at vLLM's 256), said in the
    # deployment's words, and it is what the checked argv carries.
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3")
    proc = subprocess.run([dspark_exe, "start", str(recipe), "--dry-run", "--json"], env=_env(vllm_python),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    seats = min(plan["capacity"]["safe_max_num_seqs"], 256)
    assert f"MAX_NUM_SEQS not set, using default: {seats}" in plan["notices"]
    assert plan["argv"][plan["argv"].index("--max-num-seqs") + 1] == str(seats)
    assert plan["engine_check"]["parsed"]["max_num_seqs"] == seats


def test_refused_start_never_execs(tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str) -> None:
    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3")
    env = _env(vllm_python, DSPARK_KV_CACHE_MEMORY="100TiB")  # far beyond this host's memory
    proc = subprocess.run([dspark_exe, "start", str(recipe)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 1, proc.stderr
    assert "refusing to start" in proc.stderr
    assert "does-not-fit" in proc.stdout or "short" in proc.stderr
    assert "exec:" not in proc.stdout
    assert "non-default args" not in proc.stdout + proc.stderr  # the engine never ran


def test_watch_supervises_checks_the_pool_and_forwards_ctrl_c(
    tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str, engines: list[Engine]
) -> None:
    import signal  # noqa: PLC0415

    recipe = _recipe(tmp_path, tiny_models / "dense-qwen3")
    env = _env(vllm_python, MAX_NUM_SEQS="2", DSPARK_PORT=str(free_port()))
    watcher = Engine([dspark_exe, "start", str(recipe), "--watch"], env)
    engines.append(watcher)
    # dspark stays in front (no exec): it reports the engine's pool against the prediction.
    watcher.wait_for(r"dspark: the engine's KV pool is 1,048,576 tokens, as predicted", timeout=300)
    watcher.wait_for(r"Application startup complete", timeout=180)
    import psutil  # noqa: PLC0415

    # The engine runs in a process group of its own under dspark: its whole tree must go when dspark stops.
    tree = psutil.Process(watcher.proc.pid).children(recursive=True)
    assert tree, "dspark --watch should supervise the engine as a child, not exec it"
    watcher.proc.send_signal(signal.SIGINT)  # Ctrl-C to dspark only: it forwards to the engine
    assert watcher.proc.wait(timeout=90) in (0, 130, 128 + signal.SIGINT)
    time.sleep(2)
    alive = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"engine processes left behind: {alive}"


def test_a_boot_recorded_by_watch_makes_validate_equal_the_unpinned_engine(
    tmp_path: Path, tiny_models: Path, vllm_python: str, dspark_exe: str, engines: list[Engine]
) -> None:
    """Issue 28: unpinned, the CPU build sizes its KV cache as ceil(node total x utilisation) less the worker's
    RSS after its warm-up (CPUWorker.determine_available_memory), which dspark can only estimate; after one boot
    under `start --watch` the next `validate` of the same plan equals the engine's pool to the token."""
    import signal  # noqa: PLC0415

    import psutil  # noqa: PLC0415

    # About 2.5 GiB requested whatever this host's size: the worker's RSS (some 0.6 GiB) leaves ~2 GiB of KV.
    utilisation = min(0.9, max(0.05, round((5 << 29) / psutil.virtual_memory().total, 3)))
    recipe = tmp_path / "tiny-unpinned.yaml"
    recipe.write_text(
        f"""\
name: tiny-unpinned
engine: vllm
model:
  path: {tiny_models / "dense-qwen3"}
context:
  max_model_len: 2048
kv_cache:
  gpu_memory_utilization: {utilisation}
engine_args: ["--enforce-eager", "--skip-tokenizer-init", "--dtype", "float16"]
"""
    )
    data = tmp_path / "data"
    env = _env(vllm_python, MAX_NUM_SEQS="2", DSPARK_PORT=str(free_port()), DSPARK_DATA_DIR=str(data))
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)  # that would pin it
    predicted = _validate(dspark_exe, recipe, env)["capacity"]
    assert predicted["kv_budget_source"] == "estimate"  # type: ignore[index]
    assert "budget_source" not in predicted and "observed_boot" not in predicted  # type: ignore[operator]

    watcher = Engine([dspark_exe, "start", str(recipe), "--watch"], env)
    engines.append(watcher)
    watcher.wait_for(r"dspark: recorded this boot's KV pool", timeout=240)
    match = parse_line(watcher.text())
    assert match is not None
    engine_pool = int(match["tokens"].replace(",", ""))
    watcher.proc.send_signal(signal.SIGINT)
    assert watcher.proc.wait(timeout=90) in (0, 130, 128 + signal.SIGINT)

    observed = _validate(dspark_exe, recipe, env)
    capacity = observed["capacity"]
    assert capacity["kv_pool_tokens"] == engine_pool  # type: ignore[index]
    assert f"{capacity['max_concurrency']:.2f}" == match["conc"]  # type: ignore[index]
    assert capacity["budget_source"] == "observed" and capacity["kv_budget_source"] == "observed"  # type: ignore[index]
    boot = capacity["observed_boot"]  # type: ignore[index]
    assert boot["pool_tokens"] == engine_pool and boot["label"] == "observed on this host"
    # The engine's own split of the requested memory (CPU worker: KV and non-KV), as it printed them.
    assert {"available_kv_gib", "requested_gib", "non_kv_gib"} <= set(boot["terms"])
    listed = subprocess.run([dspark_exe, "observations", "list", "--json"], env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    records = json.loads(listed.stdout)["records"]
    assert [r["pool_tokens"] for r in records] == [engine_pool]
    assert str(data) in json.loads(listed.stdout)["store"]
