"""core.failure.repair.decide_repair: the whole failure policy, checked on random clusters, jobs and failures."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.failure.recovery import BROKEN, RecoveryStrategy
from paralleljob.core.failure.repair import (
    FailureKind,
    FailurePolicy,
    FailureReport,
    GiveUp,
    GiveUpReason,
    OnUnplaceable,
    Requeue,
    Rescheduled,
    best_placement_now,
    decide_repair,
)
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.baselines import BestFitDomainPlacer
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.topology import Topology

MODEL = cost_model("seed")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterState, JobSpec, FailurePolicy, FailureReport, bool, list[int]]:
    nodes = draw(st.integers(1, 5))
    state = ClusterState(Topology.uniform(nodes, 8, levels=[("rack", 2, 100.0)]))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.integers(1, 3))
    dp = draw(st.integers(1, 2))
    job = JobSpec("j", tp, pp, dp, 1.0)
    baseline = draw(st.booleans())
    if tp * pp * dp > nodes * 8:
        return draw(st.nothing())
    placement = Placer(state).place(job, MODEL)
    state.allocate(Allocation("j", placement.groups, 1.0))
    kind = draw(st.sampled_from(list(FailureKind)))
    broken: list[int] = []
    if kind.hardware:
        gpus = sorted(state.allocations["j"].gpus)
        broken = draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=3, unique=True))
        broken += draw(st.lists(st.integers(0, nodes * 8 - 1), max_size=10, unique=True))  # elsewhere, too
        for gpu in set(broken):
            state.set_health(gpu, GPUHealth.OFFLINE)
    groups = tuple(draw(st.lists(st.integers(0, pp * dp - 1), min_size=1, max_size=2, unique=True)))
    policy = FailurePolicy(
        draw(st.sampled_from(list(RecoveryStrategy))),
        draw(st.integers(0, 3)),
        draw(st.sampled_from(list(OnUnplaceable))),
    )
    report = FailureReport(kind, groups, draw(st.integers(0, 4)))
    return state, job, policy, report, baseline, sorted(set(broken))


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_the_decision_follows_the_policy_and_the_state_follows_the_decision(
    scenario: tuple[ClusterState, JobSpec, FailurePolicy, FailureReport, bool, list[int]],
) -> None:
    state, job, policy, report, baseline, _ = scenario
    placer = BestFitDomainPlacer(state) if baseline else Placer(state)
    before = state.allocations["j"]
    total = state.counts()["total"]
    decision = decide_repair(state, placer, job, MODEL, policy, report)
    counts = state.counts()
    assert counts["allocated"] + counts["free"] + counts["unhealthy"] == total
    if report.restarts >= policy.max_restarts and not report.kind.maintenance:  # a drain is not a failure
        assert isinstance(decision, GiveUp) and decision.reason is GiveUpReason.MAX_RESTARTS
        assert "j" not in state.allocations
        return
    if not report.kind.hardware:  # a crashed worker keeps its GPUs
        assert isinstance(decision, Rescheduled) and decision.placement is None
        assert state.allocations["j"] is before
        whole = policy.strategy is RecoveryStrategy.FULL
        assert decision.restart_groups == (tuple(range(job.pp * job.dp)) if whole else tuple(sorted(report.groups)))
        return
    if isinstance(decision, Rescheduled):
        assert decision.placement is not None
        assert state.allocations["j"].groups == decision.placement.groups
        assert not any(state.health[g] in BROKEN for g in state.allocations["j"].gpus)
        moved = {g for g, (a, b) in enumerate(zip(before.groups, decision.placement.groups, strict=True)) if a != b}
        assert moved <= set(decision.restart_groups)
    else:
        assert "j" not in state.allocations
        # a drained job is never failed for want of room: it waits in line again
        expected = Requeue if policy.on_unplaceable is OnUnplaceable.REQUEUE or report.kind.maintenance else GiveUp
        assert isinstance(decision, expected)
        assert isinstance(decision, Requeue) or decision.reason is GiveUpReason.NO_ROOM


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3))
def test_best_placement_now_leaves_the_state_as_it_was(nodes: int, tp: int, pp: int) -> None:
    state = ClusterState(Topology.uniform(nodes, 8))
    job = JobSpec("j", tp, pp, 1, 1.0)
    if tp * pp > nodes * 8:
        return
    placer = Placer(state)
    first = placer.place(job, MODEL)
    state.allocate(Allocation("j", first.groups, 1.0))
    own, free = state.allocations["j"], list(state.node_free)
    best = best_placement_now(state, placer, job, MODEL)
    assert best is not None  # at worst where it already is
    assert best.cost.total_ms <= first.cost.total_ms + 1e-6
    assert state.allocations["j"] == own and list(state.node_free) == free


def test_best_placement_now_keeps_the_order_of_equal_nodes_so_the_next_placement_is_the_same() -> None:
    # Issue 43: the move-back's probe released the job and allocated it back, which listed its node last
    # among the nodes with as many free GPUs; the next 1-GPU job then took another node than it would have
    # without the probe, and on a small-node cluster under strict FIFO that one tie changed a whole run.
    state = ClusterState(Topology.uniform(3, 2))
    job = JobSpec("j", 1, 1, 1, 1.0)
    state.allocate(Allocation("j", ((0,),), 1.0))
    for node in (1, 2):
        state.allocate(Allocation(f"held-{node}", ((2 * node,),), 1.0))  # every node has 1 free GPU now
    placer = Placer(state)
    before = list(state.nodes_with_free(1, 0, 1, 1.0))
    assert before == [0, 1, 2]
    best_placement_now(state, placer, job, MODEL)
    assert list(state.nodes_with_free(1, 0, 1, 1.0)) == before
    assert placer.place(JobSpec("next", 1, 1, 1, 1.0), MODEL).groups == ((1,),)  # node 0's free GPU, as before
