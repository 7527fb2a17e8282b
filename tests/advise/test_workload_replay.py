"""The workload's reading and the replay's pure parts, without an engine: the driver's step cost is the advisor's,
arrivals are bench's, the accepted-token pattern has the asked mean, and a pass's figures follow its times."""

from __future__ import annotations

import importlib
import json
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dspark.advise.model import StepCosts, StepShape, decode_step_s
from dspark.advise.replay import pass_prediction, step_cost
from dspark.advise.workload import (
    accepted_pattern,
    arrival_times,
    arrivals_of,
    check_lengths,
    load_workload,
    synthetic,
)
from dspark.bench.load import arrival_schedule
from dspark.core.errors import InputError


def _driver() -> ModuleType:
    """The engine-side tool, imported afresh: at import it needs only the standard library."""
    for name in [m for m in sys.modules if m == "dspark_inside" or m.startswith("dspark_inside.")]:
        del sys.modules[name]
    return importlib.import_module("dspark_inside.vllm.replay_scheduler")


def test_the_drivers_step_cost_is_the_advisors() -> None:
    rng = random.Random(3)  # noqa: S311 - test inputs
    step_seconds = _driver().step_seconds
    for _ in range(200):
        costs = StepCosts(fixed_s=rng.uniform(0, 0.01), bandwidth_bytes_per_s=rng.uniform(1e10, 1e12),
                          per_token_s=rng.uniform(0, 1e-4), prefill_per_token_s=rng.uniform(0, 1e-3))
        moe = rng.random() < 0.5
        shape = StepShape(dense_weight_bytes=rng.uniform(0, 1e10),
                          expert_weight_bytes=rng.uniform(0, 1e10) if moe else 0,
                          num_experts=512 if moe else None, top_k=10 if moe else None,
                          kv_bytes_per_token=rng.uniform(0, 1e5), state_bytes_per_seat=rng.uniform(0, 1e7),
                          speculative_tokens=rng.randrange(0, 5), emitted_per_step=1.0)
        rows, ctx, prefill = rng.randrange(0, 33), rng.uniform(0, 1e6), rng.randrange(0, 8193)
        ours = decode_step_s(costs, shape, rows, ctx, prefill)
        assert step_seconds(step_cost(costs, shape), rows, ctx, prefill) == pytest.approx(ours, rel=1e-12)


def test_the_driver_imports_nothing_but_the_standard_library_at_load() -> None:
    before = set(sys.modules)
    _driver()
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("vllm", "torch", "dspark")}


@pytest.mark.parametrize(("emitted", "spec"), [(3.0, 4), (2.3, 4), (1.0, 2), (4.7, 4), (9.0, 3)])
def test_accepted_pattern_has_the_asked_mean_in_whole_tokens(emitted: float, spec: int) -> None:
    pattern = accepted_pattern(emitted, spec)
    assert all(isinstance(a, int) and 0 <= a <= spec for a in pattern)
    assert sum(pattern) / len(pattern) == pytest.approx(min(emitted - 1, spec), abs=1 / len(pattern))
    assert max(pattern) - min(pattern) <= 1  # spread evenly, not bunched


def test_no_speculation_accepts_nothing() -> None:
    assert accepted_pattern(3.0, 0) == [0]


def test_open_loop_arrivals_are_benchs_and_inf_sends_all_at_once() -> None:
    assert list(arrival_times(50, 2.5, 0.7, 11)) == arrival_schedule(50, 2.5, 0.7, 11)
    assert arrival_times(4, math.inf, 1.0, 0) == (0.0, 0.0, 0.0, 0.0)
    assert arrivals_of(3, 8, None).to_json() == {"clients": 8}
    assert arrivals_of(3, 8, math.inf).to_json() == {"times": [0.0, 0.0, 0.0]}
    with pytest.raises(InputError, match="request-rate"):
        arrival_times(3, -1.0, 1.0, 0)


def test_synthetic_requests_share_exactly_the_asked_prefix() -> None:
    reqs = synthetic(5, 100, 7, shared_prefix=40, seed=1)
    assert all(len(r.prompt) == 100 and r.max_tokens == 7 for r in reqs)
    assert len({r.prompt[:40] for r in reqs}) == 1
    assert len({r.prompt[40:] for r in reqs}) == 5  # distinct tails
    with pytest.raises(InputError, match="shared-prefix"):
        synthetic(2, 10, 1, shared_prefix=10)


def test_workload_file_token_ids_and_max_tokens(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"prompt": [11, 12, 13], "max_tokens": 4}) + "\n\n"
                    + json.dumps({"prompt": [20, 21]}) + "\n")
    reqs = load_workload(path, default_max_tokens=9)
    assert [(r.prompt, r.max_tokens) for r in reqs] == [((11, 12, 13), 4), ((20, 21), 9)]
    with pytest.raises(InputError, match="request 1 needs 3 prompt \\+ 4 output"):
        check_lengths(reqs, 6, str(path))


@pytest.mark.parametrize("line", [{"prompt": [1, 2], "max_tokens": 0}, {"prompt": [1], "max_tokens": "3"},
                                  {"messages": "hi"}, {"tokens": [1]}])
def test_bad_workload_lines_name_the_file_and_line(tmp_path: Path, line: dict[str, object]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": [5]}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(InputError, match=f"{path}:2"):
        load_workload(path, 8)


def test_text_without_transformers_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it raises ImportError
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "hello there", "max_tokens": 3}) + "\n")
    with pytest.raises(InputError) as err:
        load_workload(path, 8, model_dir=tmp_path)
    assert "transformers" in str(err.value) and "token ids" in (err.value.hint or "")
    with pytest.raises(InputError, match="no local model directory"):
        load_workload(path, 8, model_dir=None)


def test_a_pass_is_summarised_as_a_bench_reports_it() -> None:
    raw = {"requests": 3, "steps": 10, "wall_time_s": 10.0, "prefill_time_s": 2.0, "prefix_cache_queries": 300,
           "prefix_cache_hits": 120, "preemptions": 1, "kv_peak_fraction": 0.5, "kv_mean_fraction": 0.25,
           "running_peak": 2, "arrival_s": [0.0, 0.0, 1.0], "first_token_s": [1.0, 2.0, 4.0],
           "finish_s": [5.0, 6.0, 10.0], "output_tokens": [5, 5, 7]}
    p = pass_prediction(raw)
    assert p.prefix_cache_hit_rate == pytest.approx(0.4)
    assert p.ttft_mean_s == pytest.approx(2.0) and p.ttft_p50_s == pytest.approx(2.0)
    assert p.ttft_p90_s == pytest.approx(2.8)
    assert p.tpot_mean_ms == pytest.approx((1.0 + 1.0 + 1.0) / 3 * 1e3)
    assert p.per_stream_decode_tps == pytest.approx((4 + 4 + 6) / (4 + 4 + 6))
    assert p.aggregate_decode_tps == pytest.approx(1.7) and p.prefill_share == pytest.approx(0.2)
