"""The chaos run's invariants judge API snapshots: each one fires on the situation it names, only after
its grace period with the operator up, and not on the ordinary states of a healthy run."""

from __future__ import annotations

import asyncio
from typing import Any

from paralleljob.chaosrun.invariants import InvariantChecker, snapshot
from paralleljob.chaosrun.run import ChaosConfig, ChaosRun
from paralleljob.devcluster.nodes import NodeShape


def node(name: str, ready: bool = True, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(name: str, job: str, node_name: str, indices: str, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    tp = len(indices.split(","))
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "labels": {"paralleljob.dev/job": job},
            "annotations": {"paralleljob.dev/gpu-indices": indices},
            **meta,
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": tp}}}]},
        "status": {"phase": phase},
    }


def job(name: str, phase: str, pods: list[str], reason: str = "AllPodsBound") -> dict[str, Any]:
    placement = {"pods": [{"name": p} for p in pods]}
    return {"metadata": {"name": name}, "status": {"phase": phase, "reason": reason, "placement": placement}}


def test_a_healthy_gang_passes() -> None:
    checker = InvariantChecker(expected={"a"})
    snap = snapshot(
        0.0,
        [node("n1")],
        [pod("a-0", "a", "n1", "0,1"), pod("a-1", "a", "n1", "2,3")],
        [job("a", "Running", ["a-0", "a-1"])],
    )
    assert checker.check(snap, 0.0) == []
    assert checker.final(snap) == []


def test_gpu_twice_and_oversubscription_fire_at_once() -> None:
    checker = InvariantChecker()
    pods = [pod("a-0", "a", "n1", "0,1,2,3,4"), pod("b-0", "b", "n1", "4,5,6,7")]
    kinds = {v.kind for v in checker.check(snapshot(0.0, [node("n1")], pods, []), 0.0)}
    assert kinds == {"gpu-twice", "oversubscribed"}
    finished = [pod("a-0", "a", "n1", "0,1,2,3,4", phase="Failed"), pod("b-0", "b", "n1", "4,5,6,7")]
    assert checker.check(snapshot(1.0, [node("n1")], finished, []), 0.0) == [], "finished pods hold no GPU"


def test_pods_on_a_down_node_are_charged_only_after_the_grace_with_the_operator_up() -> None:
    checker = InvariantChecker(grace_s=10.0)
    pods = [pod("a-0", "a", "n1", "0")]
    assert checker.check(snapshot(0.0, [node("n1", ready=False)], pods, []), None) == []
    assert checker.check(snapshot(20.0, [node("n1", ready=False)], pods, []), None) == [], "operator down"
    assert checker.check(snapshot(25.0, [node("n1", ready=False)], pods, []), 20.0) == [], "up for 5 s only"
    found = checker.check(snapshot(31.0, [], pods, []), 20.0)  # deleted now: still down
    assert [v.kind for v in found] == ["bound-to-down-node"]


def test_half_bound_gangs_lost_and_unsettled_jobs() -> None:
    checker = InvariantChecker(grace_s=10.0, expected={"a", "b", "gone"})
    pods = [pod("a-0", "a", "n1", "0"), pod("a-1", "a", "n1", "1", phase="Failed")]
    jobs = [job("a", "Running", ["a-0", "a-1"]), job("b", "Placing", [])]
    expected = checker.expected
    assert {v.kind for v in checker.check(snapshot(0.0, [node("n1")], pods, jobs, expected), 0.0)} == {"lost"}
    late = checker.check(snapshot(11.0, [node("n1")], pods, jobs, expected), 0.0)
    assert {(v.kind, v.subject) for v in late} == {("lost", "gone"), ("half-bound", "a")}
    final = checker.final(snapshot(12.0, [node("n1")], pods, jobs))
    assert {(v.kind, v.subject) for v in final} == {("lost", "gone"), ("unsettled", "b")}


def test_a_queued_job_keeping_live_pods_counts_as_half_bound() -> None:
    checker = InvariantChecker(grace_s=1.0)
    snap = [job("q", "Queued", [], reason="Requeued")]
    checker.check(snapshot(0.0, [node("n1")], [pod("q-0", "q", "n1", "0")], snap), 0.0)
    found = checker.check(snapshot(2.0, [node("n1")], [pod("q-0", "q", "n1", "0")], snap), 0.0)
    assert [v.kind for v in found] == ["half-bound"]


def test_half_bound_is_judged_per_recorded_slot_not_by_counting_pods() -> None:
    """The chaos finding: 10 of 16 slots held while the phase said Running. Pods of other names (left from
    an earlier placement) or pods being deleted never fill a slot."""
    checker = InvariantChecker(grace_s=1.0)
    slots = ["r-d0-p0", "r-d0-p1", "r-d1-p0", "r-d1-p1"]
    pods = [
        pod("r-d0-p0", "r", "n1", "0"),
        pod("r-d0-p1", "r", "n1", "1"),
        pod("r-old-a", "r", "n2", "0"),  # not a slot of the record
        pod("r-d1-p0", "r", "n1", "2", deletionTimestamp="2026-01-01T00:00:00Z"),
        pod("r-old-b", "r", "n2", "1"),
    ]
    jobs = [job("r", "Running", slots)]
    assert checker.check(snapshot(0.0, [node("n1"), node("n2")], pods, jobs), 0.0) == []
    found = checker.check(snapshot(2.0, [node("n1"), node("n2")], pods, jobs), 0.0)
    assert [(v.kind, v.subject) for v in found] == [("half-bound", "r")]
    assert "2 of 4 slots" in found[0].detail


def test_a_running_job_with_no_pod_at_all_is_charged_but_a_placing_one_is_not() -> None:
    checker = InvariantChecker(grace_s=1.0)
    jobs = [job("run", "Running", ["run-d0-p0"]), job("plc", "Placing", ["plc-d0-p0"])]
    checker.check(snapshot(0.0, [node("n1")], [], jobs), 0.0)
    found = checker.check(snapshot(2.0, [node("n1")], [], jobs), 0.0)
    assert [(v.kind, v.subject) for v in found] == [("half-bound", "run")]


def test_an_operator_still_looping_after_the_jobs_settled_is_a_violation() -> None:
    """The end of a chaos run checks the operator's pass rate as every e2e scenario does (issue 21: a
    settled-looking cluster with the operator at 60-90 passes a second)."""

    class Looping:
        def running(self) -> bool:
            return True

        def settled_pass_rate(self, timeout_s: float) -> float:
            return 74.0

    class Idle(Looping):
        def settled_pass_rate(self, timeout_s: float) -> float:
            return 0.1

    shape = NodeShape(count=4, gpus_per_node=8, nodes_per_rack=4)
    looping = ChaosRun(None, shape, Looping(), ChaosConfig())  # type: ignore[arg-type]
    assert asyncio.run(looping._idle_rate(0.0)) == 74.0
    assert [v.kind for v in looping.checker.violations] == ["unsettled-operator"]
    idle = ChaosRun(None, shape, Idle(), ChaosConfig())  # type: ignore[arg-type]
    assert asyncio.run(idle._idle_rate(0.0)) == 0.1
    assert idle.checker.violations == []
