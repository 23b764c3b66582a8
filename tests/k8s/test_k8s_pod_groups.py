"""Pod groups, decided on plain dicts: which pods form a group, the node rank of each, why a group waits,
which slot each rank gets, and that the operator only ever annotates and binds another controller's pods."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from paralleljob.clitools.describe import describe_job
from paralleljob.core.rankorder import RankOrder, slot_of
from paralleljob.k8s.edge.constants import (
    COMPLETION_INDEX_KEY,
    GPU_INDICES_ANNOTATION,
    GPU_RESOURCE,
    NODE_RANK_ANNOTATION,
    PARALLELISM_ANNOTATION,
    POD_GROUP_LABEL,
    QUEUE_ANNOTATION,
    RANK_ORDER_ANNOTATION,
    SCHEDULER_NAME,
)
from paralleljob.k8s.edge.parse.pods import parse_pod
from paralleljob.k8s.edge.parse.queues import QueueInfo
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.status.records import record_from_status
from paralleljob.k8s.plan.groups.podgroups import (
    GroupDeclarationError,
    adopting_manifest,
    by_group,
    group_state,
    parse_parallelism,
)
from tests.k8s.factories import node
from tests.k8s.harness import FakeCluster

_uid = itertools.count(1)
JOB_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "uid-job", "controller": True}


def group_pod(
    index: int | None,
    *,
    group: str = "llm",
    gpus: int = 4,
    shape: str = "TP4xPP2xDP2",
    namespace: str = "ns",
    scheduler: str = SCHEDULER_NAME,
    extra_annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    annotations = {PARALLELISM_ANNOTATION: shape, **(extra_annotations or {})}
    if index is not None:
        annotations[COMPLETION_INDEX_KEY] = str(index)
    resources = {GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"trainer-{index}-{next(_uid)}",
            "namespace": namespace,
            "uid": f"uid-pod-{next(_uid)}",
            "resourceVersion": str(next(_uid)),
            "labels": {POD_GROUP_LABEL: group},
            "annotations": annotations,
            "ownerReferences": [owner or JOB_OWNER],
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "trainer", "image": "x", "resources": {"limits": resources}}],
        },
        "status": {"phase": "Pending"},
    }


def adopted(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the API server holds after creating the adopting ParallelJob."""
    body = copy.deepcopy(manifest)
    body["metadata"].update(uid="uid-adopted", resourceVersion="1", creationTimestamp="2024-01-01T00:00:00Z")
    return body


def cluster_with(pods: list[dict[str, Any]]) -> FakeCluster:
    fc = FakeCluster([node(f"n{i}", leaf=f"leaf-{i // 2}") for i in range(4)])
    for pod in pods:
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
    plan = fc.step()
    assert len(plan.adopt) == 1, plan.warnings
    fc.add_job(adopted(plan.adopt[0]))
    return fc


def no_writes_but_binds(fc: FakeCluster, passes: int = 6) -> None:
    """Run passes; the operator must never delete or create a pod of the group."""
    for _ in range(passes):
        plan = fc.step()
        for actions in plan.jobs:
            assert not actions.deletes and not actions.creates and actions.service is None
        assert not plan.orphans


def by_index(fc: FakeCluster) -> dict[int, dict[str, Any]]:
    return {int(p["metadata"]["annotations"][COMPLETION_INDEX_KEY]): p for p in fc.pods.values()}


# ---- parsing ------------------------------------------------------------------------------------------
def test_a_group_pod_takes_its_node_rank_from_the_completion_index_or_the_explicit_annotation() -> None:
    pod = parse_pod(group_pod(2))
    assert (pod.group, pod.group_rank, pod.first_container_gpus) == ("llm", 2, 4)
    explicit = parse_pod(group_pod(2, extra_annotations={NODE_RANK_ANNOTATION: "3"}))
    assert explicit.group_rank == 3
    labelled = group_pod(None)
    labelled["metadata"]["labels"][COMPLETION_INDEX_KEY] = "1"
    assert parse_pod(labelled).group_rank == 1
    missing = parse_pod(group_pod(None))
    assert missing.group_rank is None and NODE_RANK_ANNOTATION in missing.group_rank_error
    bad = parse_pod(group_pod(None, extra_annotations={NODE_RANK_ANNOTATION: "one"}))
    assert bad.group_rank is None and "not a whole number" in bad.group_rank_error


@pytest.mark.parametrize(
    ("keys", "rank"),
    [
        # a JobSet of two child Jobs with two pods each: the second Job's second pod
        (
            {
                "jobset.sigs.k8s.io/job-global-index": "1",
                COMPLETION_INDEX_KEY: "1",
                "paralleljob.dev/pods-per-job": "2",
            },
            3,
        ),
        # a JobSet of one-pod Jobs
        ({"jobset.sigs.k8s.io/job-global-index": "2", COMPLETION_INDEX_KEY: "0"}, 2),
        # a PyTorchJob worker (its Master is node rank 0)
        ({"training.kubeflow.org/replica-index": "0", "paralleljob.dev/node-rank-offset": "1"}, 1),
        ({"training.kubeflow.org/replica-index": "0"}, 0),
    ],
)
def test_jobset_and_kubeflow_indices_give_the_node_rank(keys: dict[str, str], rank: int) -> None:
    pod = group_pod(None, extra_annotations=keys)
    assert parse_pod(pod).group_rank == rank


def test_a_jobset_of_several_multi_pod_jobs_needs_the_pods_per_job() -> None:
    extra = {"jobset.sigs.k8s.io/job-global-index": "1", COMPLETION_INDEX_KEY: "1"}
    pod = parse_pod(group_pod(None, extra_annotations=extra))
    assert pod.group_rank is None and "needs annotation paralleljob.dev/pods-per-job" in pod.group_rank_error
    beyond = parse_pod(group_pod(None, extra_annotations={**extra, "paralleljob.dev/pods-per-job": "1"}))
    assert beyond.group_rank is None and "now 1" in beyond.group_rank_error
    # a TrainJob's single "node" Job: its completion index is the node rank
    single = {"jobset.sigs.k8s.io/job-global-index": "0", COMPLETION_INDEX_KEY: "5"}
    assert parse_pod(group_pod(None, extra_annotations=single)).group_rank == 5


def test_only_pods_for_our_scheduler_and_not_our_own_workers_form_groups() -> None:
    assert parse_pod(group_pod(0, scheduler="default-scheduler")).group is None
    ours = group_pod(0)
    ours["metadata"]["ownerReferences"] = [
        {"apiVersion": "paralleljob.dev/v1alpha1", "kind": "ParallelJob", "name": "x", "uid": "u", "controller": True}
    ]
    assert parse_pod(ours).group is None
    pods = [parse_pod(group_pod(0)), parse_pod(group_pod(1)), parse_pod(group_pod(0, group="other", namespace="b"))]
    assert sorted((k, len(v)) for k, v in by_group(pods).items()) == [("b/other", 1), ("ns/llm", 2)]


@pytest.mark.parametrize("text", ["4x2x2", "TP4xPP2xDP2", "tp4 x pp2 x dp2"])
def test_parallelism_reads_both_spellings(text: str) -> None:
    assert parse_parallelism(text) == (4, 2, 2)


@pytest.mark.parametrize("text", ["4x2", "TP0xPP2xDP2", "four"])
def test_a_bad_parallelism_says_how_to_write_it(text: str) -> None:
    with pytest.raises(GroupDeclarationError, match="TPxPPxDP"):
        parse_parallelism(text)


def test_the_adopting_parallel_job_comes_from_the_pods_annotations_and_is_owned_by_their_controller() -> None:
    extra = {RANK_ORDER_ANNOTATION: "tp-pp-dp", QUEUE_ANNOTATION: "research"}
    manifest = adopting_manifest("ns", "llm", [parse_pod(group_pod(0, extra_annotations=extra))])
    assert manifest["spec"] == {
        "podGroup": "llm",
        "parallelism": {"tensor": 4, "pipeline": 2, "data": 2},
        "preemptible": False,  # said on the object: without it the CRD's default (true) is what users read
        "rankOrder": "tp-pp-dp",
        "queue": "research",
    }
    owner = manifest["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", "uid-job", False)
    job = parse_job(adopted(manifest))
    assert job.request is not None and job.request.pod_group == "llm" and not job.request.preemptible
    no_shape = group_pod(0)
    del no_shape["metadata"]["annotations"][PARALLELISM_ANNOTATION]
    with pytest.raises(GroupDeclarationError, match=PARALLELISM_ANNOTATION):
        adopting_manifest("ns", "llm", [parse_pod(no_shape)])


def test_pod_group_must_name_the_job_itself_and_leaves_out_the_template() -> None:
    manifest = adopting_manifest("ns", "llm", [parse_pod(group_pod(0))])
    renamed = adopted(manifest)
    renamed["metadata"]["name"] = "other"
    assert "must equal metadata.name" in parse_job(renamed).invalid
    with_template = adopted(manifest)
    with_template["spec"]["template"] = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    assert "leave spec.template out" in parse_job(with_template).invalid


# ---- waiting reasons --------------------------------------------------------------------------------
def request_4x2x2() -> Any:
    job = parse_job(adopted(adopting_manifest("ns", "llm", [parse_pod(group_pod(0))])))
    assert job.request is not None
    return job.request


def test_a_group_waits_for_every_node_rank() -> None:
    state = group_state(request_4x2x2(), [parse_pod(group_pod(i)) for i in (0, 2, 3)])
    assert (state.ready, state.reason, state.message) == (
        False,
        "WaitingForPods",
        "3 of 4 pods exist (missing node ranks 1)",
    )
    assert group_state(request_4x2x2(), [parse_pod(group_pod(i)) for i in range(4)]).ready


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ([group_pod(0, gpus=8)], "must request nvidia.com/gpu: 4 on its first container"),
        ([group_pod(0), group_pod(0)], "both have node rank 0"),
        ([group_pod(7)], "node rank 7, outside 0..3"),
        ([group_pod(None)], "it has no node rank"),
        ([group_pod(0, shape="8x1x2")], "declares 8x1x2, the group is 4x2x2"),
    ],
)
def test_a_malformed_group_says_which_pod_is_wrong(pods: list[dict[str, Any]], message: str) -> None:
    state = group_state(request_4x2x2(), [parse_pod(p) for p in pods])
    assert not state.ready and state.reason == "InvalidPodGroup" and message in state.message


# ---- decisions --------------------------------------------------------------------------------------
def test_nothing_is_bound_until_the_group_is_complete_then_each_index_lands_on_its_ranks_slot() -> None:
    fc = cluster_with([group_pod(i) for i in range(3)])
    no_writes_but_binds(fc)
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Queued" and not fc.binds
    ready = next(c for c in status["conditions"] if c["type"] == "PodGroupReady")
    assert (ready["reason"], ready["message"]) == ("WaitingForPods", "3 of 4 pods exist (missing node ranks 3)")
    fc.step(now="2024-01-01T00:10:00Z")  # past the default 60 s
    ready = next(c for c in fc.job("ns/llm")["status"]["conditions"] if c["type"] == "PodGroupReady")
    assert ready["reason"] == "PodGroupTimeout" and not fc.binds
    assert any(reason == "PodGroupTimeout" for _, reason, _ in fc.events)

    last = group_pod(3)
    fc.pods[("ns", last["metadata"]["name"])] = last
    no_writes_but_binds(fc)
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Running", status.get("message")
    record = record_from_status(status)
    assert record is not None and record.rank_order is RankOrder.TP_DP_PP
    for index, pod in by_index(fc).items():
        replica, stage = slot_of(record.rank_order, index, 2, 2)
        slot = next(s for s in record.slots if (s.replica, s.stage) == (replica, stage))
        assert pod["spec"]["nodeName"] == slot.node
        assert pod["metadata"]["annotations"][GPU_INDICES_ANNOTATION] == ",".join(map(str, slot.gpu_indices))
    # the group's GPUs are held once (by the record), not again as unexplained pods
    assert fc.last_view is not None and not fc.last_view.occupants


def test_a_replaced_pod_goes_back_to_its_slot() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    before = by_index(fc)[1]
    del fc.pods[("ns", before["metadata"]["name"])]
    replacement = group_pod(1)
    fc.pods[("ns", replacement["metadata"]["name"])] = replacement
    no_writes_but_binds(fc)
    after = by_index(fc)[1]
    assert after["spec"]["nodeName"] == before["spec"]["nodeName"]
    assert (
        after["metadata"]["annotations"][GPU_INDICES_ANNOTATION]
        == before["metadata"]["annotations"][GPU_INDICES_ANNOTATION]
    )
    assert fc.phase("ns/llm") == "Running"


def test_broken_hardware_moves_the_slot_but_leaves_the_foreign_pod_to_its_owner() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    victim = by_index(fc)[0]
    broken_node = victim["spec"]["nodeName"]
    indices = victim["metadata"]["annotations"][GPU_INDICES_ANNOTATION]
    fc.nodes[broken_node] = node(broken_node, leaf="leaf-0", unhealthy=indices.split(",")[0])
    no_writes_but_binds(fc)
    assert fc.phase("ns/llm") == "Recovering"
    assert ("ns", victim["metadata"]["name"]) in fc.pods, "the operator never deletes a pod it does not own"
    record = record_from_status(fc.job("ns/llm")["status"])
    assert record is not None
    moved = next(s for s in record.slots if record.node_rank(s) == 0)
    assert (moved.node, ",".join(map(str, moved.gpu_indices))) != (broken_node, indices)
    # the owner (the Job controller) replaces the pod: the replacement is bound to the new slot
    del fc.pods[("ns", victim["metadata"]["name"])]
    replacement = group_pod(0)
    fc.pods[("ns", replacement["metadata"]["name"])] = replacement
    no_writes_but_binds(fc)
    assert by_index(fc)[0]["spec"]["nodeName"] == moved.node
    assert fc.phase("ns/llm") == "Running"


def test_a_group_whose_pods_are_all_gone_frees_its_gpus() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    fc.pods.clear()
    fc.step()
    status = fc.job("ns/llm")["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "PodGroupGone")


def test_pods_of_a_recreated_owner_are_not_bound_into_the_stale_parallel_job() -> None:
    """JobSet's restart deletes and recreates its Jobs under the same names: until the garbage collector
    removes the old Job's ParallelJob, the new Job's pods must not be bound into its old slots."""
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    assert fc.phase("ns/llm") == "Running"
    fc.pods.clear()  # the old Job and its pods are gone; a new Job of the same name makes new pods
    successor = {**JOB_OWNER, "uid": "uid-job-2"}
    for i in range(4):
        pod = group_pod(i, owner=successor)
        fc.pods[("ns", pod["metadata"]["name"])] = pod
    plan = fc.step()
    assert all(not p["spec"].get("nodeName") for p in fc.pods.values()), "bound into the stale ParallelJob"
    assert any("replacement of the ParallelJob's owner" in w for w in plan.warnings), plan.warnings
    status = fc.job("ns/llm")["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "PodGroupGone")  # its GPUs are free
    # the garbage collector removes the stale ParallelJob; the successor's pods are adopted anew and placed
    del fc.jobs["ns/llm"]
    plan = fc.step()
    assert len(plan.adopt) == 1 and plan.adopt[0]["metadata"]["ownerReferences"][0]["uid"] == "uid-job-2"
    fc.add_job(adopted(plan.adopt[0]))
    no_writes_but_binds(fc)
    assert fc.phase("ns/llm") == "Running"
    assert all(p["spec"].get("nodeName") for p in fc.pods.values())


def test_a_user_created_group_job_adopts_pods_of_any_owner() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    job = fc.job("ns/llm")
    job["metadata"].pop("ownerReferences", None)
    fc.add_job(job)
    no_writes_but_binds(fc)
    assert fc.phase("ns/llm") == "Running"


def test_a_group_requeued_for_lack_of_room_keeps_its_pods() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    for name in list(fc.nodes):
        fc.nodes[name] = node(name, ready=False)
    no_writes_but_binds(fc)  # the shared failure path asks to delete the gang's pods: never for a group
    assert fc.phase("ns/llm") == "Queued"
    assert len(fc.pods) == 4


def test_the_pods_node_selector_is_honoured_and_their_restart_policy_is_their_owners() -> None:
    pods = []
    for i in range(4):
        pod = group_pod(i)
        pod["spec"].update(nodeSelector={"pool": "a"}, restartPolicy="OnFailure")
        pods.append(pod)
    fc = FakeCluster([node(f"n{i}", labels={"pool": "a" if i in (1, 3) else "b"}) for i in range(4)])
    for pod in pods:
        fc.pods[("ns", pod["metadata"]["name"])] = pod
    fc.add_job(adopted(fc.step().adopt[0]))
    no_writes_but_binds(fc)
    assert fc.phase("ns/llm") == "Running"
    assert {p["spec"]["nodeName"] for p in fc.pods.values()} == {"n1", "n3"}


def test_a_pod_asking_for_gpus_on_a_second_container_is_named() -> None:
    pod = group_pod(0)
    pod["spec"]["containers"].append({"name": "side", "image": "x", "resources": {"limits": {GPU_RESOURCE: "1"}}})
    state = group_state(request_4x2x2(), [parse_pod(pod)])
    assert state.reason == "InvalidPodGroup" and "only the first container gets GPUs" in state.message


def test_a_group_goes_through_its_queues_limit_like_any_job() -> None:
    pods = [group_pod(i, extra_annotations={QUEUE_ANNOTATION: "capped"}) for i in range(4)]
    fc = FakeCluster([node(f"n{i}") for i in range(4)], queues={"capped": QueueInfo("capped", max_gpus=8)})
    for pod in pods:
        fc.pods[("ns", pod["metadata"]["name"])] = pod
    fc.add_job(adopted(fc.step().adopt[0]))
    no_writes_but_binds(fc)
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Queued" and not fc.binds
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "QueueFull" and "above its maximum of 8" in placed["message"], placed


def test_a_repair_says_what_really_happens_and_names_the_old_pod_that_must_go() -> None:
    """A node under rank 0 goes NotReady: the operator moves the slot but re-creates nothing, so the
    condition must not say "re-created"; it names the stuck pod, says why it stays (a NotReady node's kubelet
    never confirms) and how to get rid of it, once as a Warning event; describe shows the real pods."""
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    victim = by_index(fc)[0]
    broken = victim["spec"]["nodeName"]
    fc.nodes[broken] = node(broken, leaf="leaf-0", ready=False)
    no_writes_but_binds(fc)
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Recovering"
    conditions = {c["type"]: c for c in status["conditions"]}
    placed = conditions["Placed"]["message"]
    assert "re-created" not in placed and "waits for the pods' owner to replace" in placed, placed
    bound = conditions["Bound"]
    assert bound["reason"] == "WaitingForOwner", bound
    stuck = {
        int(p["metadata"]["annotations"][COMPLETION_INDEX_KEY]): p["metadata"]["name"]
        for p in fc.pods.values()
        if p["spec"]["nodeName"] == broken
    }
    name = victim["metadata"]["name"]
    for rank, pod_name in stuck.items():
        assert f"pod {pod_name} (node rank {rank}) must go" in bound["message"], bound["message"]
    assert f"node {broken} is NotReady" in bound["message"] and "--grace-period=0 --force" in bound["message"]
    assert sorted(status["lastFailure"]["pods"]) == sorted(stuck.values()), "the group's pods, not slot names"
    must_go = [e for e in fc.events if e[1] == "PodMustGo"]
    assert len(must_go) == 1 and name in must_go[0][2], "one Warning event, not one per pass"
    d = describe_job(fc.job("ns/llm"), list(fc.pods.values()))
    for rank, pod_name in stuck.items():
        line = next(p for p in d.pods if p.node_rank == rank)
        assert line.name == pod_name and line.pod_phase == "Running" and "must go" in line.note, line
    assert all(p.name.startswith("trainer-") and p.pod_phase == "Running" for p in d.pods)
    # the user force-deletes them; the Job controller's replacements are bound to the new slots
    replacements = {}
    for rank, pod_name in stuck.items():
        del fc.pods[("ns", pod_name)]
        replacements[rank] = group_pod(rank)
        fc.pods[("ns", replacements[rank]["metadata"]["name"])] = replacements[rank]
    no_writes_but_binds(fc)
    assert fc.phase("ns/llm") == "Running"
    assert {c["type"]: c for c in fc.job("ns/llm")["status"]["conditions"]}["Bound"]["status"] == "True"
    d = describe_job(fc.job("ns/llm"), list(fc.pods.values()))
    for rank, pod in replacements.items():
        line = next(p for p in d.pods if p.node_rank == rank)
        assert line.name == pod["metadata"]["name"] and line.note == "" and line.pod_phase == "Running"


def test_no_second_pod_must_go_warning_once_the_old_pod_is_already_going() -> None:
    """A broken GPU on a Ready node: one PodMustGo names the pod to delete. Once the user has deleted it (it is
    Terminating while its kubelet stops it) the Bound condition says so, but a second Warning that the pod
    "must go" would only contradict what the user just did (walking docs/pod-groups.md: two PodMustGo)."""
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    victim = by_index(fc)[0]
    where = victim["spec"]["nodeName"]
    gpu = victim["metadata"]["annotations"]["paralleljob.dev/gpu-indices"].split(",")[0]
    fc.nodes[where] = node(where, leaf=fc.nodes[where]["metadata"]["labels"]["network.topology.nvidia.com/leaf"],
                           unhealthy=gpu)  # fmt: skip
    no_writes_but_binds(fc)
    bound = {c["type"]: c for c in fc.job("ns/llm")["status"]["conditions"]}["Bound"]
    assert "are out of service: delete it" in bound["message"], bound
    assert [e[1] for e in fc.events].count("PodMustGo") == 1
    victim["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"  # the user deleted it; it is going
    no_writes_but_binds(fc)
    bound = {c["type"]: c for c in fc.job("ns/llm")["status"]["conditions"]}["Bound"]
    assert "it is terminating" in bound["message"], bound
    assert [e[1] for e in fc.events].count("PodMustGo") == 1, [e for e in fc.events if e[1] == "PodMustGo"]


def test_a_group_whose_pods_are_all_going_is_not_adopted_again() -> None:
    """`kubectl delete job`: the garbage collector may remove the adopting ParallelJob while the pods are
    still terminating; the operator must not create a new ParallelJob for pods that are on their way out."""
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    for pod in fc.pods.values():
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:01:00Z"
    del fc.jobs["ns/llm"]
    plan = fc.step()
    assert plan.adopt == []
    fc.pods.clear()
    assert fc.step().adopt == []


def slice_pod(index: int, profile: str = "1g.10gb") -> dict[str, Any]:
    """An Indexed Job's pod asking one MIG slice of the device plugin (mixed strategy) and no whole GPU."""
    pod = group_pod(index, group="evals", shape="1x1x2")
    pod["spec"]["containers"][0]["resources"] = {"limits": {f"nvidia.com/mig-{profile}": "1"}}
    return pod


def test_a_group_whose_pods_ask_for_a_mig_slice_is_refused_naming_why() -> None:
    """Pod groups on MIG slices are not built: the group waits, saying so on its condition and in a Warning,
    and no pod is bound (neither as a whole GPU nor anywhere else)."""
    from tests.k8s.test_mig_pools import mig_node

    fc = FakeCluster([mig_node("mig-0"), node("hgx-0")])
    for i in range(2):
        pod = slice_pod(i)
        fc.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
    plan = fc.step()
    assert len(plan.adopt) == 1, plan.warnings
    fc.add_job(adopted(plan.adopt[0]))
    warnings = []
    for _ in range(3):
        plan = fc.step()
        warnings += [e for a in plan.jobs for e in a.events if e.event_type == "Warning"]
    status = fc.job("ns/evals")["status"]
    assert status["phase"] == "Queued" and not fc.binds
    ready = next(c for c in status["conditions"] if c["type"] == "PodGroupReady")
    assert ready["reason"] == "MIGSlicesNotSupported", ready
    assert "nvidia.com/mig-1g.10gb" in ready["message"] and "spec.gpuSharing.migProfile" in ready["message"]
    assert [e.reason for e in warnings] == ["MIGSlicesNotSupported"]


def succeed(fc: FakeCluster, pod: dict[str, Any]) -> None:
    key = ("ns", pod["metadata"]["name"])
    fc.pods[key] = copy.deepcopy(fc.pods[key])  # a new version, as the API makes
    fc.pods[key]["status"]["phase"] = "Succeeded"


def test_broken_hardware_under_a_finished_group_pod_moves_nothing() -> None:
    fc = cluster_with([group_pod(i) for i in range(4)])
    no_writes_but_binds(fc)
    early = by_index(fc)[0]
    succeed(fc, early)
    no_writes_but_binds(fc, 1)
    record = record_from_status(fc.job("ns/llm")["status"])
    broken_node = early["spec"]["nodeName"]
    indices = early["metadata"]["annotations"][GPU_INDICES_ANNOTATION]  # another rank shares its node
    fc.nodes[broken_node] = node(broken_node, leaf="leaf-0", unhealthy=indices.split(",")[0])
    no_writes_but_binds(fc)
    status = fc.job("ns/llm")["status"]
    assert status["phase"] == "Running" and status.get("restarts", 0) == 0, status
    assert record_from_status(status) == record, "nothing moved"
