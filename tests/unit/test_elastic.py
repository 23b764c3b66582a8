"""Elastic data parallelism in the core: admission at the largest size that fits, growth next to the
existing replicas, the crossing rule, shrinking growth replicas first, dropping broken replicas."""

from __future__ import annotations

import re

import pytest

from paralleljob.core import Allocation, ClusterState, GPUHealth, JobSpec, ModelShape, Placer, Topology, cost_model
from paralleljob.core.elastic import (
    ElasticHolding,
    ElasticRange,
    ResizeKind,
    admission_size,
    drop_broken,
    plan_growth,
    resized,
    shrink_for,
    worth_adding,
)
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.timing.steptime import StepTimeModel

SEED = cost_model("seed")
STEP = StepTimeModel()


def _job(dp: int = 4, tp: int = 4, pp: int = 1, job_id: str = "e", priority: int = 0) -> JobSpec:
    return JobSpec(job_id, tp, pp, dp, 0.0, ModelShape(num_params_billions=7.0), priority=priority)


def _admit(state: ClusterState, job: JobSpec, rng: ElasticRange) -> JobSpec:
    placement, _ = admission_size(state, Placer(state), job, rng, SEED)
    assert placement is not None
    state.allocate(Allocation(job.job_id, placement.groups, 0.0))
    return resized(job, placement.dp)


def test_range_is_validated_with_a_message() -> None:
    with pytest.raises(InvalidRequest, match=re.escape("outside the elastic range minData..maxData = 2..4")):
        ElasticRange(2, 4, 5)
    with pytest.raises(InvalidRequest, match="above maxData"):
        ElasticRange(3, 2, 2)


def test_admitted_at_the_largest_size_that_fits_never_below_min() -> None:
    state = ClusterState(Topology.uniform(3, 4))  # room for 3 replicas of TP4
    placement, reasons = admission_size(state, Placer(state), _job(), ElasticRange(2, 4, 4), SEED)
    assert placement is not None and placement.dp == 3
    assert "admitted at 3 of 2..4 replicas" in reasons[0]
    state.allocate(Allocation("x", placement.groups[:2], 0.0))
    placement, reasons = admission_size(state, Placer(state), _job(job_id="f"), ElasticRange(2, 4, 4), SEED)
    assert placement is None and "minimum of 2" in reasons[0]


def test_quota_room_caps_the_admitted_size() -> None:
    state = ClusterState(Topology.uniform(4, 4))
    placement, reasons = admission_size(state, Placer(state), _job(), ElasticRange(1, 4, 4), SEED, gpu_room=8)
    assert placement is not None and placement.dp == 2
    assert any("room for 8 more GPUs" in r for r in reasons)


def test_grows_next_to_existing_replicas_without_moving_them() -> None:
    topo = Topology.uniform(8, 4, levels=[("rack", 4, 100.0)])
    state = ClusterState(topo)
    blocker = Allocation("b", tuple((g,) for g in range(4, 16)), 0.0)  # nodes 1-3 full
    state.allocate(blocker)
    job = _admit(state, _job(), ElasticRange(1, 4, 4))
    assert job.dp == 4  # rack 1 (nodes 4-7) has room for 3 more, but the placer took the whole free rack
    state.release(job.job_id)
    state.allocate(Allocation("c", tuple((g,) for g in range(20, 32)), 0.0))  # only nodes 0 and 4 free now
    job = _admit(state, _job(), ElasticRange(1, 4, 4))
    before = state.allocations[job.job_id].groups
    state.release("b")  # rack 0 frees
    growth = plan_growth(state, Placer(state), job, before, ElasticRange(1, 4, 4), SEED, STEP)
    assert growth.resize is not None and growth.resize.kind is ResizeKind.GROW
    assert growth.resize.groups[: len(before)] == before  # nobody moved
    assert growth.resize.after == 4
    assert growth.held_back == ""


def test_growth_held_back_for_a_rigid_job_and_at_desired() -> None:
    state = ClusterState(Topology.uniform(4, 4))
    job = _admit(state, _job(), ElasticRange(2, 4, 2))
    groups = state.allocations["e"].groups
    held = plan_growth(state, Placer(state), job, groups, ElasticRange(2, 4, 2), SEED, STEP)
    assert held.resize is None and "desired size 2" in held.held_back
    held = plan_growth(state, Placer(state), job, groups, ElasticRange(2, 4, 4), SEED, STEP, rigid_waiting="r")
    assert held.resize is None and "r waits" in held.held_back


def test_crossing_a_slower_level_only_when_throughput_gains() -> None:
    # Tiny compute, large model: a ring across the slow cluster level costs more than a replica brings.
    heavy = JobSpec("h", 4, 1, 1, 0.0, ModelShape(num_params_billions=70.0, seq_len=16))
    assert not worth_adding(STEP, heavy, 0.0, 10_000.0)[0]
    assert worth_adding(STEP, heavy, 0.0, 0.0)[0]
    topo = Topology.uniform(2, 4, inter_node_bw_gbps=0.001)
    state = ClusterState(topo)
    state.allocate(Allocation("h", ((0, 1, 2, 3),), 0.0))
    growth = plan_growth(state, Placer(state), heavy, ((0, 1, 2, 3),), ElasticRange(1, 2, 2), SEED, STEP)
    assert growth.resize is None and "would cross the cluster" in growth.held_back and "not worth" in growth.held_back


def test_shrink_takes_growth_replicas_highest_first_before_whole_gangs() -> None:
    state = ClusterState(Topology.uniform(4, 4))
    job = _admit(state, _job(priority=0), ElasticRange(2, 4, 4))
    groups = state.allocations["e"].groups
    rigid = _job(dp=1, job_id="r", priority=5)
    shrink = shrink_for(state, Placer(state), SEED, rigid, [ElasticHolding(job, groups, ElasticRange(2, 4, 4))])
    assert shrink is not None
    (resize,) = shrink.resizes
    assert resize.kind is ResizeKind.SHRINK and resize.after == 3
    assert resize.groups == groups[:3]  # replica 3 (the highest) went
    assert set(shrink.placement.gpus) == set(groups[3])
    assert state.allocations["e"].groups == groups  # the state is as it was
    big = _job(dp=3, job_id="big", priority=5)
    assert shrink_for(state, Placer(state), SEED, big, [ElasticHolding(job, groups, ElasticRange(2, 4, 4))]) is None
    low = _job(dp=1, job_id="low", priority=0)
    assert shrink_for(state, Placer(state), SEED, low, [ElasticHolding(job, groups, ElasticRange(2, 4, 4))]) is None


def test_broken_replica_dropped_while_at_or_above_min() -> None:
    state = ClusterState(Topology.uniform(3, 4))
    job = _admit(state, _job(), ElasticRange(2, 4, 4))
    groups = state.allocations["e"].groups
    state.set_health(groups[1][0], GPUHealth.OFFLINE)
    drop = drop_broken(state, job, groups, ElasticRange(2, 4, 4))
    assert drop is not None and drop.after == 2 and drop.groups == (groups[0], groups[2])
    state.set_health(groups[0][0], GPUHealth.OFFLINE)
    assert drop_broken(state, job, groups, ElasticRange(2, 4, 4)) is None  # would leave 1 < min
