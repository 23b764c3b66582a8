"""Why a job waits, as every surface shows it (issue 38): ``status.reason`` (the REASON printer column) and
``status.message`` follow the ``Placed`` condition, a wait that only someone's fix can end is a Warning
Event, and a head's "does not fit" names the real blocker with figures that are never stale."""

from __future__ import annotations

from typing import Any

from paralleljob.core.admit.fifo import RequeueOrder, room_refusal
from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.job import JobSpec
from paralleljob.core.topology import Topology
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_queue
from paralleljob.k8s.plan.status import counted, wait_message
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def status(fc: FakeCluster, key: str) -> dict[str, Any]:
    return dict(fc.job(key)["status"])


def placed(fc: FakeCluster, key: str) -> dict[str, Any]:
    return next(c for c in status(fc, key)["conditions"] if c["type"] == "Placed")


def test_a_queue_that_refuses_the_namespace_is_a_warning_and_the_reason_not_a_normal_wait() -> None:
    # A job in "default" naming queue research (namespaces: [research]) showed REASON Queued, "waits for room
    # in queue research" and one Normal Accepted Event, and waited forever.
    fc = FakeCluster([node("n0")], queues={"research": QueueInfo("research", namespaces=("research",))})
    fc.add_job(paralleljob("lost", 2, 1, 1, namespace="default", queue="research"))
    for _ in range(4):
        fc.step()
    got = status(fc, "default/lost")
    assert got["phase"] == "Queued"
    assert got["reason"] == "QueueRefused" and placed(fc, "default/lost")["reason"] == "QueueRefused"
    assert got["message"] == "queue research does not serve namespace default"
    plan = fc.last_plan
    assert plan is not None
    warnings = [(k, r) for k, r, _ in fc.events if r == "QueueRefused"]
    assert warnings == [("default/lost", "QueueRefused")], "once, when the wait starts"
    # the Event is a Warning: the pass that started the wait said so
    fc2 = FakeCluster([node("n0")], queues={"research": QueueInfo("research", namespaces=("research",))})
    fc2.add_job(paralleljob("lost", 2, 1, 1, namespace="default", queue="research"))
    first = fc2.step()
    notes = [(e.event_type, e.reason) for a in first.jobs for e in a.events]
    assert ("Warning", "QueueRefused") in notes


def test_a_queue_that_does_not_exist_is_still_a_warning_once_and_the_reason() -> None:
    fc = FakeCluster([node("n0")])
    fc.add_job(paralleljob("lost", 2, 1, 1, queue="nosuch"))
    for _ in range(3):
        fc.step()
    assert status(fc, "ns/lost")["reason"] == "QueueNotFound"
    assert [r for k, r, _ in fc.events if r == "QueueNotFound"] == ["QueueNotFound"]


def test_the_reason_column_says_why_a_job_waits_not_its_phase() -> None:
    # REASON read status.reason, which stayed "Queued" (the phase again) while the job waited for room
    fc = FakeCluster([node("n0", 8)])
    for i, (name, gpus) in enumerate((("small", 4), ("big", 8), ("behind", 1))):
        fc.add_job(paralleljob(name, gpus, 1, 1, created=f"2024-01-01T00:00:0{i}Z"))
    fc.settle(3)
    assert [fc.phase(f"ns/{n}") for n in ("small", "big", "behind")] == ["Running", "Queued", "Queued"]
    big, behind = status(fc, "ns/big"), status(fc, "ns/behind")
    assert big["reason"] == "Unschedulable" and big["message"] == placed(fc, "ns/big")["message"]
    assert big["message"].startswith("needs 1 TP group of 8 GPUs, each inside one node; no such group is free")
    assert behind["reason"] == "Waiting" and "blocked head of queue default" in behind["message"]
    assert status(fc, "ns/small")["reason"] == "Running"


def test_a_head_short_of_whole_nodes_says_so_not_one_gpu_short() -> None:
    # The issue's case: 31 of 32 GPUs free on 4 nodes, a job of 4 TP groups of 8: "needs 32 GPUs; 31 are
    # free" hid the blocker (3 whole nodes of 4).
    state = ClusterState(Topology.uniform(4, 8))
    state.allocate(Allocation("other", ((0,),), 0.0))
    spec = JobSpec("big", tp=8, pp=2, dp=2, memory_per_gpu_gb=10.0)
    assert room_refusal(state, 32, spec) == (
        "needs 4 TP groups of 8 GPUs, each inside one node; only 3 such groups are free (31 GPUs free)"
    )
    assert room_refusal(state, 32) == "needs 32 GPUs; 31 are free", "a TP group may span trays: the count"
    assert room_refusal(state, 31, spec) is None, "a count refusal only: the placer words the rest"


def test_a_kept_waiting_message_dates_its_figures() -> None:
    # A message kept while fresh (a status write saved per look) must not claim figures that moved since.
    written = counted("Unschedulable", "needs 8 GPUs; 2 are free", "2024-01-01T00:00:01Z")
    assert written == "needs 8 GPUs; 2 are free, as of 2024-01-01T00:00:01Z"
    current = {"type": "Placed", "status": "False", "reason": "Unschedulable", "message": written}
    later = counted("Unschedulable", "needs 8 GPUs; 4 are free", "2024-01-01T00:00:09Z")
    assert wait_message(current, "Unschedulable", later, fresh=True) == written
    assert wait_message(current, "Unschedulable", later, fresh=False) == later
    same = counted("Unschedulable", "needs 8 GPUs; 2 are free", "2024-01-01T00:00:09Z")
    assert wait_message(current, "Unschedulable", same, fresh=False) == written, "same figures: no write"
    assert counted("Waiting", "behind", "2024-01-01T00:00:09Z") == "behind", "no figures, no date"


def test_a_head_left_out_by_the_memo_gets_its_figures_worked_out_again_when_they_move() -> None:
    # The waiting memo leaves a blocked line out while no GPU comes free; GPUs taken by another queue moved
    # the head's figures, and its message kept the old ones ("8 are free" while 31 were).
    fc = FakeCluster([node("n0", 8), node("n1", 8)], queues={"other": QueueInfo("other")}, memo=True)
    fc.add_job(paralleljob("r", 2, 1, 1, queue="other", created="2024-01-01T00:00:00Z"))
    fc.settle(3)
    fc.add_job(paralleljob("big", 8, 1, 2, created="2024-01-01T00:00:01Z"))
    fc.settle(4)
    assert fc.phase("ns/big") == "Queued" and "(14 GPUs free)" in placed(fc, "ns/big")["message"]
    assert fc.memo is not None and "default" in fc.memo.lines, "the line is left out by the memo"
    fc.add_job(paralleljob("r2", 4, 1, 1, queue="other", created="2024-01-01T00:00:02Z"))
    fc.settle(4)
    assert fc.phase("ns/r2") == "Running"
    message = placed(fc, "ns/big")["message"]
    assert "(10 GPUs free)" in message, message
    assert status(fc, "ns/big")["message"] == message


def _knocked_out(queues: dict[str, QueueInfo]) -> tuple[FakeCluster, str]:
    """big (created first, 2 nodes) runs, then a node fails with no room to repair: it is requeued."""
    fc = FakeCluster([node("a"), node("b")], queues=queues)
    queue = "team" if "team" in queues else "default"
    fc.add_job(paralleljob("big", 8, 1, 2, queue=queue, created="2024-01-01T00:00:00Z"))
    fc.settle(4)
    assert fc.phase("ns/big") == "Running"
    queued_at = status(fc, "ns/big")["queuedAt"]
    fc.nodes["a"] = node("a", ready=False)
    fc.settle(2)
    assert status(fc, "ns/big")["lastFailure"]["action"] == "requeued"
    return fc, queued_at


def test_a_job_requeued_by_a_hardware_failure_keeps_its_place_in_line() -> None:
    # gpt-pipeline, created before big-pretrain, was requeued after a node failure and then waited behind
    # it: queuedAt was restamped. It did nothing wrong: it keeps its original queuedAt.
    fc, queued_at = _knocked_out({})
    assert fc.phase("ns/big") == "Queued" and status(fc, "ns/big")["queuedAt"] == queued_at


def test_a_queue_can_send_a_job_requeued_by_hardware_to_the_back() -> None:
    fc, queued_at = _knocked_out({"team": QueueInfo("team", requeue_order=RequeueOrder.BACK)})
    assert fc.phase("ns/big") == "Queued" and status(fc, "ns/big")["queuedAt"] > queued_at


def test_a_queues_requeue_order_is_read_from_its_spec() -> None:
    def parsed(spec: dict[str, Any]) -> RequeueOrder:
        return parse_queue({"metadata": {"name": "q"}, "spec": spec}).requeue_order

    assert parsed({}) is RequeueOrder.KEEP_PLACE
    assert parsed({"requeueOrder": "Back"}) is RequeueOrder.BACK
    assert parsed({"requeueOrder": "KeepPlace"}) is RequeueOrder.KEEP_PLACE
