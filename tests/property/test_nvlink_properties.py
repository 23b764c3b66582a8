"""Hypothesis properties of the NVLink placer (core/nvl72/nvlink) on mixed HGX + clique topologies: every TP group
inside one NVLink domain, whole free trays for jobs that span trays (so no tray is in two ComputeDomains),
TP above a tray on exactly TP / tray trays, warm spares untouched by new gangs, and the state unchanged."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import (
    Allocation,
    ClusterState,
    JobSpec,
    Level,
    NodeSpec,
    PlacementInfeasible,
    Topology,
    cost_model,
)
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from tests.property.test_eligibility_properties import snapshot


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    g = draw(st.sampled_from([2, 4]))
    specs = []
    for c in range(draw(st.integers(1, 3))):
        for t in range(draw(st.integers(2, 5))):
            specs.append(NodeSpec(f"c{c}-t{t}", g, 80.0, (f"clique-{c}", f"spine-{c // 2}", "cluster")))
    for h in range(draw(st.integers(0, 2))):
        specs.append(NodeSpec(f"hgx-{h}", 8, 80.0, (f"hgx-{h}", "spine-hgx", "cluster")))
    levels = [Level("node", 100.0), Level("clique", 100.0), Level("spine", 20.0), Level("cluster", 10.0)]
    state = ClusterState(Topology.from_nodes(specs, levels, nvlink_level=1))
    num = state.topology.num_gpus
    taken = draw(st.lists(st.integers(0, num - 1), unique=True, max_size=num // 2))
    if taken:
        state.allocate(Allocation("other", tuple((x,) for x in taken), 0.0))
    return state


def whole_free(state: ClusterState, node: int) -> bool:
    return state.usable_free(node) == state.topology.node_gpu_count[node]


@settings(max_examples=200, deadline=None)
@given(
    clusters(),
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 3)),
    st.integers(0, 2),
    st.sampled_from(["seed", "megatron"]),
)
def test_tp_groups_stay_in_one_nvlink_domain_on_whole_trays(state, shape, spares, model_name) -> None:
    topo = state.topology
    job = JobSpec("job", *shape, 10.0)
    placer = NVLinkPlacer(state, spares=spares)
    index = placer.index
    before = snapshot(state)
    whole_before = {n for n in range(topo.num_nodes) if whole_free(state, n)}
    spares_before = {c: sum(1 for n in trays if n in whole_before) for c, trays in enumerate(index.tray_nodes)}
    try:
        placement = placer.place(job, cost_model(model_name))
    except PlacementInfeasible:
        assert snapshot(state) == before
        return
    assert snapshot(state) == before
    gpus = placement.gpus
    assert len(gpus) == len(set(gpus)) == job.num_gpus
    assert all(state.eligible(x, job.memory_per_gpu_gb) for x in gpus)
    nodes_of = [sorted({topo.gpu_node[x] for x in group}) for group in placement.groups]
    for group, nodes in zip(placement.groups, nodes_of, strict=True):
        assert len(group) == job.tp
        if len(nodes) > 1:  # spans trays: all of one multi-node clique
            assert len({index.clique_of(n) for n in nodes}) == 1 and index.clique_of(nodes[0]) is not None
        tray = topo.node_gpu_count[nodes[0]]
        if index.clique_of(nodes[0]) is not None and job.tp > tray:
            assert len(nodes) == job.tp // tray
    used = {topo.gpu_node[x] for x in gpus}
    if len(used) > 1 and all(index.clique_of(n) is not None for n in used):
        # a ComputeDomain job: whole trays only, so no tray ever serves two of them
        assert used <= whole_before
        for c, trays in enumerate(index.tray_nodes):
            left = sum(1 for n in trays if n in whole_before and n not in used)
            assert left >= min(spares, spares_before[c])
