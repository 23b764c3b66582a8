"""Hypothesis properties of the core's per-job node filter (``core/placing/eligibility.py``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, JobSpec, PlacementInfeasible, Placer, Topology, cost_model
from paralleljob.core.placing.eligibility import FilteredPlacer, NodeFilter, never_fits, restricted

clusters = st.tuples(st.integers(2, 6), st.sampled_from([4, 8]), st.booleans())
jobs = st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 3))


@st.composite
def filters(draw: st.DrawFn, num_nodes: int) -> NodeFilter:
    allowed = draw(st.none() | st.frozensets(st.integers(0, num_nodes - 1)))
    limits = st.dictionaries(st.integers(0, num_nodes - 1), st.integers(0, 4), max_size=num_nodes)
    ever = draw(limits)
    now = {n: min(limit, ever.get(n, limit)) for n, limit in draw(limits).items()}
    return NodeFilter(allowed, ever, {**ever, **now}, ("some nodes are out",))


def build(cluster: tuple[int, int, bool]) -> ClusterState:
    nodes, gpn, racks = cluster
    return ClusterState(Topology.uniform(nodes, gpn, levels=[("rack", 2, 200.0)] if racks else []))


def snapshot(state: ClusterState) -> tuple[object, ...]:
    return (
        list(state.owner),
        list(state.memory_used),
        list(state.node_free),
        list(state.node_schedulable),
        [[list(row) for row in level] for level in state.hist],
        # a bucket is a set; its order may change like after any cordon and uncordon
        [[[sorted(b) for b in row] for row in level] for level in state.buckets],
        dict(state.allocations),
    )


@settings(max_examples=150, deadline=None)
@given(clusters, jobs, st.data())
def test_placements_stay_on_allowed_nodes_within_their_limits_and_the_state_is_restored(cluster, shape, data) -> None:
    state = build(cluster)
    topo = state.topology
    # some GPUs already taken, some nodes closed, so the filter meets a used cluster
    taken = data.draw(st.lists(st.integers(0, topo.num_gpus - 1), unique=True, max_size=topo.num_gpus // 2))
    if taken:
        state.allocate(Allocation("other", tuple((g,) for g in taken), 0.0))
    for n in data.draw(st.lists(st.integers(0, topo.num_nodes - 1), max_size=2)):
        state.set_node_schedulable(n, False)
    node_filter = data.draw(filters(topo.num_nodes))
    tp, pp, dp = shape
    job = JobSpec("job", tp, pp, dp, 10.0)
    before = snapshot(state)
    placer = FilteredPlacer(Placer(state), state, lambda _: node_filter)
    try:
        placement = placer.place(job, cost_model("seed"))
    except PlacementInfeasible as exc:
        assert exc.reasons
        if never_fits(topo, job, node_filter):
            assert exc.permanent
    else:
        assert not never_fits(topo, job, node_filter)
        per_node: dict[int, int] = {}
        for node in placement.group_nodes:
            assert node_filter.admits(node) and state.node_schedulable[node]
            per_node[node] = per_node.get(node, 0) + 1
        for node, count in per_node.items():
            assert count <= node_filter.now_groups.get(node, count)
        assert all(state.owner[g] is None for g in placement.gpus)
    assert snapshot(state) == before


@settings(max_examples=150, deadline=None)
@given(clusters, jobs, st.data())
def test_never_fits_is_exactly_whether_an_empty_cluster_can_take_the_job(cluster, shape, data) -> None:
    state = build(cluster)
    topo = state.topology
    node_filter = data.draw(filters(topo.num_nodes))
    node_filter = NodeFilter(node_filter.allowed, node_filter.ever_groups, node_filter.ever_groups, node_filter.why)
    tp, pp, dp = shape
    job = JobSpec("job", tp, pp, dp, 10.0)
    reasons = never_fits(topo, job, node_filter)
    eligible = range(topo.num_nodes) if node_filter.allowed is None else node_filter.allowed
    capacity = sum(
        min(topo.node_gpu_count[n] // tp, node_filter.ever_groups.get(n, topo.node_gpu_count[n])) for n in eligible
    )
    assert bool(reasons) == (capacity < job.num_groups)
    try:
        FilteredPlacer(Placer(state), state, lambda _: node_filter).place(job, cost_model("seed"))
        placed = True
    except PlacementInfeasible as exc:
        placed = False
        assert exc.permanent == bool(reasons)
    assert placed == (not reasons)


@settings(max_examples=100, deadline=None)
@given(clusters, jobs, st.data())
def test_restricted_is_invisible_outside_its_block(cluster, shape, data) -> None:
    state = build(cluster)
    node_filter = data.draw(filters(state.topology.num_nodes))
    tp, pp, dp = shape
    before = snapshot(state)
    with restricted(state, JobSpec("job", tp, pp, dp, 10.0), node_filter):
        for n in range(state.topology.num_nodes):
            if not node_filter.admits(n):
                assert state.usable_free(n) == 0
            elif n in node_filter.now_groups:
                assert state.usable_free(n) <= max(node_filter.now_groups[n] * tp, 0) or not state.node_schedulable[n]
    assert snapshot(state) == before
