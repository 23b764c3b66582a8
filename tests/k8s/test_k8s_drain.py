"""``paralleljob drain`` is maintenance, not a failure (issue 38): the job on the drained GPUs gets the
preemption's checkpoint-now signal and grace period, moves after its checkpoint (or the deadline) with no
restart counted and no GPUFailure, ``--now`` moves it at once (still no restart), and after ``undrain`` it
moves back when that pays, even if it never checkpoints."""

from __future__ import annotations

import copy
from typing import Any

from paralleljob.core.reoptimize import RECHECK_SECONDS
from paralleljob.k8s.edge.constants import CHECKPOINT_REQUESTED_ANNOTATION, LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.actions import Plan
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster, drain_node

SEED_COST_MS = 233.710821  # TP4xPP2xDP2 with each stage's two replicas sharing a node: DP over NVLink
GRACE = 30  # the operator's default --preemption-grace-seconds


def at(seconds: int) -> str:
    return f"2024-01-01T{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}Z"


def events(plan: Plan, key: str = "ns/seed") -> list[tuple[str, str]]:
    return [(e.event_type, e.reason) for a in plan.jobs if a.job.key == key for e in a.events]


def status(fc: FakeCluster) -> dict[str, Any]:
    return fc.job("ns/seed")["status"]


def condition(fc: FakeCluster, ctype: str) -> dict[str, Any]:
    return next(c for c in status(fc)["conditions"] if c["type"] == ctype)


def running(extra_spec: dict[str, Any] | None = None, **job: Any) -> tuple[FakeCluster, str]:
    """The seed job on two of four nodes (a and b); c and d half taken by someone else, so a drained node's
    stage must split over c and d (the expensive case). Returns the cluster and the node stage 0 runs on."""
    fc = FakeCluster([node(n, leaf="leaf-00") for n in ("a", "b", "c", "d")])
    fc.pods[("other", "x")] = foreign_pod("x", "c", 4)
    fc.pods[("other", "y")] = foreign_pod("y", "d", 4)
    fc.add_job(paralleljob("seed", 4, 2, 2, memory=70.0, extra_spec=extra_spec, **job))
    for _ in range(4):
        fc.step(at(0))
    record = record_from_status(status(fc))
    assert record is not None and record.cost is not None and fc.phase("ns/seed") == "Running"
    assert abs(record.cost.total_ms - SEED_COST_MS) < 1e-3
    return fc, next(s.node for s in record.slots if s.stage == 0)


def pods_on(fc: FakeCluster, name: str) -> list[str]:
    return [p["metadata"]["name"] for p in fc.job_pods("ns/seed") if p["spec"].get("nodeName") == name]


def test_a_drained_node_asks_for_a_checkpoint_first_then_moves_the_job_without_a_restart() -> None:
    fc, stage0 = running()
    drain_node(fc, stage0)
    first = fc.step(at(100))
    # Nothing moves yet: the job is asked to checkpoint, as a preemption victim is, and nothing is a failure.
    assert fc.phase("ns/seed") == "Running" and status(fc).get("restarts", 0) == 0
    deadline = status(fc)["drain"]["deadline"]
    assert deadline == at(100 + GRACE)
    assert condition(fc, "DrainPending")["status"] == "True"
    assert ("Normal", "DrainPending") in events(first)
    assert not [e for e in events(first) if e[0] == "Warning"], events(first)
    signals = {p["metadata"]["annotations"][CHECKPOINT_REQUESTED_ANNOTATION] for p in fc.job_pods("ns/seed")}
    assert signals == {deadline}, "every pod of the gang is asked to checkpoint (the preemption's signal)"
    assert len(pods_on(fc, stage0)) == 2, "the pods keep running until the checkpoint or the deadline"
    assert first.wake_after is not None and first.wake_after <= GRACE, "the loop wakes at the deadline"

    fc.step(at(110))
    assert len(pods_on(fc, stage0)) == 2 and "lastDrain" not in status(fc)

    moved = fc.step(at(100 + GRACE + 1))
    st = status(fc)
    assert st.get("restarts", 0) == 0, "a drain is not counted against maxRestarts"
    assert "lastFailure" not in st, "a drain is not a hardware failure"
    assert st["lastDrain"]["kind"] == "Drained" and st["lastDrain"]["action"] == "rescheduled"
    assert st["lastDrain"]["nodes"] == [stage0]
    assert "drain" not in st and condition(fc, "DrainPending")["reason"] == "Moved"
    assert ("Normal", "Drained") in events(moved)
    assert not [e for e in events(moved) if e[0] == "Warning" or e[1] in ("GPUFailure", "NodeFailure")]
    fc.settle()
    assert fc.phase("ns/seed") == "Running" and status(fc).get("restarts", 0) == 0
    assert not pods_on(fc, stage0)


def test_a_checkpoint_after_the_request_moves_the_job_before_the_deadline() -> None:
    fc, stage0 = running()
    drain_node(fc, stage0)
    fc.step(at(100))
    fc.step(at(105))
    assert len(pods_on(fc, stage0)) == 2
    job = copy.deepcopy(fc.job("ns/seed"))
    job["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: at(106)}  # the training code checkpointed
    fc.jobs["ns/seed"] = job
    fc.step(at(107))
    assert "after its checkpoint" in status(fc)["lastDrain"]["message"]
    fc.settle()
    assert not pods_on(fc, stage0) and status(fc).get("restarts", 0) == 0


def test_drain_now_moves_at_once_and_counts_no_restart() -> None:
    fc, stage0 = running()
    drain_node(fc, stage0, now=True)
    moved = fc.step(at(100))
    st = status(fc)
    assert st.get("restarts", 0) == 0 and "lastFailure" not in st
    assert "at once (drain --now)" in st["lastDrain"]["message"]
    assert ("Normal", "Drained") in events(moved) and ("Normal", "DrainPending") not in events(moved)
    fc.settle()
    assert not pods_on(fc, stage0)


def test_a_drain_never_makes_a_job_give_up_at_max_restarts() -> None:
    fc, stage0 = running()
    job = copy.deepcopy(fc.job("ns/seed"))
    job["status"]["restarts"] = 3  # maxRestarts used up by real failures
    fc.jobs["ns/seed"] = job
    drain_node(fc, stage0, now=True)
    fc.settle()
    assert fc.phase("ns/seed") == "Running" and status(fc)["restarts"] == 3
    assert not pods_on(fc, stage0)


def test_a_drain_with_no_room_left_requeues_at_its_place_even_with_on_unplaceable_fail() -> None:
    fc = FakeCluster([node(n, leaf="leaf-00") for n in ("a", "b")])
    fc.add_job(paralleljob("seed", 4, 2, 2, memory=70.0, on_unplaceable="Fail"))
    fc.settle(4)
    assert fc.phase("ns/seed") == "Running"
    queued_at = status(fc)["queuedAt"]
    drain_node(fc, "a", now=True)
    fc.step(at(100))
    assert fc.phase("ns/seed") == "Queued", "an admin's drain does not fail the job"
    assert status(fc)["queuedAt"] == queued_at and status(fc).get("restarts", 0) == 0


def test_undrain_before_the_deadline_cancels_the_move() -> None:
    fc, stage0 = running()
    before = status(fc)["placement"]
    drain_node(fc, stage0)
    fc.step(at(100))
    drain_node(fc, stage0, undo=True)
    fc.step(at(110))
    assert "drain" not in status(fc) and condition(fc, "DrainPending")["reason"] == "Cancelled"
    fc.step(at(200))
    assert status(fc)["placement"] == before and "lastDrain" not in status(fc)


def test_a_job_that_never_checkpoints_moves_back_after_undrain_at_its_safe_point() -> None:
    fc, stage0 = running()  # no checkpoint spec at all: today's rule says "never checkpoints, never moves"
    drain_node(fc, stage0, now=True)
    fc.step(at(100))
    for t in range(101, 106):
        fc.step(at(t))
    moved = record_from_status(status(fc))
    assert moved is not None and moved.cost is not None and moved.cost.total_ms > 5 * SEED_COST_MS
    assert status(fc).get("restarts", 0) == 0
    drain_node(fc, stage0, undo=True)
    t = 106 + int(RECHECK_SECONDS) + 1
    fc.step(at(t))
    reopt = status(fc)["reoptimization"]
    assert reopt["proposedAt"] and condition(fc, "Reoptimizable")["status"] == "True", condition(fc, "Reoptimizable")
    # the safe point: the drain's own checkpoint signal and grace period, then the move back
    signal = {p["metadata"]["annotations"].get(CHECKPOINT_REQUESTED_ANNOTATION) for p in fc.job_pods("ns/seed")}
    assert signal == {at(t + GRACE)}, signal
    fc.step(at(t + 5))
    assert "lastMigration" not in status(fc)
    fc.step(at(t + GRACE + 1))
    back = status(fc)
    assert back.get("lastMigration"), back.get("conditions")
    assert abs(back["communicationCost"]["totalMs"] - SEED_COST_MS) < 1e-3
    fc.settle()
    assert fc.phase("ns/seed") == "Running" and status(fc).get("restarts", 0) == 0
