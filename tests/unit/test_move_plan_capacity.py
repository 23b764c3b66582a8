"""The move planner's first question: could the waiting job's placer ever give it enough GPUs? Moving jobs frees
none, so a plan needs the free GPUs the placer may use (warm spare trays held back by the NVLink placer are
not) plus those of jobs that end within ``max_wait_s`` (a plan may wait for them)."""

from __future__ import annotations

import math

from paralleljob.core import Allocation, ClusterState, JobSpec, cost_model
from paralleljob.core.moves import MovableJob, MoveBounds, MovePlan, MoveRequest, MoveWhen, NoMovePlan, plan_moves
from paralleljob.core.nvl72.cliques import nvl72_topology
from paralleljob.core.nvl72.nvlink import NVLinkPlacer

NOW = 100_000.0


def one_rack(small_trays: int) -> tuple[ClusterState, list[MovableJob]]:
    """One NVL72 rack (18 trays of 4 GPUs): a 1-GPU job on each of the first ``small_trays`` trays, a 48-GPU
    job (TP4 x DP12, 12 whole trays) on the next ones, the rest free."""
    state = ClusterState(nvl72_topology(1))
    topo = state.topology
    running = []
    for tray in range(small_trays):
        job = JobSpec(f"s{tray}", 1, 1, 1, 0.0)
        state.allocate(Allocation(job.job_id, ((topo.node_first_gpu[tray],),), 0.0))
        running.append(MovableJob(job, 0.0, started_at=NOW - 60.0, checkpoint_interval_s=3600.0))
    big = JobSpec("big48", 4, 1, 12, 0.0)
    trays = range(small_trays, small_trays + 12)
    groups = tuple(tuple(topo.node_gpus(t)) for t in trays)
    state.allocate(Allocation(big.job_id, groups, 0.0))
    # checkpoints every 10 h, last one 5 h ago: it can move neither now nor within the 30-minute wait
    running.append(MovableJob(big, 0.0, started_at=NOW - 5 * 3600.0, checkpoint_interval_s=36_000.0))
    return state, running


def test_the_warm_spares_are_not_free_for_the_waiting_job() -> None:
    # 2 small trays, 12 busy, 4 whole free: 4 x 4 + 2 x 3 = 22 GPUs free, 8 of them on the 2 spare trays
    state, running = one_rack(2)
    waiting = JobSpec("tp8", 8, 1, 2, 0.0)  # 16 GPUs: 4 whole trays, but only 2 + the 2 small ones' could be
    placer = NVLinkPlacer(state, spares=2)
    request = MoveRequest(waiting, tuple(running), MoveBounds(), NOW)
    decision = plan_moves(state, placer, cost_model("seed"), request)
    assert isinstance(decision, NoMovePlan)
    assert decision.reasons[0].startswith("only 14 GPUs are free (not held, no warm spare) of the 16 it needs")
    # the 16 GPUs are there, on the 4 whole trays: a placer that keeps no spare places it now
    unspared = plan_moves(state, NVLinkPlacer(state), cost_model("seed"), request)
    assert isinstance(unspared, NoMovePlan) and unspared.reasons == ("it fits now: nothing needs to move",)


def test_a_job_that_ends_within_the_wait_counts_and_the_plan_waits_for_it() -> None:
    state, running = one_rack(2)
    ends = [
        MovableJob(j.job, j.cost_ms, j.started_at, j.checkpoint_interval_s, expected_end_at=NOW + 600.0)
        if j.job_id == "big48"
        else j
        for j in running
    ]
    waiting = JobSpec("tp8", 8, 1, 2, 0.0)
    request = MoveRequest(waiting, tuple(ends), MoveBounds(), NOW)
    decision = plan_moves(state, NVLinkPlacer(state, spares=2), cost_model("seed"), request)
    assert isinstance(decision, MovePlan), decision
    assert [m.when for m in decision.moves if m.job_id == "big48"] == [MoveWhen.AT_END]
    assert decision.ready_at == NOW + 600.0
    # the same job ending after the wait bound: nothing to wait for, the count refuses at once
    late = tuple(
        MovableJob(j.job, j.cost_ms, j.started_at, math.inf, expected_end_at=NOW + 7200.0) if j.job_id == "big48" else j
        for j in running
    )
    refused = plan_moves(
        state, NVLinkPlacer(state, spares=2), cost_model("seed"), MoveRequest(waiting, late, MoveBounds(), NOW)
    )
    assert isinstance(refused, NoMovePlan) and refused.reasons[0].startswith("only 14 GPUs")
