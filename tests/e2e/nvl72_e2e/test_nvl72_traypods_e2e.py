"""A TP8xPP4xDP2 job's whole-tray objects against the real API server: the NVLink placer on the cluster's
labels, the tray record written into a real ParallelJob's status (the CRD schema keeps it, it reads back
equal), the job's ComputeDomains and tray pods from ``k8s/edge/render/traymanifests``, kube-controller-manager's
claims from each clique's template, and nothing left once the job is deleted. The operator does not make
these objects itself yet (docs/nvl72.md): this tests the pieces it will use, on the real programs."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from tests.e2e.nvl72_e2e.test_nvl72_cluster_e2e import _list, cluster_topology, wait_for
from tests.k8s.factories import paralleljob

from paralleljob.core import Allocation, ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.rankorder import RankOrder
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.constants import GROUP, PLURAL, VERSION
from paralleljob.k8s.edge.parse.specs import parse_job
from paralleljob.k8s.edge.render import computedomain as cd
from paralleljob.k8s.edge.render.trayenv import tray_pod_name
from paralleljob.k8s.edge.render.traymanifests import compute_domains, job_domains, tray_pod
from paralleljob.k8s.edge.status.records import PlacementRecord, record_from_status
from paralleljob.k8s.edge.status.trayrecords import TraySlot

ORDER = RankOrder.TP_PP_DP


def test_a_tp8_pp4_dp2_job_gets_whole_tray_pods_and_one_compute_domain_per_clique(
    nvl72_kube: KubeSession, nvl72_namespace: str
) -> None:
    kube, ns = nvl72_kube, nvl72_namespace
    custom = CustomObjectsApi(kube.api)
    body = paralleljob("llm", 8, 4, 2, namespace=ns, memory=10.0)
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation"):
        body["metadata"].pop(key)
    body["spec"]["template"] = {"spec": {"containers": [{"name": "w", "image": "trainer"}]}}
    created = kube.run(custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body))
    state = ClusterState(cluster_topology(kube))
    topo = state.topology
    # 6 trays of each rack busy: 12 free trays a clique, so the job's 16 trays must use both cliques.
    by_clique: dict[int, list[int]] = {}
    for n in range(topo.num_nodes):
        if topo.node_gpu_count[n] == 4:
            by_clique.setdefault(topo.domain_of[1][n], []).append(n)
    busy = [n for trays in by_clique.values() for n in trays[:6]]
    first = topo.node_first_gpu
    state.allocate(Allocation("busy", tuple(tuple(range(first[n], first[n] + 4)) for n in busy), 0.0))
    placement = NVLinkPlacer(state).place(JobSpec("llm", 8, 4, 2, 10.0), cost_model("megatron"))
    clique_of = {topo.node_names[n]: topo.domain_names[1][topo.domain_of[1][n]] for n in range(topo.num_nodes)}
    for group in placement.groups:  # every TP group on the trays of one clique
        assert len({topo.domain_of[1][topo.gpu_node[g]] for g in group}) == 1
    trays = tuple(
        TraySlot(
            tray_pod_name("llm", pod),
            topo.node_names[pod.node],
            tuple(g - topo.node_first_gpu[pod.node] for g in pod.gpus),
            pod.node_rank,
            pod.clique,
        )
        for pod in tray_pods(topo, placement.groups, 8, 4, 2, ORDER)
    )
    record = PlacementRecord(1, "megatron", 8, 4, 2, (), ORDER, trays=trays)
    kube.run(
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            "llm",
            {"status": {"placement": record.to_status()}},
            _content_type="application/merge-patch+json",
        )
    )
    job = parse_job(kube.run(custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "llm")))
    assert job.uid == created["metadata"]["uid"]
    assert record_from_status(job.status.raw) == record  # the CRD's schema keeps the tray layout whole
    assert job.request is not None
    domains = compute_domains(job, record)
    assert len(domains) == len({t.clique for t in trays}) == 2
    assert not {t.node for t in trays} & {topo.node_names[n] for n in busy}
    for domain in domains:
        kube.run(custom.create_namespaced_custom_object(cd.GROUP, cd.VERSION, ns, cd.PLURAL, domain))
    for tray in trays:
        kube.run(kube.core.create_namespaced_pod(ns, tray_pod(job, job.request, record, tray)))
    pods = kube.run(kube.core.list_namespaced_pod(ns)).items
    assert len(pods) == 16  # 64 GPUs = 16 whole trays, one pod each
    names = job_domains("llm", record)
    for pod in pods:
        tray = next(t for t in trays if t.name == pod.metadata.name)
        assert clique_of[tray.node] == tray.clique and len(tray.gpu_indices) == 4
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "4"
        (claim,) = pod.spec.resource_claims
        assert claim.resource_claim_template_name == cd.claim_template_name(names[tray.clique])
    # No tray in two ComputeDomains: every tray of the job serves the one domain of its clique.
    assert len({t.node for t in trays}) == len(trays)
    for name in names.values():
        wait_for("the stand-in controller's claim template", lambda n=name: _template(kube, custom, ns, n), 5)
    wait_for("one generated claim per tray pod", lambda: len(_list(kube, custom, ns, "resourceclaims")) == 16, 20)
    kube.run(custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "llm"))
    wait_for("no ComputeDomain left", lambda: not _list(kube, custom, ns, cd.PLURAL, cd.GROUP, cd.VERSION), 30)
    wait_for("no claim template left", lambda: not _list(kube, custom, ns, "resourceclaimtemplates"), 30)
    wait_for("no pod left", lambda: not kube.run(kube.core.list_namespaced_pod(ns)).items, 30)
    wait_for("no claim left", lambda: not _list(kube, custom, ns, "resourceclaims"), 30)


def _template(kube: KubeSession, custom: Any, ns: str, domain: str) -> bool:
    wanted = cd.claim_template_name(domain)
    return any(t["metadata"]["name"] == wanted for t in _list(kube, custom, ns, "resourceclaimtemplates"))
