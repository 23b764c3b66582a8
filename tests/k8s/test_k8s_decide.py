"""The operator's reconcile decisions against an in-memory cluster: placement, binding, queueing,
failure handling, completion, idempotence."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.metrics_model import gauges, queue_statuses
from paralleljob.k8s.plan.pods.podsync import gpu_holders, sync_pods
from paralleljob.k8s.plan.status import StatusDraft
from tests.k8s.factories import foreign_pod, node, paralleljob
from tests.k8s.harness import FakeCluster


def cluster(n: int = 4, **kw: object) -> FakeCluster:
    return FakeCluster([node(f"gpu-node-{i:03d}", leaf=f"leaf-{i // 4:02d}", **kw) for i in range(n)])  # type: ignore[arg-type]


def assert_invariants(fc: FakeCluster) -> None:
    used: Counter[tuple[str, int]] = Counter()
    for pod in fc.pods.values():
        if pod["status"]["phase"] in ("Succeeded", "Failed") or not pod["spec"].get("nodeName"):
            continue
        indices = pod["metadata"]["annotations"]["paralleljob.dev/gpu-indices"].split(",")
        for i in indices:
            used[(pod["spec"]["nodeName"], int(i))] += 1
    assert all(c == 1 for c in used.values()), f"a GPU is used twice: {used}"


def test_places_and_binds_one_pod_per_tp_group_on_one_node() -> None:
    fc = cluster()
    fc.add_job(paralleljob("llama", 4, 2, 2))
    fc.step()
    status = fc.job("ns/llama")["status"]
    assert status["phase"] == "Placing"
    record = record_from_status(status)
    assert record is not None and len(record.slots) == 4
    pods = fc.job_pods("ns/llama")
    assert len(pods) == 4 and all(p["spec"]["nodeName"] for p in pods)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "paralleljob-scheduler"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["WORLD_SIZE"] == "16" and env["PJ_TP_SIZE"] == "4"
    fc.step()
    assert fc.phase("ns/llama") == "Running"
    assert status["communicationCost"]["totalMs"] > 0
    binds_before = len(fc.binds)
    fc.settle()
    assert len(fc.binds) == binds_before, "an idle pass must not bind again"
    assert_invariants(fc)


def test_seed_example_cost_matches_the_core() -> None:
    fc = FakeCluster([node(f"n{i}") for i in range(4)])
    fc.add_job(paralleljob("llama-70b", 4, 2, 2, memory=70.0))
    fc.step()
    assert abs(fc.job("ns/llama-70b")["status"]["communicationCost"]["totalMs"] - 233.7) < 0.1


def test_job_that_does_not_fit_waits_and_runs_when_room_frees() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("big", 8, 1, 2, created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("next", 8, 1, 1, created="2024-01-01T00:00:01Z"))
    fc.settle()
    assert fc.phase("ns/big") == "Running"
    assert fc.phase("ns/next") == "Queued"
    placed = next(c for c in fc.job("ns/next")["status"]["conditions"] if c["type"] == "Placed")
    assert placed["status"] == "False" and "free" in placed["message"]
    del fc.jobs["ns/big"]
    fc.settle()
    assert fc.phase("ns/next") == "Running"
    assert not fc.job_pods("ns/big"), "pods of a deleted job are cleaned up"


def test_strict_fifo_head_blocks_smaller_jobs_behind_it() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("a", 8, 1, 1, created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("head", 8, 1, 2, created="2024-01-01T00:00:01Z"))
    fc.add_job(paralleljob("small", 1, 1, 1, created="2024-01-01T00:00:02Z"))
    fc.settle()
    assert fc.phase("ns/head") == "Queued" and fc.phase("ns/small") == "Queued"


def test_never_fits_fails_with_reason() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("huge", 16, 1, 1))
    fc.step()
    status = fc.job("ns/huge")["status"]
    assert status["phase"] == "Failed"
    assert "largest node has 8" in status["message"]


def test_foreign_gpu_pods_count_as_used() -> None:
    fc = cluster(1)
    fc.pods[("other", "x")] = foreign_pod("x", "gpu-node-000", 6)
    fc.add_job(paralleljob("j", 4, 1, 1))
    fc.settle()
    assert fc.phase("ns/j") == "Queued"


def test_node_failure_minimal_moves_only_the_broken_groups() -> None:
    fc = cluster(4)
    fc.add_job(paralleljob("j", 4, 2, 1))
    fc.settle()
    before = record_from_status(fc.job("ns/j")["status"])
    assert before is not None
    victim = before.slots[0].node
    fc.nodes[victim] = node(victim, ready=False, leaf="leaf-00")
    fc.step()
    status = fc.job("ns/j")["status"]
    assert status["phase"] in ("Recovering", "Running")
    assert status["restarts"] == 1 and status["lastFailure"]["kind"] == "NodeFailure"
    fc.settle()
    after = record_from_status(fc.job("ns/j")["status"])
    assert after is not None and fc.phase("ns/j") == "Running"
    assert victim not in after.nodes
    moved = [a.name for a, b in zip(after.slots, before.slots, strict=True) if a != b]
    untouched = [b for a, b in zip(after.slots, before.slots, strict=True) if a == b]
    assert all(b.node != victim for b in untouched)
    assert all(before.slot_named(name).node == victim for name in moved)  # type: ignore[union-attr]
    for pod in fc.job_pods("ns/j"):
        assert pod["spec"]["nodeName"] != victim
    assert_invariants(fc)


def test_gpu_failure_full_restarts_whole_gang() -> None:
    fc = cluster(4)
    fc.add_job(paralleljob("j", 2, 2, 1, strategy="full"))
    fc.settle()
    uids = {p["metadata"]["uid"] for p in fc.job_pods("ns/j")}
    record = record_from_status(fc.job("ns/j")["status"])
    assert record is not None
    slot = record.slots[0]
    fc.nodes[slot.node] = node(slot.node, unhealthy=str(slot.gpu_indices[0]))
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    assert not uids & {p["metadata"]["uid"] for p in fc.job_pods("ns/j")}, "full restarts every pod"
    after = record_from_status(fc.job("ns/j")["status"])
    assert after is not None
    assert all(not (s.node == slot.node and slot.gpu_indices[0] in s.gpu_indices) for s in after.slots)


def test_no_room_requeues_or_fails_per_policy() -> None:
    for policy, phase in (("Requeue", "Queued"), ("Fail", "Failed")):
        fc = cluster(1)
        fc.add_job(paralleljob("j", 8, 1, 1, on_unplaceable=policy))
        fc.settle()
        fc.nodes["gpu-node-000"] = node("gpu-node-000", ready=False)
        fc.settle()
        assert fc.phase("ns/j") == phase
        assert fc.job("ns/j")["status"]["lastFailure"]["action"] == ("requeued" if policy == "Requeue" else "failed")
        assert not [p for p in fc.job_pods("ns/j") if p["status"]["phase"] == "Running"]
        if policy == "Requeue":
            fc.nodes["gpu-node-000"] = node("gpu-node-000")
            fc.settle()
            assert fc.phase("ns/j") == "Running"


def test_max_restarts_fails_the_job() -> None:
    fc = cluster(4)
    fc.add_job(paralleljob("j", 8, 1, 1, max_restarts=0))
    fc.settle()
    record = record_from_status(fc.job("ns/j")["status"])
    assert record is not None
    fc.nodes[record.slots[0].node] = node(record.slots[0].node, ready=False)
    fc.settle()
    assert fc.phase("ns/j") == "Failed"
    assert "maxRestarts" in fc.job("ns/j")["status"]["message"]


def test_worker_failure_recreates_only_that_pod_with_minimal() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("j", 2, 2, 1))
    fc.settle()
    pods = fc.job_pods("ns/j")
    pods[0]["status"]["phase"] = "Failed"
    keep = pods[1]["metadata"]["uid"]
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    assert fc.job("ns/j")["status"]["restarts"] == 1
    uids = {p["metadata"]["uid"] for p in fc.job_pods("ns/j")}
    assert keep in uids and pods[0]["metadata"]["uid"] not in uids


def test_completion_frees_gpus() -> None:
    fc = cluster(1)
    fc.add_job(paralleljob("a", 8, 1, 1, created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("b", 8, 1, 1, created="2024-01-01T00:00:01Z"))
    fc.settle()
    for pod in fc.job_pods("ns/a"):
        pod["status"]["phase"] = "Succeeded"
    fc.settle()
    assert fc.phase("ns/a") == "Succeeded"
    assert fc.phase("ns/b") == "Running"


def test_restart_mid_gang_binds_the_rest_without_double_binding() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("j", 2, 2, 2))
    plan = fc.step()
    # Undo half of the binds, as if the operator died after binding two pods.
    unbound = fc.job_pods("ns/j")[2:]
    for pod in unbound:
        pod["spec"].pop("nodeName")
    fc.binds.clear()
    assert plan.jobs[0].draft.data["phase"] == "Placing"
    fc.settle()
    assert fc.phase("ns/j") == "Running"
    assert sorted(name for name, _ in fc.binds) == sorted(p["metadata"]["name"] for p in unbound)


def test_bind_failure_rolls_the_gang_back() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("j", 2, 2, 1))
    fc.step()
    fc.bind_failures["ns/j"] = "pod j-d0-p1 was replaced (UID mismatch)"
    fc.step()
    assert fc.phase("ns/j") == "Queued"
    assert not fc.job_pods("ns/j")
    fc.settle()
    assert fc.phase("ns/j") == "Running"


def test_invalid_spec_fails_without_crashing_others() -> None:
    fc = cluster(2)
    bad = paralleljob("bad", 4, 1, 1)
    bad["spec"]["template"] = {"spec": {"containers": []}}
    fc.add_job(bad)
    fc.add_job(paralleljob("good", 4, 1, 1))
    fc.settle()
    assert fc.phase("ns/bad") == "Failed"
    assert "container" in fc.job("ns/bad")["status"]["message"]
    assert fc.phase("ns/good") == "Running"


def test_gpu_product_is_honoured() -> None:
    fc = FakeCluster([node("a100", product="NVIDIA-A100"), node("h100")])
    fc.add_job(paralleljob("j", 8, 1, 1, extra_spec={"gpuProduct": "NVIDIA-A100"}))
    fc.settle()
    assert fc.job("ns/j")["status"]["nodes"] == "a100"
    fc.add_job(paralleljob("k", 8, 1, 1, extra_spec={"gpuProduct": "NVIDIA-B200"}))
    fc.settle()
    assert fc.phase("ns/k") == "Failed"


def test_pods_the_api_refuses_as_invalid_fail_the_job() -> None:
    fc = cluster(2)
    fc.add_job(paralleljob("j", 2, 2, 1))
    fc.step()
    fc.invalid_pods["ns/j"] = 'Pod "j-d0-p0" is invalid: spec.containers[0].image: Required value'
    fc.step()
    status = fc.job("ns/j")["status"]
    assert status["phase"] == "Failed" and "fix spec.template" in status["message"]
    assert not fc.job_pods("ns/j")


def test_malformed_template_fails_with_the_field_to_fix() -> None:
    fc = cluster(2)
    bad = paralleljob("bad", 2, 1, 1)
    bad["spec"]["template"]["spec"]["containers"][0]["env"] = "PJ=1"
    fc.add_job(bad)
    fc.add_job(paralleljob("good", 2, 1, 1))
    fc.settle()
    assert fc.phase("ns/bad") == "Failed" and "env must be a list" in fc.job("ns/bad")["status"]["message"]
    assert fc.phase("ns/good") == "Running"


def test_an_unexpected_error_is_reported_on_the_job_and_does_not_block_others(monkeypatch: pytest.MonkeyPatch) -> None:
    import paralleljob.k8s.plan.admission.fifo_admission as admission

    fc = cluster(2)
    fc.queues["other"] = QueueInfo("other")
    fc.add_job(paralleljob("a-cursed", 2, 1, 1, created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("b-fine", 2, 1, 1, queue="other", created="2024-01-01T00:00:01Z"))
    real = admission.sync_pods

    def cursed(actions: Any, job: Any, *args: Any, **kwargs: Any) -> Any:
        if job.name == "a-cursed":
            raise RuntimeError("boom")
        return real(actions, job, *args, **kwargs)

    monkeypatch.setattr(admission, "sync_pods", cursed)
    fc.settle()
    status = fc.job("ns/a-cursed")["status"]
    error = next(c for c in status["conditions"] if c["type"] == "ReconcileError")
    assert error["status"] == "True" and "boom" in error["message"]
    assert status.get("placement") is None and not fc.job_pods("ns/a-cursed")
    assert fc.phase("ns/b-fine") == "Running"


def test_labelled_pods_outside_the_served_namespaces_are_not_orphans() -> None:
    """With --namespace, a ParallelJob in another namespace is invisible, not deleted: its pods stay."""
    fc = FakeCluster([node(f"n{i}") for i in range(2)], namespaces=("team-a",))
    for namespace in ("team-a", "team-b"):
        pod = foreign_pod(f"gone-d0-p0-{namespace}", "n0", 1, namespace=namespace)
        pod["metadata"]["labels"] = {"paralleljob.dev/job": "gone"}
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "paralleljob.dev/v1alpha1",
                "kind": "ParallelJob",
                "name": "gone",
                "uid": "uid-gone",
                "controller": True,
            }
        ]
        fc.pods[(namespace, pod["metadata"]["name"])] = pod
    plan = fc.step()
    assert [(o.namespace, o.name) for o in plan.orphans] == [("team-a", "gone-d0-p0-team-a")]


def degraded(body: dict[str, Any], detail: str) -> dict[str, Any]:
    body["metadata"].setdefault("annotations", {})["paralleljob.dev/gpu-health"] = detail
    return body


def test_degraded_gpus_keep_their_job_but_take_no_new_one() -> None:
    fc = cluster(1)
    fc.add_job(paralleljob("running", 2, 1, 1))
    fc.settle()
    uids = {p["metadata"]["uid"] for p in fc.job_pods("ns/running")}
    record = record_from_status(fc.job("ns/running")["status"])
    assert record is not None
    held = record.slots[0].gpu_indices
    # the agent marks the job's GPUs and four more Degraded (e.g. running hot)
    others = [i for i in range(8) if i not in held][:4]
    hot = {"state": "Degraded", "reason": "Thermal", "message": "92 C"}
    detail = json.dumps({str(i): hot for i in [*held, *others]})
    fc.nodes["gpu-node-000"] = degraded(node("gpu-node-000"), detail)
    fc.add_job(paralleljob("new", 4, 1, 1))
    fc.settle()
    assert fc.phase("ns/running") == "Running"
    assert {p["metadata"]["uid"] for p in fc.job_pods("ns/running")} == uids, "a Degraded GPU keeps its job"
    assert fc.phase("ns/new") == "Queued", "only 2 GPUs are neither held nor Degraded"
    fc.nodes["gpu-node-000"] = node("gpu-node-000")  # recovered
    fc.settle()
    assert fc.phase("ns/new") == "Running"


def test_malformed_gpu_health_is_ignored_with_a_warning() -> None:
    from paralleljob.k8s.edge.config import TopologyConfig
    from paralleljob.k8s.edge.parse.nodes import parse_node

    info = parse_node(degraded(node("n0"), "{not json"), TopologyConfig())
    assert info.degraded_gpus == frozenset()
    assert any("gpu-health" in w for w in info.warnings)
    info = parse_node(degraded(node("n1"), '{"3": {"state": "Degraded"}, "5": {"state": "Offline"}}'), TopologyConfig())
    assert info.degraded_gpus == frozenset({3})


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("strategy", ["minimal", "full"])
def test_a_repair_numbers_replacements_like_their_siblings(strategy: str) -> None:
    """A job recorded before rankOrder existed (d·pp + p) keeps that numbering through a repair, though its
    spec now says tp-dp-pp (the API's default): no pod may disagree with its siblings on the ranks."""
    fc = cluster(4)
    body = paralleljob("j", 4, 2, 2)
    body["spec"]["failurePolicy"]["strategy"] = strategy
    fc.add_job(body)
    fc.settle()
    status = fc.job("ns/j")["status"]
    assert status["placement"]["rankOrder"] == "tp-dp-pp"
    del status["placement"]["rankOrder"]  # as an operator of the previous version recorded it
    for pod in fc.job_pods("ns/j"):
        fc.pods.pop((pod["metadata"]["namespace"], pod["metadata"]["name"]))
    fc.settle()  # the pods come back with the recorded (legacy) numbering
    before = {p["metadata"]["name"]: env_of(p)["NODE_RANK"] for p in fc.job_pods("ns/j")}
    assert before == {"j-d0-p0": "0", "j-d0-p1": "1", "j-d1-p0": "2", "j-d1-p1": "3"}
    victim = next(p for p in fc.job_pods("ns/j") if p["metadata"]["name"] == "j-d1-p0")["spec"]["nodeName"]
    fc.nodes[victim] = node(victim, ready=False, leaf="leaf-00")
    fc.settle()
    after = record_from_status(fc.job("ns/j")["status"])
    assert after is not None and after.rank_order.value == "tp-pp-dp" and victim not in after.nodes
    assert {p["metadata"]["name"]: env_of(p)["NODE_RANK"] for p in fc.job_pods("ns/j")} == before
    assert all(env_of(p)["PJ_RANK_ORDER"] == "tp-pp-dp" for p in fc.job_pods("ns/j"))
    assert_invariants(fc)


def test_jobs_mid_chain_still_count_in_the_gauges_and_queue_status() -> None:
    # Issue 21: paralleljob_jobs{phase=Running} read 2 while 3 ran. A job whose previous decisions were still
    # being carried out (its chain in flight: Observed.busy) was left out of the pass, and so of the counts.
    fc = cluster(4)
    fc.queues["team"] = QueueInfo("team")
    for name in ("a", "b", "c"):
        fc.add_job(paralleljob(name, 8, 1, 1, queue="team"))
    fc.settle()
    assert [fc.phase(f"ns/{n}") for n in "abc"] == ["Running"] * 3
    fc.held_busy = {"ns/b": None}
    plan = fc.step()
    assert plan.queue_statuses["team"]["running"] == 3  # what the pass writes to the ParallelJobQueue
    assert gauges(fc.last_view, plan.seen(), fc.queues).jobs["Running"] == 3  # what the reconciler exports
    assert queue_statuses(plan.seen(), fc.queues, fc.last_view)["team"]["running"] == 3


def test_a_re_placement_onto_gpus_of_its_own_leaving_pod_waits_until_that_pod_is_gone() -> None:
    """A repair may give a slot the GPUs of another slot's old pod, which a live node's kubelet still runs
    (graceful deletion). A kubelet hands a device to a new pod only once the pod holding it has terminated
    (the admission fails otherwise), so that slot's pod is created after the old one is gone."""
    fc = FakeCluster([node("n0"), node("n1"), node("n2")])
    fc.add_job(paralleljob("j", 4, 1, 2, strategy="full"))
    fc.settle()
    body = fc.job("ns/j")
    first = {s["name"]: s for s in body["status"]["placement"]["pods"]}
    # the new record: d0 onto the GPUs d1's old pod still holds, d1 onto a free node
    d1_old = first["j-d1-p0"]
    moved = [
        {**first["j-d0-p0"], "node": d1_old["node"], "gpuIndices": d1_old["gpuIndices"], "incarnation": 2},
        {**d1_old, "node": "n2", "gpuIndices": [0, 1, 2, 3], "incarnation": 2},
    ]
    status = {**body["status"], "phase": "Recovering", "placementEpoch": 2}
    status["placement"] = {**body["status"]["placement"], "epoch": 2, "pods": moved}
    job = parse_job({**body, "status": status})
    assert job.request is not None and job.record is not None
    del fc.pods[("ns", "j-d0-p0")]  # d0's old pod is gone already (its node died, force-deleted)
    nodes = {n: parse_node(b, fc.config) for n, b in fc.nodes.items()}
    pods = [parse_pod(p) for p in fc.job_pods("ns/j")]
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    sync_pods(actions, job, job.request, job.record, pods, nodes)
    assert [d.name for d in actions.deletes] == ["j-d1-p0"] and not actions.deletes[0].force
    assert [c.manifest["metadata"]["name"] for c in actions.creates] == [], "d0 waits: its GPUs are d1's old pod's"
    # once the old pod is gone, d0 is created (d1 waits for its own name as before)
    pods = [parse_pod(p) for p in fc.job_pods("ns/j") if p["metadata"]["name"] != "j-d1-p0"]
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    sync_pods(actions, job, job.request, job.record, pods, nodes)
    assert sorted(c.manifest["metadata"]["name"] for c in actions.creates) == ["j-d0-p0", "j-d1-p0"]


def test_a_pod_is_not_created_on_gpus_another_jobs_leaving_pod_still_runs_on() -> None:
    """Chaos finding: one job's full repair released its GPUs and, in the same pass, another job's repair
    took one of them, while the first job's pod still ran there (graceful deletion). The second job's pod
    waits for it; the pass's holders come from every pod."""
    fc = FakeCluster([node("n0"), node("n1")])
    fc.add_job(paralleljob("a", 4, 1, 1, created="2024-01-01T00:00:00Z"))
    fc.add_job(paralleljob("b", 4, 1, 1, created="2024-01-01T00:00:01Z"))
    fc.settle()
    pods = {p["metadata"]["name"]: p for p in fc.pods.values()}
    a_pod = parse_pod(pods["a-d0-p0"])
    body = fc.job("ns/b")
    slot = {**body["status"]["placement"]["pods"][0], "node": a_pod.node, "gpuIndices": list(a_pod.gpu_indices or ())}
    status = {**body["status"], "phase": "Recovering"}
    status["placement"] = {**body["status"]["placement"], "pods": [{**slot, "incarnation": 2}]}
    job = parse_job({**body, "status": status})
    assert job.request is not None and job.record is not None
    nodes = {n: parse_node(b, fc.config) for n, b in fc.nodes.items()}
    everyone = [parse_pod(p) for p in fc.pods.values()]
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    sync_pods(actions, job, job.request, job.record, [], nodes, gpu_holders(everyone, nodes))
    assert not actions.creates, "a's pod still runs on those GPUs"
    holders = gpu_holders([p for p in everyone if p.job != "a"], nodes)  # a's pod is gone
    actions = JobActions(job, StatusDraft(job.status.raw, job.phase, job.generation))
    sync_pods(actions, job, job.request, job.record, [], nodes, holders)
    assert [c.node for c in actions.creates] == [a_pod.node]


def test_a_finished_orphan_that_names_its_owner_is_left_to_the_garbage_collector() -> None:
    """A job deleted (its TTL, say) leaves pods the collector removes with it: the operator deletes only those
    that still hold GPUs."""
    fc = FakeCluster([node("n0")])
    owner = {"apiVersion": "paralleljob.dev/v1alpha1", "kind": "ParallelJob", "name": "gone", "uid": "uid-gone"}
    for name, phase in {"done": "Succeeded", "failed": "Failed", "running": "Running"}.items():
        pod = foreign_pod(name, "n0", 1, namespace="ns")
        pod["metadata"]["labels"] = {"paralleljob.dev/job": "gone"}
        pod["metadata"]["ownerReferences"] = [{**owner, "controller": True}]
        pod["status"] = {"phase": phase}
        fc.pods[("ns", name)] = pod
    plan = fc.step()
    assert [o.name for o in plan.orphans] == ["running"]
