"""The prediction `dspark sweep` stores beside its measurements is made for the load the sweep sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dspark.advise import build
from dspark.advise.build import AdviseOptions, sweep_prediction
from dspark.bench.load import LoadOptions
from dspark.core.errors import InputError
from dspark.planning.validate import ValidateRequest


class _Advice:
    def __init__(self, opts: AdviseOptions) -> None:
        self.opts = opts

    def to_json(self) -> dict[str, Any]:
        return {"predictions": [], "assumptions": ["from advise"]}


def test_the_sweeps_load_reaches_the_replay(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Warm re-run, open-loop arrivals, seed and prompts file go to advise, whose default simulator (auto) is the
    engine's scheduler when the engine is installed."""
    seen: list[AdviseOptions] = []

    def fake(request: ValidateRequest, opts: AdviseOptions) -> _Advice:
        seen.append(opts)
        return _Advice(opts)

    monkeypatch.setattr(build, "build_advice", fake)
    prompts = tmp_path / "w.jsonl"
    load = LoadOptions(requests=12, concurrency=4, max_tokens=64, input_len=300, warm_rerun=True, request_rate=2.5,
                       burstiness=0.5, seed=9, prompts_file=prompts, reps=2)
    out = sweep_prediction(ValidateRequest(), "2,4", load, "wall_time", "10%", "10%", None)
    (opts,) = seen
    assert (opts.seats, opts.clients, opts.requests, opts.input_len, opts.output_len) == ("2,4", 4, 12, 300, 64)
    assert (opts.warm, opts.request_rate, opts.burstiness, opts.seed, opts.prompts_file) == (True, 2.5, 0.5, 9,
                                                                                               prompts)
    assert opts.simulator == "auto"
    assert out["assumptions"][0] == "from advise"
    assert "2 rep(s) of 12 requests" in out["assumptions"][1] and "re-run of the last rep" in out["assumptions"][1]
    assert "at most 4 requests in flight" in out["assumptions"][2]


def test_a_prediction_that_cannot_be_made_is_an_error_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(request: ValidateRequest, opts: AdviseOptions) -> _Advice:
        raise InputError("no model")

    monkeypatch.setattr(build, "build_advice", refuse)
    assert sweep_prediction(ValidateRequest(), "2", LoadOptions(), "wall_time", "10%", "10%", None) == {
        "error": "InputError: no model"}
