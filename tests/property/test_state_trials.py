"""A trial on a cluster state (begin_trial ... rollback) leaves the state exactly as it was, whatever
allocations, releases, assumed usage, health and schedulability changes happened in between, and
``state_differences`` sees every kind of difference it is meant to see. Assumed usage is an overlay: it
takes GPUs like a job does but never appears among the jobs."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.statecheck import state_differences
from paralleljob.core.topology import Topology

NODES, GPUS = 4, 4
TOPOLOGY = Topology.uniform(NODES, GPUS, levels=[("rack", 2, 100.0)])

Op = tuple[Any, ...]
gpu = st.integers(0, NODES * GPUS - 1)
operation = st.one_of(
    st.tuples(st.just("allocate"), st.sampled_from("abcd"), st.lists(gpu, min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("release"), st.sampled_from("abcd")),
    st.tuples(st.just("assume"), st.sampled_from(["pod:x", "claims:n"]), st.lists(gpu, max_size=3, unique=True)),
    st.tuples(st.just("forget"), st.sampled_from(["pod:x", "claims:n"])),
    st.tuples(st.just("health"), gpu, st.sampled_from(list(GPUHealth))),
    st.tuples(st.just("schedulable"), st.integers(0, NODES - 1), st.booleans()),
)


def _apply(state: ClusterState, op: Op) -> None:
    kind = op[0]
    try:
        if kind == "allocate":
            gpus = tuple(int(g) for g in op[2])
            state.allocate(Allocation(str(op[1]), (gpus,), 10.0))
        elif kind == "release":
            state.release(str(op[1]))
        elif kind == "assume":
            state.assume(str(op[1]), [int(g) for g in op[2]])
        elif kind == "forget":
            state.forget(str(op[1]))
        elif kind == "health":
            state.set_health(int(op[1]), op[2])
        else:
            state.set_node_schedulable(int(op[1]), bool(op[2]))
    except InvalidRequest:
        pass  # refused mutations change nothing, in or out of a trial


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, max_size=12), st.lists(operation, max_size=20))
def test_rollback_restores_the_state_before_the_trial(before: list[Op], trial: list[Op]) -> None:
    kept, reference = ClusterState(TOPOLOGY), ClusterState(TOPOLOGY)
    for op in before:
        _apply(kept, op)
        _apply(reference, op)
    kept.begin_trial()
    for op in trial:
        _apply(kept, op)
    kept.rollback()
    assert not kept.in_trial
    assert state_differences(kept, reference) == []
    assert kept.counts() == _recount(kept) == reference.counts()


@settings(max_examples=100, deadline=None)
@given(st.lists(operation, max_size=30))
def test_kept_totals_equal_a_recount(ops: list[Op]) -> None:
    state = ClusterState(TOPOLOGY)
    for op in ops:
        _apply(state, op)
        assert state.counts() == _recount(state)
        assert not set(state.assumed) & set(state.allocations)  # holders are never jobs
        for holder, gpus in state.assumed.items():
            assert all(state.owner[g] == holder and not state.eligible(g, 0.0) for g in gpus)
            assert not set(state.jobs_on(gpus))
        held = [g for gpus in state.assumed.values() for g in gpus] + [
            g for allocation in state.allocations.values() for g in allocation.gpus
        ]
        assert sorted(held) == [g for g, owner in enumerate(state.owner) if owner is not None]


def _recount(state: ClusterState) -> dict[str, int]:
    return {
        "total": state.topology.num_gpus,
        "allocated": sum(1 for owner in state.owner if owner is not None),
        "unhealthy": sum(1 for health in state.health if health is not GPUHealth.HEALTHY),
        "free": sum(state.usable_free(n) for n in range(state.topology.num_nodes)),
    }


def test_differences_are_named() -> None:
    kept, fresh = ClusterState(TOPOLOGY), ClusterState(TOPOLOGY)
    kept.allocate(Allocation("a", ((0, 1),), 0.0))
    kept.set_health(5, GPUHealth.OFFLINE)
    kept.set_node_schedulable(3, False)
    kept.assume("pod:ns/web", [8])
    found = " | ".join(state_differences(kept, fresh))
    for part in ("health", "owner", "free GPUs per node", "schedulable", "allocations", "assumed", "rack histograms"):
        assert part in found
    assert state_differences(ClusterState(Topology.uniform(2, 4)), fresh) == ["topology differs"]


def test_a_trial_cannot_nest_and_rollback_without_one_is_a_no_op() -> None:
    state = ClusterState(TOPOLOGY)
    assert state.rollback() == 0
    state.begin_trial()
    try:
        state.begin_trial()
    except InvalidRequest:
        pass
    else:
        raise AssertionError("a nested trial must be refused")
    state.allocate(Allocation("a", ((0,),), 0.0))
    assert state.rollback() == 1
    assert state.allocations == {}


def test_an_assumed_holder_is_never_a_job() -> None:
    state = ClusterState(TOPOLOGY)
    state.assume("pod:ns/web", [0, 1])
    state.allocate(Allocation("job", ((4, 5),), 0.0))
    for refused in (lambda: state.allocate(Allocation("pod:ns/web", ((8,),), 0.0)), lambda: state.assume("job", [8])):
        try:
            refused()
        except InvalidRequest:
            pass
        else:
            raise AssertionError("a name is a job or an assumed holder, never both")
    assert state.jobs_on([0, 1, 4]) == ["job"] and set(state.allocations) == {"job"}
    assert state.forget("pod:ns/web") == (0, 1) and state.counts()["allocated"] == 2
