"""Elastic jobs through the queue policies' pass (``core.admit.admission.schedule``): admitted at the largest size
that fits (quota counts min as the guarantee and caps the size), and growth replicas of lower-priority
elastic jobs taken (highest replica first) before any whole gang is evicted: the same core functions as
the FIFO path (``place_largest``, ``shrink_for``)."""

from __future__ import annotations

from paralleljob.core import Allocation, ClusterState, JobSpec, ModelShape, Placer, Topology, cost_model
from paralleljob.core.admit.admission import (
    Admit,
    PlaceOn,
    Preempt,
    QueueSnapshot,
    Reserve,
    ShrinkReplicas,
    Wait,
    schedule,
)
from paralleljob.core.admit.gates import WaitReason
from paralleljob.core.admit.queueing import PendingJob, QueuePolicy, QueueSpec, RunningJob
from paralleljob.core.elastic import ElasticRange, ResizeKind, place_largest

SEED = cost_model("seed")
POLICY = QueuePolicy()  # priority, fair share, backfill, preemption


def _job(name: str, dp: int, tp: int = 4, priority: int = 0) -> JobSpec:
    return JobSpec(name, tp, 1, dp, 10.0, ModelShape(num_params_billions=7.0), priority=priority)


def _running(state: ClusterState, spec: JobSpec, queue: str = "a") -> RunningJob:
    placement = Placer(state).place(spec, SEED)
    state.allocate(Allocation(spec.job_id, placement.groups, spec.memory_per_gpu_gb))
    return RunningJob(spec, queue, started_at=0.0)


def test_admitted_at_the_largest_size_that_fits() -> None:
    state = ClusterState(Topology.uniform(3, 4))  # room for 3 replicas of TP4
    pending = [PendingJob(_job("e", 4), "a", 0.0)]
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot(pending, [], [], 0.0, {"e": ElasticRange(2, 4, 4)}),
        POLICY,
    )
    (admit,) = plan.decisions
    assert isinstance(admit, Admit) and admit.placement.dp == 3
    assert "admitted at 3 of 2..4 replicas" in admit.reasons[0]
    assert len(state.allocations["e"].groups) == 3


def test_same_size_as_the_fifo_paths_core_function() -> None:
    # One function for both paths: the pass admits at exactly what place_largest picks on the same state.
    for nodes in (2, 3, 5):
        fifo = ClusterState(Topology.uniform(nodes, 4))
        direct, _ = place_largest(fifo, Placer(fifo), _job("e", 4), ElasticRange(2, 4, 4), SEED)
        core = ClusterState(Topology.uniform(nodes, 4))
        plan = schedule(
            PlaceOn(core, Placer(core), SEED),
            QueueSnapshot([PendingJob(_job("e", 4), "a", 0.0)], [], [], 0.0, {"e": ElasticRange(2, 4, 4)}),
            POLICY,
        )
        (admit,) = plan.decisions
        assert isinstance(admit, Admit) and admit.placement.groups == direct.groups


def test_quota_counts_min_as_guarantee_and_caps_the_size() -> None:
    state = ClusterState(Topology.uniform(4, 4))
    queues = [QueueSpec("a", max_gpus=12)]
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot([PendingJob(_job("e", 4), "a", 0.0)], [], queues, 0.0, {"e": ElasticRange(2, 4, 4)}),
        POLICY,
    )
    (admit,) = plan.decisions
    assert isinstance(admit, Admit) and admit.placement.dp == 3  # 12 GPUs of quota: 3 replicas of 4
    assert any("the queue has room for 12 more GPUs" in r for r in admit.reasons)
    # a queue with room for min only admits at min; one without room for min refuses by quota
    state = ClusterState(Topology.uniform(4, 4))
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot(
            [PendingJob(_job("e", 4), "a", 0.0)],
            [],
            [QueueSpec("a", max_gpus=8)],
            0.0,
            {"e": ElasticRange(2, 4, 4)},
        ),
        POLICY,
    )
    assert isinstance(plan.decisions[0], Admit) and plan.decisions[0].placement.dp == 2
    state = ClusterState(Topology.uniform(4, 4))
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot(
            [PendingJob(_job("e", 4), "a", 0.0)],
            [],
            [QueueSpec("a", max_gpus=4)],
            0.0,
            {"e": ElasticRange(2, 4, 4)},
        ),
        POLICY,
    )
    wait = plan.decisions[0]
    assert isinstance(wait, Wait) and wait.reason is WaitReason.QUEUE_FULL
    assert "this job needs 8" in wait.reasons[0]  # min, not its desired 16


def test_growth_replicas_taken_highest_first_before_any_whole_gang() -> None:
    state = ClusterState(Topology.uniform(4, 4))
    elastic = _running(state, _job("e", 3))  # min 2: replica 2 is growth
    rigid_low = _running(state, _job("r", 1))  # a whole gang that could also be evicted
    high = PendingJob(_job("h", 1, priority=5), "a", 1.0)
    ranges = {"e": ElasticRange(2, 4, 4)}
    groups_before = state.allocations["e"].groups
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot([high], [elastic, rigid_low], [], 1.0, ranges),
        POLICY,
    )
    assert not any(isinstance(d, Preempt) for d in plan.decisions)
    shrink, admit = plan.decisions
    assert isinstance(shrink, ShrinkReplicas) and shrink.for_job == "h"
    (resize,) = shrink.resizes
    assert resize.kind is ResizeKind.SHRINK and (resize.before, resize.after) == (3, 2)
    assert resize.groups == groups_before[:2]  # the highest replica went, the others did not move
    assert isinstance(admit, Admit) and admit.job_id == "h"
    assert admit.placement.groups == (groups_before[2],)
    assert state.allocations["e"].groups == groups_before[:2] and "r" in state.allocations


def test_whole_gang_only_when_growth_replicas_do_not_do() -> None:
    state = ClusterState(Topology.uniform(4, 4))
    elastic = _running(state, _job("e", 2))  # at min: no growth replica to take
    rigid_low = _running(state, _job("r", 2))
    high = PendingJob(_job("h", 1, priority=5), "a", 1.0)
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot([high], [elastic, rigid_low], [], 1.0, {"e": ElasticRange(2, 4, 4)}),
        POLICY,
    )
    assert not any(isinstance(d, ShrinkReplicas) for d in plan.decisions)
    assert isinstance(plan.decisions[0], Preempt) and isinstance(plan.decisions[1], Reserve)


def test_no_shrink_without_preemption_or_for_equal_priority() -> None:
    for policy, priority in ((QueuePolicy(preemption=False), 5), (POLICY, 0)):
        state = ClusterState(Topology.uniform(4, 4))
        elastic = _running(state, _job("e", 4))
        plan = schedule(
            PlaceOn(state, Placer(state), SEED),
            QueueSnapshot(
                [PendingJob(_job("h", 1, priority=priority), "a", 1.0)],
                [elastic],
                [],
                1.0,
                {"e": ElasticRange(2, 4, 4)},
            ),
            policy,
        )
        assert not any(isinstance(d, ShrinkReplicas | Admit) for d in plan.decisions)
        assert len(state.allocations["e"].groups) == 4


def test_later_jobs_see_the_shrunk_sizes() -> None:
    # Two high-priority jobs in one pass: the second takes the next-highest growth replica (the book and
    # the holdings follow the first shrink), and neither takes min's replicas.
    state = ClusterState(Topology.uniform(4, 4))
    elastic = _running(state, _job("e", 4))
    pending = [PendingJob(_job("h1", 1, priority=5), "a", 1.0), PendingJob(_job("h2", 1, priority=5), "a", 2.0)]
    pending.append(PendingJob(_job("h3", 1, priority=5), "a", 3.0))
    plan = schedule(
        PlaceOn(state, Placer(state), SEED),
        QueueSnapshot(pending, [elastic], [], 3.0, {"e": ElasticRange(2, 4, 4)}),
        POLICY,
    )
    sizes = [(r.before, r.after) for d in plan.decisions if isinstance(d, ShrinkReplicas) for r in d.resizes]
    assert sizes == [(4, 3), (3, 2)]
    assert [d.job_id for d in plan.decisions if isinstance(d, Admit)] == ["h1", "h2"]
    assert len(state.allocations["e"].groups) == 2 and "h3" not in state.allocations
