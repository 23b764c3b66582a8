"""A waiting tray job short of GPUs in all is still planned for when running jobs with an ``expectedRuntime``
end within the queue's wait bound (``core.moveplan.ends_in_time``, the simulator's rule too): the plan holds
the room and waits for them, so backfill cannot take what they free. Jobs that end later leave it waiting as
before, with nothing written (``test_tray_room_moves``)."""

from __future__ import annotations

from paralleljob.k8s.edge.status.moveplans import plan_from_status
from tests.k8s.factories import foreign_pod, paralleljob
from tests.k8s.harness import FakeCluster
from tests.k8s.test_tray_room_moves import BIG, RACK0, RACK1, SMALL, at, trays


def scattered_ending(runtime_s: int) -> FakeCluster:
    """The one-tray jobs of ``test_tray_room_moves`` (64 GPUs free), each expected to run ``runtime_s``,
    checkpointing daily (so none can move at its checkpoint within the wait)."""
    fc = FakeCluster(trays())
    everything = [f"r{r}-t{t:02d}" for r in range(2) for t in range(18)]
    for name in everything:
        if name not in RACK0 + RACK1:
            fc.pods[("other", f"f-{name}")] = foreign_pod(f"f-{name}", name, 4)
    for key in SMALL:
        spec = {"checkpoint": {"intervalSeconds": 86_400}, "expectedRuntimeSeconds": runtime_s}
        fc.add_job(paralleljob(key.split("/")[1], 4, 1, 1, memory=10.0, extra_spec=spec))
    for _ in range(4):
        fc.step(at(0))
    for name in everything:
        fc.pods.pop(("other", f"f-{name}"), None)
    assert all(fc.phase(k) == "Running" for k in SMALL)
    return fc


def test_jobs_ending_within_the_wait_make_a_plan_that_waits_for_them() -> None:
    fc = scattered_ending(11_000)  # all end at ~11,000 s, within 30 min of 10,000 s
    fc.add_job(paralleljob("big", 8, 1, 16, memory=10.0, created=at(10_000)))  # 128 GPUs, 64 free
    for t in range(3):
        fc.step(at(10_000 + t))
    status = fc.job(BIG)["status"]
    plan = plan_from_status(status)
    assert fc.phase(BIG) == "Queued" and plan is not None, status
    assert plan.moves and {m.when.value for m in plan.moves} == {"at-end"}, plan
    assert all(fc.phase(k) == "Running" and "lastRoomMove" not in fc.job(k)["status"] for k in SMALL)


def test_jobs_ending_after_the_wait_leave_it_waiting_with_nothing_written() -> None:
    fc = scattered_ending(20_000)
    fc.add_job(paralleljob("big", 8, 1, 16, memory=10.0, created=at(10_000)))
    for t in range(3):
        fc.step(at(10_000 + t))
    status = fc.job(BIG)["status"]
    assert fc.phase(BIG) == "Queued" and status["reason"] == "Unschedulable", status
    assert "movePlan" not in status and "moveCheck" not in status, status
