"""The traced profile-run peak: its request, its cache (key, atomic file, unreadable files) and its answers."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from dspark.engines.inside import MARKER
from dspark.engines.vllm import profile_trace as pt

H200 = pt.DeviceFacts("NVIDIA H200", (9, 0), 150754820096, 132)
CONFIG = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36}
ANSWER = {"ok": True, "engine_version": "0.32.0", "runner": "v2", "forward_peak_bytes": 872415232,
          "kept_bytes": 67305472, "sampler_peak_bytes": None, "peak_bytes": 872415232, "sampler": "not traced"}


def _request(**changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"max_num_batched_tokens": 8192, "max_num_seqs": 24, "max_model_len": 32768,
                            "device": H200}
    args.update(changes)
    config = args.pop("config", CONFIG)
    return pt.trace_request(config, **args)


class Tool:
    """A stand-in for the engine's interpreter: answers with `answer`, counts its runs."""

    def __init__(self, answer: object) -> None:
        self.answer, self.runs = answer, 0

    def __call__(self, argv: Sequence[str], stdin: str, timeout: float, env: Mapping[str, str]
                 ) -> subprocess.CompletedProcess[str]:
        self.runs += 1
        assert argv[-1] == "dspark_inside.vllm.profile_peak"
        assert json.loads(stdin)["engine_args"]["max_num_batched_tokens"] == 8192
        return subprocess.CompletedProcess(list(argv), 0, f"noise\n{MARKER}{json.dumps(self.answer)}\n", "")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"DSPARK_DATA_DIR": str(tmp_path / "data")}


def test_the_key_changes_with_everything_the_peak_depends_on() -> None:
    base = pt.cache_key(_request(), "0.32.0")
    variants = [
        pt.cache_key(_request(max_num_batched_tokens=4096), "0.32.0"),
        pt.cache_key(_request(max_num_seqs=256), "0.32.0"),
        pt.cache_key(_request(max_model_len=8192), "0.32.0"),
        pt.cache_key(_request(dtype="float16"), "0.32.0"),
        pt.cache_key(_request(kv_cache_dtype="fp8"), "0.32.0"),
        pt.cache_key(_request(config={**CONFIG, "hidden_size": 2048}), "0.32.0"),
        pt.cache_key(_request(device=pt.DeviceFacts("NVIDIA H100", (9, 0), 85 << 30, 132)), "0.32.0"),
        pt.cache_key(_request(), "0.33.0"),
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert base == pt.cache_key(_request(), "0.32.0")  # and nothing else (no time, no path)
    assert len(base) == 16 and int(base, 16) >= 0


def test_a_trace_is_run_once_then_read_from_the_cache(env: dict[str, str]) -> None:
    tool = Tool(ANSWER)
    first, problem = pt.traced_peak("/py", _request(), "0.32.0", env=env, runner=tool)
    assert problem is None and first is not None and not first.cached
    assert first.peak_bytes == 872415232 and first.runner == "v2"
    again, problem = pt.traced_peak("/py", _request(), "0.32.0", env=env, runner=tool)
    assert tool.runs == 1 and problem is None and again is not None and again.cached
    assert again.peak_bytes == first.peak_bytes and again.key == first.key
    files = list(pt.cache_dir(env).iterdir())
    assert [f.name for f in files] == [f"{first.key}.json"]  # no temporary file left beside it
    assert files[0].stat().st_mode & 0o777 == 0o600
    # another batch size is another trace
    pt.traced_peak("/py", _request(max_num_seqs=8), "0.32.0", env=env, runner=tool)
    assert tool.runs == 2


def test_the_request_names_the_devices_cublas_workspace() -> None:
    assert _request()["cublas_workspace_bytes"] == 32 << 20  # H200: the probe's rows say 32 MiB
    old = pt.DeviceFacts("NVIDIA A100", (8, 0), 80 << 30, 108)
    assert _request(device=old)["cublas_workspace_bytes"] == 8519680 == pt.cublas_workspace_bytes((8, 0))
    assert pt.cublas_workspace_bytes((10, 0)) == 32 << 20
    peak = pt.TracedPeak("k", "0.25.0", "v2", 905969664, 100859904, 0, 905969664, "")
    assert peak.torch_peak_increase() == 905969664  # the workspace is in the traced peak already


@pytest.mark.parametrize("text", [
    "not json", "[]", json.dumps({"format": "other"}),
    json.dumps({"format": pt.FORMAT, "version": pt.VERSION + 1}),
    json.dumps({"format": pt.FORMAT, "version": pt.VERSION, "key": "0" * 16, **ANSWER}),  # another key's
    json.dumps({"format": pt.FORMAT, "version": pt.VERSION, "KEY": None, **ANSWER, "peak_bytes": -1}),
    json.dumps({"format": pt.FORMAT, "version": pt.VERSION, "KEY": None, **ANSWER, "peak_bytes": True}),
    json.dumps({"format": pt.FORMAT, "version": pt.VERSION, "KEY": None, **ANSWER, "peak_bytes": 1}),  # < forward
    "x" * (pt.MAX_FILE_BYTES + 1),
])
def test_an_unreadable_cache_file_is_ignored_and_traced_again(env: dict[str, str], text: str) -> None:
    key = pt.cache_key(_request(), "0.32.0")
    folder = pt.cache_dir(env)
    folder.mkdir(parents=True)
    (folder / f"{key}.json").write_text(text.replace('"KEY": null', f'"key": "{key}"'))
    cached, problem = pt.load(key, env)
    assert cached is None and problem is not None and "is ignored" in problem
    tool = Tool(ANSWER)
    peak, problem = pt.traced_peak("/py", _request(), "0.32.0", env=env, runner=tool)
    assert tool.runs == 1 and peak is not None and problem is not None and "is ignored" in problem
    assert pt.load(key, env)[0] == pt.TracedPeak(key, "0.32.0", "v2", 872415232, 67305472, None, 872415232,
                                                 "not traced", cached=True)  # rewritten


@pytest.mark.parametrize(("answer", "words"), [
    ({"ok": False, "error": "not traced: speculative decoding"}, "gave no figures: not traced: speculative"),
    ({**ANSWER, "engine_version": "0.33.0"}, "ran vLLM 0.33.0, not 0.32.0"),
    ({**ANSWER, "peak_bytes": "many"}, "not usable: peak_bytes is not a byte count"),
    ([ANSWER], "not an object"),
])
def test_an_answer_without_figures_is_said_and_not_cached(env: dict[str, str], answer: object, words: str) -> None:
    peak, problem = pt.traced_peak("/py", _request(), "0.32.0", env=env, runner=Tool(answer))
    assert peak is None and problem is not None and words in problem
    assert not pt.cache_dir(env).exists() or not list(pt.cache_dir(env).glob("*.json"))


def test_a_tool_that_cannot_run_is_said(env: dict[str, str]) -> None:
    def missing(argv: Sequence[str], stdin: str, timeout: float, env: Mapping[str, str]
                ) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    peak, problem = pt.traced_peak("/no/python", _request(), "0.32.0", env=env, runner=missing)
    assert peak is None and problem is not None and "did not run in /no/python" in problem


# --- the plan on the traced figure (compute_vllm_capacity's activation_trace) -----------------------------------

ROOT = Path(__file__).resolve().parents[3]
QWEN3_8B = json.loads((ROOT / "tests/device/configs/qwen3-8b.json").read_text())
TOTAL = 150754820096


def _capacity(flags: list[str], trace: Any = None, tp: int = 1) -> Any:
    from dspark.engines.vllm.capacity import compute_vllm_capacity  # noqa: PLC0415
    from dspark.engines.vllm.options import parse_vllm_serve_flags  # noqa: PLC0415
    from dspark.model.architecture import parse_config  # noqa: PLC0415

    argv = ["--max-model-len", "32768", "--max-num-seqs", "24", "--tensor-parallel-size", str(tp), *flags]
    return compute_vllm_capacity(
        parse_config(QWEN3_8B), parse_vllm_serve_flags(argv), platform="cuda", device_total_bytes=TOTAL,
        device_free_bytes=TOTAL, device_reserved_bytes=644_939_776, compute_capability=(9, 0),
        weights_per_gpu_bytes=(16_394_145_792 - 10_485_760) // tp,  # the probe's weights less the rotary table
        engine_version="0.25.0", activation_trace=trace)


class Trace:
    def __init__(self, outcome: pt.TraceOutcome) -> None:
        self.outcome = outcome
        self.asked: list[pt.TraceAsk] = []

    def __call__(self, ask: pt.TraceAsk) -> pt.TraceOutcome:
        self.asked.append(ask)
        return self.outcome


def test_an_eager_plan_stands_on_the_traced_peak() -> None:
    heuristic = _capacity(["--enforce-eager"])
    # What the H200 measured for this plan (qwen3-8b-eager): torch peak increase 905,971,712 B.
    trace = Trace(pt.TraceOutcome(905_971_712, "activation peak (traced: test)"))
    traced = _capacity(["--enforce-eager"], trace)
    assert trace.asked == [pt.TraceAsk(8192, 24, 32768, "bfloat16", "auto")]
    before, after = dict(heuristic.budget.terms), dict(traced.budget.terms)
    assert after["activation_peak"] == 905_971_712 and before["activation_peak"] != 905_971_712
    assert {k: v for k, v in after.items() if k != "activation_peak"} == {
        k: v for k, v in before.items() if k != "activation_peak"}
    lost = after["activation_peak"] - before["activation_peak"]
    assert traced.budget.bytes == heuristic.budget.bytes - lost
    assert traced.runtime_overhead_bytes == heuristic.runtime_overhead_bytes + lost
    assert [a for a in traced.budget.assumptions if a.startswith("activation peak")] == [
        "activation peak (traced: test)"]  # the estimate's own activation line is gone
    assert any(a.startswith("activation peak (") for a in heuristic.budget.assumptions)
    assert traced.num_blocks == traced.budget.bytes // traced.bytes_per_block  # the pool follows the budget
    # The engine's budget for that row: 120,559,799,911 B available; the traced plan is 10 MiB under it (the
    # non-torch heuristic's 240 MiB against the 230 MiB measured): every other term is the engine's.
    engine = 120_559_799_911
    assert engine - traced.budget.bytes == 251_658_240 - 241_172_480


@pytest.mark.parametrize(("flags", "tp", "why"), [
    ([], 1, "the plan is compiled"),
    (["--enforce-eager"], 2, "one rank without a drafter"),
])
def test_where_the_trace_is_not_the_engines_the_heuristic_stands(flags: list[str], tp: int, why: str) -> None:
    trace = Trace(pt.TraceOutcome(1, "never used"))
    plan = _capacity(flags, trace, tp)
    assert trace.asked == [] and plan.budget == _capacity(flags, None, tp).budget
    assert any(why in n and n.startswith("activation peak stays the heuristic") for n in plan.notes)


def test_a_trace_without_figures_leaves_the_heuristic_and_says_why() -> None:
    plan = _capacity(["--enforce-eager"], Trace(pt.TraceOutcome(None, "activation peak stays the heuristic: x")))
    assert plan.budget == _capacity(["--enforce-eager"]).budget
    assert "activation peak stays the heuristic: x" in plan.notes


def test_a_pinned_budget_is_not_traced() -> None:
    trace = Trace(pt.TraceOutcome(1, "never used"))
    plan = _capacity(["--enforce-eager", "--kv-cache-memory-bytes", str(60 << 30)], trace)
    assert trace.asked == [] and plan.budget.source == "pinned"
