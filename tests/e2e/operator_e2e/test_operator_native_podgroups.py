"""Kubernetes' own gang API against a real control plane with its gates on (``up(kube_scheduler=True)``), of
the minor the dev cluster runs (1.37 by default: scheduling.k8s.io/v1beta1; ``PARALLELJOB_KUBERNETES=1.36``:
v1alpha2): kube-controller-manager's Job controller making Workloads and PodGroups (``WorkloadWithJob``), and
kube-scheduler with its gang and ``TopologyAwareWorkloadScheduling`` gates. The module runs its own cluster:
the gates change what the Job controller does for every Indexed Job, which the other suites' clusters must not
see.

- A Workload + PodGroup + 4 bare pods (TP4xPP2xDP2 by the Workload's annotation) asking for our scheduler are
  held until the fourth exists, then bound whole at the cost of the twin ParallelJob, and the PodGroup says
  its scheduling condition True as kube-scheduler would (``PodGroupInitiallyScheduled``, ``PodGroupScheduled``
  on 1.36);
- a topology key no single domain can satisfy leaves the group waiting, the PodGroup saying why;
- an Indexed Job under ``WorkloadWithJob`` (no label of ours) is gang-placed through the PodGroup the Job
  controller made;
- the same PodGroup with kube-scheduler's name is held and then placed by kube-scheduler (the baseline of
  ``paralleljob bench native`` is real);
- the documented example (deploy/examples/pod-groups/native-podgroup.yaml), applied and deleted with kubectl,
  is placed whole inside one rack and leaves nothing behind;
- a PodGroup deleted as users delete it (``kubectl delete podgroup``, then its pods) goes away, and the
  ParallelJob that adopted it with it: kube-controller-manager's podgroup-protection-controller takes the
  finalizer off once no pod of it is active (without it the PodGroup stayed Terminating for ever).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gangapi import API, create, own_cluster, read
from kubernetes_asyncio.client import BatchV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from pjhelpers import Jobs, OperatorProcess, running, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import (
    GPU_INDICES_ANNOTATION,
    GPU_RESOURCE,
    NODE_RANK_ANNOTATION,
    PARALLELISM_ANNOTATION,
    SCHEDULER_NAME,
)
from paralleljob.k8s.edge.parse.nativegroups import scheduled_condition, workload_reference

pytestmark = pytest.mark.e2e
SCHEDULED = scheduled_condition(API[1])
LEAF = "network.topology.nvidia.com/leaf"  # the dev cluster's rack: four 8-GPU nodes each
EXAMPLE = Path(__file__).parents[3] / "deploy" / "examples" / "pod-groups" / "native-podgroup.yaml"


# ---- this module's own cluster (overrides the session's fixtures of the same names) ----------------------
@pytest.fixture(scope="module")
def dev_cluster() -> Iterator[DevCluster]:
    # to reuse one: `paralleljob dev-cluster up --kube-scheduler --nodes 8`
    yield from own_cluster("native", kube_scheduler=True)


@pytest.fixture(scope="module")
def kube(dev_cluster: DevCluster) -> Iterator[KubeSession]:
    with KubeSession(dev_cluster.kubeconfig, dev_cluster.shape) as session:
        yield session


@pytest.fixture(scope="module")
def pj_operator(dev_cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running(OperatorProcess(dev_cluster.kubeconfig, tmp_path_factory.mktemp("operator"))) as proc:
        yield proc


# ---- helpers ---------------------------------------------------------------------------------------------
def scheduled(kube: KubeSession, namespace: str, name: str) -> dict[str, Any]:
    """The PodGroup's scheduling-cycle condition ({} while it has none)."""
    conditions = (read(kube, namespace, "podgroups", name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == SCHEDULED), {})


def workload_and_group(
    kube: KubeSession, namespace: str, name: str, topology_key: str | None = None, shape: str = "4x2x2"
) -> None:
    """A Workload declaring the shape (our annotation) and the gang, and the PodGroup stamped from it."""
    constraints = {"schedulingConstraints": {"topology": [{"key": topology_key}]}} if topology_key else {}
    gang = {"schedulingPolicy": {"gang": {"minCount": 4}}, **constraints}
    create(kube, namespace, "workloads", {
        "apiVersion": "/".join(API), "kind": "Workload",
        "metadata": {"name": name, "annotations": {PARALLELISM_ANNOTATION: shape}},
        "spec": {"podGroupTemplates": [{"name": "workers", **gang}]},
    })  # fmt: skip
    create(kube, namespace, "podgroups", {
        "apiVersion": "/".join(API), "kind": "PodGroup",
        "metadata": {"name": f"{name}-workers"},
        "spec": {**workload_reference(API[1], name, "workers"), **gang},
    })  # fmt: skip


def group_pod(kube: KubeSession, namespace: str, group: str, rank: int, scheduler: str = SCHEDULER_NAME) -> None:
    kube.run(kube.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{group}-{rank}", "annotations": {NODE_RANK_ANNOTATION: str(rank)}},
        "spec": {
            "schedulerName": scheduler,
            "schedulingGroup": {"podGroupName": group},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
            "containers": [{"name": "trainer", "image": "trainer:e2e", "resources": {"limits": {GPU_RESOURCE: "4"}}}],
        },
    }))  # fmt: skip


def pods_of(kube: KubeSession, namespace: str, group: str) -> list[Any]:
    listed = kube.run(kube.core.list_namespaced_pod(namespace)).items
    return sorted((p for p in listed if p.metadata.name.startswith(group)), key=lambda p: p.metadata.name)


def job_gone(pjs: Jobs, name: str) -> bool:
    try:
        pjs.get(name)
    except ApiException as exc:
        return exc.status == 404
    return False


def bound(pods: list[Any]) -> list[str]:
    return [p.spec.node_name for p in pods if p.spec.node_name]


# ---- scenarios -------------------------------------------------------------------------------------------
def test_a_podgroup_asking_for_us_is_held_until_complete_then_bound_whole_at_the_twin_parallel_jobs_cost(
    pjs: Jobs, kube: KubeSession
) -> None:
    ns = pjs.namespace
    workload_and_group(kube, ns, "llm")
    for rank in range(3):
        group_pod(kube, ns, "llm-workers", rank)

    def holding() -> dict[str, Any] | None:
        condition = scheduled(kube, ns, "llm-workers")
        return condition if "3 of 4 pods exist" in condition.get("message", "") else None

    condition = wait_for("the PodGroup says it waits for its fourth pod", holding, timeout_s=30)
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert "3 of 4 pods exist (missing node ranks 3)" in condition["message"]
    assert pjs.status("llm-workers")["phase"] == "Queued"
    assert bound(pods_of(kube, ns, "llm-workers")) == []  # nothing of the gang is bound

    group_pod(kube, ns, "llm-workers", 3)
    status = pjs.wait_phase("llm-workers", "Running")
    pods = pods_of(kube, ns, "llm-workers")
    assert len(bound(pods)) == 4 and all(p.metadata.annotations.get(GPU_INDICES_ANNOTATION) for p in pods)
    twin = pjs.create("twin", 4, 2, 2)
    assert twin["spec"]["parallelism"] == {"tensor": 4, "pipeline": 2, "data": 2}
    twin_status = pjs.wait_phase("twin", "Running")
    assert status["communicationCost"]["totalMs"] == pytest.approx(twin_status["communicationCost"]["totalMs"])
    assert status["communicationCost"]["totalMs"] == pytest.approx(233.71, abs=0.01)  # DP all-reduce on NVLink
    assert len(set(bound(pods))) == 2  # both replicas of each stage on one node

    def says_scheduled() -> dict[str, Any] | None:
        condition = scheduled(kube, ns, "llm-workers")
        return condition if condition.get("status") == "True" else None

    condition = wait_for("the PodGroup says it is scheduled", says_scheduled, timeout_s=60)
    assert condition["reason"] == "Scheduled" and "all 4 pods placed as one gang" in condition["message"]


def test_a_topology_key_no_single_domain_can_satisfy_leaves_the_group_waiting_with_that_reason(
    pjs: Jobs, kube: KubeSession
) -> None:
    ns = pjs.namespace
    # 16 GPUs in one node: no node (8 GPUs) is a domain big enough
    workload_and_group(kube, ns, "tight", topology_key="kubernetes.io/hostname")
    for rank in range(4):
        group_pod(kube, ns, "tight-workers", rank)

    def refused() -> dict[str, Any] | None:
        condition = scheduled(kube, ns, "tight-workers")
        return condition if "no single domain" in condition.get("message", "") else None

    condition = wait_for("the PodGroup says no domain has room", refused, timeout_s=30)
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert "topology key kubernetes.io/hostname has room for 4 TP groups of 4 GPUs" in condition["message"]
    assert pjs.status("tight-workers")["phase"] == "Queued"
    assert bound(pods_of(kube, ns, "tight-workers")) == []


def test_an_indexed_job_under_workload_with_job_is_gang_placed_through_the_job_controllers_podgroup(
    pjs: Jobs, kube: KubeSession
) -> None:
    batch: Any = BatchV1Api(kube.api)
    ns = pjs.namespace
    # A name of the length people give Jobs: the Job controller's PodGroup is then 81 characters
    # (<job>-<hash>-<job>-pgt-0-<hash>), above the 45 a ParallelJob that makes its own pods may have.
    job = "llama-70b-pretrain-stage-2"
    # 1.36's Job controller made every such Job a gang; 1.37's makes a basic (non-gang) PodGroup unless the Job
    # asks for a gang in spec.scheduling, and a basic group is not ours to place as one
    gang = {"scheduling": {"schedulingPolicy": {"gang": {"minCount": 4}}}} if API[1] != "v1alpha2" else {}
    kube.run(batch.create_namespaced_job(ns, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job},
        "spec": {
            **gang,
            "completionMode": "Indexed", "completions": 4, "parallelism": 4,
            "template": {
                "metadata": {"annotations": {PARALLELISM_ANNOTATION: "4x2x2"}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME, "restartPolicy": "Never",
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                    "containers": [{"name": "trainer", "image": "trainer:e2e",
                                    "resources": {"limits": {GPU_RESOURCE: "4"}}}],
                },
            },
        },
    }))  # fmt: skip
    custom: Any = CustomObjectsApi(kube.api)

    def job_controllers_group() -> str | None:
        items = kube.run(custom.list_namespaced_custom_object(*API, ns, "podgroups")).get("items") or []
        return str(items[0]["metadata"]["name"]) if items else None

    group = wait_for("the Job controller made a PodGroup", job_controllers_group, timeout_s=30)
    assert len(group) > 45 and group.startswith(f"{job}-") and f"-{job}-pgt-0-" in group
    pg = read(kube, ns, "podgroups", group)
    assert pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "Job"
    status = pjs.wait_phase(group, "Running")
    assert status["communicationCost"]["totalMs"] == pytest.approx(233.71, abs=0.01)
    pods = pods_of(kube, ns, job)
    assert len(pods) == 4 and all(p.spec.scheduling_group.pod_group_name == group for p in pods)
    assert len(bound(pods)) == 4
    assert wait_for(f"{SCHEDULED}=True", lambda: scheduled(kube, ns, group).get("status") == "True")
    # the long name is allowed to an adopting ParallelJob only: one that makes its own pods is still refused
    with pytest.raises(ApiException) as refused:
        pjs.create("x" * 46, 1, 1, 1)
    assert refused.value.status == 422 and "at most 45 characters" in str(refused.value.body)


def test_the_same_podgroup_with_kube_schedulers_name_is_held_then_placed_by_kube_scheduler_in_one_rack(
    pjs: Jobs, kube: KubeSession
) -> None:
    ns = pjs.namespace
    workload_and_group(kube, ns, "native", topology_key=LEAF)
    for rank in range(3):
        group_pod(kube, ns, "native-workers", rank, scheduler="default-scheduler")
    # GangScheduling on: three of four pods are not placed (without the gate kube-scheduler binds each within
    # milliseconds; with it, PreEnqueue keeps them out of the queue and writes nothing on them)
    time.sleep(3.0)
    assert bound(pods_of(kube, ns, "native-workers")) == []
    group_pod(kube, ns, "native-workers", 3, scheduler="default-scheduler")
    wait_for("kube-scheduler binds all four", lambda: len(bound(pods_of(kube, ns, "native-workers"))) == 4)
    nodes = set(bound(pods_of(kube, ns, "native-workers")))
    leaves = {kube.run(kube.core.read_node(n)).metadata.labels[LEAF] for n in nodes}
    assert len(leaves) == 1  # TopologyAwareWorkloadScheduling: inside one domain of the key
    condition = wait_for(f"kube-scheduler's {SCHEDULED}=True", lambda: scheduled(kube, ns, "native-workers") or None)
    assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
    # the operator did not adopt it: kube-scheduler's pods are not ours
    with pytest.raises(ApiException) as refused:
        pjs.get("native-workers")
    assert refused.value.status == 404


def test_a_deleted_podgroup_goes_away_once_its_pods_are_gone_and_its_parallel_job_with_it(
    pjs: Jobs, kube: KubeSession
) -> None:
    ns = pjs.namespace
    custom: Any = CustomObjectsApi(kube.api)
    workload_and_group(kube, ns, "bye")
    for rank in range(4):
        group_pod(kube, ns, "bye-workers", rank)
    pjs.wait_phase("bye-workers", "Running")
    assert "scheduling.k8s.io/podgroup-protection" in read(kube, ns, "podgroups", "bye-workers")["metadata"].get(
        "finalizers", []
    )
    kube.run(custom.delete_namespaced_custom_object(*API, ns, "podgroups", "bye-workers"))
    time.sleep(2.0)  # its pods are active: the finalizer keeps it, as in a real cluster
    assert read(kube, ns, "podgroups", "bye-workers")["metadata"].get("deletionTimestamp")
    for pod in pods_of(kube, ns, "bye-workers"):
        kube.run(kube.core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0))

    def gone(plural: str, name: str) -> bool:
        try:
            read(kube, ns, plural, name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("the PodGroup is gone once no pod of it is active", lambda: gone("podgroups", "bye-workers"), 120)
    wait_for("the adopting ParallelJob is collected with it", lambda: job_gone(pjs, "bye-workers"), timeout_s=120)


def example_for_this_minor(tmp_path: Path) -> Path:
    """The documented example (1.37's v1beta1), or on 1.36 the same objects in v1alpha2 as docs/pod-groups.md
    tells 1.36 users to write them."""
    if API[1] == "v1beta1":
        return EXAMPLE
    documents = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for document in documents:
        if document["apiVersion"].startswith(f"{API[0]}/"):
            document["apiVersion"] = "/".join(API)
        ref = document.get("spec", {}).pop("workloadRef", None)
        if ref is not None:
            document["spec"].update(workload_reference(API[1], ref["workloadName"], ref["templateName"]))
    converted = tmp_path / EXAMPLE.name
    converted.write_text(yaml.safe_dump_all(documents))
    return converted


def test_the_documented_native_podgroup_example_applied_and_deleted_with_kubectl(
    pjs: Jobs, kube: KubeSession, dev_cluster: DevCluster, tmp_path: Path
) -> None:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is part of the machine's image"
    ns = pjs.namespace

    def kubectl(*args: str) -> str:
        done = subprocess.run(
            [binary, "--kubeconfig", str(dev_cluster.kubeconfig), "-n", ns, *args],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.returncode}\n{done.stderr}"
        return done.stdout

    example = example_for_this_minor(tmp_path)
    kubectl("apply", "-f", str(example))
    status = pjs.wait_phase("llm-workers", "Running")
    assert status["communicationCost"]["totalMs"] == pytest.approx(233.71, abs=0.01)
    pods = pods_of(kube, ns, "llm-workers")
    assert len(bound(pods)) == 4
    leaves = {kube.run(kube.core.read_node(n)).metadata.labels[LEAF] for n in bound(pods)}
    assert len(leaves) == 1  # the Workload's topology key: one rack
    assert wait_for(f"{SCHEDULED}=True", lambda: scheduled(kube, ns, "llm-workers").get("status") == "True")
    kubectl("delete", "-f", str(example))  # waits until every object is gone, the PodGroup's finalizer included
    wait_for("the adopting ParallelJob is collected", lambda: job_gone(pjs, "llm-workers"), timeout_s=120)
