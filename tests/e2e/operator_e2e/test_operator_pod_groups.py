"""Pod groups against the real API server and kube-controller-manager's Job controller: an Indexed Job's pods
(which the operator never creates nor deletes) are held until the whole group exists, placed like the
equivalent ParallelJob, bound rank by rank where the rank order puts them, re-bound in place when the Job
controller replaces one, and their GPUs come free when the Job is deleted (garbage collection).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import BatchV1Api
from pjhelpers import Jobs, wait_for

from paralleljob.cli import main
from paralleljob.core.rankorder import RankOrder, slot_of
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import (
    COMPLETION_INDEX_KEY,
    GPU_INDICES_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_TIMEOUT_ANNOTATION,
)

pytestmark = pytest.mark.e2e
GROUP = "llm-pretrain"  # the example's Job and pod group


EXAMPLE = Path(__file__).parents[3] / "deploy" / "examples" / "pod-groups" / "indexed-job.yaml"


def example_job(parallelism: int) -> dict[str, Any]:
    """The documented example (deploy/examples/pod-groups/indexed-job.yaml), started with ``parallelism``
    pods and a short group timeout so the test sees the "waited too long" reason quickly."""
    job = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "Job")
    job["spec"]["parallelism"] = parallelism
    job["spec"]["template"]["metadata"]["annotations"][POD_GROUP_TIMEOUT_ANNOTATION] = "3"
    return dict(job)


def group_pods(kube: KubeSession, namespace: str, group: str) -> list[Any]:
    listed = kube.run(kube.core.list_namespaced_pod(namespace, label_selector=f"{POD_GROUP_LABEL}={group}"))
    return sorted((p for p in listed.items if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)


def index_of(pod: Any) -> int:
    return int(pod.metadata.annotations[COMPLETION_INDEX_KEY])


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def test_an_indexed_jobs_pods_are_gang_placed_by_rank_and_repaired_in_place(pjs: Jobs, kube: KubeSession) -> None:
    batch: Any = BatchV1Api(kube.api)
    ns = pjs.namespace
    kube.run(batch.create_namespaced_job(ns, example_job(parallelism=3)))

    # Three of four pods: the operator creates the group's ParallelJob and holds it, saying why.
    def waiting_too_long() -> dict[str, Any] | None:
        try:
            status = pjs.status(GROUP)
        except Exception:
            return None
        return status if condition(status, "PodGroupReady").get("reason") == "PodGroupTimeout" else None

    try:
        status = wait_for("the group reports that it waited too long", waiting_too_long, timeout_s=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{pjs.operator.log_tail()}") from None
    assert status["phase"] == "Queued"
    assert "3 of 4 pods exist (missing node ranks 3)" in condition(status, "PodGroupReady")["message"]
    job = pjs.get(GROUP)
    assert job["spec"]["podGroup"] == GROUP and "template" not in job["spec"]
    assert job["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert len(group_pods(kube, ns, GROUP)) == 3
    assert not any(p.spec.node_name for p in group_pods(kube, ns, GROUP)), "nothing is bound before the gang exists"
    assert any(e.reason == "PodGroupTimeout" for e in pjs.events(GROUP))

    # The fourth pod appears: all four are placed at once, with the cost of the equivalent ParallelJob.
    kube.run(batch.patch_namespaced_job(GROUP, ns, {"spec": {"parallelism": 4}}))
    status = pjs.wait_phase(GROUP, "Running", timeout_s=30)
    assert condition(status, "PodGroupReady")["status"] == "True"
    assert abs(status["communicationCost"]["totalMs"] - 233.7) < 0.1, status["communicationCost"]
    pjs.create("twin", 4, 2, 2)
    twin = pjs.wait_phase("twin", "Running", timeout_s=30)
    assert twin["communicationCost"]["totalMs"] == status["communicationCost"]["totalMs"]
    pjs.delete("twin")

    # Completion index i sits on the slot of node rank i under the rank order.
    placement = status["placement"]
    order = RankOrder.parse(placement["rankOrder"])
    slots = {(s["replica"], s["stage"]): s for s in placement["pods"]}
    # the seed shape's DP all-reduce on NVLink: both replicas of a stage share a node
    for stage in (0, 1):
        assert slots[(0, stage)]["node"] == slots[(1, stage)]["node"], placement["pods"]
    pods = group_pods(kube, ns, GROUP)
    assert sorted(index_of(p) for p in pods) == [0, 1, 2, 3]
    for pod in pods:
        slot = slots[slot_of(order, index_of(pod), 2, 2)]
        assert slot["nodeRank"] == index_of(pod)
        assert pod.spec.node_name == slot["node"], (pod.metadata.name, slot)
        assert [int(i) for i in pod.metadata.annotations[GPU_INDICES_ANNOTATION].split(",")] == slot["gpuIndices"]
        assert not any(ref.kind == "ParallelJob" for ref in pod.metadata.owner_references or [])

    # A pod is lost (as on a failed node): the Job controller replaces it, and the replacement goes back
    # to the same slot (the operator neither deleted nor created any pod of the group).
    victim = next(p for p in pods if index_of(p) == 1)
    kube.run(kube.core.delete_namespaced_pod(victim.metadata.name, ns, grace_period_seconds=0))

    def replaced_and_bound() -> Any:
        for pod in group_pods(kube, ns, GROUP):
            if index_of(pod) == 1 and pod.metadata.uid != victim.metadata.uid and pod.spec.node_name:
                return pod
        return None

    replacement = wait_for("the replacement of index 1 bound", replaced_and_bound, timeout_s=60)
    assert replacement.spec.node_name == victim.spec.node_name
    assert (
        replacement.metadata.annotations[GPU_INDICES_ANNOTATION] == victim.metadata.annotations[GPU_INDICES_ANNOTATION]
    )
    assert pjs.status(GROUP)["phase"] == "Running"
    assert pjs.status(GROUP)["placement"] == placement, "the placement is unchanged"

    # Deleting the Job deletes its pods and (garbage collection) the group's ParallelJob: the GPUs are free.
    kube.run(batch.delete_namespaced_job(GROUP, ns, propagation_policy="Background"))
    wait_for("the Job's pods gone", lambda: not group_pods(kube, ns, GROUP), timeout_s=60)

    def adopted_gone() -> bool:
        listed = kube.run(pjs.custom.list_namespaced_custom_object("paralleljob.dev", "v1alpha1", ns, "paralleljobs"))
        return not [i for i in listed["items"] if i["metadata"]["name"] == GROUP]

    wait_for("the group's ParallelJob deleted by garbage collection", adopted_gone, timeout_s=60)
    shape = kube.shape
    pjs.create("everything", shape.gpus_per_node, 1, shape.count)
    pjs.wait_phase("everything", "Running", timeout_s=30)


def _describe(cluster: DevCluster, key: str) -> dict[str, Any]:
    """``paralleljob describe KEY -o json`` in this process, as a user runs it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["describe", key, "-o", "json", "--kubeconfig", str(cluster.kubeconfig)]) == 0
    return dict(json.loads(out.getvalue()))


def test_a_broken_gpu_moves_the_slot_and_the_owners_replacement_lands_there(
    pjs: Jobs, chaos: KubeSession, dev_cluster: DevCluster
) -> None:
    batch: Any = BatchV1Api(chaos.api)
    ns = pjs.namespace
    job = example_job(parallelism=4)
    kube_job = chaos.run(batch.create_namespaced_job(ns, job))
    assert kube_job.metadata.name == GROUP
    status = pjs.wait_phase(GROUP, "Running", timeout_s=30)
    victim = next(p for p in group_pods(chaos, ns, GROUP) if index_of(p) == 0)
    indices = [int(i) for i in victim.metadata.annotations[GPU_INDICES_ANNOTATION].split(",")]
    chaos.set_unhealthy_gpus(victim.spec.node_name, [indices[0]])

    # The operator moves rank 0's slot off the broken GPU (minimal repair) but leaves the pod to its owner.
    def moved() -> dict[str, Any] | None:
        current = pjs.status(GROUP)
        slot = next(s for s in current["placement"]["pods"] if s["nodeRank"] == 0)
        return current if (slot["node"], slot["gpuIndices"]) != (victim.spec.node_name, indices) else None

    repaired = wait_for("rank 0's slot moved off the broken GPU", moved, timeout_s=30)
    assert repaired["phase"] == "Recovering"
    still = [p for p in group_pods(chaos, ns, GROUP) if p.metadata.uid == victim.metadata.uid]
    assert still, "the operator never deletes a pod it does not own"
    new_slot = next(s for s in repaired["placement"]["pods"] if s["nodeRank"] == 0)
    old_slots = {(s["node"], tuple(s["gpuIndices"])) for s in status["placement"]["pods"] if s["nodeRank"] != 0}
    assert {(s["node"], tuple(s["gpuIndices"])) for s in repaired["placement"]["pods"] if s["nodeRank"] != 0} == (
        old_slots
    ), "only the broken rank moves"
    assert pjs.get(GROUP)["spec"]["preemptible"] is False, "the adopting ParallelJob says what docs promise"
    # What the user reads: no "re-created" (the operator creates no pod of a group), the pod that must go
    # by name, once as a Warning event, and describe showing the real pods, the old one with a note.
    placed, bound = condition(repaired, "Placed")["message"], condition(repaired, "Bound")
    assert "re-created" not in placed and "waits for the pods' owner" in placed, placed
    assert (
        bound["reason"] == "WaitingForOwner"
        and f"pod {victim.metadata.name} (node rank 0) must go" in (bound["message"])
    ), bound
    pjs.wait_events(GROUP, {"PodMustGo"})
    must_go = [e for e in pjs.events(GROUP) if e.reason == "PodMustGo"]
    assert len(must_go) == 1 and must_go[0].type == "Warning" and victim.metadata.name in must_go[0].message
    described = _describe(dev_cluster, f"{ns}/{GROUP}")
    lines = {line["node_rank"]: line for line in described["pods"]}
    assert lines[0]["name"] == victim.metadata.name and "must go" in lines[0]["note"], lines[0]
    live = {p.metadata.name for p in group_pods(chaos, ns, GROUP)}
    assert {line["name"] for line in lines.values()} <= live and all(line["pod_phase"] for line in lines.values()), (
        lines
    )

    # Its owner's side (here: whoever evicts the pod) deletes it; the Job controller's replacement is bound
    # to the new slot and the group runs again.
    chaos.run(chaos.core.delete_namespaced_pod(victim.metadata.name, ns))  # as the Warning says: a graceful delete

    def replacement_bound() -> Any:
        for pod in group_pods(chaos, ns, GROUP):
            if index_of(pod) == 0 and pod.metadata.uid != victim.metadata.uid and pod.spec.node_name:
                return pod
        return None

    replacement = wait_for("the replacement of rank 0 bound", replacement_bound, timeout_s=60)
    assert replacement.spec.node_name == new_slot["node"]
    assert [int(i) for i in replacement.metadata.annotations[GPU_INDICES_ANNOTATION].split(",")] == new_slot[
        "gpuIndices"
    ]
    pjs.wait_phase(GROUP, "Running", timeout_s=30)
    # the delete the Warning asked for brings no second "must go" Warning while the pod terminates
    assert [e.reason for e in pjs.events(GROUP) for _ in range(e.count or 1)].count("PodMustGo") == 1
    chaos.run(batch.delete_namespaced_job(GROUP, ns, propagation_policy="Background"))
    wait_for("the Job's pods gone", lambda: not group_pods(chaos, ns, GROUP), timeout_s=60)
