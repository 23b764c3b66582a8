"""Fragmentation first on NVL72 racks (issue 40, item 2): a job that fits one tray goes to a partly used tray
first, and among whole trays to the clique already in use (the core placer's layouts take as few, and as full,
domains as possible), so emptier cliques stay whole for TP groups larger than a tray; warm spares stay free."""

from __future__ import annotations

from paralleljob.core import Allocation, ClusterState, JobSpec, cost_model
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer


def test_a_one_tray_job_goes_to_the_fuller_clique() -> None:
    for busy in (range(18, 27), range(0, 9)):
        state = ClusterState(nvl72_topology(3))
        topo = state.topology
        for tray in busy:
            state.allocate(Allocation(f"busy-{tray}", (tuple(topo.node_gpus(tray)),), 0.0))
        fuller = topo.domain_of[1][busy[0]]
        for tp in (1, 2, 4):
            placement = NVLinkPlacer(state, spares=2).place(JobSpec(f"small-{tp}", tp, 1, 1, 0.0), cost_model("seed"))
            assert {topo.domain_of[1][n] for n in placement.group_nodes} == {fuller}, (busy, tp)


def test_partly_used_trays_still_come_first() -> None:
    state = ClusterState(nvl72_topology(2))
    topo = state.topology
    for tray in range(18, 27):  # rack 1: 9 of its 18 trays busy
        state.allocate(Allocation(f"busy-{tray}", (tuple(topo.node_gpus(tray)),), 0.0))
    state.allocate(Allocation("one", ((topo.node_first_gpu[3],),), 0.0))  # rack 0, tray 3: 3 GPUs free
    placement = NVLinkPlacer(state, spares=2).place(JobSpec("three", 1, 1, 3, 0.0), cost_model("seed"))
    assert set(placement.group_nodes) == {3}


def test_a_clique_whose_only_whole_trays_are_spares_takes_nothing() -> None:
    state = ClusterState(nvl72_topology(2))
    topo = state.topology
    for tray in range(18, 34):  # rack 1: 16 busy, its 2 whole free trays are its spares
        state.allocate(Allocation(f"busy-{tray}", (tuple(topo.node_gpus(tray)),), 0.0))
    placement = NVLinkPlacer(state, spares=2).place(JobSpec("small", 4, 1, 1, 0.0), cost_model("seed"))
    assert topo.domain_of[1][placement.group_nodes[0]] == 0
