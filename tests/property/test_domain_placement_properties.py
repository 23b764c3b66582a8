"""Hypothesis properties of the one-domain constraint (a PodGroup's topology key, ``core/placing/eligibility.py``):
a placement lies inside one domain, costs what the cheapest domain-restricted placement costs, a refusal
means no domain can take the job now and is never permanent on its own, and the state is left as it was."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, JobSpec, PlacementInfeasible, Placer, Topology, cost_model
from paralleljob.core.placing.eligibility import FilteredPlacer, NodeFilter, restricted, within_domain
from tests.property.test_eligibility_properties import snapshot

EPS = 1e-6


@st.composite
def domain_filters(draw: st.DrawFn, num_nodes: int) -> NodeFilter:
    """A node label: each node gets one of a few values, or none (a node without the label is in no domain)."""
    values = draw(st.lists(st.sampled_from(["r0", "r1", "r2", None]), min_size=num_nodes, max_size=num_nodes))
    members: dict[str, set[int]] = {}
    for n, value in enumerate(values):
        if value is not None:
            members.setdefault(value, set()).add(n)
    domains = tuple((v, frozenset(members[v])) for v in sorted(members))
    return NodeFilter(domain_key="example.com/rack", domains=domains)


@settings(max_examples=150, deadline=None)
@given(
    st.tuples(st.integers(2, 6), st.sampled_from([4, 8]), st.booleans()),
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 3)),
    st.sampled_from(["seed", "megatron"]),
    st.data(),
)
def test_a_domain_constrained_placement_is_the_cheapest_inside_one_domain(cluster, shape, model_name, data) -> None:
    nodes, gpn, racks = cluster
    state = ClusterState(Topology.uniform(nodes, gpn, levels=[("rack", 2, 200.0)] if racks else []))
    topo = state.topology
    taken = data.draw(st.lists(st.integers(0, topo.num_gpus - 1), unique=True, max_size=topo.num_gpus // 2))
    if taken:
        state.allocate(Allocation("other", tuple((g,) for g in taken), 0.0))
    node_filter = data.draw(domain_filters(topo.num_nodes))
    tp, pp, dp = shape
    job = JobSpec("job", tp, pp, dp, 10.0)
    model = cost_model(model_name)
    before = snapshot(state)
    # what each domain alone allows: the reference the constrained placement must match
    best: float | None = None
    for _, members in node_filter.domains:
        try:
            with restricted(state, job, NodeFilter(members)):
                cost = Placer(state).place(job, model).cost.total_ms
        except PlacementInfeasible:
            continue
        best = cost if best is None else min(best, cost)
    try:
        placement = FilteredPlacer(Placer(state), state, lambda _: node_filter).place(job, model)
    except PlacementInfeasible as exc:
        assert exc.reasons
        assert best is None, "a domain could hold the job, yet it was refused"
        assert not exc.permanent or job.num_groups > sum(topo.node_gpu_count[n] // tp for n in range(topo.num_nodes))
    else:
        assert best is not None
        assert any(set(placement.group_nodes) <= members for _, members in node_filter.domains)
        assert abs(placement.cost.total_ms - best) <= EPS * max(1.0, best)
        assert all(state.owner[g] is None for g in placement.gpus)
    assert snapshot(state) == before


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.data())
def test_a_repair_filter_admits_only_the_domain_holding_most_of_the_jobs_nodes(nodes: int, data: st.DataObject) -> None:
    base = data.draw(domain_filters(nodes))
    allowed = data.draw(st.none() | st.frozensets(st.integers(0, nodes - 1)))
    node_filter = NodeFilter(allowed, why=("x",), domain_key=base.domain_key, domains=base.domains)
    in_use = data.draw(st.lists(st.integers(0, nodes - 1), max_size=nodes))
    narrowed = within_domain(node_filter, in_use)
    assert narrowed is not None and narrowed.domain_key == "" and narrowed.allowed is not None
    assert narrowed.why[0] == "x" and len(narrowed.why) == 2
    if allowed is not None:
        assert narrowed.allowed <= allowed
    held = {value: len(set(in_use) & members) for value, members in base.domains}
    if not any(held.values()):
        assert narrowed.allowed == frozenset()  # the job runs on no node of the key: nowhere to repair to
        return
    most = max(held.values())
    inside = [members for value, members in base.domains if held[value] == most]
    assert any(narrowed.allowed <= members for members in inside)
    assert within_domain(None, in_use) is None
    plain = NodeFilter(allowed)
    assert within_domain(plain, in_use) is plain
