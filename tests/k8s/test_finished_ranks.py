"""Ranks that exit 0 before the rest of their job: written down in ``status.succeededPods`` at once, and from
then on never created again (their pod deleted by the pod GC), repaired (their node gone) or moved."""

from __future__ import annotations

from paralleljob.clitools.describe import describe_job
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.status import StatusDraft
from tests.k8s.factories import node, paralleljob
from tests.k8s.harness import FakeCluster


def cluster(n: int) -> FakeCluster:
    return FakeCluster([node(f"gpu-node-{i:03d}", leaf="leaf-00") for i in range(n)])


def running(fc: FakeCluster, tp: int, pp: int, dp: int, **spec: object) -> list[str]:
    fc.add_job(paralleljob("j", tp, pp, dp, **spec))
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    return [p["metadata"]["name"] for p in fc.job_pods("ns/j")]


def finish(fc: FakeCluster, name: str) -> None:
    pod = fc.pods[("ns", name)]
    pod["status"]["phase"] = "Succeeded"


def test_a_finished_rank_is_written_down_and_not_created_again_once_its_pod_is_gone() -> None:
    fc = cluster(2)
    first, second = running(fc, 8, 2, 1)
    finish(fc, first)
    fc.step()
    record = record_from_status(fc.job("ns/j")["status"])
    assert record is not None
    incarnation = record.slot_named(first).incarnation  # type: ignore[union-attr]
    assert fc.job("ns/j")["status"]["succeededPods"] == {first: incarnation}
    del fc.pods[("ns", first)]  # the pod GC
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    assert [p["metadata"]["name"] for p in fc.job_pods("ns/j")] == [second], "the finished rank ran again"
    finish(fc, second)
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Succeeded" and status["message"] == "all 2 workers succeeded"
    assert "succeededPods" not in status, "a completed job keeps no list of its pods"


def test_the_node_of_a_finished_rank_going_away_is_no_failure_of_the_job() -> None:
    fc = cluster(2)
    first, second = running(fc, 8, 2, 1)
    gone = fc.pods[("ns", first)]["spec"]["nodeName"]
    finish(fc, first)
    fc.step()
    del fc.nodes[gone]  # scaled down once its only pod had finished
    del fc.pods[("ns", first)]  # and the pod GC deletes a pod whose node is gone
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Running" and status["restarts"] == 0, status
    assert [p["metadata"]["name"] for p in fc.job_pods("ns/j")] == [second]
    finish(fc, second)
    fc.settle()
    assert fc.phase("ns/j") == "Succeeded"


def test_a_restart_of_the_whole_gang_runs_the_finished_rank_again() -> None:
    """A full restart resumes every rank from the checkpoint: the finished one too, under a new incarnation,
    so the entry of its old one no longer counts."""
    fc = cluster(3)
    first, second = running(fc, 8, 2, 1, strategy="full")
    finish(fc, first)
    fc.step()
    assert first in fc.job("ns/j")["status"]["succeededPods"]
    broken = fc.pods[("ns", second)]["spec"]["nodeName"]
    fc.nodes[broken] = node(broken, ready=False, leaf="leaf-00")
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Running" and status["restarts"] == 1, status
    assert "succeededPods" not in status
    assert sorted(p["metadata"]["name"] for p in fc.job_pods("ns/j")) == sorted([first, second])
    assert all(p["status"]["phase"] == "Running" for p in fc.job_pods("ns/j"))


def test_the_status_parse_keeps_only_counts_and_the_patch_adds_one_entry_at_a_time() -> None:
    body = paralleljob("j", 8, 2, 1)
    body["status"] = {"phase": "Running", "succeededPods": {"a": 2, "b": "x", "c": True}}
    assert parse_job(body).status.succeeded_pods == {"a": 2}
    draft = StatusDraft(body["status"], parse_job(body).phase, 1)
    draft.set(succeededPods={"a": 2, "b": 3})
    assert draft.merge_patch() == {"succeededPods": {"b": 3, "c": None}}
    draft.set(succeededPods=None)
    assert draft.merge_patch() == {"succeededPods": None}


def test_a_finished_tray_pod_whose_tray_fails_is_left_alone() -> None:
    trays = [
        node(f"r0-t{t:02d}", 4, leaf="leaf-r0", product="NVIDIA-GB200", labels={cd.CLIQUE_LABEL: "uuid.0"})
        for t in range(6)
    ]
    fc = FakeCluster(trays)
    fc.add_job(paralleljob("j", 8, 1, 2, memory=10.0))  # 2 TP8 groups: 4 whole trays
    for _ in range(4):
        fc.step()
    assert fc.phase("ns/j") == "Running"
    record = record_from_status(fc.job("ns/j")["status"])
    assert record is not None and len(record.trays) == 4
    done = record.trays[0]
    finish(fc, done.name)
    fc.step()
    fc.nodes[done.node]["status"]["conditions"][0]["status"] = "False"
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Running" and status.get("restarts", 0) == 0, status
    assert record_from_status(status) == record, "nothing moved"
    for tray in record.trays[1:]:
        finish(fc, tray.name)
    fc.settle()
    assert fc.phase("ns/j") == "Succeeded"


def test_describe_shows_a_finished_rank_whose_pod_was_deleted() -> None:
    fc = cluster(2)
    first, second = running(fc, 8, 2, 1)
    finish(fc, first)
    fc.step()
    del fc.pods[("ns", first)]
    fc.settle()
    described = describe_job(fc.job("ns/j"), fc.job_pods("ns/j"))
    assert {p.name: p.pod_phase for p in described.pods} == {first: "Succeeded (pod deleted)", second: "Running"}
