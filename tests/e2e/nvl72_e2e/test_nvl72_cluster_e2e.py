"""The NVL72 pieces against the real API server and kube-controller-manager: the racks' trays and slices as
``dev-cluster up --nvl72-racks`` publishes them, the ComputeDomain CRD written from the driver's API types,
the stand-in controller's claim template, a tray pod that references it (kube-controller-manager generates
its ResourceClaim from the template), and the garbage collector removing a job's ComputeDomain, template
and claims with the job. The core's NVLink placer places on the cluster as its labels describe it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from tests.timings import record_time

from paralleljob.core import ClusterState, JobSpec, Level, NodeSpec, Topology, cost_model
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods
from paralleljob.core.rankorder import RankOrder
from paralleljob.devcluster.session import KubeSession
from paralleljob.k8s.edge.render import computedomain as cd

pytestmark = pytest.mark.e2e


def wait_for(what: str, check: Any, timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return value


def cluster_topology(kube: KubeSession) -> Topology:
    """The topology the nodes' labels describe: a tray's clique from ``nvidia.com/gpu.clique``, an HGX node
    its own NVLink domain."""
    nodes = kube.run(kube.core.list_node()).items
    specs = []
    for node in sorted(nodes, key=lambda n: n.metadata.name):
        labels = node.metadata.labels or {}
        clique = cd.clique_of_labels(labels) or f"node:{node.metadata.name}"
        gpus = 4 if labels.get(cd.CLIQUE_LABEL) else 8
        specs.append(
            NodeSpec(node.metadata.name, gpus, 80.0, (clique, labels["network.topology.nvidia.com/leaf"], "cluster"))
        )
    levels = [Level("node", 900.0), Level("clique", 900.0), Level("leaf", 50.0), Level("cluster", 25.0)]
    return Topology.from_nodes(specs, levels, nvlink_level=1)


def test_racks_publish_trays_with_their_clique_and_the_channel_device(nvl72_kube: KubeSession) -> None:
    nodes = nvl72_kube.run(nvl72_kube.core.list_node()).items
    trays = [n for n in nodes if (n.metadata.labels or {}).get(cd.CLIQUE_LABEL)]
    assert len(trays) == 36 and len(nodes) == 40
    cliques = {n.metadata.labels[cd.CLIQUE_LABEL] for n in trays}
    assert len(cliques) == 2
    custom = CustomObjectsApi(nvl72_kube.api)
    slices = nvl72_kube.run(custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices"))["items"]
    channel = [s for s in slices if s["spec"]["driver"] == cd.DRIVER]
    assert {s["spec"]["nodeName"] for s in channel} == {n.metadata.name for n in trays}
    assert all([d["name"] for d in s["spec"]["devices"]] == ["channel-0", "daemon-0"] for s in channel)
    gpus = [s for s in slices if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"]["nodeName"].startswith("gb200")]
    assert len(gpus) == 36 and all(len(s["spec"]["devices"]) == 4 for s in gpus)
    classes = nvl72_kube.run(custom.list_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses"))["items"]
    assert cd.CHANNEL_DEVICE_CLASS in {c["metadata"]["name"] for c in classes}
    # The core reads this cluster as 2 cliques of 18 trays and 4 node-domain HGX nodes.
    state = ClusterState(cluster_topology(nvl72_kube))
    placement = NVLinkPlacer(state).place(JobSpec("llm", 8, 4, 2, 10.0), cost_model("megatron"))
    topo = state.topology
    for group in placement.groups:
        assert len({topo.domain_of[1][topo.gpu_node[g]] for g in group}) == 1
        assert all(topo.node_names[topo.gpu_node[g]].startswith("gb200") for g in group)


def test_a_compute_domain_gets_its_claim_template_and_goes_with_its_job(
    nvl72_kube: KubeSession, nvl72_namespace: str
) -> None:
    kube, ns = nvl72_kube, nvl72_namespace
    custom = CustomObjectsApi(kube.api)
    # The job stands in as a ConfigMap owner here: what is tested is the chain job -> ComputeDomain -> template.
    owner_obj = kube.run(kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "llm"}}))
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "llm", "uid": owner_obj.metadata.uid, "controller": True}
    state = ClusterState(cluster_topology(kube))
    topo = state.topology
    # TP16: larger than any HGX node here, so it goes to the racks, on 4 whole trays of one clique
    placement = NVLinkPlacer(state).place(JobSpec("llm", 16, 1, 1, 10.0), cost_model("seed"))
    pods = tray_pods(topo, placement.groups, 16, 1, 1, RankOrder.TP_DP_PP)
    assert len(pods) == 4
    names = cd.domains_for("llm", [pod.clique for pod in pods])
    assert len(names) == 1  # 4 trays of one clique: one ComputeDomain
    ((clique, domain),) = names.items()
    kube.run(
        custom.create_namespaced_custom_object(
            cd.GROUP, cd.VERSION, ns, cd.PLURAL, cd.compute_domain_manifest(ns, domain, clique, owner, {})
        )
    )
    template = cd.claim_template_name(domain)
    started = time.monotonic()
    wait_for(
        "the stand-in controller's ResourceClaimTemplate",
        lambda: _get(kube, custom, ns, "resourceclaimtemplates", template),
        timeout_s=60,
    )
    record_time("ComputeDomain created -> the stand-in controller's ResourceClaimTemplate", time.monotonic() - started)
    current = kube.run(custom.get_namespaced_custom_object(cd.GROUP, cd.VERSION, ns, cd.PLURAL, domain))
    current["spec"]["numNodes"] = 4
    with pytest.raises(ApiException) as immutable:
        kube.run(custom.replace_namespaced_custom_object(cd.GROUP, cd.VERSION, ns, cd.PLURAL, domain, current))
    assert immutable.value.status == 422 and "immutable" in immutable.value.body
    for pod in pods:
        manifest = {
            "metadata": {"name": f"llm-tray-{pod.node_rank}"},
            "spec": {
                "schedulerName": "paralleljob-none",  # nobody schedules it: the claim is what is tested
                "containers": [{"name": "worker", "image": "trainer"}],
            },
        }
        kube.run(kube.core.create_namespaced_pod(ns, cd.with_channel_claim(manifest, domain)))
    claims = wait_for(
        "kube-controller-manager's claims from the template",
        lambda: (
            [c for c in _list(kube, custom, ns, "resourceclaims") if c["metadata"].get("ownerReferences")]
            if len(_list(kube, custom, ns, "resourceclaims")) == len(pods)
            else None
        ),
    )
    requests = {r["exactly"]["deviceClassName"] for c in claims for r in c["spec"]["devices"]["requests"]}
    assert requests == {cd.CHANNEL_DEVICE_CLASS}
    for pod in pods:
        kube.run(kube.core.delete_namespaced_pod(f"llm-tray-{pod.node_rank}", ns, grace_period_seconds=0))
    kube.run(kube.core.delete_namespaced_config_map("llm", ns))
    wait_for(
        "the ComputeDomain gone with its job", lambda: not _list(kube, custom, ns, cd.PLURAL, cd.GROUP, cd.VERSION), 20
    )
    wait_for(
        "the template gone with its ComputeDomain", lambda: not _list(kube, custom, ns, "resourceclaimtemplates"), 20
    )
    wait_for("the claims gone with their pods", lambda: not _list(kube, custom, ns, "resourceclaims"), 20)


def _list(
    kube: KubeSession, custom: Any, ns: str, plural: str, group: str = "resource.k8s.io", version: str = "v1"
) -> list[Any]:
    return kube.run(custom.list_namespaced_custom_object(group, version, ns, plural))["items"]


def _get(kube: KubeSession, custom: Any, ns: str, plural: str, name: str) -> Any:
    try:
        return kube.run(custom.get_namespaced_custom_object("resource.k8s.io", "v1", ns, plural, name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
