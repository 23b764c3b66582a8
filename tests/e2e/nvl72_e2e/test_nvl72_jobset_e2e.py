"""A JobSet pod group on NVL72 racks (issue 39), with JobSet's own controller on the mixed cluster (4 HGX
nodes of 8 GPUs beside 2 racks of 4-GPU trays): the documented example
(deploy/examples/pod-groups/jobset-nvl72.yaml) declares TP8 over pods of one tray each. The operator places
its one TP group over 2 whole trays of one clique, creates that clique's ComputeDomain, whose channel
template the pods name, and binds JobSet's pods by node rank; kube-controller-manager makes each pod's
channel claim from that template. A tray reporting an unhealthy GPU under the group goes through the failure
policy (``core.failure.repair.decide_repair``, as a ParallelJob's trays do): the default policy moves that tray's
rank to a spare tray of the same clique (same ComputeDomain), counts one restart, and binds the owner's
replacement pod there once the old pod is gone.

Before this, a pod group never took trays: its pods had to ask for a whole TP group each, so this group
waited as ``InvalidPodGroup`` ("must request nvidia.com/gpu: 8 on its first container"), and no
ComputeDomain was ever made for a group.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import CustomObjectsApi
from pjhelpers import Jobs, wait_for

from paralleljob.devcluster.cluster import DevCluster
from paralleljob.devcluster.jobset import start_jobset
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import COMPLETION_INDEX_KEY, GPU_INDICES_ANNOTATION, POD_GROUP_LABEL
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.status.records import record_from_status

pytestmark = pytest.mark.e2e
GROUP = "llm-nvl72"
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
CLAIMS_API = ("resource.k8s.io", "v1", "resourceclaims")
EXAMPLE = Path(__file__).parents[3] / "deploy" / "examples" / "pod-groups" / "jobset-nvl72.yaml"


@pytest.fixture
def nvl72_jobset(nvl72_cluster: DevCluster, nvl72_pjs: Jobs) -> Iterator[Any]:
    """JobSet's API on the cluster (its controller started with the cluster, or now on a reused one); the
    test's JobSets are deleted before ``nvl72_pjs`` checks and cleans up (their ParallelJobs are the GC's)."""
    start_jobset(nvl72_cluster.name)
    api = CustomObjectsApi(nvl72_pjs.kube.api)
    try:
        yield api
    finally:
        kube, ns = nvl72_pjs.kube, nvl72_pjs.namespace
        listed = kube.run(api.list_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2]))
        for item in listed["items"]:
            name = item["metadata"]["name"]
            kube.run(
                api.delete_namespaced_custom_object(
                    *JOBSET_API[:2], ns, JOBSET_API[2], name, propagation_policy="Background"
                )
            )
        wait_for("the JobSets' pods gone", lambda: not group_pods(kube, ns), timeout_s=90)


def group_pods(kube: KubeSession, namespace: str) -> list[Any]:
    listed = kube.run(kube.core.list_namespaced_pod(namespace, label_selector=f"{POD_GROUP_LABEL}={GROUP}"))
    return sorted((p for p in listed.items if not p.metadata.deletion_timestamp), key=lambda p: p.metadata.name)


def rank_of(pod: Any) -> int:
    return int(pod.metadata.annotations[COMPLETION_INDEX_KEY])  # one child Job: node rank = completion index


def domains(kube: KubeSession, namespace: str) -> list[dict[str, Any]]:
    custom: Any = CustomObjectsApi(kube.api)
    listed = kube.run(custom.list_namespaced_custom_object(cd.GROUP, cd.VERSION, namespace, cd.PLURAL))
    return [d for d in listed["items"] if not d["metadata"].get("deletionTimestamp")]


def clique_of(kube: KubeSession, node: str) -> str:
    return str(kube.run(kube.core.read_node(node)).metadata.labels[cd.CLIQUE_LABEL])


def test_a_jobset_on_nvl72_runs_tp8_over_two_trays_with_its_compute_domain_claim(
    nvl72_jobset: Any, nvl72_pjs: Jobs, nvl72_kube: KubeSession
) -> None:
    kube, pjs, ns = nvl72_kube, nvl72_pjs, nvl72_pjs.namespace
    custom: Any = CustomObjectsApi(kube.api)
    document = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "JobSet")
    kube.run(nvl72_jobset.create_namespaced_custom_object(*JOBSET_API[:2], ns, JOBSET_API[2], document))
    try:
        status = pjs.wait_phase(GROUP, "Running", timeout_s=120)
    except AssertionError as exc:
        try:
            seen = pjs.status(GROUP)
        except Exception:  # the group's ParallelJob may not exist at all
            seen = {}
        raise AssertionError(f"{exc}\nstatus: {seen}\noperator log:\n{pjs.operator.log_tail()}") from None
    record = record_from_status(status)
    assert record is not None and status["placement"].get("layout") == "trays", status.get("placement")
    assert len(record.trays) == 2 and {len(t.gpu_indices) for t in record.trays} == {4}
    cliques = {clique_of(kube, t.node) for t in record.trays}
    assert len(cliques) == 1, f"one TP group over trays of one clique: {cliques}"
    (clique,) = cliques
    # one ComputeDomain, of that clique, whose channel template is the one the pods name
    (domain,) = wait_for("the group's ComputeDomain", lambda: domains(kube, ns) or None, timeout_s=60)
    assert domain["metadata"]["name"] == cd.compute_domain_name(GROUP, clique)
    assert domain["metadata"]["annotations"][cd.CLIQUE_ANNOTATION] == clique
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{GROUP}-nvlink-channel"
    assert domain["metadata"]["ownerReferences"][0]["name"] == GROUP  # the group's ParallelJob: GC'd with it
    # JobSet's pods, bound by node rank onto the recorded trays, each with its channel claim made
    by_rank = {t.node_rank: t for t in record.trays}

    def bound_with_claims() -> list[Any] | None:
        pods = group_pods(kube, ns)
        if len(pods) != 2 or not all(p.spec.node_name for p in pods):
            return None
        if not all(p.status.resource_claim_statuses for p in pods):
            return None
        return pods

    pods = wait_for("JobSet's pods bound, their channel claims made", bound_with_claims, timeout_s=90)
    for pod in pods:
        tray = by_rank[rank_of(pod)]
        assert pod.spec.node_name == tray.node
        assert pod.metadata.annotations[GPU_INDICES_ANNOTATION] == ",".join(map(str, tray.gpu_indices))
        (claim,) = pod.status.resource_claim_statuses
        assert claim.name == cd.CLAIM_NAME
        name = claim.resource_claim_name
        made = kube.run(custom.get_namespaced_custom_object(*CLAIMS_API[:2], ns, CLAIMS_API[2], name))
        assert made["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == cd.CHANNEL_DEVICE_CLASS

    # A tray under the group breaks: the failure policy (default: maxRestarts 3, minimal) moves its rank to a
    # spare tray of the same clique, so the ComputeDomain stays; the owner's replacement is bound there.
    victim = record.trays[1]
    old_pod = next(p for p in pods if rank_of(p) == victim.node_rank)
    kube.set_unhealthy_gpus(victim.node, [victim.gpu_indices[0]])
    try:

        def repaired() -> dict[str, Any] | None:
            status = pjs.status(GROUP)
            return status if status.get("restarts") == 1 and status.get("lastFailure") else None

        moved = wait_for("the broken tray's rank moved", repaired, timeout_s=90)
        failure = moved["lastFailure"]
        assert failure["kind"] == "GPUFailure" and failure["action"] == "rescheduled", failure
        assert failure["nodes"] == [victim.node], failure
        after = record_from_status(moved)
        assert after is not None and len(after.trays) == 2
        new_tray = next(t for t in after.trays if t.node_rank == victim.node_rank)
        kept = next(t for t in after.trays if t.node_rank != victim.node_rank)
        assert new_tray.node != victim.node and clique_of(kube, new_tray.node) == clique, new_tray
        assert kept == next(t for t in record.trays if t.node_rank != victim.node_rank), "the healthy tray stays"
        assert [d["metadata"]["name"] for d in domains(kube, ns)] == [domain["metadata"]["name"]]
        # the old pod is JobSet's: the operator says it must go; deleted (as a user or the pod GC would),
        # its Job makes a replacement, which is bound onto the new tray
        kube.run(kube.core.delete_namespaced_pod(old_pod.metadata.name, ns, grace_period_seconds=0))

        def replacement_bound() -> Any:
            for pod in group_pods(kube, ns):
                if rank_of(pod) == victim.node_rank and pod.metadata.uid != old_pod.metadata.uid and pod.spec.node_name:
                    return pod
            return None

        replacement = wait_for("the replacement bound on the spare tray", replacement_bound, timeout_s=90)
        assert replacement.spec.node_name == new_tray.node
        pjs.wait_phase(GROUP, "Running", timeout_s=60)
    finally:
        kube.set_unhealthy_gpus(victim.node, [])
