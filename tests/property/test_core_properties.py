"""Hypothesis properties of the core: invariants that must hold after any sequence of operations."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from paralleljob.core import (
    Allocation,
    ClusterState,
    GPUHealth,
    JobSpec,
    ModelShape,
    PlacementInfeasible,
    Placer,
    RecoveryStrategy,
    Topology,
    cost_model,
    node_level_cost,
    rank_level_cost,
    recover,
)
from paralleljob.core.failure.recovery import BROKEN, affected_groups

clusters = st.tuples(
    st.integers(2, 5),  # nodes
    st.sampled_from([4, 8]),  # GPUs per node
    st.booleans(),  # racks of two nodes
)
place_op = st.tuples(
    st.just("place"),
    st.sampled_from([1, 2, 4]),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from([10.0, 40.0, 79.0]),
    st.sampled_from(["seed", "megatron"]),
    st.sampled_from([0.1, 7.0, 70.0]),
)
other_ops = st.one_of(
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("fail"), st.integers(0, 39), st.sampled_from(["full", "minimal"])),
    st.tuples(st.just("heal"), st.integers(0, 39)),
    st.tuples(st.just("cordon"), st.integers(0, 4), st.booleans()),
)
operations = st.lists(st.one_of(place_op, place_op, other_ops), min_size=1, max_size=25)


def build(cluster) -> ClusterState:
    nodes, gpn, racks = cluster
    levels = [("rack", 2, 200.0)] if racks else []
    return ClusterState(Topology.uniform(nodes, gpn, levels=levels))


def snapshot(state: ClusterState):
    return (
        list(state.owner),
        list(state.memory_used),
        list(state.health),
        list(state.node_free),
        list(state.node_schedulable),
        dict(state.allocations),
        copy.deepcopy(state.hist),
    )


def check_invariants(state: ClusterState) -> None:
    topo = state.topology
    seen: set[int] = set()
    for job_id, allocation in state.allocations.items():
        for group in allocation.groups:
            assert len({topo.gpu_node[g] for g in group}) == 1, "TP group spans nodes"
            for g in group:
                assert g not in seen, "GPU in two jobs"
                seen.add(g)
                assert state.owner[g] == job_id
    assert {g for g, owner in enumerate(state.owner) if owner is not None} == seen
    for g, used in enumerate(state.memory_used):
        assert used <= topo.node_gpu_memory_gb[topo.gpu_node[g]] + 1e-9, "GPU memory oversubscribed"
    # incremental counters equal a recount from scratch
    for node in range(topo.num_nodes):
        free = sum(1 for g in topo.node_gpus(node) if state.owner[g] is None and state.health[g] is GPUHealth.HEALTHY)
        assert state.node_free[node] == free
    fresh = ClusterState(topo)
    for node in range(topo.num_nodes):
        fresh._change_node(node, state.node_free[node] - fresh.node_free[node], state.node_schedulable[node])
    assert fresh.hist == state.hist
    # bucket order depends on history; membership must not
    for level in range(1, topo.top + 1):
        for dom, row in enumerate(state.buckets[level]):
            for free, bucket in enumerate(row):
                assert set(bucket) == set(fresh.buckets[level][dom][free])


def run(cluster, ops):
    """Apply ``ops``; returns a trace of outcomes so two runs can be compared."""
    state = build(cluster)
    placer = Placer(state)
    jobs: dict[str, JobSpec] = {}
    trace = []
    for i, op in enumerate(ops):
        kind = op[0]
        if kind == "place":
            _, tp, pp, dp, mem, model_name, params = op
            job = JobSpec(f"job-{i}", tp, pp, dp, mem, ModelShape(num_params_billions=params))
            model = cost_model(model_name)
            before = snapshot(state)
            try:
                placement = placer.place(job, model)
            except PlacementInfeasible as refusal:
                assert refusal.reasons
                assert snapshot(state) == before, "a refused placement changed the state"
                trace.append(("refused", job.job_id))
                continue
            assert snapshot(state) == before, "place() must not mutate the state"
            for g in placement.gpus:
                assert state.health[g] is GPUHealth.HEALTHY, "placed on an unhealthy GPU"
                assert state.node_schedulable[state.topology.gpu_node[g]], "placed on a cordoned node"
            fast = node_level_cost(state.topology, job, placement.group_nodes, model)
            slow = rank_level_cost(state.topology, job, placement.groups, model)
            assert abs(fast.total_ms - slow.total_ms) <= 1e-9 * max(1.0, slow.total_ms)
            assert placement.cost.total_ms >= placement.lower_bound_ms - 1e-6
            state.allocate(Allocation(job.job_id, placement.groups, mem))
            jobs[job.job_id] = job
            trace.append(("placed", job.job_id, placement.groups))
        elif kind == "release":
            names = sorted(state.allocations)
            if names:
                name = names[op[1] % len(names)]
                state.release(name)
                trace.append(("released", name))
        elif kind == "fail":
            gpu = op[1] % state.topology.num_gpus
            state.set_health(gpu, GPUHealth.OFFLINE)
            for name in state.jobs_on([gpu]):
                job = jobs[name]
                old = state.allocations[name]
                broken = affected_groups(state, old)
                outcome = recover(state, placer, job, cost_model("seed"), RecoveryStrategy(op[2]))
                if outcome.new is not None:
                    if op[2] == "minimal":
                        old_nodes = [state.topology.gpu_node[g[0]] for g in old.groups]
                        moved = sum(1 for a, b in zip(old_nodes, outcome.new.group_nodes, strict=True) if a != b)
                        assert moved <= len(broken), "minimal repair moved intact groups"
                else:
                    assert name not in state.allocations
                trace.append(("recovered", name, outcome.action))
        elif kind == "heal":
            state.set_health(op[1] % state.topology.num_gpus, GPUHealth.HEALTHY)
        elif kind == "cordon":
            state.set_node_schedulable(op[1] % state.topology.num_nodes, not op[2])
        check_invariants(state)
        for allocation in state.allocations.values():
            assert not any(state.health[g] in BROKEN for g in allocation.gpus), "a job runs on a failed GPU"
    return trace


@given(clusters, operations)
def test_invariants_hold_after_any_operations(cluster, ops):
    run(cluster, ops)


@given(clusters, operations)
def test_same_inputs_give_the_same_outputs(cluster, ops):
    assert run(cluster, ops) == run(cluster, ops)


bandwidths = st.floats(1.0, 1000.0)


@given(
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(1, 8),
    st.sampled_from(["seed", "megatron"]),
    st.lists(st.tuples(bandwidths, bandwidths), min_size=1, max_size=7),
    st.tuples(bandwidths, bandwidths),
)
def test_cost_models_are_monotone_in_bandwidth(tp, pp, dp, name, boundary_pairs, pair):
    model = cost_model(name)
    job = JobSpec("j", tp, pp, dp, 1.0)
    low, high = sorted(pair)
    assert model.tp_ms(job, low) >= model.tp_ms(job, high)
    assert model.dp_ms(job, low) >= model.dp_ms(job, high)
    slow = [min(a, b) for a, b in boundary_pairs]
    fast = [max(a, b) for a, b in boundary_pairs]
    assert model.pp_ms(job, slow) >= model.pp_ms(job, fast)
    assert model.combine(2.0, 1.0, 1.0) >= model.combine(1.0, 1.0, 1.0)
