"""Hypothesis properties of the move planner (core/moves) on NVL72-like clusters strewn with small jobs: a plan
never moves a job to a placement dearer than its bound, never moves a job of higher priority than the waiting
one nor one inside its cool-down, stays within the disruption budget, never puts a moved job on GPUs held for
another waiting job, and really makes room: carried out on the state, the waiting job's placement is free.
The state is left as it was."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, JobSpec, Level, NodeSpec, Topology, cost_model
from paralleljob.core.moves import MovableJob, MoveBounds, MovePlan, MoveRequest, MoveWhen, plan_moves
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from tests.property.test_eligibility_properties import snapshot


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterState, tuple[MovableJob, ...], MoveRequest]:
    specs = []
    for c in range(draw(st.integers(1, 3))):
        for t in range(draw(st.integers(3, 6))):
            specs.append(NodeSpec(f"c{c}-t{t}", 4, 80.0, (f"clique-{c}", f"spine-{c // 2}", "cluster")))
    levels = [Level("node", 100.0), Level("clique", 100.0), Level("spine", 20.0), Level("cluster", 10.0)]
    topo = Topology.from_nodes(specs, levels, nvlink_level=1)
    state = ClusterState(topo)
    running: list[MovableJob] = []
    now = 10_000.0
    # most trays hold a small job, so the free GPUs are many but few trays are whole
    for i, gpus in enumerate(
        draw(st.lists(st.sampled_from([0, 1, 1, 2, 3]), min_size=topo.num_nodes, max_size=topo.num_nodes))
    ):
        node = i
        if not gpus:
            continue
        free = list(topo.node_gpus(node))
        job = JobSpec(f"s{i}", gpus, 1, 1, 0.0, priority=draw(st.integers(0, 2)))
        state.allocate(Allocation(job.job_id, (tuple(free[:gpus]),), 0.0))
        # what it costs where it is: a tray's price, or half that (it sits somewhere cheaper than any tray):
        # such a job can never move within a bound of 1.5x
        cost = cost_model("seed").tp_ms(job, 100.0) if gpus > 1 else 0.0
        running.append(
            MovableJob(
                job, cost * draw(st.sampled_from([1.0, 0.5])), started_at=now - 3600.0,
                checkpoint_interval_s=draw(st.sampled_from([600.0, 7200.0, math.inf])),
                last_checkpoint_at=draw(st.sampled_from([None, now - 300.0])),
                last_moved_at=draw(st.sampled_from([None, now - 60.0, now - 7200.0])),
                expected_end_at=draw(st.sampled_from([None, now + 120.0, now + 36_000.0])),
                movable=draw(st.booleans()) or draw(st.booleans()),
            )
        )  # fmt: skip
    whole = sum(1 for n in range(topo.num_nodes) if state.node_free[n] == 4)
    tp = draw(st.sampled_from([4, 8]))
    # just more whole trays than there are: it fits only once some trays are emptied
    dp = max(1, -(-(whole + draw(st.integers(1, 2))) * 4 // tp))
    waiting = JobSpec("big", tp, 1, dp, 0.0, priority=1)
    held = frozenset(draw(st.lists(st.integers(0, topo.num_nodes - 1), max_size=3)))
    bounds = MoveBounds(
        max_extra_cost_ratio=draw(st.sampled_from([0.0, 0.5])),
        move_now_max_lost_gpu_s=draw(st.sampled_from([0.0, 3600.0, 1e6])),
        max_wait_s=draw(st.sampled_from([0.0, 1800.0, 86_400.0])),
        cooldown_s=draw(st.sampled_from([0.0, 3600.0])),
        max_moves_per_hour=draw(st.integers(0, 6)),
    )
    request = MoveRequest(
        waiting, tuple(running), bounds, now, draw(st.integers(0, 2)), held, relocate=draw(st.booleans())
    )
    return state, tuple(running), request


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_plan_keeps_its_bounds_and_makes_room(scenario) -> None:
    state, running, request = scenario
    placer = NVLinkPlacer(state)
    model = cost_model("seed")
    before = snapshot(state)
    decision = plan_moves(state, placer, model, request)
    assert snapshot(state) == before
    assert decision.reasons and all(decision.reasons)  # every answer says why
    if not isinstance(decision, MovePlan):
        return
    by_id = {j.job_id: j for j in running}
    bounds, topo = request.bounds, state.topology
    assert len(decision.moves) + request.moves_last_hour <= bounds.max_moves_per_hour
    assert len({m.job_id for m in decision.moves}) == len(decision.moves)
    held_elsewhere = request.held_nodes
    for move in decision.moves:
        job = by_id[move.job_id]
        assert job.movable
        assert job.job.priority <= request.waiting.priority  # never a higher-priority job
        assert job.last_moved_at is None or request.now - job.last_moved_at >= bounds.cooldown_s
        assert move.at_s - request.now <= bounds.max_wait_s
        if move.placement is not None:
            assert request.relocate and move.when is not MoveWhen.AT_END
            # never dearer than the bound
            assert move.cost_after_ms <= job.cost_ms * (1 + bounds.max_extra_cost_ratio) + 1e-6
            assert move.placement.cost.total_ms == move.cost_after_ms
            nodes = {topo.gpu_node[g] for g in move.placement.gpus}
            assert not nodes & held_elsewhere  # never refills GPUs held for another job
            assert not nodes & set(decision.held_nodes)  # nor the ones it frees
        elif move.when is not MoveWhen.AT_END:
            assert not request.relocate  # only the preemption baseline stops a job
        if move.when is MoveWhen.NOW:
            assert move.lost_work_gpu_s == job.lost_now_gpu_s(request.now)
        else:
            assert move.lost_work_gpu_s == 0.0
    # Carried out on the state, the moves leave the waiting job's placement free and off the other holds.
    for move in decision.moves:
        state.release(move.job_id)
    for move in decision.moves:
        if move.placement is not None:
            state.allocate(Allocation(move.job_id, move.placement.groups, 0.0))
    state.allocate(Allocation("big", decision.placement.groups, 0.0))
    assert not {topo.gpu_node[g] for g in decision.placement.gpus} & held_elsewhere
    assert set(decision.held_nodes) == {topo.gpu_node[g] for g in decision.placement.gpus}
