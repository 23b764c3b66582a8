"""Queue policies: ordering, fair share, quotas, backfill, preemption, starvation, Jain's index."""

from __future__ import annotations

import pytest

from paralleljob.core import Allocation, ClusterState, JobSpec, Placer, Topology, cost_model
from paralleljob.core.admit.admission import Admit, PlaceOn, Preempt, QueueSnapshot, Reserve, Wait, schedule
from paralleljob.core.admit.queueing import PendingJob, QueueBook, QueuePolicy, QueueSpec, RunningJob, order

SEED = cost_model("seed")


def cluster(nodes: int = 2) -> tuple[ClusterState, Placer]:
    state = ClusterState(Topology.uniform(nodes, 8))
    return state, Placer(state)


def run_job(state: ClusterState, placer: Placer, job: JobSpec, queue: str = "a", **kw) -> RunningJob:
    placement = placer.place(job, SEED)
    state.allocate(Allocation(job.job_id, placement.groups, job.memory_per_gpu_gb))
    return RunningJob(job, queue, started_at=kw.pop("started_at", 0.0), **kw)


def job(name: str, gpus: int, priority: int = 0, tp: int = 1) -> JobSpec:
    return JobSpec(name, tp, 1, gpus // tp, 10.0, priority=priority)


def kinds(plan) -> dict[str, str]:
    out = {}
    for d in plan.decisions:
        key = getattr(d, "job_id", None) or d.for_job
        out.setdefault(key, type(d).__name__)
    return out


def test_priority_with_aging_overtakes_and_fifo_ignores_priority():
    book = QueueBook.of([QueueSpec("a")], [], 16, 16 * 80.0)
    old_low = PendingJob(job("old", 1, priority=0), "a", submitted_at=0.0)
    new_high = PendingJob(job("new", 1, priority=5), "a", submitted_at=9 * 3600.0)
    at = 10 * 3600.0
    assert [p.job.job_id for p in order([old_low, new_high], book, QueuePolicy(aging_per_hour=0.1), at)] == [
        "new",
        "old",
    ]
    assert [p.job.job_id for p in order([old_low, new_high], book, QueuePolicy(aging_per_hour=1.0), at)] == [
        "old",
        "new",
    ]
    assert [p.job.job_id for p in order([new_high, old_low], book, QueuePolicy(ordering="fifo"), at)] == [
        "old",
        "new",
    ]


def test_starving_jobs_go_first():
    book = QueueBook.of([QueueSpec("a")], [], 16, 16 * 80.0)
    starved = PendingJob(job("starved", 1, priority=-10), "a", submitted_at=0.0)
    vip = PendingJob(job("vip", 1, priority=100), "a", submitted_at=100.0)
    policy = QueuePolicy(max_wait_s=1000.0)
    assert order([vip, starved], book, policy, now=2000.0)[0].job.job_id == "starved"


def test_fair_share_lets_the_light_tenant_go_first():
    state, placer = cluster()
    running = [run_job(state, placer, job("heavy-1", 8), queue="heavy")]
    pending = [
        PendingJob(job("heavy-2", 4), "heavy", submitted_at=1.0),
        PendingJob(job("light-1", 4), "light", submitted_at=2.0),
        PendingJob(job("light-2", 4), "light", submitted_at=3.0),
    ]
    queues = [QueueSpec("heavy"), QueueSpec("light")]
    plan = schedule(PlaceOn(state, placer, SEED), QueueSnapshot(pending, running, queues, 10.0), QueuePolicy())
    admitted = [d.job_id for d in plan.admitted()]
    assert admitted == ["light-1", "light-2"]
    assert kinds(plan)["heavy-2"] == "Reserve"
    assert plan.jain_index == pytest.approx(1.0)  # both tenants now hold 8 GPUs


def test_weights_scale_the_fair_share():
    book = QueueBook.of([QueueSpec("big", weight=3.0), QueueSpec("small")], [], 16, 16 * 80.0)
    book.add("big", job("b", 6))
    book.add("small", job("s", 2))
    assert book.dominant_share("big") == pytest.approx(book.dominant_share("small"))
    assert book.jain_index() == pytest.approx(1.0)
    book.add("small", job("s2", 6))
    assert book.jain_index() < 0.9


def test_queue_maximum_is_never_exceeded():
    state, placer = cluster()
    pending = [PendingJob(job("a1", 4), "a", 0.0), PendingJob(job("a2", 4), "a", 1.0)]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, [], [QueueSpec("a", max_gpus=6)], 5.0),
        QueuePolicy(),
    )
    assert [d.job_id for d in plan.admitted()] == ["a1"]
    (wait,) = plan.of("a2")
    assert isinstance(wait, Wait) and "above its maximum of 6" in wait.reasons[0]


def test_without_backfill_everything_waits_behind_the_head():
    state, placer = cluster()
    running = [run_job(state, placer, job("r", 12), expected_end_at=100.0)]
    pending = [PendingJob(job("big", 8, tp=8), "a", 0.0), PendingJob(job("small", 2), "a", 1.0, 10.0)]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, running, [QueueSpec("a")], 5.0),
        QueuePolicy(backfill=False),
    )
    reserve, wait = plan.of("big")[0], plan.of("small")[0]
    assert isinstance(reserve, Reserve) and reserve.start_by == 100.0
    assert isinstance(wait, Wait) and "waits behind big" in wait.reasons[0]


def test_backfill_admits_jobs_that_cannot_delay_the_head():
    state, placer = cluster()
    # node 0: 6 GPUs until t=100 and 2 free; node 1: full until t=1000
    state.allocate(Allocation("r1", tuple((g,) for g in range(6)), 10.0))
    state.allocate(Allocation("r2", tuple((g,) for g in range(8, 16)), 10.0))
    running = [
        RunningJob(job("r1", 6), "a", 0.0, expected_end_at=100.0),
        RunningJob(job("r2", 8), "a", 0.0, expected_end_at=1000.0),
    ]
    pending = [
        PendingJob(job("big", 8, tp=8), "a", 0.0),  # will get node 0 at t=100, including its 2 free GPUs
        PendingJob(job("short", 2), "a", 1.0, expected_runtime_s=50.0),  # ends at 55 < 100
        PendingJob(job("long", 2), "a", 2.0, expected_runtime_s=500.0),  # would hold GPUs the head needs
    ]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, running, [QueueSpec("a")], 5.0),
        QueuePolicy(preemption=False),
    )
    assert kinds(plan) == {"big": "Reserve", "short": "Admit", "long": "Wait"}
    (admit,) = plan.admitted()
    assert "backfilled: ends by 55s" in admit.reasons[0]


def test_backfill_may_use_gpus_the_head_will_not_need():
    state, placer = cluster(3)
    running = [run_job(state, placer, job("r", 12), expected_end_at=100.0)]  # node 0 full, node 1 half
    pending = [
        PendingJob(job("big", 16, tp=8), "a", 0.0),  # needs two whole nodes: node 2 and (later) node 1 or 0
        PendingJob(job("long", 2), "a", 2.0, expected_runtime_s=1e6),
    ]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, running, [QueueSpec("a")], 5.0),
        QueuePolicy(preemption=False),
    )
    reserve = plan.of("big")[0]
    assert isinstance(reserve, Reserve)
    long = plan.of("long")[0]
    if isinstance(long, Admit):
        assert "around the GPUs reserved for big" in long.reasons[0]
        # the head still fits at its shadow time
        state.release("r")
        placer.place(JobSpec("big", 8, 1, 2, 10.0), SEED)
    else:
        assert isinstance(long, Wait)


def test_preemption_frees_one_node_at_the_least_lost_work():
    state, placer = cluster()
    now = 1000.0
    running = [
        run_job(state, placer, job("fresh-ckpt", 8), last_checkpoint_at=990.0),  # node 0, 10 s of work at risk
        run_job(state, placer, job("stale-ckpt", 8), last_checkpoint_at=100.0),  # node 1, 900 s at risk
    ]
    pending = [PendingJob(job("urgent", 8, priority=10, tp=8), "a", now)]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, running, [QueueSpec("a")], now),
        QueuePolicy(),
    )
    preempt = plan.decisions[0]
    assert isinstance(preempt, Preempt)
    assert preempt.victims == ("fresh-ckpt",) and preempt.for_job == "urgent"
    assert preempt.lost_work_gpu_s == pytest.approx(80.0)
    assert preempt.grace_period_s == 120.0
    reserve = plan.decisions[1]
    assert isinstance(reserve, Reserve) and reserve.start_by == now + 120.0
    assert all(state.allocations.keys() >= {"fresh-ckpt", "stale-ckpt"} for _ in [0])  # nothing stopped yet


def test_no_preemption_of_equal_priority_or_unpreemptible_jobs():
    state, placer = cluster(1)
    running = [run_job(state, placer, job("peer", 8, priority=10)),]
    pending = [PendingJob(job("urgent", 8, priority=10, tp=8), "a", 0.0)]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, running, [QueueSpec("a")], 5.0),
        QueuePolicy(),
    )
    assert not any(isinstance(d, Preempt) for d in plan.decisions)
    state2, placer2 = cluster(1)
    running2 = [run_job(state2, placer2, job("pinned", 8), preemptible=False)]
    plan2 = schedule(
        PlaceOn(state2, placer2, SEED),
        QueueSnapshot(pending, running2, [QueueSpec("a")], 5.0),
        QueuePolicy(),
    )
    assert not any(isinstance(d, Preempt) for d in plan2.decisions)


def test_a_queue_below_its_guarantee_reclaims_from_a_borrower():
    state, placer = cluster(1)
    queues = [QueueSpec("owner", guaranteed_gpus=8), QueueSpec("borrower", guaranteed_gpus=0)]
    running = [run_job(state, placer, job("borrowed", 8), queue="borrower", last_checkpoint_at=0.0)]
    pending = [PendingJob(job("mine", 4), "owner", 10.0)]
    plan = schedule(PlaceOn(state, placer, SEED), QueueSnapshot(pending, running, queues, 20.0), QueuePolicy())
    preempt = plan.decisions[0]
    assert isinstance(preempt, Preempt) and preempt.victims == ("borrowed",)
    assert any("borrows above its guarantee" in r for r in preempt.reasons)


def test_permanently_unplaceable_jobs_are_flagged_not_reserved():
    state, placer = cluster(1)
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot([PendingJob(job("huge", 16, tp=16), "a", 0.0)], [], [QueueSpec("a")], 1.0),
        QueuePolicy(),
    )
    (wait,) = plan.decisions
    assert isinstance(wait, Wait) and wait.permanent


def test_queue_spec_validation():
    with pytest.raises(ValueError, match="weight"):
        QueueSpec("a", weight=0)
    with pytest.raises(ValueError, match="below its guarantee"):
        QueueSpec("a", guaranteed_gpus=8, max_gpus=4)
    with pytest.raises(ValueError, match="ordering"):
        QueuePolicy(ordering="random")


def test_a_preemption_names_every_node_its_victim_runs_on():
    # "preempting 1 job(s) in node node-0" for a victim on node-0 and node-1 hid that node-1 stops too
    state, placer = cluster(2)
    now = 1000.0
    running = [run_job(state, placer, job("wide", 16, tp=8), last_checkpoint_at=990.0)]
    assert len({state.topology.gpu_node[g] for g in state.allocations["wide"].gpus}) == 2
    pending = [PendingJob(job("urgent", 8, priority=10, tp=8), "a", now)]
    plan = schedule(
        PlaceOn(state, placer, SEED),
        QueueSnapshot(pending, running, [QueueSpec("a")], now),
        QueuePolicy(),
    )
    preempt = plan.decisions[0]
    assert isinstance(preempt, Preempt) and preempt.victims == ("wide",)
    assert preempt.reasons[0].startswith("preempting 1 job(s) in nodes node-0, node-1 loses"), preempt.reasons[0]
