"""Hypothesis: elastic jobs through the queue policies' pass. Whatever mix of running (elastic and rigid)
and waiting jobs, quotas and policies: no GPU is held twice, every elastic job holds whole replicas within
its range (never below min, a waiting one admitted at most at its desired size), a queue's maximum holds
after the pass, growth replicas are only taken for a higher-priority job and only the highest ones (the kept
replicas do not move), and a whole-gang preemption is only proposed when growth replicas were not enough."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from paralleljob.core import (
    Allocation,
    ClusterState,
    JobSpec,
    ModelShape,
    PlacementInfeasible,
    Placer,
    Topology,
    cost_model,
)
from paralleljob.core.admit.admission import Admit, PlaceOn, Preempt, QueueSnapshot, ShrinkReplicas, schedule
from paralleljob.core.admit.queueing import PendingJob, QueuePolicy, QueueSpec, RunningJob
from paralleljob.core.elastic import ElasticHolding, ElasticRange, resized, shrink_for

SEED = cost_model("seed")



def jobs(priorities: st.SearchStrategy[int], least: int) -> st.SearchStrategy[list[tuple]]:
    return st.lists(
        st.tuples(
            st.sampled_from([1, 2, 4]),  # tp
            st.integers(1, 2),  # pp
            st.integers(1, 3),  # min
            st.integers(0, 2),  # max - min (running: growth replicas above min)
            st.booleans(),  # elastic
            priorities,
            st.sampled_from(["a", "b"]),
        ),
        min_size=least,
        max_size=8,
    )


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.integers(2, 4),
    running_specs=jobs(st.integers(-1, 2), 3),  # mostly fill the cluster, mostly below the waiting ones
    pending_specs=jobs(st.integers(0, 3), 1),
    cap=st.one_of(st.none(), st.integers(4, 40)),
    preemption=st.booleans(),
    backfill=st.booleans(),
)
def test_elastic_through_the_pass(nodes, running_specs, pending_specs, cap, preemption, backfill) -> None:
    state = ClusterState(Topology.uniform(nodes, 8))
    placer = Placer(state)
    ranges: dict[str, ElasticRange] = {}
    running: list[RunningJob] = []
    for i, (tp, pp, lo, extra, elastic, priority, queue) in enumerate(running_specs):
        spec = JobSpec(f"r{i}", tp, pp, lo + extra, 10.0, ModelShape(num_params_billions=1.0), priority=priority)
        try:
            placement = placer.place(spec, SEED)
        except PlacementInfeasible:
            continue
        state.allocate(Allocation(spec.job_id, placement.groups, 0.0))
        running.append(RunningJob(spec, queue, started_at=0.0))
        if elastic:
            ranges[spec.job_id] = ElasticRange(lo, lo + extra + 1, lo + extra)
    pending: list[PendingJob] = []
    for i, (tp, pp, lo, extra, elastic, priority, queue) in enumerate(pending_specs):
        spec = JobSpec(f"p{i}", tp, pp, lo + extra, 10.0, ModelShape(num_params_billions=1.0), priority=priority)
        pending.append(PendingJob(spec, queue, float(i), 100.0))
        if elastic:
            ranges[spec.job_id] = ElasticRange(lo, lo + extra, lo + extra)
    before = {jid: a.groups for jid, a in state.allocations.items()}
    held_gpus = {q: sum(r.job.num_gpus for r in running if r.queue == q) for q in ("a", "b")}
    queues = [QueueSpec("a", max_gpus=cap), QueueSpec("b")]
    policy = QueuePolicy(preemption=preemption, backfill=backfill)
    # what shrink_for alone says for each pending job on the state before the pass (a whole-gang Preempt
    # is the fallback when growth replicas would not do)
    holdings = [ElasticHolding(r.job, before[r.job.job_id], ranges[r.job.job_id]) for r in running
                if r.job.job_id in ranges]
    plan = schedule(PlaceOn(state, placer, SEED), QueueSnapshot(pending, running, queues, 0.0, ranges), policy)

    owners: dict[int, str] = {}
    for jid, allocation in state.allocations.items():
        for gpu in allocation.gpus:
            assert gpu not in owners, f"GPU {gpu} held by {owners[gpu]} and {jid}"
            owners[gpu] = jid
    priority = {r.job.job_id: r.job.priority for r in running} | {p.job.job_id: p.job.priority for p in pending}
    specs = {r.job.job_id: r.job for r in running} | {p.job.job_id: p.job for p in pending}
    for jid, rng in ranges.items():
        allocation = state.allocations.get(jid)
        if allocation is None:
            continue
        spec = specs[jid]
        assert len(allocation.groups) % spec.pp == 0
        replicas = len(allocation.groups) // spec.pp
        assert rng.min <= replicas <= rng.desired or (jid in before and replicas <= spec.dp)
        assert replicas >= rng.min
    admitted = {d.job_id: d for d in plan.decisions if isinstance(d, Admit)}
    added_a = sum(len(state.allocations[j].gpus) for j in admitted if specs[j] and j.startswith("p")
                  and next(p.queue for p in pending if p.job.job_id == j) == "a")
    if cap is not None and held_gpus["a"] <= cap:
        shrunk_a = sum(
            (r.before - r.after) * specs[r.job_id].tp * specs[r.job_id].pp
            for d in plan.decisions if isinstance(d, ShrinkReplicas) for r in d.resizes
            if next(x.queue for x in running if x.job.job_id == r.job_id) == "a"
        )
        assert held_gpus["a"] - shrunk_a + added_a <= cap
    for d in plan.decisions:
        event(type(d).__name__)
        if isinstance(d, Admit) and d.job_id in ranges and d.placement.dp > ranges[d.job_id].min:
            event("elastic admitted above min")
        if isinstance(d, ShrinkReplicas):
            assert preemption and d.for_job in admitted
            for r in d.resizes:
                assert priority[r.job_id] < priority[d.for_job]
                assert ranges[r.job_id].min <= r.after < r.before
                assert r.groups == before[r.job_id][: len(r.groups)]  # highest replicas went, none moved
        if isinstance(d, Preempt) and not any(isinstance(x, ShrinkReplicas) for x in plan.decisions):
            # nothing was shrunk earlier in the pass: the state growth replicas were judged on is the one
            # before it, less what was admitted in front of this job
            trial = ClusterState(Topology.uniform(nodes, 8))
            for jid, groups in before.items():
                trial.allocate(Allocation(jid, groups, 0.0))
            for jid, a in admitted.items():
                trial.allocate(Allocation(jid, a.placement.groups, 0.0))
            waiting = resized(specs[d.for_job], ranges[d.for_job].min) if d.for_job in ranges else specs[d.for_job]
            assert shrink_for(trial, Placer(trial), SEED, waiting, holdings) is None
