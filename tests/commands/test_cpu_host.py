"""Planning a CPU-engine host from another machine: `probe --platform cpu --json` saves it, `--hardware FILE`
with `--platform cpu` plans against it (its memory and the ISA flags vLLM's CPU build branches on); TP on the
CPU build runs its ranks in one host's memory; a profile names only machines that exist."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dspark.cli import main
from dspark.hardware.select import host_snapshot
from dspark.hardware.snapshot import dumps_snapshot
from dspark.hardware.unified import HostMemory

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
GIB = 1 << 30


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_") or k.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("DSPARK_ENGINE_PYTHON", "/nonexistent/python")
    yield


def _host(tmp_path: Path, flags: str, name: str = "host.json") -> Path:
    """A saved CPU host with 64 GiB free and these /proc/cpuinfo flags, as `probe --platform cpu --json` writes."""
    cpuinfo = tmp_path / f"cpuinfo-{name}"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
    snap = host_snapshot(lambda: HostMemory(total_bytes=128 * GIB, available_bytes=64 * GIB), cpuinfo=cpuinfo)
    path = tmp_path / name
    path.write_text(dumps_snapshot(snap) + "\n")
    return path


def _model(tmp_path: Path, config: str) -> Path:
    directory = tmp_path / config
    directory.mkdir()
    shutil.copy(CONFIGS / f"{config}.json", directory / "config.json")
    return directory


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["validate", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_probe_saves_the_cpu_host(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--platform", "cpu", "--json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert saved["platform"] == "cpu"
    assert saved["cpu_arch"] and isinstance(saved["cpu_flags"], list)
    assert saved["gpus"][0]["name"] == "CPU (host memory)"
    assert saved["host_memory_total_bytes"] > 0


@pytest.mark.parametrize(("flags", "block"), [("avx512f avx512_bf16 amx_tile amx_bf16", 128), ("avx512f", 16)])
def test_a_saved_cpu_host_decides_mla_block_size(flags: str, block: int, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's CPU build: MLA runs the AMX backend at block 128 with AMX, block 16 without (CpuPlatform)."""
    host = _host(tmp_path, flags)
    code, out = _validate(capsys, "--model", str(_model(tmp_path, "deepseek-v3")), "--engine", "vllm", "--platform",
                          "cpu", "--hardware", str(host), "--kv-cache-memory", "4GiB", "--", "--max-model-len", "4096")
    assert "error" not in out, out
    assert code in (0, 1)  # 671B of weights do not fit 64 GiB: the plan is refused, the figures still print
    assert out["capacity"]["details"]["block_size"] == block
    assert out["hardware"]["cpu_flags"] == sorted(flags.split())


@pytest.mark.parametrize(("flags", "ssm"), [("avx512f avx512_bf16", "float32"), ("avx512f", "bfloat16")])
def test_a_saved_cpu_host_decides_the_gdn_state_dtype(flags: str, ssm: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """CpuPlatform.check_and_update_config: with AVX512-BF16 an auto GDN state is reset to float32."""
    host = _host(tmp_path, flags)
    _, out = _validate(capsys, "--model", str(_model(tmp_path, "qwen3-next-80b-a3b-instruct")), "--engine",
                       "vllm", "--platform", "cpu", "--hardware", str(host), "--kv-cache-memory", "4GiB", "--",
                       "--max-model-len", "4096")
    assert "error" not in out, out
    assert out["capacity"]["details"]["mamba_state_dtypes"][1] == ssm


def test_a_gpu_snapshot_or_profile_is_not_a_cpu_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(_model(tmp_path, "llama-3-8b-instruct"))
    gpu_file = Path(__file__).resolve().parents[1] / "fixtures" / "probes" / "h200-idle.json"
    for hardware, words in ((str(gpu_file), "it is a GPU snapshot"), ("h200", "it is not a saved CPU host")):
        code, out = _validate(capsys, "--model", model, "--platform", "cpu", "--hardware", hardware)
        assert code == 2
        assert f"--hardware {hardware!r} does not apply with platform cpu: {words}" in out["error"]["message"]
        assert "dspark probe --platform cpu --json" in out["error"]["hint"]


def test_a_cpu_host_is_not_gpus_for_a_cuda_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 26 item 20: a host saved by `probe --platform cpu` was planned on as one GPU of its memory."""
    model = str(_model(tmp_path, "llama-3-8b-instruct"))
    host = str(_host(tmp_path, "avx512f"))
    for platform in ((), ("--platform", "cuda")):
        code, out = _validate(capsys, "--model", model, *platform, "--hardware", host)
        assert code == 2
        assert f"--hardware {host}: a CPU host's snapshot" in out["error"]["message"]
        assert "--platform cpu" in out["error"]["hint"] and "dspark probe --json" in out["error"]["hint"]
    code, out = _validate(capsys, "--model", model, "--platform", "cpu", "--hardware", host)
    assert code in (0, 1) and "error" not in out and out["hardware"]["platform"] == "cpu"  # planned on it


def test_cpu_tensor_parallel_runs_its_ranks_in_one_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TP=2 on the CPU build is two ranks in one host's memory (OMP thread groups), not two GPUs."""
    host = _host(tmp_path, "avx512f avx512_bf16")
    code, out = _validate(capsys, "--model", str(_model(tmp_path, "llama-3-8b-instruct")), "--engine", "vllm",
                          "--platform", "cpu", "--hardware", str(host), "--tp", "2", "--kv-cache-memory", "1GiB",
                          "--", "--max-model-len", "4096")
    codes = {f["code"]: f["message"] for f in out["findings"]}
    assert "not-enough-gpus" not in codes
    assert code == 0, codes
    # Each rank holds half the weights and its own 1 GiB pin: 2 x (weights / 2 + 1 GiB + 2 GiB runtime).
    assert "CPU (host memory) x 2 ranks" in codes["fits"]


def test_cpu_tensor_parallel_on_this_host_is_not_counted_in_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 16 item 10 as reported: --platform cpu --tp 2 on this host (no --hardware) failed with not-enough-gpus."""
    from dspark.hardware import select  # noqa: PLC0415

    monkeypatch.setattr(select, "read_host_memory", lambda: HostMemory(total_bytes=64 * GIB, available_bytes=48 * GIB))
    code, out = _validate(capsys, "--model", str(_model(tmp_path, "llama-3-8b-instruct")), "--engine", "vllm",
                          "--platform", "cpu", "--tp", "2", "--kv-cache-memory", "1GiB",
                          "--", "--max-model-len", "4096")
    codes = {f["code"]: f["message"] for f in out.get("findings", [])}
    assert "not-enough-gpus" not in codes
    assert code == 0, out
    assert "CPU (host memory) x 2 ranks" in codes["fits"]


def test_a_dgx_spark_holds_one_gb10(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _validate(capsys, "--hardware", "gb10:8")
    assert code == 2
    assert "a DGX Spark holds one GB10" in out["error"]["message"]
    assert _validate(capsys, "--hardware", "gb10:1")[0] in (0, 1)


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
@pytest.mark.parametrize(("flags", "code"), [("avx2", 1), ("avx2 avx512f", 0), ("avx2 amx_tile", 0)])
def test_fp8_kv_on_the_cpu_build_follows_the_saved_hosts_isa(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              flags: str, code: int, version: str) -> None:
    """The README's fp8 example: vLLM's CPU build refuses fp8 KV on an AVX2-only host (0.32 after its KV line,
    0.33 at config time), and dspark says why and what to do where the engine's own message does not."""
    host = _host(tmp_path, flags)
    rc, out = _validate(capsys, "--model", str(_model(tmp_path, "llama-3-8b-instruct")), "--engine", "vllm",
                        "--platform", "cpu", "--hardware", str(host), "--kv-cache-memory", "1GiB",
                        "--engine-version", version, "--", "--max-model-len", "4096", "--kv-cache-dtype", "fp8")
    assert rc == code, out
    refused = [f for f in out["findings"] if f["code"] == "cpu_kv_cache_dtype"]
    if code:
        (finding,) = refused
        assert finding["level"] == "fail" and "x86 with AVX-512 or AMX" in finding["message"]  # why
        assert finding["message"].endswith("use --kv-cache-dtype auto here, or an x86 host with AVX-512 or AMX.")
    else:
        assert not refused
