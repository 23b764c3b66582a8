"""The move planner asks each candidate domain alone (``core/placing/domainview``) and gets the plan it gets on the
whole state with every other node closed: on random NVL72-like clusters (the NVLink placer, with and without
warm spares) and random HGX clusters (the core placer, nodes under leaves and spines, a cordoned node, a
broken GPU), the plan, or the reasons for none, are the same both ways, and the state comes back exactly as
it was, the order in which it lists its nodes included (so a plan changes no later tie-break)."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, GPUHealth, JobSpec, Topology, cost_model
from paralleljob.core.moves import MovableJob, MoveBounds, MoveRequest, plan_moves
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.placing.placement import PlacerLike
from paralleljob.core.placing.placer import OPERATOR_PLACER, Placer
from paralleljob.core.timing.evaluate import placement_cost
from tests.property.test_eligibility_properties import snapshot
from tests.property.test_move_plan_properties import scenarios


def stir(draw: st.DrawFn, state: ClusterState) -> None:
    """Cordon and uncordon some open nodes in a random order: each goes last in its lists, as a live state's
    history leaves them (a view that listed a domain's nodes in node order would break ties otherwise)."""
    nodes = [n for n in range(state.topology.num_nodes) if state.node_schedulable[n]]
    for n in draw(st.permutations(nodes))[: draw(st.integers(0, len(nodes)))]:
        state.set_node_schedulable(n, False)
        state.set_node_schedulable(n, True)


def listed(state: ClusterState) -> list[object]:
    return [[[list(bucket) for bucket in row] for row in level] for level in state.buckets]


def both_ways(state: ClusterState, request: MoveRequest, placer_for) -> tuple[object, object]:  # type: ignore[no-untyped-def]
    before, order = snapshot(state), listed(state)
    model = cost_model("seed")
    answers = []
    for narrow in (True, False):
        answers.append(plan_moves(state, placer_for(state), model, request, placer_for=placer_for, narrow=narrow))
        assert snapshot(state) == before
        assert listed(state) == order  # not even the order of equal nodes changed
    return answers[0], answers[1]


LENIENT = MoveBounds(max_extra_cost_ratio=0.5, move_now_max_lost_gpu_s=1e6, max_wait_s=86_400.0, cooldown_s=0.0)


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.sampled_from([0, 1]), st.booleans(), st.data())
def test_nvl72_plans_are_the_same_on_the_domain_alone(scenario, spares: int, lenient: bool, data) -> None:
    state, _, request = scenario
    stir(data.draw, state)
    if lenient:  # bounds that let most plans through, so that most examples compare plans, not refusals
        request = replace(request, bounds=LENIENT, moves_last_hour=0)

    def placer_for(on: ClusterState) -> PlacerLike:
        return NVLinkPlacer(on, OPERATOR_PLACER, spares)

    narrowed, whole = both_ways(state, request, placer_for)
    assert narrowed == whole
    event(getattr(narrowed, "domain", " ".join(narrowed.reasons)[:40]).split(" ")[0])


@st.composite
def hgx(draw: st.DrawFn) -> tuple[ClusterState, MoveRequest]:
    per_leaf = draw(st.integers(2, 4))
    nodes = per_leaf * draw(st.integers(2, 5))
    topo = Topology.uniform(nodes, 8, levels=[("leaf", per_leaf, 100.0), ("spine", 2 * per_leaf, 50.0)])
    state = ClusterState(topo)
    model = cost_model("seed")
    now = 10_000.0
    running = []
    for n in range(nodes):
        first = topo.node_first_gpu[n]
        taken = 0
        for k, gpus in enumerate(draw(st.lists(st.sampled_from([1, 2, 2, 4]), min_size=1, max_size=2))):
            if taken + gpus > 8:
                break
            job = JobSpec(f"j{n}-{k}", gpus, 1, 1, 10.0, priority=draw(st.integers(0, 2)))
            groups = (tuple(range(first + taken, first + taken + gpus)),)
            taken += gpus
            state.allocate(Allocation(job.job_id, groups, 10.0))
            cost = placement_cost(topo, job, groups, model).total_ms * draw(st.sampled_from([1.0, 0.5]))
            running.append(
                MovableJob(
                    job, cost, started_at=now - draw(st.sampled_from([60.0, 36_000.0])),
                    checkpoint_interval_s=draw(st.sampled_from([600.0, math.inf])),
                    movable=draw(st.booleans()) or draw(st.booleans()),
                )
            )  # fmt: skip
    if draw(st.booleans()):
        state.set_node_schedulable(draw(st.integers(0, nodes - 1)), False)
    if draw(st.booleans()):
        gpu = draw(st.integers(0, topo.num_gpus - 1))
        if state.owner[gpu] is None:
            state.set_health(gpu, GPUHealth.OFFLINE)
    stir(draw, state)
    whole = sum(1 for n in range(nodes) if state.usable_free(n) == 8)
    tp, dp = 8, whole + draw(st.integers(1, 2))  # just more whole nodes than there are
    held = frozenset(draw(st.lists(st.integers(0, nodes - 1), max_size=2)))
    bounds = MoveBounds(
        max_extra_cost_ratio=draw(st.sampled_from([0.0, 0.5, 0.5])),
        move_now_max_lost_gpu_s=draw(st.sampled_from([0.0, 1e6])),
        max_moves_per_hour=draw(st.integers(0, 20)),
    )
    waiting = JobSpec("big", tp, 1, dp, 10.0, priority=1)
    return state, MoveRequest(waiting, tuple(running), bounds, now, 0, held, relocate=draw(st.booleans()))


@settings(max_examples=150, deadline=None)
@given(hgx())
def test_hgx_plans_are_the_same_on_the_domain_alone_and_as_before(scenario) -> None:
    state, request = scenario

    def placer_for(on: ClusterState) -> PlacerLike:
        return Placer(on, OPERATOR_PLACER)

    narrowed, whole = both_ways(state, request, placer_for)
    assert narrowed == whole
    event(getattr(narrowed, "domain", " ".join(narrowed.reasons)[:40]).split(" ")[0])
    # the core placer keeps nothing between calls, so the plan is also the one asked without placer_for
    assert plan_moves(state, placer_for(state), cost_model("seed"), request) == narrowed
