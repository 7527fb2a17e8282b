"""The README's fp8 CPU example on this host's CPU: `dspark start --dry-run` plans it, the real vLLM 0.32 starts it.

vLLM's CPU build keeps an fp8 KV cache only on x86 with AVX-512 or AMX, as torch reads the CPU (CPUID): on an
AVX2-only CPU it prints its KV line, then its attention backend raises (cpu_attn.py _get_attn_isa). dspark must
refuse exactly there, with that reason and the fix, and plan the engine's own KV line everywhere. The suite runs
this on whatever CPU it has; scripts/ci-avx2.sh runs it on an emulated AVX2-only CPU as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from vllm_harness import ENGINE_ENV, TIME_SCALE, free_port, kill_group, parse_line

from dspark.cli import main
from dspark.hardware.select import read_cpu_flags

pytestmark = pytest.mark.engine

FLAGS = ("--max-model-len", "4096", "--kv-cache-dtype", "fp8", "--no-enable-prefix-caching")
ENGINE_WORDS = "FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
# A start answers /health in about a minute here; the refused one takes 5 minutes under scripts/ci-avx2.sh.
START_SECONDS = 300 * TIME_SCALE


def _start(argv: list[str], env: dict[str, str], log: Path) -> tuple[int | None, bool]:
    """Run the engine until it answers /health or exits: (its exit code or None, healthy)."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, **ENGINE_ENV, **env}, cwd=tempfile.gettempdir())
    try:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    return None, True
            except httpx.HTTPError:
                pass
            time.sleep(1)
        return proc.poll(), False
    finally:
        kill_group(proc)


@pytest.mark.timeout(START_SECONDS + 300)
def test_fp8_kv_starts_on_the_cpu_build_exactly_where_dspark_plans_it(
    vllm_python: str, tiny_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith(("DSPARK_", "VLLM_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", str(tmp_path / "none" / "python"))  # plan 0.32.0, the one installed
    rc = main(["start", "--dry-run", "--json", "--model", str(tiny_models / "dense-qwen3"), "--engine", "vllm",
               "--platform", "cpu", "--engine-version", "0.32.0", "--kv-cache-memory", "1GiB", "--", *FLAGS])
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    refused = [f for f in plan["findings"] if f["code"] == "cpu_kv_cache_dtype"]
    flags = read_cpu_flags()  # CPUID, as torch reads it
    assert bool(refused) is not ("avx512f" in flags or "amx_tile" in flags), (flags, refused)
    assert plan["argv"][:2] == ["vllm", "serve"]
    log = tmp_path / "engine.log"
    code, healthy = _start([vllm_python, "-m", "vllm.entrypoints.cli.main", *plan["argv"][1:],
                            "--skip-tokenizer-init", "--enforce-eager"], plan["env"], log)
    text = log.read_text(errors="replace")
    line = parse_line(text)
    assert line is not None, text[-4000:]
    assert line.group("line") == plan["capacity"]["details"]["kv_line"]  # printed before any refusal
    if refused:  # an x86 CPU without AVX-512 or AMX
        (finding,) = refused
        assert (rc, plan["verdict"], finding["level"]) == (1, "fail", "fail")
        assert finding["message"].endswith("use --kv-cache-dtype auto here, or an x86 host with AVX-512 or AMX.")
        assert not healthy and code not in (None, 0), text[-4000:]
        assert ENGINE_WORDS in text, text[-4000:]
    else:
        assert rc == 0 and plan["verdict"] != "fail", plan["findings"]
        assert healthy and ENGINE_WORDS not in text, text[-4000:]
