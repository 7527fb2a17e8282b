"""A sweep records each setting's boot (PlannedLaunch.on_boot, dspark.planning.boot_records.BootRecorder) and says
what the recorder says, against the fake engine."""

from __future__ import annotations

import dataclasses

from dspark.bench.sweep import run_setting
from tests.bench.test_sweep_fake import POOL, fake_plan, spec


def test_each_setting_hands_its_boot_to_the_recorder() -> None:
    seen: list[int] = []

    def on_boot(log: object) -> list[str]:
        seen.append(log.kv_pool.pool_tokens)  # type: ignore[attr-defined]
        return ["dspark: recorded this boot's KV pool"]

    said: list[str] = []
    launch = dataclasses.replace(fake_plan(2), on_boot=on_boot)
    result = run_setting(2, launch, spec(), log_path=None, health_timeout_s=60, stop_timeout_s=10, say=said.append)
    assert result.clean, result.problems
    assert seen == [POOL]
    assert "2 seats: recorded this boot's KV pool" in said
