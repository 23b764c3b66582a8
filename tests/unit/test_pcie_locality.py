"""A level below the node (issue 13 part 4, PCIe locality): GPUs of a node grouped by PCIe root talk faster
inside a root than across the node, and the placer keeps a TP group under one root where it fits."""

from __future__ import annotations

import math

import pytest

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.evaluate import placement_cost, rank_level_cost
from paralleljob.core.topology import Level, NodeSpec, Topology

ROOTS = ("pci0000:00",) * 4 + ("pci0000:80",) * 4
LEVELS = (Level("node", 32.0), Level("leaf", 25.0), Level("cluster", 12.5))
ROOT = Level("pcieRoot", 64.0)


def topology(nodes: int = 2, roots: tuple[str, ...] = ROOTS, sub_level: Level | None = ROOT) -> Topology:
    specs = [NodeSpec(f"n{i}", 8, 80.0, ("leaf-0", "cluster"), gpu_domains=roots) for i in range(nodes)]
    return Topology.from_nodes(specs, LEVELS, sub_level)


def test_gpus_under_one_root_talk_at_the_roots_bandwidth() -> None:
    topo = topology()
    assert topo.bandwidth_between(0, 3) == 64.0  # same root
    assert topo.bandwidth_between(3, 4) == 32.0  # two roots of one node
    assert topo.bandwidth_between(0, 8) == 25.0  # two nodes
    assert topo.bandwidth_between(5, 5) == math.inf
    assert topo.same_subdomain((4, 5, 6, 7)) and not topo.same_subdomain((2, 3, 4, 5))
    flat = topology(sub_level=None)
    assert flat.bandwidth_between(0, 3) == flat.bandwidth_between(3, 4) == 32.0


def test_a_sub_level_must_not_be_slower_than_the_node_and_must_name_every_gpu() -> None:
    with pytest.raises(InvalidRequest, match="slower than the node"):
        topology(sub_level=Level("pcieRoot", 16.0))
    with pytest.raises(InvalidRequest, match="names 3 GPU domains for 8 GPUs"):
        topology(roots=("a", "a", "b"))


def test_a_node_without_roots_is_one_domain() -> None:
    specs = [
        NodeSpec("n0", 8, 80.0, ("leaf-0", "cluster"), gpu_domains=ROOTS),
        NodeSpec("n1", 8, 80.0, ("leaf-0", "cluster")),
    ]
    topo = Topology.from_nodes(specs, LEVELS, ROOT)
    assert topo.bandwidth_between(8, 15) == 64.0
    assert topo.bandwidth_between(0, 7) == 32.0


def test_tp4_groups_stay_under_one_root() -> None:
    state = ClusterState(topology(nodes=1))
    placement = Placer(state).place(JobSpec("j", 4, 1, 2, 1.0), cost_model("seed"))
    assert sorted(placement.groups) == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_a_group_takes_the_root_it_fits_in_not_the_lowest_free_gpus() -> None:
    state = ClusterState(topology(nodes=1))
    state.allocate(Allocation("other", ((1,),), 1.0))  # root 0 keeps three free GPUs, root 1 four
    placement = Placer(state).place(JobSpec("j", 4, 1, 1, 1.0), cost_model("seed"))
    assert placement.groups == ((4, 5, 6, 7),)
    # Without the level the lowest free GPUs are taken, across both roots.
    flat = ClusterState(topology(nodes=1, sub_level=None))
    flat.allocate(Allocation("other", ((1,),), 1.0))
    assert Placer(flat).place(JobSpec("j", 4, 1, 1, 1.0), cost_model("seed")).groups == ((0, 2, 3, 4),)


def test_a_small_group_fills_the_fuller_root_and_keeps_the_other_whole() -> None:
    state = ClusterState(topology(nodes=1))
    state.allocate(Allocation("other", ((4,),), 1.0))  # root 1 has three free, root 0 four
    placement = Placer(state).place(JobSpec("j", 2, 1, 1, 1.0), cost_model("seed"))
    assert placement.groups == ((5, 6),)


def test_a_group_that_fits_no_root_spans_as_few_as_it_can() -> None:
    state = ClusterState(topology(nodes=1))
    state.allocate(Allocation("other", ((0, 4),), 1.0))  # three free under each root
    placement = Placer(state).place(JobSpec("j", 4, 1, 1, 1.0), cost_model("seed"))
    (group,) = placement.groups
    assert len(group) == 4 and len({g // 4 for g in group}) == 2


def test_evaluation_prices_tp_by_the_roots_a_group_spans() -> None:
    topo = topology(nodes=1)
    job = JobSpec("j", 4, 1, 1, 1.0)
    model = cost_model("seed")
    inside = placement_cost(topo, job, [(4, 5, 6, 7)], model)
    across = placement_cost(topo, job, [(2, 3, 4, 5)], model)
    assert inside.tp_ms < across.tp_ms
    assert inside == rank_level_cost(topo, job, [(4, 5, 6, 7)], model)
    assert across.tp_ms == model.tp_ms(job, 32.0) and inside.tp_ms == model.tp_ms(job, 64.0)


def test_a_group_moves_to_a_node_where_it_fits_under_one_root_when_that_costs_nothing() -> None:
    # Node 0 has five free GPUs, three and two per root; node 1 six, two and four. The tightest fit (node 0)
    # would split the TP4 group across roots; with the level, node 1's second root takes it whole.
    def placed(sub_level: Level | None) -> tuple[tuple[int, ...], ...]:
        state = ClusterState(topology(sub_level=sub_level))
        state.allocate(Allocation("other", ((0, 5, 6), (8, 9)), 1.0))
        return Placer(state).place(JobSpec("j", 4, 1, 1, 1.0), cost_model("seed")).groups

    assert placed(ROOT) == ((12, 13, 14, 15),)
    assert placed(None) == ((1, 2, 3, 4),)


def test_a_group_is_not_moved_when_that_would_cost_more() -> None:
    # Node 0 (roots of five and three GPUs) can hold both stages of a TP4xPP2 job, the second one split
    # across its roots; moving that stage to node 1 (another leaf) would send PP traffic between leaves.
    specs = [
        NodeSpec("n0", 8, 80.0, ("leaf-0", "cluster"), gpu_domains=("a",) * 5 + ("b",) * 3),
        NodeSpec("n1", 8, 80.0, ("leaf-1", "cluster"), gpu_domains=ROOTS),
    ]
    state = ClusterState(Topology.from_nodes(specs, LEVELS, ROOT))
    state.allocate(Allocation("other", ((8,),), 1.0))  # node 1 cannot hold both stages
    placement = Placer(state).place(JobSpec("j", 4, 2, 1, 1.0), cost_model("seed"))
    assert placement.group_nodes == (0, 0)
    assert placement.groups == ((0, 1, 2, 3), (4, 5, 6, 7))
