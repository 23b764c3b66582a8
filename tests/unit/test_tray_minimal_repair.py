"""A tray job whose clique has no spare tray left, repaired through ``decide_repair`` as both shells do: with
``strategy: minimal`` only the broken TP group moves (whole, to another clique's spares) and every other rank
keeps its GPU; with ``full`` the gang is placed afresh where it is cheapest. Before, both re-placed the job
afresh, re-creating 6 of 8 tray pods for one failed tray (issue 39)."""

from __future__ import annotations

import pytest

from paralleljob.core import Allocation, ClusterState, GPUHealth, JobSpec, cost_model
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import (
    FailureKind,
    FailurePolicy,
    FailureReport,
    Rescheduled,
    best_placement_now,
    decide_repair,
    pods_to_move,
)
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods_to_move
from paralleljob.core.placing.placement import Placement
from paralleljob.core.rankorder import DEFAULT_RANK_ORDER
from paralleljob.core.topology import Topology


def a_full_clique() -> tuple[ClusterState, NVLinkPlacer, JobSpec]:
    """TP8 x DP4 (8 trays) in clique 0, the clique's other 10 trays taken by a filler: no spare left."""
    state = ClusterState(nvl72_topology(2))
    placer, model = NVLinkPlacer(state), cost_model("megatron")
    job = JobSpec("j", 8, 1, 4, 10.0)
    placement = placer.place(job, model)
    state.allocate(Allocation("j", placement.groups, 10.0))
    home = {state.topology.domain_of[1][n] for n in placement.group_nodes}
    assert len(home) == 1
    filler = placer.place(JobSpec("filler", 8, 1, 5, 10.0), model)
    assert {state.topology.domain_of[1][n] for n in filler.group_nodes} == home
    state.allocate(Allocation("filler", filler.groups, 10.0))
    return state, placer, job


def pods_moved(topo: Topology, before: Allocation, after: Placement) -> int:
    """Tray pods re-created: trays of the job whose GPUs changed."""
    old = {(topo.gpu_node[a], a) for group in before.groups for a in group}
    new = {(topo.gpu_node[b], b) for group in after.groups for b in group}
    return len({tray for tray, _ in new - old})


@pytest.mark.parametrize("strategy", [RecoveryStrategy.MINIMAL, RecoveryStrategy.FULL])
def test_a_clique_out_of_spares_moves_only_the_broken_group_unless_full(strategy: RecoveryStrategy) -> None:
    state, placer, job = a_full_clique()
    topo = state.topology
    before = state.allocations["j"]
    broken_group = 2
    state.set_health(before.groups[broken_group][0], GPUHealth.OFFLINE)
    report = FailureReport(FailureKind.GPU, (broken_group,), restarts=0)
    decision = decide_repair(state, placer, job, cost_model("megatron"), FailurePolicy(strategy=strategy), report)
    assert isinstance(decision, Rescheduled) and decision.placement is not None
    after = decision.placement
    cliques = [{topo.domain_of[1][topo.gpu_node[g]] for g in group} for group in after.groups]
    if strategy is RecoveryStrategy.MINIMAL:
        assert decision.restart_groups == (broken_group,)
        assert pods_moved(topo, before, after) == 2  # the broken group's two trays, nothing else
        assert [tuple(a) == tuple(b) for a, b in zip(before.groups, after.groups, strict=True)] == [
            True, True, False, True,
        ]  # fmt: skip
        assert cliques[broken_group] != cliques[0] and len(cliques[broken_group]) == 1
        assert "only the broken TP groups moved" in " ".join(decision.reasons)
    else:
        assert decision.restart_groups == (0, 1, 2, 3)
        assert len(set().union(*cliques)) == 1  # the whole gang in the other rack: one ComputeDomain
    assert state.allocations["j"].groups == after.groups


def test_a_tray_move_is_counted_in_tray_pods_by_both_shells() -> None:
    """The move back prices a tray job's move by the tray pods it re-creates (the operator's podsToMove and the
    simulator's move-back, through ``tray_pods_to_move``), not by TP groups: one TP8 group is two tray pods."""
    state, placer, job = a_full_clique()
    before = state.allocations["j"]
    state.set_health(before.groups[2][0], GPUHealth.OFFLINE)
    report = FailureReport(FailureKind.GPU, (2,), restarts=0)
    decision = decide_repair(state, placer, job, cost_model("megatron"), FailurePolicy(), report)
    assert isinstance(decision, Rescheduled) and decision.placement is not None
    after = decision.placement.groups
    assert pods_to_move(before.groups, after) == 1
    assert tray_pods_to_move(state.topology, (8, 1, 4), DEFAULT_RANK_ORDER, before.groups, after) == 2


def a_job_split_over_two_empty_cliques(home: int) -> tuple[ClusterState, NVLinkPlacer, JobSpec]:
    """TP8 x DP4 placed in clique ``home`` with no spare left, its group 2 repaired into the other clique, then
    the broken GPU healed and the filler gone: three groups in ``home``, one in the other, both cliques empty
    around them."""
    state = ClusterState(nvl72_topology(2))
    placer, model = NVLinkPlacer(state), cost_model("megatron")
    if home == 1:
        blocker = placer.place(JobSpec("blocker", 8, 1, 9, 10.0), model)
        state.allocate(Allocation("blocker", blocker.groups, 10.0))
    job = JobSpec("j", 8, 1, 4, 10.0)
    state.allocate(Allocation("j", placer.place(job, model).groups, 10.0))
    filler = placer.place(JobSpec("filler", 8, 1, 5, 10.0), model)
    state.allocate(Allocation("filler", filler.groups, 10.0))
    state.release("blocker")
    broken = state.allocations["j"].groups[2][0]
    state.set_health(broken, GPUHealth.OFFLINE)
    report = FailureReport(FailureKind.GPU, (2,), restarts=0)
    assert isinstance(decide_repair(state, placer, job, model, FailurePolicy(), report), Rescheduled)
    state.set_health(broken, GPUHealth.HEALTHY)
    state.release("filler")
    return state, placer, job


@pytest.mark.parametrize("home", [0, 1])
def test_a_move_back_keeps_the_clique_most_of_the_job_runs_in(home: int) -> None:
    """Both cliques cost the same for the whole job; the move back names the one holding three of its four
    groups, so it re-creates the moved group's 2 tray pods, not all 8 (the placer's own tie-break picked the
    other clique, in both orientations, before)."""
    state, placer, job = a_job_split_over_two_empty_cliques(home)
    topo = state.topology
    current = state.allocations["j"]
    cliques_now = [topo.domain_of[1][topo.gpu_node[group[0]]] for group in current.groups]
    assert sorted(cliques_now) == sorted([home] * 3 + [1 - home])
    best = best_placement_now(state, placer, job, cost_model("megatron"))
    assert best is not None
    assert {topo.domain_of[1][topo.gpu_node[group[0]]] for group in best.groups} == {home}
    assert tray_pods_to_move(topo, (8, 1, 4), DEFAULT_RANK_ORDER, current.groups, best.groups) == 2
    assert [tuple(a) == tuple(b) for a, b in zip(current.groups, best.groups, strict=True)] == [
        True, True, False, True,
    ]  # fmt: skip
    assert state.allocations["j"] == current  # the probe left the job where it runs


def test_a_full_repair_may_use_the_warm_spares_held_for_repairs() -> None:
    """``strategy: full`` re-places the whole gang, but it is still a repair: the spare trays each clique holds
    back from new gangs are there for it. Placed as a new gang would be (spares counted out), the job below
    had no room anywhere and was requeued, in both shells."""
    state = ClusterState(nvl72_topology(2))
    placer, model = NVLinkPlacer(state, spares=2), cost_model("megatron")
    job = JobSpec("j", 8, 1, 4, 10.0)
    for spec in (job, JobSpec("filler", 8, 1, 4, 10.0), JobSpec("other", 8, 1, 8, 10.0)):
        state.allocate(Allocation(spec.job_id, placer.place(spec, model).groups, 10.0))
    topo = state.topology
    assert all(placer.whole_free_count(c, 10.0) == 2 for c in range(2)), "only the spares are free"
    before = state.allocations["j"]
    home = topo.domain_of[1][topo.gpu_node[before.groups[0][0]]]
    state.set_health(before.groups[1][0], GPUHealth.OFFLINE)
    report = FailureReport(FailureKind.GPU, (1,), restarts=0)
    decision = decide_repair(state, placer, job, model, FailurePolicy(strategy=RecoveryStrategy.FULL), report)
    assert isinstance(decision, Rescheduled) and decision.placement is not None, decision
    assert decision.restart_groups == (0, 1, 2, 3)
    assert {topo.domain_of[1][topo.gpu_node[g[0]]] for g in decision.placement.groups} == {home}
    assert "spare trays included" in " ".join(decision.reasons)
