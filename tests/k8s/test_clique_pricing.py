"""The operator prices a GB200 clique as what a job gets across its trays: without a ComputeDomain the
trays of a rack reach each other over the network, so the clique level costs what the level above costs."""

from __future__ import annotations

from paralleljob.core.cluster import ClusterState
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.k8s.edge.config import TopologyConfig, topology_from_mapping
from paralleljob.k8s.edge.parse.nodes import parse_node
from paralleljob.k8s.view.clusterview import build_view
from tests.k8s.factories import node

CONFIG = TopologyConfig()
CLIQUE = "nvidia.com/gpu.clique"


def _trays(config: TopologyConfig) -> list:
    return [
        parse_node(node(f"t{i}", 4, leaf=f"leaf-{i // 4}", labels={CLIQUE: f"uuid.{i // 4}"}), config) for i in range(8)
    ]


def test_the_clique_level_is_priced_as_the_leaf_above_it() -> None:
    view = build_view(_trays(CONFIG), [], [], CONFIG)
    assert view.topology is not None
    levels = {lv.name: lv.bandwidth_gbps for lv in view.topology.levels}
    assert levels["clique"] == levels["leaf"] == 50.0
    assert view.topology.nvlink_level == 0  # the node stays the NVLink domain: TP stays inside a tray


def test_a_tp_dp_job_over_trays_costs_the_network_not_nvlink() -> None:
    view = build_view(_trays(CONFIG), [], [], CONFIG)
    assert view.topology is not None
    model = cost_model("seed")
    placed = Placer(ClusterState(view.topology)).place(JobSpec("j", 4, 1, 2, 10.0), model)
    # Same job on two plain nodes of one leaf (no clique label): the DP ring crosses the same network.
    plain = [parse_node(node(f"n{i}", 4, leaf="leaf-0"), CONFIG) for i in range(2)]
    plain_view = build_view(plain, [], [], CONFIG)
    assert plain_view.topology is not None
    reference = Placer(ClusterState(plain_view.topology)).place(JobSpec("j", 4, 1, 2, 10.0), model)
    assert placed.cost.dp_ms == reference.cost.dp_ms


def test_a_level_file_may_say_which_level_is_the_nvlink_domain() -> None:
    config = topology_from_mapping(
        {
            "levels": [
                {"name": "clique", "labels": [CLIQUE], "bandwidthGbps": 450},
                {"name": "rack", "labels": "rack", "bandwidthGbps": 100, "nvlinkDomain": False},
                {"name": "pod", "labels": "pod", "bandwidthGbps": 50},
            ]
        }
    )
    assert [lv.nvlink_domain for lv in config.levels] == [True, False, False]
    view = build_view(_trays(config), [], [], config)
    assert view.topology is not None
    # Only the clique is present: it falls to the cluster's bandwidth, the next level a job really crosses.
    assert {lv.name: lv.bandwidth_gbps for lv in view.topology.levels}["clique"] == config.cluster_bandwidth_gbps
