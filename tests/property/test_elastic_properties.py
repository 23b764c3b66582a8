"""Hypothesis: no sequence of grow / shrink / fail / preempt / scale leaves a running elastic job below its
min (or above max), a replica with the wrong number of GPUs, or two replicas on one GPU; growth and drops
never move a running replica. A rigid blocker holds part of the cluster at first, so jobs start small and the
sequences do grow them (checked by hand: about 20 growths, 40 shrinks and 15 drops per 120 examples)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, GPUHealth, JobSpec, ModelShape, Placer, Topology, cost_model
from paralleljob.core.elastic import (
    ElasticHolding,
    ElasticRange,
    admission_size,
    drop_broken,
    plan_growth,
    resized,
    shrink_for,
    trim_to_desired,
)
from paralleljob.core.timing.steptime import StepTimeModel

SEED = cost_model("seed")
STEP = StepTimeModel()

ops = st.lists(
    st.one_of(
        st.tuples(st.just("grow"), st.integers(0, 2)),
        st.tuples(st.just("fail"), st.integers(0, 63)),
        st.tuples(st.just("heal"), st.integers(0, 63)),
        st.tuples(st.just("preempt"), st.integers(1, 3)),
        st.tuples(st.just("finish_rigid"), st.integers(0, 5)),
        st.tuples(st.just("scale"), st.integers(1, 6)),
    ),
    max_size=25,
)


def _check(state: ClusterState, jobs: dict[str, tuple[JobSpec, ElasticRange]]) -> None:
    owners: dict[int, str] = {}
    for jid, allocation in state.allocations.items():
        for gpu in allocation.gpus:
            assert gpu not in owners, f"GPU {gpu} held by {owners[gpu]} and {jid}"
            owners[gpu] = jid
            assert state.owner[gpu] == jid
    for jid, (job, rng) in jobs.items():
        allocation = state.allocations.get(jid)
        if allocation is None:
            continue  # not running (requeued by its failure policy)
        assert rng.min <= job.dp <= rng.max
        assert len(allocation.groups) == job.dp * job.pp
        assert all(len(group) == job.tp for group in allocation.groups)


@settings(max_examples=120, deadline=None)
@given(
    nodes=st.integers(2, 6),
    gpn=st.sampled_from([4, 8]),
    tp=st.sampled_from([1, 2, 4]),
    pp=st.integers(1, 2),
    lo=st.integers(1, 3),
    extra=st.integers(0, 3),
    blocked=st.integers(0, 3),
    sequence=ops,
)
def test_no_sequence_breaks_the_elastic_invariants(
    nodes: int, gpn: int, tp: int, pp: int, lo: int, extra: int, blocked: int, sequence: list[tuple[str, int]]
) -> None:
    blocked = min(blocked, nodes - 1)
    topo = Topology.uniform(nodes, gpn, levels=[("rack", 2, 100.0)])
    state = ClusterState(topo)
    placer = Placer(state)
    model = ModelShape(num_params_billions=7.0)
    jobs: dict[str, tuple[JobSpec, ElasticRange]] = {}
    # a rigid job holds part of the cluster at first, so that the elastic jobs start small and can grow later
    held = tuple((g,) for g in range(blocked * gpn))
    if held:
        state.allocate(Allocation("blocker", held, 0.0))
    for i in range(2):
        rng = ElasticRange(lo, lo + extra, lo + extra)
        job = JobSpec(f"e{i}", tp, pp, rng.max, 0.0, model, priority=i)
        placement, _ = admission_size(state, placer, job, rng, SEED)
        if placement is not None:
            state.allocate(Allocation(job.job_id, placement.groups, 0.0))
            jobs[job.job_id] = (resized(job, placement.dp), rng)
    _check(state, jobs)
    rigid = 0
    for op, arg in sequence:
        running = [jid for jid in jobs if jid in state.allocations]
        if op == "grow" and running:
            jid = running[arg % len(running)]
            job, rng = jobs[jid]
            before = state.allocations[jid].groups
            growth = plan_growth(state, placer, job, before, rng, SEED, STEP)
            assert state.allocations[jid].groups == before  # deciding changes nothing
            if growth.resize is not None:
                assert growth.resize.groups[: len(before)] == before  # the running replicas never move
                state.release(jid)
                state.allocate(Allocation(jid, growth.resize.groups, 0.0))
                jobs[jid] = (resized(job, growth.resize.after), rng)
        elif op in ("fail", "heal"):
            gpu = arg % topo.num_gpus
            state.set_health(gpu, GPUHealth.OFFLINE if op == "fail" else GPUHealth.HEALTHY)
            owner = state.owner[gpu]
            if op == "fail" and owner in jobs:
                job, rng = jobs[owner]
                before_drop = state.allocations[owner].groups
                drop = drop_broken(state, job, before_drop, rng)
                state.release(owner)
                if drop is not None:
                    assert set(drop.groups) <= set(before_drop)  # the kept replicas stay where they were
                    state.allocate(Allocation(owner, drop.groups, 0.0))
                    jobs[owner] = (resized(job, drop.after), rng)
                # else: below min, the failure policy requeues it whole (it no longer runs)
            elif op == "fail" and owner is not None:
                state.release(owner)  # a rigid job fails whole
        elif op == "preempt":
            rigid += 1
            waiting = JobSpec(f"r{rigid}", tp, pp, arg, 0.0, model, priority=10)
            holdings = [ElasticHolding(jobs[j][0], state.allocations[j].groups, jobs[j][1]) for j in running]
            shrink = shrink_for(state, placer, SEED, waiting, holdings)
            if shrink is not None:
                for resize in shrink.resizes:
                    job, rng = jobs[resize.job_id]
                    state.release(resize.job_id)
                    state.allocate(Allocation(resize.job_id, resize.groups, 0.0))
                    jobs[resize.job_id] = (resized(job, resize.after), rng)
                state.allocate(Allocation(waiting.job_id, shrink.placement.groups, 0.0))
        elif op == "finish_rigid":
            others = [j for j in state.allocations if j not in jobs]
            if others:
                state.release(others[arg % len(others)])
        elif op == "scale" and running:
            jid = running[arg % len(running)]
            job, rng = jobs[jid]
            desired = min(max(arg, rng.min), rng.max)
            jobs[jid] = (job, ElasticRange(rng.min, rng.max, desired))
            trim = trim_to_desired(job, state.allocations[jid].groups, jobs[jid][1])
            if trim is not None:
                state.release(jid)
                state.allocate(Allocation(jid, trim.groups, 0.0))
                jobs[jid] = (resized(job, trim.after), jobs[jid][1])
        _check(state, jobs)
