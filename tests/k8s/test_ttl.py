"""spec.ttlSecondsAfterFinished (plan/ttl.py): a finished job is deleted that many seconds after its
completionTime, the loop wakes at the deadline until then, the waiting memo never leaves such a job out,
and the field's bounds are the CRD's and the parser's."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from paralleljob.core.errors import InvalidRequest
from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.edge.parse.specs import parse_job, parse_request
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.waiting import WaitingMemo, triage
from paralleljob.k8s.plan.admission.waiting_remember import remember_running
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.plan.ttl import REASON, deadline, expire
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster

ROOT = Path(__file__).resolve().parents[2]


def finished_cluster(ttl: int | None, memo: bool = False) -> FakeCluster:
    """One 8-GPU job that ran and whose pods all succeeded; settled, so its Succeeded status is recorded."""
    fc = FakeCluster([node("n0", 8)], memo=memo)
    extra = {} if ttl is None else {"ttlSecondsAfterFinished": ttl}
    fc.add_job(paralleljob("j", 8, 1, 1, extra_spec=extra))
    fc.settle(3)
    assert fc.phase("ns/j") == "Running"
    for key, pod in list(fc.pods.items()):
        pod = fc.pods[key] = {**pod, "status": {**pod["status"], "phase": "Succeeded"}}  # a new version
    fc.step()
    assert fc.phase("ns/j") == "Succeeded"
    return fc


def completed_at(fc: FakeCluster) -> float:
    stamp = parse_time(fc.job("ns/j")["status"]["completionTime"])
    assert stamp is not None
    return stamp


def actions_of(fc: FakeCluster) -> JobActions:
    assert fc.last_plan is not None
    return next(a for a in fc.last_plan.jobs if a.job.key == "ns/j")


def test_a_finished_job_waits_out_its_ttl_then_is_deleted_with_its_pods() -> None:
    fc = finished_cluster(ttl=5)
    done = completed_at(fc)
    fc.step()  # the first pass that reads Succeeded from the stored status
    actions = actions_of(fc)
    assert actions.delete_job is None and actions.wake_at == done + 5
    assert fc.last_plan is not None and fc.last_plan.wake_after == pytest.approx(done + 5 - fc.seconds_now())
    while fc.seconds_now() < done + 4:  # each step is a second later: the last one here is at done + 4
        fc.step()
        assert "ns/j" in fc.jobs, "deleted before its TTL ran out"
    assert fc.job_pods("ns/j"), "the pods stay while the job does"
    fc.step()  # now = completionTime + 5
    actions = actions_of(fc)
    assert actions.delete_job is not None and actions.delete_job.uid == "uid-ns-j"
    assert [e.event_type for e in actions.events if e.reason == REASON] == ["Normal"]
    assert "ns/j" not in fc.jobs and not fc.job_pods("ns/j")


def test_ttl_zero_deletes_on_the_pass_after_the_finished_status_is_recorded() -> None:
    fc = FakeCluster([node("n0", 8)])
    fc.add_job(paralleljob("j", 8, 1, 1, extra_spec={"ttlSecondsAfterFinished": 0}))
    fc.settle(3)
    for key, pod in list(fc.pods.items()):
        fc.pods[key] = {**pod, "status": {**pod["status"], "phase": "Succeeded"}}
    plan = fc.step()
    finishing = next(a for a in plan.jobs if a.job.key == "ns/j")
    assert finishing.draft.phase.value == "Succeeded" and finishing.delete_job is None, "status first"
    assert finishing.wake_at is not None and plan.wake_after == 0.0, "and the loop passes again at once"
    assert "ns/j" in fc.jobs
    fc.step()
    assert "ns/j" not in fc.jobs


def test_without_the_field_a_finished_job_is_kept_and_wakes_nothing() -> None:
    fc = finished_cluster(ttl=None)
    for _ in range(5):
        fc.step()
        actions = actions_of(fc)
        assert actions.delete_job is None and actions.wake_at is None
    assert fc.phase("ns/j") == "Succeeded"


def test_a_job_that_failed_as_invalid_is_cleaned_up_too() -> None:
    fc = FakeCluster([node("n0", 8)])
    body = paralleljob("bad", 8, 1, 1, extra_spec={"ttlSecondsAfterFinished": 2, "costModel": "nope"})
    fc.add_job(body)
    fc.step()
    assert fc.phase("ns/bad") == "Failed"
    fc.settle(3)
    assert "ns/bad" not in fc.jobs


def test_a_finished_job_with_a_ttl_to_run_is_left_out_until_its_deadline_wakes_the_loop() -> None:
    """Left out as unchanged (a drained queue's finished jobs cost nothing a pass), the job must still be
    decided again when its TTL ends: the pass asks to be woken then, and the triage lets it in."""
    fc = finished_cluster(ttl=4, memo=True)
    done = completed_at(fc)
    left_out = 0
    while fc.seconds_now() < done + 3:  # each step is a second later: the last one here is at done + 3
        fc.step()
        plan = fc.last_plan
        assert plan is not None and plan.wake_after is not None and plan.wake_after <= 4
        left_out += sum(plan.quiet_finished.values())
        assert "ns/j" in fc.jobs
    assert left_out > 0
    fc.step()
    assert "ns/j" not in fc.jobs


def test_the_memo_keeps_a_finished_job_with_a_ttl_only_until_its_deadline() -> None:
    fc = finished_cluster(ttl=30)
    job = parse_job(fc.job("ns/j"))
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    due = deadline(actions)  # its completionTime + 30 s, remembered with it
    assert due is not None
    memo = WaitingMemo()
    remember_running(memo, [actions], lambda _: [], set())
    assert "ns/j" in memo.finished
    before = triage(memo, [job], frozenset(), lambda _: [], now_s=due - 1)
    assert [s.job for s in before.finished] == [job] and not before.to_decide and before.wake_at == due
    after = triage(memo, [job], frozenset(), lambda _: [], now_s=due)
    assert not after.finished and after.to_decide == [job]


def test_deadline_counts_from_completion_time_and_falls_back_to_the_condition() -> None:
    body = paralleljob("j", extra_spec={"ttlSecondsAfterFinished": 60})
    condition = {"type": "Succeeded", "status": "True", "lastTransitionTime": "2024-01-01T00:10:00Z"}
    body["status"] = {"phase": "Succeeded", "conditions": [condition]}
    job = parse_job(body)
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    base = dt.datetime(2024, 1, 1, 0, 10, tzinfo=dt.UTC).timestamp()
    assert deadline(actions) == base + 60
    body["status"]["completionTime"] = "2024-01-01T00:20:00Z"
    job = parse_job(body)
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    assert deadline(actions) == base + 600 + 60
    expire(actions, base + 600 + 59)
    assert actions.delete_job is None and actions.wake_at == base + 660
    deleting = parse_job({**body, "metadata": {**body["metadata"], "deletionTimestamp": "2024-01-01T00:30:00Z"}})
    gone = JobActions(deleting, StatusDraft(deleting.status.raw, deleting.phase, deleting.generation))
    expire(gone, base + 3600)
    assert gone.delete_job is None and gone.wake_at is None, "being deleted already"


@pytest.mark.parametrize("value", [-1, 1.5, "10", True])
def test_the_parser_refuses_what_the_crd_refuses(value: Any) -> None:
    spec = paralleljob("j", extra_spec={"ttlSecondsAfterFinished": value})["spec"]
    with pytest.raises(InvalidRequest, match="ttlSecondsAfterFinished must be an integer >= 0"):
        parse_request("ns/j", spec)
    assert parse_job(paralleljob("j", extra_spec={"ttlSecondsAfterFinished": value})).ttl_after_finished is None


def test_the_crd_declares_an_optional_integer_of_at_least_zero() -> None:
    for path in (ROOT / "crds" / "paralleljob.yaml", ROOT / "charts" / "paralleljob" / "crds" / "paralleljob.yaml"):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        field = spec["properties"]["ttlSecondsAfterFinished"]
        assert field["type"] == "integer" and field["minimum"] == 0 and "default" not in field
        assert "ttlSecondsAfterFinished" not in spec.get("required", [])
    assert parse_job(paralleljob("j")).ttl_after_finished is None
    assert parse_job(paralleljob("j", extra_spec={"ttlSecondsAfterFinished": 0})).ttl_after_finished == 0
