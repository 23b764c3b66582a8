"""Hypothesis properties of one scheduling pass: quotas, backfill, preemption, starvation."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, JobSpec, PlacementInfeasible, Placer, Topology, cost_model
from paralleljob.core.admit.admission import Admit, PlaceOn, Preempt, QueueSnapshot, Reserve, schedule
from paralleljob.core.admit.queueing import PendingJob, QueueBook, QueuePolicy, QueueSpec, RunningJob, order

SEED = cost_model("seed")
QUEUES = ["a", "b", "c"]

shapes = st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 2), st.integers(1, 3))
running_jobs = st.lists(
    st.tuples(shapes, st.sampled_from(QUEUES), st.integers(-2, 2), st.floats(0, 500), st.floats(1, 2000)),
    max_size=6,
)
pending_jobs = st.lists(
    st.tuples(shapes, st.sampled_from(QUEUES), st.integers(-2, 4), st.floats(0, 900), st.floats(1, 2000)),
    min_size=1,
    max_size=7,
)
queue_specs = st.tuples(*[st.tuples(st.floats(0.5, 3), st.integers(0, 16), st.integers(0, 40)) for _ in QUEUES])
policies = st.builds(
    QueuePolicy,
    ordering=st.sampled_from(["fifo", "priority"]),
    fair_share=st.booleans(),
    backfill=st.booleans(),
    preemption=st.booleans(),
    max_wait_s=st.sampled_from([300.0, 1e9]),
)
NOW = 1000.0


def setup(nodes, running_spec, pending_spec, queue_spec):
    state = ClusterState(Topology.uniform(nodes, 8, levels=[("rack", 2, 200.0)] if nodes >= 4 else []))
    placer = Placer(state)
    queues = []
    for name, (weight, guarantee, extra) in zip(QUEUES, queue_spec, strict=True):
        queues.append(QueueSpec(name, weight, guarantee, guarantee + extra if extra < 40 else None))
    running = []
    for i, ((tp, pp, dp), queue, prio, ckpt, end) in enumerate(running_spec):
        job = JobSpec(f"run-{i}", tp, pp, dp, 10.0, priority=prio)
        try:
            placement = placer.place(job, SEED)
        except PlacementInfeasible:
            continue
        state.allocate(Allocation(job.job_id, placement.groups, 10.0))
        running.append(RunningJob(job, queue, 0.0, last_checkpoint_at=ckpt, expected_end_at=NOW + end))
    pending = [
        PendingJob(JobSpec(f"wait-{i}", tp, pp, dp, 10.0, priority=prio), queue, submitted, runtime)
        for i, ((tp, pp, dp), queue, prio, submitted, runtime) in enumerate(pending_spec)
    ]
    return state, placer, queues, running, pending


@given(st.integers(1, 5), running_jobs, pending_jobs, queue_specs, policies)
def test_scheduling_pass_properties(nodes, running_spec, pending_spec, queue_spec, policy):
    state, placer, queues, running, pending = setup(nodes, running_spec, pending_spec, queue_spec)
    before = QueueBook.of(queues, running, 1, 1.0)
    plan = schedule(PlaceOn(state, placer, SEED), QueueSnapshot(pending, running, queues, NOW), policy)
    by_id = {p.job.job_id: p for p in pending}
    after = QueueBook.of(queues, running, 1, 1.0)
    for admit in plan.admitted():
        after.add(admit.queue, by_id[admit.job_id].job)
    # quotas: no admission pushes a queue above its maximum
    for spec in queues:
        admitted_here = [a for a in plan.admitted() if a.queue == spec.name]
        if spec.max_gpus is not None and admitted_here:
            assert after.used(spec.name).gpus <= spec.max_gpus
        assert after.used(spec.name).gpus >= before.used(spec.name).gpus
    # every pending job gets exactly one verdict of its own (a Preempt names the job it serves)
    verdicts = [d.job_id for d in plan.decisions if not isinstance(d, Preempt)]
    assert sorted(verdicts) == sorted(by_id)
    preempts = [d for d in plan.decisions if isinstance(d, Preempt)]
    reserves = [d for d in plan.decisions if isinstance(d, Reserve)]
    assert len(reserves) <= 1 and len(preempts) <= len(reserves)
    for preempt in preempts:
        # preemption only when it lets a more deserving job run
        head = by_id[preempt.for_job]
        victims = {r.job.job_id: r for r in running}
        for victim in preempt.victims:
            v = victims[victim]
            assert v.job.priority < head.job.priority or v.queue != head.queue
        # once the victims stop (and jobs backfilled to end within the grace period have ended), the
        # job they were preempted for fits
        start_by = next(r.start_by for r in reserves if r.job_id == preempt.for_job)
        gone = list(preempt.victims) + [
            a.job_id
            for a in plan.admitted()
            if any("backfilled: ends by" in reason for reason in a.reasons)
            and NOW + (by_id[a.job_id].expected_runtime_s or math.inf) <= start_by
        ]
        released = [state.release(v) for v in gone]
        placer.place(head.job, SEED)  # raises if the preemption would not let it run
        for allocation in reversed(released):
            assert allocation is not None
            state.allocate(allocation)
    if reserves and not preempts and math.isfinite(reserves[0].start_by):
        # backfill never delays the head: at its shadow time it still fits
        head = by_id[reserves[0].job_id]
        ends = {r.job.job_id: r.expected_end_at for r in running}
        for admit in plan.admitted():
            if any("backfilled: ends by" in reason for reason in admit.reasons):
                runtime = by_id[admit.job_id].expected_runtime_s
                assert runtime is not None
                ends[admit.job_id] = NOW + runtime
        for job_id, end in ends.items():
            if end is not None and end <= reserves[0].start_by:
                state.release(job_id)
        placer.place(head.job, SEED)
    if not policy.backfill and reserves:
        head_index = [d.job_id for d in plan.decisions if not isinstance(d, Preempt)].index(reserves[0].job_id)
        later = [d for d in plan.decisions[head_index + 1 :] if isinstance(d, Admit)]
        assert not later, "without backfill nothing starts behind a blocked head"


@given(pending_jobs, st.floats(0, 5000))
def test_starving_jobs_are_ordered_first(pending_spec, now):
    _, _, _, _, pending = setup(1, [], pending_spec, ((1, 0, 40),) * 3)
    policy = QueuePolicy(max_wait_s=300.0)
    book = QueueBook.of([QueueSpec(q) for q in QUEUES], [], 8, 640.0)
    ordered = order(pending, book, policy, now)
    starved = [p.submitted_at for p in ordered if now - p.submitted_at >= 300.0]
    assert [now - p.submitted_at >= 300.0 for p in ordered] == sorted(
        (now - p.submitted_at >= 300.0 for p in ordered), reverse=True
    )
    assert starved == sorted(starved)
