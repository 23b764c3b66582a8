"""core.failure.keepreplicas: a new placement of a running job renumbers its replicas to keep TP groups where they
are, never at a different price; and the move-back question (best_placement_now) answers with it."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.failure.keepreplicas import keep_replicas
from paralleljob.core.failure.repair import best_placement_now, pods_to_move
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import cost_model
from paralleljob.core.timing.evaluate import placement_cost
from paralleljob.core.topology import Topology

MODEL = cost_model("seed")


def node_gpus(node: int, count: int = 8) -> tuple[int, ...]:
    return tuple(range(node * 8, node * 8 + count))


def placement_on(topology: Topology, job: JobSpec, groups: list[tuple[int, ...]]) -> Placement:
    cost = placement_cost(topology, job, groups, MODEL)
    nodes = tuple(topology.gpu_node[group[0]] for group in groups)
    return Placement(job.job_id, job.pp, job.dp, nodes, tuple(groups), cost, 0.0, True, ())


def test_a_tp8_dp2_job_moving_one_replica_moves_one_pod_not_two() -> None:
    topology = Topology.uniform(4, 8, levels=[("rack", 4, 100.0)])
    job = JobSpec("j", 8, 1, 2, 1.0)
    current = [node_gpus(1), node_gpus(3)]
    best = placement_on(topology, job, [node_gpus(3), node_gpus(2)])  # the placer's own numbering
    assert pods_to_move(current, best.groups) == 2
    kept = keep_replicas(current, best, topology, job, MODEL)
    assert kept.groups == (node_gpus(2), node_gpus(3))
    assert kept.group_nodes == (2, 3)
    assert pods_to_move(current, kept.groups) == 1
    assert kept.cost.total_ms == best.cost.total_ms


def test_pipeline_rows_are_renumbered_whole_and_unmatched_replicas_keep_the_new_order() -> None:
    topology = Topology.uniform(6, 8, levels=[("rack", 3, 100.0)])
    job = JobSpec("j", 4, 2, 3, 1.0)
    a, b, c, d, e, f = (node_gpus(n, 4) for n in range(6))
    current = [a, b, c, d, e, f]  # replica 0 = (a, b), 1 = (c, d), 2 = (e, f)
    best = placement_on(topology, job, [e, f, node_gpus(0)[4:], node_gpus(1)[4:], c, d])
    kept = keep_replicas(current, best, topology, job, MODEL)
    assert kept.groups == (node_gpus(0)[4:], node_gpus(1)[4:], c, d, e, f)
    assert pods_to_move(current, kept.groups) == 2


def test_a_renumbering_the_model_would_price_differently_is_not_made() -> None:
    topology = Topology.uniform(4, 8, levels=[("rack", 4, 100.0)])
    job = JobSpec("j", 8, 1, 2, 1.0)
    current = [node_gpus(1), node_gpus(3)]
    best = placement_on(topology, job, [node_gpus(3), node_gpus(2)])
    dearer = replace(best, cost=replace(best.cost, total_ms=best.cost.total_ms / 2))  # as if order mattered
    assert keep_replicas(current, dearer, topology, job, MODEL) is dearer


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(2, 6),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 3),
    dp=st.integers(2, 4),
    seed=st.integers(0, 10_000),
)
def test_keeping_replicas_never_changes_the_price_nor_moves_more(
    nodes: int, tp: int, pp: int, dp: int, seed: int
) -> None:

    if tp * pp * dp > nodes * 8:
        return
    topology = Topology.uniform(nodes, 8, levels=[("rack", 2, 100.0)])
    state = ClusterState(topology)
    job = JobSpec("j", tp, pp, dp, 1.0)
    free = list(range(nodes * 8))
    random.Random(seed).shuffle(free)
    current = [tuple(sorted(free[i * tp : (i + 1) * tp])) for i in range(pp * dp)]
    state.allocate(Allocation("j", tuple(current), 1.0))
    best = best_placement_now(state, Placer(state), job, MODEL)
    assert best is not None
    unaligned = Placer(ClusterState(topology)).place(job, MODEL)
    kept = keep_replicas(current, unaligned, topology, job, MODEL)
    assert kept.cost.total_ms == unaligned.cost.total_ms
    assert sorted(kept.groups) == sorted(unaligned.groups)
    assert pods_to_move(current, kept.groups) <= pods_to_move(current, unaligned.groups)
    assert state.allocations["j"].groups == tuple(current)  # the question left the state as it was


def test_the_move_back_question_keeps_the_replica_that_stays() -> None:
    # racks {0, 1} and {2, 3}; node 0 is taken, so the job on {1, 3} (across racks) is best on {2, 3}
    topology = Topology.uniform(4, 8, levels=[("rack", 2, 100.0)])
    for current in ([node_gpus(1), node_gpus(3)], [node_gpus(3), node_gpus(1)]):
        state = ClusterState(topology)
        state.allocate(Allocation("other", (node_gpus(0),), 1.0))
        job = JobSpec("j", 8, 1, 2, 1.0)
        state.allocate(Allocation("j", tuple(current), 1.0))
        best = best_placement_now(state, Placer(state), job, MODEL)
        assert best is not None and set(best.group_nodes) == {2, 3}
        assert pods_to_move(current, best.groups) == 1, (current, best.groups)
