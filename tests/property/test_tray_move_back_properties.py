"""Re-pricing a running tray job (``core.failure.repair.best_placement_now`` through ``NVLinkPlacer.place_near``) on
random NVL72 racks with random neighbours: keeping the job's cliques and trays never raises the price of the
fresh placement and never moves more tray pods than it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.failure.repair import FailureKind, FailurePolicy, FailureReport, best_placement_now, decide_repair
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods_to_move
from paralleljob.core.rankorder import DEFAULT_RANK_ORDER
from paralleljob.core.timing.cost import cost_model

MODEL = cost_model("megatron")


@settings(max_examples=100, deadline=None)
@given(
    racks=st.integers(2, 3),
    tp=st.sampled_from([8, 16]),
    dp=st.integers(2, 6),
    neighbours=st.lists(st.tuples(st.sampled_from([4, 8]), st.integers(1, 4)), max_size=5),
    gone=st.lists(st.integers(0, 4), max_size=4),
    broken=st.lists(st.integers(0, 5), max_size=2),
)
def test_keeping_the_cliques_never_costs_more_nor_moves_more(
    racks: int, tp: int, dp: int, neighbours: list[tuple[int, int]], gone: list[int], broken: list[int]
) -> None:
    state = ClusterState(nvl72_topology(racks))
    placer = NVLinkPlacer(state)
    for i, (n_tp, n_dp) in enumerate(neighbours):
        try:
            placed = placer.place(JobSpec(f"n{i}", n_tp, 1, n_dp, 10.0), MODEL)
        except PlacementInfeasible:
            continue
        state.allocate(Allocation(f"n{i}", placed.groups, 10.0))
    job = JobSpec("j", tp, 1, dp, 10.0)
    try:
        state.allocate(Allocation("j", placer.place(job, MODEL).groups, 10.0))
    except PlacementInfeasible:
        return
    for g in sorted({b % dp for b in broken}):  # repaired, maybe into another clique, then healed
        gpu = state.allocations["j"].groups[g][0]
        state.set_health(gpu, GPUHealth.OFFLINE)
        report = FailureReport(FailureKind.GPU, (g,), restarts=0)
        decide_repair(state, placer, job, MODEL, FailurePolicy(max_restarts=10), report)
        state.set_health(gpu, GPUHealth.HEALTHY)
        if "j" not in state.allocations:
            return  # requeued: nothing runs to re-price
    for i in sorted(set(gone)):  # neighbours leave: the job may now have a cheaper home
        state.release(f"n{i}")
    current = state.allocations["j"]
    state.release("j")
    try:
        fresh = placer.place(job, MODEL)
    except PlacementInfeasible:
        fresh = None
    state.allocate(current)
    near = best_placement_now(state, placer, job, MODEL)
    assert (near is None) == (fresh is None)
    if near is None or fresh is None:
        return
    assert near.cost.total_ms <= fresh.cost.total_ms + 1e-6
    shape = (tp, 1, dp)
    moved_near = tray_pods_to_move(state.topology, shape, DEFAULT_RANK_ORDER, current.groups, near.groups)
    moved_fresh = tray_pods_to_move(state.topology, shape, DEFAULT_RANK_ORDER, current.groups, fresh.groups)
    assert moved_near <= moved_fresh
    assert state.allocations["j"] == current
