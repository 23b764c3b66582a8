"""Composite pod groups on Kubernetes 1.38 (``make test-k8s-1.38``; ``CompositePodGroup`` is beta there and served
as ``scheduling.k8s.io/v1beta1``; 1.37 serves it only as ``v1alpha3``, which the operator does not read).

No JobSet release makes them yet (kubernetes-sigs/jobset KEP-969's gang of gangs; the pinned v0.12.0 has no
``spec.scheduling``), so the test writes what such a JobSet would: a Workload with one composite template whose
pod-group templates are the ReplicatedJobs (``leader`` before ``followers``), the root CompositePodGroup, one
child PodGroup per ReplicatedJob, and bare pods naming their child and their node rank in the whole gang.

- the four pods (two per child) are held until the last exists, then bound as ONE gang of TP4xPP2xDP2 at the
  twin ParallelJob's cost, each child on its own rank range in template order (the leader's pods on ranks 0-1
  although ``followers`` sorts first by name); the composite says ``CompositePodGroupInitiallyScheduled`` and
  each child ``PodGroupInitiallyScheduled`` as kube-scheduler 1.38 writes them;
- a pod whose node rank is outside its child's range is not placed, and the group says why;
- deleted as users delete it (``kubectl delete compositepodgroup``, its PodGroups and pods), everything goes,
  the adopting ParallelJob with it (kube-controller-manager's podgroup-protection-controller takes the
  composite's finalizer off too).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from gangapi import API, create, own_cluster, read
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, OperatorProcess, running, wait_for

from paralleljob.devcluster import kubeline
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GPU_RESOURCE, NODE_RANK_ANNOTATION, PARALLELISM_ANNOTATION, SCHEDULER_NAME
from paralleljob.k8s.edge.status.records import record_from_status

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not kubeline.selected().composite_groups,
        reason=f"Kubernetes {kubeline.selected().minor} serves no CompositePodGroup in the gang API version the"
        " operator reads: `make test-k8s-1.38` runs this module",
    ),
]
LEAF = "network.topology.nvidia.com/leaf"
CHILDREN = ("leader", "followers")  # template order; "followers" sorts first by name


@pytest.fixture(scope="module")
def dev_cluster() -> Iterator[DevCluster]:
    # to reuse one: `paralleljob dev-cluster up --kubernetes 1.38 --gang-api --nodes 8`
    yield from own_cluster("composite", gang_api=True)


@pytest.fixture(scope="module")
def kube(dev_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(dev_cluster.kubeconfig, dev_cluster.shape) as session:
        yield session


@pytest.fixture(scope="module")
def pj_operator(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running(OperatorProcess(dev_cluster.kubeconfig, tmp_path_factory.mktemp("operator"))) as proc:
        yield proc


def condition(kube: KubeSession, namespace: str, plural: str, name: str, kind: str) -> dict[str, Any]:
    conditions = (read(kube, namespace, plural, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def gang_of_gangs(kube: KubeSession, namespace: str, name: str) -> None:
    """What a JobSet with two ReplicatedJobs (2 pods each) under a gang-of-gangs spec.scheduling would make."""
    child_gang = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    root_gang = {"schedulingPolicy": {"gang": {"minGroupCount": len(CHILDREN)}},
                 "schedulingConstraints": {"topology": [{"key": LEAF}]}}  # fmt: skip
    create(kube, namespace, "workloads", {
        "apiVersion": "/".join(API), "kind": "Workload", "metadata": {"name": name},
        "spec": {"compositePodGroupTemplates": [{
            "name": "whole", **root_gang,
            "podGroupTemplates": [{"name": child, **child_gang} for child in CHILDREN],
        }]},
    })  # fmt: skip
    create(kube, namespace, "compositepodgroups", {
        "apiVersion": "/".join(API), "kind": "CompositePodGroup",
        "metadata": {"name": name, "annotations": {PARALLELISM_ANNOTATION: "4x2x2"}},
        "spec": {"workloadRef": {"workloadName": name, "templateName": "whole"}, **root_gang},
    })  # fmt: skip
    for child in reversed(CHILDREN):  # created out of order: the order is the template's
        create(kube, namespace, "podgroups", {
            "apiVersion": "/".join(API), "kind": "PodGroup", "metadata": {"name": f"{name}-{child}"},
            "spec": {"parentCompositePodGroupName": name,
                     "workloadRef": {"workloadName": name, "templateName": child}, **child_gang},
        })  # fmt: skip


def member_pod(kube: KubeSession, namespace: str, group: str, rank: int) -> None:
    kube.run(kube.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{group}-{rank}", "annotations": {NODE_RANK_ANNOTATION: str(rank)}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "schedulingGroup": {"podGroupName": group},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "containers": [{"name": "trainer", "image": "trainer:e2e", "resources": {"limits": {GPU_RESOURCE: "4"}}}],
        },
    }))  # fmt: skip


def pods_of(kube: KubeSession, namespace: str, prefix: str) -> list[Any]:
    listed = kube.run(kube.core.list_namespaced_pod(namespace)).items
    return sorted((p for p in listed if p.metadata.name.startswith(prefix)), key=lambda p: p.metadata.name)


def test_a_composite_of_two_podgroups_is_placed_as_one_gang_with_each_childs_ranks_in_template_order(
    pjs: Jobs, kube: KubeSession
) -> None:
    ns = pjs.namespace
    gang_of_gangs(kube, ns, "train")
    member_pod(kube, ns, "train-leader", 0)
    member_pod(kube, ns, "train-leader", 1)
    member_pod(kube, ns, "train-followers", 2)

    def waiting() -> dict[str, Any] | None:
        said = condition(kube, ns, "compositepodgroups", "train", "CompositePodGroupInitiallyScheduled")
        return said if "3 of 4 pods exist (missing node ranks 3)" in said.get("message", "") else None

    said = wait_for("the composite says it waits for its fourth pod", waiting, timeout_s=60)
    assert (said["status"], said["reason"]) == ("False", "Unschedulable")
    child = condition(kube, ns, "podgroups", "train-followers", "PodGroupInitiallyScheduled")
    assert child["status"] == "False" and "node ranks 2..3 of 4" in child["message"]
    assert pjs.status("train")["phase"] == "Queued"
    assert not any(p.spec.node_name for p in pods_of(kube, ns, "train-"))

    member_pod(kube, ns, "train-followers", 3)
    status = pjs.wait_phase("train", "Running")
    assert status["communicationCost"]["totalMs"] == pytest.approx(233.71, abs=0.01)  # the twin ParallelJob's
    pods = {p.metadata.name: p for p in pods_of(kube, ns, "train-")}
    assert len(pods) == 4 and all(p.spec.node_name for p in pods.values())
    leaves = {kube.run(kube.core.read_node(p.spec.node_name)).metadata.labels[LEAF] for p in pods.values()}
    assert len(leaves) == 1  # the composite's topology key: the whole gang in one rack
    record = record_from_status(status)
    assert record is not None
    for slot in record.pod_slots:  # each node rank's slot holds the pod of that rank: leader 0-1, followers 2-3
        rank = record.node_rank(slot)
        pod = pods[f"train-{'leader' if rank < 2 else 'followers'}-{rank}"]
        assert pod.spec.node_name == slot.node
    job = pjs.get("train")
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("CompositePodGroup", "train")

    def scheduled() -> dict[str, Any] | None:
        said = condition(kube, ns, "compositepodgroups", "train", "CompositePodGroupInitiallyScheduled")
        return said if said.get("status") == "True" else None

    said = wait_for("the composite says it is scheduled", scheduled, timeout_s=60)
    assert said["reason"] == "Scheduled"
    # as kube-scheduler: the composite's generation, which the 1.38 beta's API server does not set (so none)
    generation = read(kube, ns, "compositepodgroups", "train")["metadata"].get("generation", 0)
    assert said.get("observedGeneration", 0) == generation
    assert "all 4 pods placed as one gang" in said["message"]
    for child_name, ranks in (("train-leader", "0..1"), ("train-followers", "2..3")):
        said = wait_for(
            f"{child_name} says it is scheduled",
            lambda name=child_name: condition(kube, ns, "podgroups", name, "PodGroupInitiallyScheduled") or None,
        )
        assert (said["status"], said["reason"]) == ("True", "Scheduled") and f"node ranks {ranks}" in said["message"]


def test_a_pod_whose_rank_is_outside_its_childs_range_is_not_placed_and_the_group_says_why(
    pjs: Jobs, kube: KubeSession
) -> None:
    ns = pjs.namespace
    gang_of_gangs(kube, ns, "skew")
    member_pod(kube, ns, "skew-leader", 0)
    member_pod(kube, ns, "skew-leader", 2)  # rank 2 is the followers' first
    member_pod(kube, ns, "skew-followers", 1)
    member_pod(kube, ns, "skew-followers", 3)

    def refused() -> dict[str, Any] | None:
        try:
            conditions = pjs.status("skew").get("conditions") or []
        except ApiException:
            return None  # not adopted yet
        ready = next((c for c in conditions if c["type"] == "PodGroupReady"), {})
        return ready if ready.get("reason") == "InvalidPodGroup" else None

    ready = wait_for("the adopting ParallelJob says which pod is out of range", refused, timeout_s=60)
    assert "outside 0..1, the ranks of its PodGroup skew-leader in CompositePodGroup skew" in ready["message"]
    assert not any(p.spec.node_name for p in pods_of(kube, ns, "skew-"))


def test_a_composite_deleted_as_users_delete_it_goes_away_with_its_parallel_job(
    pjs: Jobs, kube: KubeSession, dev_cluster: DevCluster
) -> None:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is part of the machine's image"
    ns = pjs.namespace
    gang_of_gangs(kube, ns, "bye")
    for rank in range(4):
        member_pod(kube, ns, f"bye-{CHILDREN[rank // 2]}", rank)
    pjs.wait_phase("bye", "Running")
    finalizers = read(kube, ns, "compositepodgroups", "bye")["metadata"].get("finalizers", [])
    assert "scheduling.k8s.io/compositepodgroup-protection" in finalizers
    for what in ("compositepodgroup/bye", "podgroup/bye-leader", "podgroup/bye-followers"):
        done = subprocess.run(
            [binary, "--kubeconfig", str(dev_cluster.kubeconfig), "-n", ns, "delete", "--wait=false", what],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    for pod in pods_of(kube, ns, "bye-"):
        kube.run(kube.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0))

    def gone(plural: str, name: str) -> bool:
        try:
            read(kube, ns, plural, name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("the composite is gone once no pod of it is active", lambda: gone("compositepodgroups", "bye"), 120)
    wait_for("its PodGroups are gone", lambda: gone("podgroups", "bye-leader") and gone("podgroups", "bye-followers"))

    def job_gone() -> bool:
        try:
            pjs.get("bye")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("the adopting ParallelJob is collected with it", job_gone, timeout_s=120)
