"""Kueue with Topology Aware Scheduling in the dev cluster (``up(controllers=("jobset", "kueue"))``): the
pinned sigs.k8s.io/kueue release admits a JobSet through a LocalQueue and a ClusterQueue whose
ResourceFlavor names a Topology over the dev cluster's rack (leaf) and hostname labels, and the stock
kube-scheduler started beside it binds the pods where Kueue's topology assignment put them. No ParallelJob
operator runs here: whatever is placed was placed by Kueue and kube-scheduler.

The module runs its own cluster, so the other suites never pay for Kueue nor see its webhooks. The JobSet
asks for 4 pods of 6 GPUs with ``podset-required-topology`` on the rack: Kueue must put all four in one rack
of four 8-GPU nodes, one a node, where kube-scheduler's own spreading would most likely have used both racks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import wait_for
from tests.e2e.conftest import E2E_CLUSTER_PREFIX, E2E_SHAPE

from paralleljob.devcluster import state
from paralleljob.devcluster.cluster import DevCluster, down, get, up
from paralleljob.devcluster.nodes import DEV_CLUSTER_LABEL, LEAF_LABEL
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GPU_RESOURCE

pytestmark = pytest.mark.e2e
KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
HOSTNAME = "kubernetes.io/hostname"
PODS, GPUS = 4, 6


@pytest.fixture(scope="module")
def dev_cluster() -> Iterator[DevCluster]:
    reuse = os.environ.get("PARALLELJOB_E2E_KUEUE_CLUSTER")
    if reuse:  # a running `paralleljob dev-cluster up --controllers jobset,kueue --nodes 8` (faster when iterating)
        cluster = get(reuse)
        assert cluster is not None, f"PARALLELJOB_E2E_KUEUE_CLUSTER={reuse} but no such dev cluster is running"
        yield cluster
        return
    if os.geteuid() != 0:  # as the real-node tests do: an environment limit, said as such
        pytest.skip(
            "Kueue cannot run here (an environment limit): its metrics certificate path is fixed and the"
            " dev cluster mounts the cluster's over it in a private mount namespace, which needs root"
        )
    name = f"{E2E_CLUSTER_PREFIX}kueue-{os.getpid()}"
    cluster = up(name, E2E_SHAPE, report=lambda _: None, die_with_caller=True, controllers=("jobset", "kueue"))
    try:
        yield cluster
    finally:
        down(name, report=lambda _: None)


@pytest.fixture(scope="module")
def kube(dev_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(dev_cluster.kubeconfig, dev_cluster.shape) as session:
        yield session


def kueue_objects(suffix: str, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """Plural -> object: the Topology, a TAS ResourceFlavor on the dev cluster's GPU nodes, a ClusterQueue
    with room for every GPU, and the namespace's LocalQueue."""
    quota = [
        {"name": "cpu", "nominalQuota": "1000"},
        {"name": "memory", "nominalQuota": "10000Gi"},
        {"name": GPU_RESOURCE, "nominalQuota": str(E2E_SHAPE.count * E2E_SHAPE.gpus_per_node)},
    ]
    flavor = {"name": f"gpus-{suffix}", "resources": quota}
    groups = [{"coveredResources": [q["name"] for q in quota], "flavors": [flavor]}]
    specs = [
        ("topologies", "Topology", {"levels": [{"nodeLabel": LEAF_LABEL}, {"nodeLabel": HOSTNAME}]}),
        (
            "resourceflavors",
            "ResourceFlavor",
            {"nodeLabels": {DEV_CLUSTER_LABEL: "true"}, "topologyName": f"racks-{suffix}"},
        ),
        ("clusterqueues", "ClusterQueue", {"namespaceSelector": {}, "resourceGroups": groups}),
        ("localqueues", "LocalQueue", {"clusterQueue": f"cq-{suffix}"}),
    ]
    names = {"topologies": f"racks-{suffix}", "resourceflavors": f"gpus-{suffix}", "clusterqueues": f"cq-{suffix}"}
    objects = []
    for plural, kind, spec in specs:
        metadata = {"name": names[plural]} if plural in names else {"name": "lq", "namespace": namespace}
        objects.append((plural, {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": metadata, "spec": spec}))
    return objects


def jobset(name: str) -> dict[str, Any]:
    resources = {GPU_RESOURCE: str(GPUS), "cpu": "1", "memory": "1Gi"}
    container = {"name": "trainer", "image": "trainer:dev", "resources": {"requests": resources, "limits": resources}}
    pod = {
        "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": LEAF_LABEL}},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }
    job = {"completionMode": "Indexed", "parallelism": PODS, "completions": PODS, "template": pod}
    return {
        "apiVersion": "/".join(JOBSET[:2]),
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}]},
    }


def test_kueue_admits_a_jobset_into_one_rack_and_kube_scheduler_binds_it_there(kube: KubeSession) -> None:
    custom: Any = CustomObjectsApi(kube.api)
    suffix = f"{os.getpid()}-{int(time.time()) % 100000}"
    namespace = f"kueue-{suffix}"
    kube.run(kube.core.create_namespace({"metadata": {"name": namespace}}))
    for plural, body in kueue_objects(suffix, namespace):
        if "namespace" in body["metadata"]:
            kube.run(custom.create_namespaced_custom_object(*KUEUE, namespace, plural, body))
        else:
            kube.run(custom.create_cluster_custom_object(*KUEUE, plural, body))

    created = kube.run(custom.create_namespaced_custom_object(*JOBSET[:2], namespace, JOBSET[2], jobset("llm")))
    assert created["spec"].get("suspend") is True, "Kueue's JobSet webhook suspends a queued JobSet at create"

    def admitted() -> dict[str, Any] | None:
        listed = kube.run(custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads"))
        for workload in listed["items"]:
            conditions = {c["type"]: c["status"] for c in workload.get("status", {}).get("conditions", [])}
            if conditions.get("Admitted") == "True":
                return dict(workload)
        return None

    workload = wait_for("Kueue admits the JobSet's Workload", admitted, timeout_s=180)
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    topology = assignment["topologyAssignment"]
    assert topology["levels"] == [LEAF_LABEL, HOSTNAME] or topology["levels"] == [HOSTNAME], topology

    def running_pods() -> list[Any] | None:
        listed = kube.run(kube.core.list_namespaced_pod(namespace))
        pods = [p for p in listed.items if p.status.phase == "Running" and p.spec.node_name]
        return pods if len(pods) == PODS else None

    pods = wait_for("the JobSet's 4 pods Running", running_pods, timeout_s=180)
    nodes = kube.run(kube.core.list_node())
    rack_of = {n.metadata.name: n.metadata.labels[LEAF_LABEL] for n in nodes.items}
    placed = sorted(p.spec.node_name for p in pods)
    assert len({rack_of[node] for node in placed}) == 1, f"pods across racks: {placed}"
    assert len(set(placed)) == PODS, f"6-GPU pods share an 8-GPU node: {placed}"
    for pod in pods:
        assert pod.spec.scheduler_name == "default-scheduler"  # kube-scheduler bound it, nothing of ours
        assert not pod.spec.scheduling_gates, "Kueue's TopologyUngater removes kueue.x-k8s.io/topology"
        assert (pod.spec.node_selector or {}).get(HOSTNAME) == pod.spec.node_name  # Kueue's assignment
    current = kube.run(custom.get_namespaced_custom_object(*JOBSET[:2], namespace, JOBSET[2], "llm"))
    assert current["spec"].get("suspend") is False


def test_the_cluster_records_jobset_kueue_and_kube_scheduler_so_down_stops_them(dev_cluster: DevCluster) -> None:
    """``up`` saved its own copy of the state after the add-ons had recorded theirs (the scheduler last),
    which dropped JobSet's and Kueue's processes from it: ``dev-cluster down`` then left both running."""
    record = state.load(dev_cluster.name)
    assert record is not None
    names = {p.name for p in record.processes}
    assert {"jobset-controller-manager", "kueue-controller-manager", "kube-scheduler"} <= names, names
    assert {"kueue-webhook", "kueue-metrics", "kueue-health", "jobset-webhook"} <= set(record.ports)
