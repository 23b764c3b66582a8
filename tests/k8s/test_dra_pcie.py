"""PCIe locality on DRA nodes (issue 13 part 4): with ``pcieRootBandwidthGbps`` set, the view groups a DRA
node's GPUs by ``resource.kubernetes.io/pcieRoot`` in a level below the node; off by default. The kept view
over slices and claims still equals a rebuild with the level on."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from paralleljob.core.errors import InvalidRequest
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.devcluster.dra import resource_slice_manifest
from paralleljob.devcluster.nodes import NodeShape
from paralleljob.k8s.edge.config import DraConfig, TopologyConfig, topology_from_mapping
from paralleljob.k8s.edge.parse.dra import ClaimInfo, SliceInfo, overlay_nodes, parse_claim, parse_slice
from paralleljob.k8s.edge.parse.nodes import NodeInfo, parse_node
from paralleljob.k8s.edge.parse.pods import PodInfo, parse_pod
from paralleljob.k8s.view.clusterview import ClusterView, build_view
from paralleljob.k8s.view.dranodes import OverlaidNodes
from paralleljob.k8s.view.liveview import LiveView
from paralleljob.k8s.view.store import ObjectStore
from paralleljob.k8s.view.viewcheck import view_differences
from tests.k8s.test_dra import claim, dra_node, gpu, resource_slice
from tests.k8s.viewworld import node_body

# A PCIe-only product: 64 GB/s under one root, 32 GB/s between the two roots of a node (through the CPUs).
PCIE = topology_from_mapping(
    {
        "nodeBandwidthGbps": 32,
        "pcieRootBandwidthGbps": 64,
        "levels": [{"name": "leaf", "labels": ["network.topology.nvidia.com/leaf"], "bandwidthGbps": 25}],
    }
)
SHAPE = NodeShape(count=2, gpus_per_node=8, gpu_api="dra")
_versions = itertools.count(100)


def _dev_cluster_view(config: TopologyConfig, held: tuple[str, ...] = ()) -> ClusterView:
    """Two nodes as ``dev-cluster up --gpu-api dra`` makes them (two roots of four GPUs each)."""
    nodes = [parse_node(dra_node(name), config) for name in SHAPE.names()]
    slices = [parse_slice(copy.deepcopy(resource_slice_manifest(SHAPE, name, f"uid-{name}"))) for name in SHAPE.names()]
    claims = [parse_claim(claim("theirs", [("gpu.nvidia.com", "gpu-node-000", d) for d in held]))] if held else []
    return build_view(overlay_nodes(nodes, slices, claims, DraConfig(), 80.0), [], [], config)


def test_the_level_is_off_by_default() -> None:
    assert TopologyConfig().pcie_root_bandwidth_gbps == 0.0
    view = _dev_cluster_view(TopologyConfig())
    assert view.topology.sub_level is None


def test_pcie_roots_form_a_level_below_the_node_when_configured() -> None:
    view = _dev_cluster_view(PCIE)
    topo = view.topology
    assert topo is not None and topo.sub_level is not None
    assert (topo.sub_level.name, topo.sub_level.bandwidth_gbps) == ("pcieRoot", 64.0)
    assert topo.gpu_subdomain == (0, 0, 0, 0, 1, 1, 1, 1) * 2
    assert topo.bandwidth_between(0, 3) == 64.0 and topo.bandwidth_between(3, 4) == 32.0


def test_tp4_job_on_dra_nodes_with_two_roots_gets_one_root_per_group() -> None:
    # gpu-1 of the first node is someone else's: its first root keeps only three free GPUs.
    view = _dev_cluster_view(PCIE, held=("gpu-1",))
    assert not view.empty
    placement = Placer(view.state).place(JobSpec("j", 4, 1, 3, 1.0), cost_model("seed"))
    roots = view.topology.gpu_subdomain
    for group, node in zip(placement.groups, placement.group_nodes, strict=True):
        assert len({roots[g] for g in group}) == 1, f"TP group {group} on node {node} spans two roots"
    assert 1 not in placement.gpus
    # One group alone goes to the partly used first node, under its whole second root; without the level
    # it takes that node's lowest free GPUs, which straddle the two roots.
    one = Placer(view.state).place(JobSpec("j", 4, 1, 1, 1.0), cost_model("seed"))
    assert one.group_nodes == (0,) and one.groups == ((4, 5, 6, 7),)
    flat = _dev_cluster_view(TopologyConfig(), held=("gpu-1",))
    assert not flat.empty
    assert Placer(flat.state).place(JobSpec("j", 4, 1, 1, 1.0), cost_model("seed")).groups == ((0, 2, 3, 4),)


def test_config_rejects_a_root_slower_than_the_node() -> None:
    with pytest.raises(InvalidRequest, match="pcieRootBandwidthGbps"):
        topology_from_mapping({"nodeBandwidthGbps": 600, "pcieRootBandwidthGbps": 64})


def test_kept_view_with_pcie_roots_equals_a_rebuild() -> None:
    nodes: ObjectStore[NodeInfo] = ObjectStore(lambda body: parse_node(body, PCIE))
    pods: ObjectStore[PodInfo] = ObjectStore(parse_pod)
    slices: ObjectStore[SliceInfo] = ObjectStore(parse_slice)
    claims: ObjectStore[ClaimInfo] = ObjectStore(parse_claim)

    def put(store: ObjectStore[Any], body: dict[str, Any]) -> None:
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(next(_versions))
        store.upsert(body)

    def check(live: LiveView) -> ClusterView:
        view = live.refresh([])
        fresh = build_view(OverlaidNodes(nodes, slices, claims, DraConfig(), 80.0).values(), pods.values(), [], PCIE)
        assert view_differences(view, fresh) == []
        return view

    two_roots = [gpu(i, root="pci0000:00" if i < 4 else "pci0000:80") for i in range(8)]
    put(nodes, node_body("a-plugin", 8))
    put(nodes, dra_node("b-dra"))
    put(slices, resource_slice("b-dra", two_roots))
    live = LiveView(PCIE, OverlaidNodes(nodes, slices, claims, DraConfig(), 80.0), pods)
    view = check(live)
    assert view.topology.sub_level is not None
    put(claims, claim("theirs", [("gpu.nvidia.com", "b-dra", "gpu-5")]))
    view = check(live)
    assert view.state.usable_free(view.node_index["b-dra"]) == 7
    # The driver republishes with the GPUs under other roots: a new topology, rebuilt, still equal.
    one_root = [gpu(i, root="pci0000:00") for i in range(8)]
    put(slices, resource_slice("b-dra", one_root, generation=2))
    view = check(live)
    assert not view.empty
    first = view.topology.node_first_gpu[view.node_index["b-dra"]]
    assert set(view.topology.gpu_subdomain[first : first + 8]) == {0}
