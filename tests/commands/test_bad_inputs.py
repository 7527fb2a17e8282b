"""The README's table of bad inputs: a clear message naming what is wrong, the right exit code, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dspark.hardware import HardwareSnapshot, HardwareSource

ROOT = Path(__file__).resolve().parents[2]


def run_dspark(
    args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed console entry point in a fresh process (as users run it)."""
    full_env = {k: v for k, v in os.environ.items() if k != "MAX_NUM_SEQS" and not k.startswith("DSPARK_")}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "dspark", *args], capture_output=True, text=True, env=full_env,
                          cwd=cwd, timeout=120, check=False)


def _recipe(tmp_path: Path, text: str) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return str(path)


GOOD = """\
name: tiny
engine: vllm
model:
  path: /nonexistent/tiny
  config: {model_type: qwen3, architectures: [Qwen3ForCausalLM], hidden_size: 64, num_hidden_layers: 2,
           num_attention_heads: 4, num_key_value_heads: 2, head_dim: 16, vocab_size: 1000,
           max_position_embeddings: 4096, torch_dtype: bfloat16, intermediate_size: 128}
"""


@pytest.mark.parametrize(
    ("case", "recipe_text", "expected"),
    [
        ("broken YAML", "name: x\nmodel: [unclosed\n", ["r.yaml:3", "YAML"]),
        ("unknown key", GOOD + "modle: {}\n", ["r.yaml:8", "modle", "did you mean 'model'"]),
        ("wrong type", GOOD + "batching: {max_num_seqs: lots}\n", ["r.yaml:8", "batching.max_num_seqs", "'lots'"]),
    ],
)
def test_bad_recipe(tmp_path: Path, case: str, recipe_text: str, expected: list[str]) -> None:
    proc = run_dspark(["validate", _recipe(tmp_path, recipe_text)])
    assert proc.returncode == 2, (case, proc.stderr)
    for text in expected:
        assert text in proc.stderr, (case, text, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_missing_model_directory() -> None:
    proc = run_dspark(["validate", "--model", "/no/such/model", "--engine", "vllm"])
    assert proc.returncode == 2
    assert "model directory '/no/such/model' does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "qwen3",\n "hidden_size": 64,,\n}')
    proc = run_dspark(["validate", "--model", str(tmp_path), "--engine", "vllm"])
    assert proc.returncode == 2
    assert str(tmp_path / "config.json") in proc.stderr
    assert "line 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_model_type_fails_closed(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mystery", "hidden_size": 64}))
    proc = run_dspark(["validate", "--model", str(tmp_path)])
    assert proc.returncode == 2
    assert "mystery" in proc.stderr
    assert "model.config" in proc.stderr  # the fix: give the architecture in a recipe


@pytest.mark.parametrize(
    ("value", "reason"),
    [("abc", "not a whole number"), ("0", "out of range"), ("-3", "out of range"), ("1e9", "not a whole number"),
     ("", "empty"), ("12.5", "not a whole number")],
)
def test_bad_max_num_seqs_environment_value(value: str, reason: str) -> None:
    proc = run_dspark(["validate"], env={"MAX_NUM_SEQS": value})
    assert proc.returncode == 2, proc.stderr
    assert f"MAX_NUM_SEQS={value!r}" in proc.stderr
    assert reason in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_dspark_environment_value() -> None:
    proc = run_dspark(["validate"], env={"DSPARK_KV_CACHE_MEMORY": "lots"})
    assert proc.returncode == 2
    assert "DSPARK_KV_CACHE_MEMORY='lots'" in proc.stderr


def test_unknown_hardware_profile() -> None:
    proc = run_dspark(["validate", "--hardware", "tpu-v9"])
    assert proc.returncode == 2
    assert "gb10x2" in proc.stderr  # lists the valid profiles


def test_debug_shows_the_traceback() -> None:
    proc = run_dspark(["--debug", "validate", "--model", "/no/such/model"])
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr


# --- Hardware rows: NVML driven through the hardware tests' fake pynvml module (no GPU here). ---

def _hw_fakes() -> object:
    """tests/hardware/conftest.py's fakes, loaded by path (conftest modules are not importable by name)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("hw_fakes", ROOT / "tests" / "hardware" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("hw_fakes", module)  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _run_with_nvml(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], source: HardwareSource,
                   args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`dspark ARGS` in-process with validate's hardware resolver reading `source` as if it were NVML."""
    from dspark.cli import main  # noqa: PLC0415
    from dspark.hardware.select import resolve_hardware  # noqa: PLC0415
    from dspark.planning import validate as validate_module  # noqa: PLC0415

    def resolver(spec: str | None, default_profile: str, origin: str = "--hardware") -> HardwareSnapshot:
        return resolve_hardware(spec, default_profile=default_profile, nvml_factory=lambda: source, origin=origin)

    monkeypatch.setattr(validate_module, "_resolve_hw", resolver)
    for name in [k for k in os.environ if k == "MAX_NUM_SEQS" or k.startswith("DSPARK_")]:
        monkeypatch.delenv(name)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_nvml_absent_plans_against_the_profile_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fakes = _hw_fakes()
    from dspark.hardware.nvml import NvmlSource  # noqa: PLC0415

    absent = NvmlSource(fakes.FakeNvml([], init_error=fakes.LIBRARY_NOT_FOUND))  # type: ignore[attr-defined]
    code, out, _ = _run_with_nvml(monkeypatch, capsys, absent, ["validate", "--json"])
    assert code == 0
    report = json.loads(out)
    assert report["hardware"]["description"].startswith("no NVIDIA GPU found here (")
    assert report["hardware"]["description"].endswith("planning against built-in profile gb10x2")
    assert report["capacity"]["safe_max_num_seqs"] == 6


def test_nvml_not_supported_on_a_discrete_gpu_is_an_input_error(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    fakes = _hw_fakes()
    from dspark.hardware.nvml import NvmlSource  # noqa: PLC0415

    ns = fakes.FakeNVMLError(fakes.NOT_SUPPORTED)  # type: ignore[attr-defined]
    device = fakes.FakeDevice(name="NVIDIA H100 80GB HBM3", v1=ns, v2=ns, addressing=0)  # type: ignore[attr-defined]
    code, out, err = _run_with_nvml(monkeypatch, capsys, NvmlSource(fakes.FakeNvml([device])),  # type: ignore[attr-defined]
                                    ["validate"])
    assert code == 2
    assert out == ""
    assert "NVML answers NOT_SUPPORTED for memory" in err
    assert "--hardware" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("available_gib", "code", "finding"), [(100, 0, "fits"), (52, 1, "unified-memory-danger-band")]
)
def test_gb10_unified_memory_fits_or_is_refused_in_the_danger_band(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    available_gib: int, code: int, finding: str,
) -> None:
    from functools import partial  # noqa: PLC0415

    from dspark.hardware.nvml import NvmlSource  # noqa: PLC0415
    from dspark.hardware.unified import read_host_memory  # noqa: PLC0415

    fakes = _hw_fakes()
    gib = 1 << 30
    ns = fakes.FakeNVMLError(fakes.NOT_SUPPORTED)  # type: ignore[attr-defined]
    gb10 = fakes.FakeDevice(name="NVIDIA GB10", v1=ns, v2=ns, cc=(12, 1))  # type: ignore[attr-defined]
    host = partial(read_host_memory, virtual_memory=fakes.fake_vm(119 * gib, available_gib * gib),  # type: ignore[attr-defined]
                   root=tmp_path)
    source = NvmlSource(fakes.FakeNvml([gb10]), host_memory=host)  # type: ignore[attr-defined]
    # Utilization 0.4 passes vLLM's start-up gate (free >= 0.4 x 119 GiB) so the band alone decides.
    rc, out, _ = _run_with_nvml(monkeypatch, capsys, source, ["validate", "--json"],
                                {"DSPARK_GPU_MEMORY_UTILIZATION": "0.4"})
    report = json.loads(out)
    argv = report["argv"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.4"  # passed beside the KV pin
    assert rc == code
    assert report["hardware"]["gpus"][0]["memory_source"] == "unified"
    assert finding in {f["code"] for f in report["findings"]}
    assert report["verdict"] == ("fail" if code else "warn")
    assert "startup_free_memory" not in {f["code"] for f in report["findings"]}


def test_gb10_default_utilization_fails_vllms_startup_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Under a KV pin vLLM still checks free >= 0.92 x total; on a GB10 MemAvailable rarely passes."""
    from functools import partial  # noqa: PLC0415

    from dspark.hardware.nvml import NvmlSource  # noqa: PLC0415
    from dspark.hardware.unified import read_host_memory  # noqa: PLC0415

    fakes = _hw_fakes()
    gib = 1 << 30
    ns = fakes.FakeNVMLError(fakes.NOT_SUPPORTED)  # type: ignore[attr-defined]
    gb10 = fakes.FakeDevice(name="NVIDIA GB10", v1=ns, v2=ns, cc=(12, 1))  # type: ignore[attr-defined]
    memory = fakes.fake_vm(119 * gib, 100 * gib)  # type: ignore[attr-defined]
    host = partial(read_host_memory, virtual_memory=memory, root=tmp_path)
    source = NvmlSource(fakes.FakeNvml([gb10]), host_memory=host)  # type: ignore[attr-defined]
    rc, out, _ = _run_with_nvml(monkeypatch, capsys, source, ["validate", "--json"])
    report = json.loads(out)
    assert rc == 1
    gate = next(f for f in report["findings"] if f["code"] == "startup_free_memory")
    assert gate["message"].startswith("Free memory on device cuda:0 (100.0/119.0 GiB) on startup is less than desired")


def test_a_ray_runtime_without_a_cluster_is_refused_by_start_not_ignored() -> None:
    # No cluster answers on a closed port: the dry run says the nodes went unchecked, a real start refuses.
    env = {"DSPARK_DISTRIBUTED_RUNTIME": "ray", "RAY_ADDRESS": "127.0.0.1:9"}
    proc = run_dspark(["start", "flash-next-vllm", "--dry-run", "--json"], env=env)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert any(f["code"] == "ray-cluster-not-checked" for f in plan["findings"])
    assert "--distributed-executor-backend" in plan["argv"] and "--nnodes" not in plan["argv"]
    proc = run_dspark(["start", "flash-next-vllm"], env=env)
    assert proc.returncode == 1
    assert "refusing to start on Ray: " in proc.stderr
    assert "Traceback" not in proc.stderr


def test_deepseek_v4_flash_on_an_rtx5090_exits_1_naming_the_weights_shortfall(
    unpinned_recipe: Callable[[str], str],
) -> None:
    # Unpinned, so that vLLM's own budget check (which names a TP that starts) is what judges the weights.
    result = run_dspark(["validate", unpinned_recipe("deepseek-v4-flash-vllm"), "--hardware", "rtx5090", "--json"])
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    finding = next(f for f in report["findings"] if f["code"] == "weights-do-not-fit")
    assert "GiB of weights per GPU (TP=2) do not fit" in finding["message"]
    assert "--tp " in finding["message"]


def test_a_config_only_deepseek_v4_directory_validates_with_a_kv_pin(tmp_path: Path) -> None:
    config = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "deepseek-v4-flash.json"
    (tmp_path / "config.json").write_text(config.read_text())
    result = run_dspark(["validate", "--model", str(tmp_path), "--engine", "vllm", "--hardware", "gb10x2",
                         "--tp", "2", "--nnodes", "2", "--max-model-len", "131072", "--kv-cache-memory", "10GB",
                         "--json"])
    assert result.returncode == 0, result.stderr
    capacity = json.loads(result.stdout)["capacity"]
    assert capacity["kv_budget_source"] == "pinned" and capacity["kv_budget_bytes"] == 10**10
    assert capacity["kv_pool_tokens"] > 0 and capacity["kv_bytes_per_token"] > 0
