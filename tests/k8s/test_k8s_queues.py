"""The operator's queueing pass without an API server: the mapping of objects to the core's queue inputs,
fair share between queues, Wait/Reserve reasons, and a checkpoint-aware preemption carried in the status."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from paralleljob.core.errors import InvalidRequest
from paralleljob.k8s.edge.constants import CHECKPOINT_REQUESTED_ANNOTATION, JOB_LABEL, LAST_CHECKPOINT_ANNOTATION
from paralleljob.k8s.edge.parse.queues import (
    QueueInfo,
    format_time,
    parse_queue,
    parse_time,
    pending_job,
    queue_policy,
    queue_spec,
    running_job,
)
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.plan.admission.fifo_admission import line_position
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

T0 = parse_time("2024-01-01T00:00:00Z") or 0.0


def at(seconds: float) -> str:
    return format_time(T0 + seconds)


def conditions(fc: FakeCluster, key: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in fc.job(key)["status"].get("conditions", [])}


# ---- mapping ----------------------------------------------------------------------------------------


def test_policy_flag_maps_to_the_core_policy() -> None:
    assert queue_policy("strict-fifo", 30) is None
    fair = queue_policy("fair", 30)
    assert fair is not None and fair.fair_share and not fair.backfill and not fair.preemption
    full = queue_policy("fair-backfill-preempt", 7)
    assert full is not None and full.backfill and full.preemption and full.grace_period_s == 7
    with pytest.raises(InvalidRequest, match="queue-policy"):
        queue_policy("lottery", 30)
    with pytest.raises(InvalidRequest, match="grace"):
        queue_policy("fair", -1)


def test_queue_spec_is_made_consistent() -> None:
    spec = queue_spec(QueueInfo("team", weight=2.0, guaranteed_gpus=16, max_gpus=8, namespaces=("a",)))
    assert (spec.name, spec.weight, spec.guaranteed_gpus, spec.max_gpus, spec.namespaces) == ("team", 2.0, 8, 8, ("a",))
    assert queue_spec(QueueInfo("open", weight=0.0)).weight == 1.0


def test_pending_job_keeps_its_place_and_expected_runtime() -> None:
    body = paralleljob("a", queue="team", extra_spec={"expectedRuntimeSeconds": 600})
    body["status"] = {"phase": "Queued", "queuedAt": "2024-01-01T00:00:10Z"}
    job = parse_job(body)
    assert job.request is not None
    pending = pending_job(job, job.request, T0 + 99)
    assert pending.submitted_at == T0 + 10 and pending.queue == "team" and pending.expected_runtime_s == 600


def test_running_job_last_checkpoint_from_annotation_or_interval() -> None:
    body = paralleljob("r", extra_spec={"checkpoint": {"intervalSeconds": 100}, "preemptible": False})
    body["status"] = {"phase": "Running", "startTime": "2024-01-01T00:00:00Z"}
    job = parse_job(body)
    assert job.request is not None
    run = running_job(job, job.request, T0 + 250, preemptible=True)
    assert run.started_at == T0 and run.last_checkpoint_at == T0 + 200 and not run.preemptible
    body["metadata"]["annotations"] = {LAST_CHECKPOINT_ANNOTATION: "2024-01-01T00:00:30Z"}
    job = parse_job(body)
    assert job.request is not None
    assert running_job(job, job.request, T0 + 250, preemptible=True).last_checkpoint_at == T0 + 30


def test_a_bad_preemptible_value_is_refused_with_the_field() -> None:
    job = parse_job(paralleljob("x", extra_spec={"preemptible": "no"}))
    assert job.request is None and "spec.preemptible" in job.invalid


# ---- the pass ---------------------------------------------------------------------------------------


def test_light_queue_goes_before_more_of_the_heavy_one() -> None:
    queues = {"heavy": QueueInfo("heavy"), "light": QueueInfo("light")}
    fc = FakeCluster([node("n0"), node("n1")], policy=queue_policy("fair", 30), queues=queues)
    fc.add_job(paralleljob("h1", 8, 1, 1, queue="heavy", created="2024-01-01T00:00:00Z"))
    fc.step(at(1))
    fc.step(at(2))
    assert fc.phase("ns/h1") == "Running"
    fc.add_job(paralleljob("h0", 8, 1, 1, queue="heavy", created="2024-01-01T00:00:02Z"))  # fills n1
    fc.step(at(3))
    fc.step(at(4))
    fc.add_job(paralleljob("h2", 8, 1, 1, queue="heavy", created="2024-01-01T00:00:05Z"))
    fc.add_job(paralleljob("l1", 8, 1, 1, queue="light", created="2024-01-01T00:00:06Z"))
    fc.step(at(7))
    assert fc.phase("ns/h2") == "Queued" and fc.phase("ns/l1") == "Queued"
    del fc.jobs["ns/h0"]  # 8 GPUs free again: the light queue (share 0) goes first although h2 came earlier
    for pod in fc.job_pods("ns/h0"):
        fc.pods.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]))
    fc.step(at(8))
    fc.step(at(9))
    assert fc.phase("ns/l1") == "Running"
    assert fc.phase("ns/h2") == "Queued"
    placed = conditions(fc, "ns/h2")["Placed"]
    assert placed["status"] == "False" and placed["reason"] in ("Reserved", "Unschedulable"), placed
    assert "free" in placed["message"] or "GPUs" in placed["message"], placed


def test_queue_max_gpus_still_caps_with_the_core_pass() -> None:
    fc = FakeCluster(
        [node("n0"), node("n1")],
        policy=queue_policy("fair-backfill", 30),
        queues={"capped": QueueInfo("capped", max_gpus=8)},
    )
    fc.add_job(paralleljob("a", 8, 1, 1, queue="capped"))
    fc.add_job(paralleljob("b", 4, 1, 1, queue="capped", created="2024-01-01T00:00:01Z"))
    fc.step(at(1))
    fc.step(at(2))
    assert fc.phase("ns/a") == "Running" and fc.phase("ns/b") == "Queued"
    placed = conditions(fc, "ns/b")["Placed"]
    assert placed["reason"] == "QueueFull" and "maximum of 8" in placed["message"]


def test_never_fits_fails_with_the_reason() -> None:
    fc = FakeCluster([node("n0")], policy=queue_policy("fair-backfill", 30))
    fc.add_job(paralleljob("wide", 16, 1, 1))
    fc.step(at(1))
    assert fc.phase("ns/wide") == "Failed"
    assert "largest node has 8" in fc.job("ns/wide")["status"]["message"]


def test_preemption_signals_waits_for_the_grace_period_then_requeues_the_victim() -> None:
    fc = FakeCluster([node("n0")], policy=queue_policy("fair-backfill-preempt", 5))
    fc.add_job(paralleljob("lo", 8, 1, 1, priority=0))
    fc.step(at(0))
    fc.step(at(1))
    assert fc.phase("ns/lo") == "Running"
    fc.add_job(paralleljob("hi", 8, 1, 1, priority=10, created="2024-01-01T00:00:02Z"))
    plan = fc.step(at(2))
    lo = fc.job("ns/lo")["status"]
    assert lo["preemption"] == {"deadline": at(7), "for": "ns/hi", "requestedAt": at(2)}
    pending = conditions(fc, "ns/lo")["PreemptionPending"]
    assert pending["status"] == "True" and at(7) in pending["message"]
    assert all(p["metadata"]["annotations"][CHECKPOINT_REQUESTED_ANNOTATION] == at(7) for p in fc.job_pods("ns/lo"))
    assert ("ns/lo", "PreemptionPending") in {(k, r) for k, r, _ in fc.events}
    assert conditions(fc, "ns/hi")["Placed"]["reason"] == "Preempting"
    assert plan.wake_after == pytest.approx(5.0)
    for second in (3, 4, 6):  # within the grace period nothing is deleted and nothing more is chosen
        fc.step(at(second))
        assert fc.phase("ns/lo") == "Running" and fc.job_pods("ns/lo") and not fc.job_pods("ns/hi")
        assert fc.job("ns/lo")["status"]["preemption"]["deadline"] == at(7)
    fc.step(at(7))
    assert fc.phase("ns/lo") == "Preempted" and not fc.job_pods("ns/lo")
    assert ("ns/lo", "Preempted") in {(k, r) for k, r, _ in fc.events}
    fc.step(at(8))
    fc.step(at(9))
    lo = fc.job("ns/lo")["status"]
    assert lo["phase"] == "Queued" and lo["restarts"] == 0 and "preemption" not in lo
    assert lo["queuedAt"] != at(8)  # kept its place
    assert conditions(fc, "ns/lo")["PreemptionPending"]["status"] == "False"
    assert fc.phase("ns/hi") == "Running" and len(fc.job_pods("ns/hi")) == 1


def test_a_preemption_is_cancelled_when_the_waiting_job_goes_away() -> None:
    fc = FakeCluster([node("n0")], policy=queue_policy("fair-backfill-preempt", 60))
    fc.add_job(paralleljob("lo", 8, 1, 1))
    fc.step(at(0))
    fc.step(at(1))
    fc.add_job(paralleljob("hi", 8, 1, 1, priority=5, created="2024-01-01T00:00:02Z"))
    fc.step(at(2))
    assert "preemption" in fc.job("ns/lo")["status"]
    del fc.jobs["ns/hi"]
    fc.step(at(3))
    assert fc.phase("ns/lo") == "Running" and "preemption" not in fc.job("ns/lo")["status"]
    assert conditions(fc, "ns/lo")["PreemptionPending"]["reason"] == "Cancelled"


def test_a_job_marked_not_preemptible_is_never_chosen() -> None:
    fc = FakeCluster([node("n0")], policy=queue_policy("fair-backfill-preempt", 1))
    fc.add_job(paralleljob("keep", 8, 1, 1, extra_spec={"preemptible": False}))
    fc.step(at(0))
    fc.step(at(1))
    fc.add_job(paralleljob("hi", 8, 1, 1, priority=5, created="2024-01-01T00:00:02Z"))
    for second in range(2, 6):
        fc.step(at(second))
    assert fc.phase("ns/keep") == "Running" and "preemption" not in fc.job("ns/keep")["status"]
    assert conditions(fc, "ns/hi")["Placed"]["reason"] == "Reserved"


def test_the_plan_names_the_queues_whose_status_is_out_of_date() -> None:
    fc = FakeCluster([node("n0")], queues={"team": QueueInfo("team"), "idle": QueueInfo("idle")})
    fc.add_job(paralleljob("a", 8, 1, 1, queue="team"))
    fc.step(at(1))
    plan = fc.step(at(2))
    assert fc.phase("ns/a") == "Running"
    assert plan.queue_statuses["team"] == {"gpusInUse": 8, "running": 1, "waiting": 0, "dominantShare": 1.0}
    assert plan.queue_statuses["idle"] == {"gpusInUse": 0, "running": 0, "waiting": 0, "dominantShare": 0.0}
    # Once the statuses are written (and read back into the queues), the next pass has nothing to write.
    written = {
        "metadata": {"name": "team"},
        "status": {"gpusInUse": 8, "running": 1, "waiting": 0, "dominantShare": 1.0},
    }
    idle = QueueInfo("idle", status=tuple(plan.queue_statuses["idle"].items()))
    fc.queues = {"team": parse_queue(written), "idle": idle}
    assert fc.step(at(3)).queue_statuses == {}


def test_a_jobs_place_in_line_is_worked_out_once_per_object_and_request() -> None:
    body = paralleljob("j", extra_spec={"queue": "q", "priority": 3})
    body["status"] = {"phase": "Queued", "queuedAt": "2024-01-01T00:00:10Z"}
    job = parse_job(body)
    assert job.request is not None
    position = line_position(job, job.request)
    assert position == ("q", -3, 1704067210.0, f"{job.created} ns/j", job.request.spec.job_id)
    assert line_position(job, job.request) is position  # kept on the object
    other = dataclasses.replace(job.request, queue="r")
    assert line_position(job, other)[0] == "r"  # another request is placed anew
    later = {**body, "status": {**body["status"], "queuedAt": "2024-01-01T00:00:20Z"}}
    newer = parse_job(later)  # a new version of the job is a new object: nothing carried over
    assert newer.request is not None and line_position(newer, newer.request)[2] == 1704067220.0


def test_jobs_behind_a_blocked_head_are_not_rewritten_when_the_head_changes() -> None:
    # Naming the head in every job behind it rewrote the whole line on each admission: a queue 50 deep cost
    # 49 status writes per job admitted from it.
    fc = FakeCluster([node("n0", 8)])
    for i, name in enumerate(("a", "b", "c", "d")):
        fc.add_job(paralleljob(name, 8, 1, 1, created=f"2024-01-01T00:00:0{i}Z"))
    fc.settle(3)
    assert [fc.phase(f"ns/{n}") for n in "abcd"] == ["Running", "Queued", "Queued", "Queued"]
    before = fc.job("ns/d")["status"]
    assert "waiting behind the blocked head of queue default" in str(before["conditions"])
    for key, pod in list(fc.pods.items()):
        fc.pods[key] = {**pod, "status": {**pod["status"], "phase": "Succeeded"}}  # a's workers finish
    plans = [fc.step() for _ in range(3)]
    assert [fc.phase(f"ns/{n}") for n in "abcd"] == ["Succeeded", "Running", "Queued", "Queued"]
    assert fc.job("ns/d")["status"] is before, "d still waits behind the line's blocked head: nothing to write"
    assert not any(a.writes_status for plan in plans for a in plan.jobs if a.job.name == "d")
    assert any(a.writes_status for plan in plans for a in plan.jobs if a.job.name == "c"), "c is the head now"


NO_WHOLE_NODE = "needs 1 TP group of 8 GPUs, each inside one node; no such group is free"


def _head_message(fc: FakeCluster, key: str) -> str:
    return str(conditions(fc, key)["Placed"]["message"])


@pytest.mark.parametrize("refresh", [30.0, 0.0])
def test_a_heads_free_count_is_rewritten_at_most_once_a_refresh_period(refresh: float) -> None:
    # A head is looked at whenever GPUs come free; its message's free count changed every time, and each
    # change was a status write (~1.5 a job in a 10,000-job flood) for a figure stale by the next finish.
    fc = FakeCluster([node("n0", 8)])
    fc.message_refresh_s = refresh
    for i, (name, gpus) in enumerate((("a", 2), ("b", 2), ("c", 2), ("big", 8))):
        fc.add_job(paralleljob(name, gpus, 1, 1, created=f"2024-01-01T00:00:0{i}Z"))
    fc.settle(3)
    assert [fc.phase(f"ns/{n}") for n in ("a", "b", "c", "big")] == ["Running"] * 3 + ["Queued"]
    assert _head_message(fc, "ns/big").startswith(f"{NO_WHOLE_NODE} (2 GPUs free), as of 2024-")
    written = fc.job("ns/big")["status"]

    def finish(name: str) -> None:
        for key, pod in list(fc.pods.items()):
            if pod["metadata"]["labels"].get(JOB_LABEL) == name:
                fc.pods[key] = {**pod, "status": {**pod["status"], "phase": "Succeeded"}}

    finish("a")  # 2 more GPUs free: the head still does not fit, same reason, another count
    plans = [fc.step() for _ in range(2)]
    big_writes = [a for plan in plans for a in plan.jobs if a.job.name == "big" and a.writes_status]
    if refresh:
        assert fc.job("ns/big")["status"] is written and not big_writes, "nothing new to say but a count"
        later = moved_on(fc, refresh + 1)
        fc.step(now=later)  # the period is over: the next look writes the count now, and when it was counted
        assert _head_message(fc, "ns/big") == f"{NO_WHOLE_NODE} (4 GPUs free), as of {later}"
    else:
        assert _head_message(fc, "ns/big").startswith(f"{NO_WHOLE_NODE} (4 GPUs free), as of ") and big_writes
    finish("b")
    finish("c")
    fc.settle(3)
    assert fc.phase("ns/big") == "Running", "a new state is written at once, whatever the period"


def moved_on(fc: FakeCluster, later: float) -> str:
    """The harness's clock moved ``later`` seconds on (its own steps move it one second each)."""
    fc.seconds += int(later)
    return format_time(fc.seconds_now())
