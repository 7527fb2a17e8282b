"""The sweep's check of a Ray launch against a fake engine and a scripted cluster view: the placement groups the
engine created must hold every rank while it runs and be gone once it stopped (tests/deploy/test_ray_cluster.py
runs the same against a real local Ray cluster)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from dspark.bench import sweep as sweep_mod
from dspark.bench.sweep import PlannedLaunch, RayRanks, RayView, run_setting
from dspark.hardware.ray_nodes import Placement, RayUnavailable, placement_of
from dspark.runtime.supervise import EngineProcess, StopOutcome
from tests.bench.test_sweep_fake import POOL, fake_plan, spec

A, B = "a" * 56, "b" * 56  # Ray node ids are 56 hex digits


class ScriptedView(RayView):
    """A cluster view whose groups follow the engine: before its start, while it runs, after it stopped."""

    def __init__(self, running: Mapping[str, Placement], stopped: Mapping[str, Placement],
                 existing: Mapping[str, Placement] | None = None) -> None:
        self.existing = dict(existing or {})
        self.running, self.stopped = running, stopped
        self.phase = "before"
        self.closed = False

    def groups(self) -> Mapping[str, Placement]:
        if self.phase == "before":
            self.phase = "running"
            return self.existing
        return {**self.existing, **(self.running if self.phase == "running" else self.stopped)}

    def close(self) -> None:
        self.closed = True


def group(gid: str, *nodes: str, state: str = "CREATED") -> Placement:
    return Placement(group_id=gid, state=state, gpu_nodes=nodes, gpus=float(len(nodes)))


def ray_launch(seats: int, ranks: int = 2) -> PlannedLaunch:
    return PlannedLaunch(plan=fake_plan(seats).plan, expected_pool_tokens=POOL, ray_ranks=ranks,
                         ray_address="127.0.0.1:6379")


def run(view: ScriptedView, launch: PlannedLaunch) -> sweep_mod.SettingResult:
    said: list[str] = []

    def opener(address: str | None) -> RayView:
        assert address == "127.0.0.1:6379"
        return view

    class Stopping(EngineProcess):
        def stop(self, timeout: float = 30.0) -> StopOutcome:
            view.phase = "stopped"
            return super().stop(timeout)

    mp = pytest.MonkeyPatch()
    mp.setattr(sweep_mod, "EngineProcess", Stopping)
    mp.setattr(sweep_mod, "RAY_PLACE_GRACE_S", 0.3)
    try:
        return run_setting(2, launch, spec(), log_path=None, health_timeout_s=60, stop_timeout_s=1.0,
                           say=said.append, open_ray=opener)
    finally:
        mp.undo()


def test_every_rank_placed_and_released_is_clean_and_says_where() -> None:
    old = group("old", A)  # another job's group, there before the engine: not the engine's
    view = ScriptedView({"pg1": group("pg1", A, B)}, {"pg1": group("pg1", A, B, state="REMOVED")}, {"old": old})
    result = run(view, ray_launch(2))
    assert result.problems == ()
    assert result.ray_nodes == (RayRanks(A, 1), RayRanks(B, 1))
    assert view.closed


def test_fewer_ranks_placed_than_the_plan_is_a_problem() -> None:
    view = ScriptedView({"pg1": group("pg1", A, "")}, {})
    result = run(view, ray_launch(2))
    assert result.ray_nodes == (RayRanks(A, 1),)
    assert any("Ray placed 1 of the plan's 2 ranks" in p and "1 GPU bundle(s) waiting for a node" in p
               for p in result.problems), result.problems
    assert result.bench is None  # an unverified launch is not benched


def test_a_group_still_reserving_gpus_after_the_stop_is_a_problem() -> None:
    view = ScriptedView({"pg1": group("pg1", A, B)}, {"pg1": group("pg1", A, B)})
    result = run(view, ray_launch(2))
    (problem,) = result.problems
    assert problem.startswith("Ray placement group pg1 still reserves 2 GPU(s) on aaaaaaaa, bbbbbbbb")
    assert result.bench is not None and not result.clean


def test_a_cluster_that_cannot_be_read_starts_nothing() -> None:
    def opener(_address: str | None) -> RayView:
        raise RayUnavailable("no Ray cluster answers at 127.0.0.1:6379")

    result = run_setting(2, ray_launch(2), spec(), log_path=None, health_timeout_s=60, stop_timeout_s=1.0,
                         open_ray=opener)
    assert result.startup_s is None and result.stop is None
    (problem,) = result.problems
    assert "no Ray cluster answers at 127.0.0.1:6379" in problem


def test_a_plan_not_on_ray_never_opens_the_cluster() -> None:
    def opener(_address: str | None) -> RayView:
        raise AssertionError("a plan without Ray ranks must not join a Ray cluster")

    result = run_setting(2, fake_plan(2), spec(), log_path=None, health_timeout_s=60, stop_timeout_s=1.0,
                         open_ray=opener)
    assert result.clean and result.ray_nodes == ()


def test_placement_of_reads_rays_table_entry() -> None:
    entry = {"placement_group_id": "pg1", "name": "", "strategy": "PACK", "state": "CREATED",
             "bundles": {0: {"GPU": 1.0}, 1: {"GPU": 1.0}, 2: {"CPU": 1.0}},
             "bundles_to_node_id": {0: A, 1: B, 2: A}}
    assert placement_of("pg1", entry) == Placement(group_id="pg1", state="CREATED", gpu_nodes=(A, B), gpus=2.0)
    pending = placement_of("pg2", {"state": "PENDING", "bundles": {0: {"GPU": 1.0}}, "bundles_to_node_id": {}})
    assert pending.gpu_nodes == ("",) and pending.live
    assert not placement_of("pg3", {"state": "REMOVED"}).live
