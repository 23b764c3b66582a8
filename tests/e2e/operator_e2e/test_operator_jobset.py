"""A JobSet pod group end to end: JobSet's own controller manager (the pinned sigs.k8s.io/jobset release, its
webhooks served on loopback) makes the child Jobs, kube-controller-manager's Job controller makes their pods,
and the operator gang-places them by node rank = job-global-index x pods-per-job + completion index. The
operator never creates nor deletes any of them; JobSet's objects are the example in
deploy/examples/pod-groups/jobset.yaml.

JobSet runs only in the sessions that collect this module: ``dev_cluster`` (tests/e2e/conftest.py) starts
the session's cluster with it when a collected test uses the ``jobset`` fixture, so other e2e sessions do
not pay for it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import BatchV1Api, CustomObjectsApi
from pjhelpers import Jobs, wait_for

from paralleljob.core.rankorder import RankOrder, slot_of
from paralleljob.devcluster import state
from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.jobset import start_jobset
from paralleljob.devcluster.nodes import LEAF_LABEL
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import (
    COMPLETION_INDEX_KEY,
    GPU_INDICES_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_TIMEOUT_ANNOTATION,
)
from paralleljob.k8s.edge.parse.noderank import JOBSET_GLOBAL_INDEX

pytestmark = pytest.mark.e2e
GROUP = "llm-jobset"  # the example's JobSet and pod group
PODS_PER_JOB = 2
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")

EXAMPLE = Path(__file__).parents[3] / "deploy" / "examples" / "pod-groups" / "jobset.yaml"


@pytest.fixture(scope="session")
def jobset(dev_cluster: DevCluster, pytestconfig: pytest.Config) -> None:
    """JobSet's controller manager on the session's cluster: already there when ``dev_cluster`` started it;
    on a reused cluster (PARALLELJOB_E2E_CLUSTER) without it, started now and left running like the cluster
    (there, kube-controller-manager's garbage collector learns about JobSets only at its next 30 s resync,
    so deleting a JobSet may take that long to delete its Jobs)."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"[dev-cluster] {message}", flush=True)

    record = state.load(dev_cluster.name)
    owned = record is not None and record.owner_pid == os.getpid()
    started = time.monotonic()
    start_jobset(dev_cluster.name, report=progress, die_with_caller=owned)
    progress(f"JobSet ready after {time.monotonic() - started:.1f} s")


@pytest.fixture
def jobsets(jobset: None, pjs: Jobs) -> Iterator[Any]:
    api = CustomObjectsApi(pjs.kube.api)
    try:
        yield api
    finally:  # before pjs's own cleanup: the pods are JobSet's to delete, and their group's ParallelJob the GC's
        listed = pjs.kube.run(api.list_namespaced_custom_object(*JOBSET_API[:2], pjs.namespace, JOBSET_API[2]))
        for item in listed["items"]:
            name = item["metadata"]["name"]
            pjs.kube.run(
                api.delete_namespaced_custom_object(
                    *JOBSET_API[:2], pjs.namespace, JOBSET_API[2], name, propagation_policy="Background"
                )
            )
        wait_for("the JobSets' pods gone", lambda: not group_pods(pjs.kube, pjs.namespace), timeout_s=60)
        wait_for("their ParallelJobs gone", lambda: not [i for i in _adopted(pjs) if i["spec"].get("podGroup")])


def example_jobset() -> dict[str, Any]:
    """The documented example, with a short group timeout so the test sees the "waited too long" reason."""
    document = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "JobSet")
    template = document["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["metadata"]["annotations"][POD_GROUP_TIMEOUT_ANNOTATION] = "3"
    return dict(document)


def group_pods(kube: KubeSession, namespace: str) -> list[Any]:
    listed = kube.run(kube.core.list_namespaced_pod(namespace, label_selector=f"{POD_GROUP_LABEL}={GROUP}"))
    return sorted((p for p in listed.items if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)


def node_rank(pod: Any) -> int:
    annotations = pod.metadata.annotations
    return int(annotations[JOBSET_GLOBAL_INDEX]) * PODS_PER_JOB + int(annotations[COMPLETION_INDEX_KEY])


def condition(status: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), {})


def test_a_jobsets_pods_are_gang_placed_by_global_rank_and_replaced_in_place(
    jobsets: Any, pjs: Jobs, kube: KubeSession
) -> None:
    batch: Any = BatchV1Api(kube.api)
    ns = pjs.namespace
    document = example_jobset()
    # Start each child Job with one of its two pods, so that the group is incomplete: 2 of 4 pods.
    document["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 1
    took: dict[str, float] = {}  # seconds per step, printed at the end (docs/pod-groups.md quotes them)
    started = time.monotonic()
    kube.run(jobsets.create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], document))
    wait_for("JobSet's first pods", lambda: len(group_pods(kube, ns)) == 2, timeout_s=30)
    took["JobSet created -> its Jobs' first 2 pods exist"] = time.monotonic() - started

    def waiting_too_long() -> dict[str, Any] | None:
        try:
            status = pjs.status(GROUP)
        except Exception:
            return None
        return status if condition(status, "PodGroupReady").get("reason") == "PodGroupTimeout" else None

    try:
        status = wait_for("the group reports that it waited too long", waiting_too_long, timeout_s=60)
        took["JobSet created -> PodGroupTimeout (3 s timeout)"] = time.monotonic() - started
    except AssertionError as exc:
        raise AssertionError(f"{exc}\noperator log:\n{pjs.operator.log_tail()}") from None
    assert status["phase"] == "Queued"
    assert "2 of 4 pods exist (missing node ranks 1, 3)" in condition(status, "PodGroupReady")["message"]
    pods = group_pods(kube, ns)
    assert sorted(node_rank(p) for p in pods) == [0, 2]
    assert not any(p.spec.node_name for p in pods), "nothing is bound before the gang exists"
    # JobSet's controller made the child Jobs; the pods carry its index keys as it sets them.
    jobs = kube.run(batch.list_namespaced_job(ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={GROUP}"))
    assert sorted(j.metadata.name for j in jobs.items) == [f"{GROUP}-node-0", f"{GROUP}-node-1"]
    assert all(j.metadata.owner_references[0].kind == "JobSet" for j in jobs.items)
    adopted = pjs.get(GROUP)
    assert adopted["spec"]["podGroup"] == GROUP and adopted["metadata"]["ownerReferences"][0]["kind"] == "Job"

    # The missing pods appear (each child Job runs both its pods): all four are placed at once, with the
    # cost of the equivalent ParallelJob.
    started = time.monotonic()
    for job in jobs.items:
        kube.run(batch.patch_namespaced_job(job.metadata.name, ns, {"spec": {"parallelism": PODS_PER_JOB}}))
    status = pjs.wait_phase(GROUP, "Running", timeout_s=30)
    took["Jobs scaled to 2 pods -> group Running"] = time.monotonic() - started
    assert condition(status, "PodGroupReady")["status"] == "True"
    assert abs(status["communicationCost"]["totalMs"] - 233.7) < 0.1, status["communicationCost"]  # as the Job's
    pjs.create("twin", 4, 2, 2)
    twin = pjs.wait_phase("twin", "Running", timeout_s=30)
    assert twin["communicationCost"]["totalMs"] == status["communicationCost"]["totalMs"], (twin, status)
    pjs.delete("twin")

    # Node rank (global Job index x pods per Job + completion index) sits on its (replica, stage) slot.
    placement = status["placement"]
    pods = group_pods(kube, ns)
    assert_ranks_on_their_slots(placement, pods)
    # JobSet's own status sees it: both child Jobs have all their pods Ready (kwok runs the bound pods).
    wait_for("JobSet counts both child Jobs ready", lambda: _ready_jobs(jobsets, kube, ns) == 2, timeout_s=30)

    # A pod is lost (as on a failed node): its Job replaces it, and the replacement goes back to its slot.
    victim = next(p for p in pods if node_rank(p) == 3)
    started = time.monotonic()
    kube.run(kube.core.delete_namespaced_pod(victim.metadata.name, ns, grace_period_seconds=0))

    def replaced_and_bound() -> Any:
        for pod in group_pods(kube, ns):
            if node_rank(pod) == 3 and pod.metadata.uid != victim.metadata.uid and pod.spec.node_name:
                return pod
        return None

    replacement = wait_for("the replacement of node rank 3 bound", replaced_and_bound, timeout_s=60)
    took["pod deleted -> its replacement bound"] = time.monotonic() - started
    assert replacement.spec.node_name == victim.spec.node_name
    assert (
        replacement.metadata.annotations[GPU_INDICES_ANNOTATION] == victim.metadata.annotations[GPU_INDICES_ANNOTATION]
    )
    assert pjs.status(GROUP)["phase"] == "Running"
    assert pjs.status(GROUP)["placement"] == placement, "the placement is unchanged"

    # Deleting the JobSet deletes its Jobs, their pods and (garbage collection) the group's ParallelJob.
    started = time.monotonic()
    kube.run(
        jobsets.delete_namespaced_custom_object(
            *JOBSET_API[:2], ns, JOBSET_API[2], GROUP, propagation_policy="Background"
        )
    )
    wait_for("the JobSet's pods gone", lambda: not group_pods(kube, ns), timeout_s=60)
    took["JobSet deleted -> pods gone"] = time.monotonic() - started

    def adopted_gone() -> bool:
        listed = kube.run(pjs.custom.list_namespaced_custom_object("paralleljob.dev", "v1alpha1", ns, "paralleljobs"))
        return not [i for i in listed["items"] if i["metadata"]["name"] == GROUP]

    wait_for("the group's ParallelJob deleted by garbage collection", adopted_gone, timeout_s=60)
    took["JobSet deleted -> group's ParallelJob gone"] = time.monotonic() - started
    shape = kube.shape
    pjs.create("everything", shape.gpus_per_node, 1, shape.count)
    pjs.wait_phase("everything", "Running", timeout_s=30)
    print("".join(f"\n  {step}: {seconds:.1f} s" for step, seconds in took.items()))


def assert_ranks_on_their_slots(placement: dict[str, Any], pods: list[Any]) -> None:
    order = RankOrder.parse(placement["rankOrder"])
    slots = {(s["replica"], s["stage"]): s for s in placement["pods"]}
    for stage in (0, 1):  # the seed shape's DP all-reduce on NVLink: both replicas of a stage share a node
        assert slots[(0, stage)]["node"] == slots[(1, stage)]["node"], placement["pods"]
    assert sorted(node_rank(p) for p in pods) == [0, 1, 2, 3]
    for pod in pods:
        slot = slots[slot_of(order, node_rank(pod), 2, 2)]
        assert slot["nodeRank"] == node_rank(pod)
        assert pod.spec.node_name == slot["node"], (pod.metadata.name, slot)
        assert [int(i) for i in pod.metadata.annotations[GPU_INDICES_ANNOTATION].split(",")] == slot["gpuIndices"]
        assert not any(ref.kind == "ParallelJob" for ref in pod.metadata.owner_references or [])


def test_jobsets_failure_policy_restarts_the_gang_and_it_is_placed_again_in_the_same_domain(
    jobsets: Any, pjs: Jobs, kube: KubeSession
) -> None:
    """JobSet's own recovery, as ML JobSets are usually written: ``backoffLimit: 0`` makes a lost pod fail its
    Job, and ``failurePolicy.maxRestarts`` makes JobSet recreate every child Job. The whole gang is new (new
    Jobs, new pods, and so, by garbage collection and the operator, a new adopting ParallelJob); it is placed
    again, in the same rack, each node rank on its slot."""
    ns = pjs.namespace
    document = example_jobset()
    document["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    document["spec"]["failurePolicy"] = {"maxRestarts": 1}
    kube.run(jobsets.create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], document))
    wait_for("the group's ParallelJob", lambda: any(i["metadata"]["name"] == GROUP for i in _adopted(pjs)))
    status = pjs.wait_phase(GROUP, "Running", timeout_s=30)
    first = {"uid": pjs.get(GROUP)["metadata"]["uid"], "pods": {p.metadata.uid for p in group_pods(kube, ns)}}
    leaves = {_leaf(kube, s["node"]) for s in status["placement"]["pods"]}

    started = time.monotonic()
    victim = next(p for p in group_pods(kube, ns) if node_rank(p) == 3)
    kube.run(kube.core.delete_namespaced_pod(victim.metadata.name, ns, grace_period_seconds=0))

    def restarted_and_running() -> dict[str, Any] | None:
        current = kube.run(jobsets.get_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], GROUP))
        pods = group_pods(kube, ns)
        if (current.get("status") or {}).get("restarts") != 1 or len(pods) != 4:
            return None
        if any(p.metadata.uid in first["pods"] or not p.spec.node_name for p in pods):
            return None
        try:
            adopted = pjs.get(GROUP)
        except Exception:
            return None
        running = adopted.get("status", {}).get("phase") == "Running"
        return adopted if running and adopted["metadata"]["uid"] != first["uid"] else None

    try:
        adopted = wait_for("JobSet restarted and the new gang Running", restarted_and_running, timeout_s=60)
    except AssertionError as exc:
        pods = [(p.metadata.name, p.metadata.uid in first["pods"], p.spec.node_name) for p in group_pods(kube, ns)]
        adopted_now = pjs.get(GROUP) if any(i["metadata"]["name"] == GROUP for i in _adopted(pjs)) else {}
        raise AssertionError(
            f"{exc}\npods (name, from the first gang, node): {pods}\nadopting ParallelJob: {adopted_now}"
            f"\noperator log:\n{pjs.operator.log_tail()}"
        ) from None
    took = time.monotonic() - started
    placement = adopted["status"]["placement"]
    assert_ranks_on_their_slots(placement, group_pods(kube, ns))
    assert {_leaf(kube, s["node"]) for s in placement["pods"]} == leaves, "placed again in the same rack"
    assert adopted["status"]["communicationCost"]["totalMs"] == status["communicationCost"]["totalMs"]
    print(f"\n  pod deleted -> JobSet restarted, new gang Running: {took:.1f} s")


def _adopted(pjs: Jobs) -> list[dict[str, Any]]:
    listed = pjs.kube.run(
        pjs.custom.list_namespaced_custom_object("paralleljob.dev", "v1alpha1", pjs.namespace, "paralleljobs")
    )
    return list(listed["items"])


def _leaf(kube: KubeSession, node: str) -> str:
    return str(kube.run(kube.core.read_node(node)).metadata.labels[LEAF_LABEL])


def _ready_jobs(jobsets: Any, kube: KubeSession, namespace: str) -> int:
    """Child Jobs whose pods are all Ready, as JobSet's status counts them."""
    current = kube.run(jobsets.get_namespaced_custom_object(*JOBSET_API[:2], namespace, JOBSET_API[2], GROUP))
    return sum(int(r.get("ready", 0)) for r in (current.get("status") or {}).get("replicatedJobsStatus") or [])
