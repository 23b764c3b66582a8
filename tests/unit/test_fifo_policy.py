"""The core's strict FIFO pass (core.admit.fifo): the checks in their order, each with its typed reason, and
properties on random queues: a blocked head holds its line, queues never block each other, caps hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paralleljob.core import Allocation, ClusterState, JobSpec, Placer, Topology, cost_model
from paralleljob.core.admit.admission import Admit, PlaceOn, Wait
from paralleljob.core.admit.fifo import FifoJob, FifoLines, FifoPolicy, schedule_fifo
from paralleljob.core.admit.gates import Gate, WaitReason

SEED = cost_model("seed")


def cluster(nodes: int = 2) -> tuple[ClusterState, Placer]:
    state = ClusterState(Topology.uniform(nodes, 8))
    return state, Placer(state)


def fj(name: str, gpus: int, queue: str = "a", at: float = 0.0, priority: int = 0, tp: int = 1, **kw) -> FifoJob:
    return FifoJob(JobSpec(name, tp, 1, gpus // tp, 10.0, priority=priority), queue, at, **kw)


def verdicts(decisions) -> dict[str, object]:
    return {d.job_id: "admit" if isinstance(d, Admit) else d.reason for d in decisions}


def test_a_head_that_does_not_fit_holds_its_line_but_not_other_queues() -> None:
    state, placer = cluster(2)
    state.allocate(Allocation("held", tuple((g,) for g in range(8)), 10.0))  # 8 of 16 GPUs held
    jobs = [fj("big", 16, "a", 1.0), fj("small", 1, "a", 2.0), fj("other", 1, "b", 3.0)]
    decisions = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(jobs))
    assert verdicts(decisions) == {"big": WaitReason.UNSCHEDULABLE, "small": WaitReason.WAITING, "other": "admit"}
    waiting = next(d for d in decisions if d.job_id == "small")
    assert isinstance(waiting, Wait)
    assert waiting.reasons == ("waiting behind the blocked head of queue a (strict FIFO)",)
    assert "other" in state.allocations, "an admission is allocated in the state"
    best_effort = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(jobs[:2]), FifoPolicy(strict=False))
    assert verdicts(best_effort) == {"big": WaitReason.UNSCHEDULABLE, "small": "admit"}


def test_jobs_behind_a_head_decided_before_wait_as_if_it_were_decided_first() -> None:
    # The shell's waiting memo decides only the jobs that joined a line behind a head known not to fit:
    # they get exactly what one pass over the whole line gives them, and other queues are untouched.
    state, placer = cluster(2)
    state.allocate(Allocation("held", tuple((g,) for g in range(8)), 10.0))
    backing = Gate(WaitReason.BACKING_OFF, "its gang was refused; tries again at 12:00", blocks_line=True)
    whole = [fj("big", 16, "a", 1.0), fj("small", 1, "a", 2.0), fj("held", 1, "a", 3.0, gate=backing)]
    newcomers = [*whole[1:], fj("other", 1, "b", 4.0)]
    alone = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(newcomers, blocked={"a": "big"}))
    state.release("other")
    together = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(whole + newcomers[2:]))
    assert [d for d in together if d.job_id != "big"] == list(alone)
    assert verdicts(alone) == {"small": WaitReason.WAITING, "held": WaitReason.BACKING_OFF, "other": "admit"}
    assert alone[0].reasons == ("waiting behind the blocked head of queue a (strict FIFO)",)
    unblocked = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(newcomers[:1]))
    assert verdicts(unblocked) == {"small": "admit"}, "without the head named, the line is open"


def test_order_is_priority_then_queue_time_then_tiebreak() -> None:
    state, placer = cluster(1)
    jobs = [fj("late", 8, at=5.0), fj("early", 8, at=1.0, tiebreak="b"), fj("twin", 8, at=1.0, tiebreak="a")]
    jobs.append(fj("urgent", 8, at=9.0, priority=3))
    decisions = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(jobs))
    assert [d.job_id for d in decisions] == ["urgent", "twin", "early", "late"]
    assert verdicts(decisions)["urgent"] == "admit"


def test_the_queue_cap_refuses_and_blocks_with_its_reason() -> None:
    state, placer = cluster(2)
    jobs = [fj("a1", 4, at=1.0), fj("a2", 4, at=2.0), fj("a3", 1, at=3.0)]
    lines = FifoLines(jobs, {"a": 2}, lambda q: 6 if q == "a" else None)
    decisions = schedule_fifo(PlaceOn(state, placer, SEED), lines)
    assert verdicts(decisions) == {"a1": "admit", "a2": WaitReason.QUEUE_FULL, "a3": WaitReason.WAITING}
    full = decisions[1]
    assert isinstance(full, Wait) and "above its maximum of 6 GPUs" in full.reasons[0]


def test_entry_gates_come_first_and_only_blocking_ones_hold_the_line() -> None:
    state, placer = cluster(1)
    refused = Gate(WaitReason.QUEUE_REFUSED, "queue a does not serve namespace x", blocks_line=False)
    backing = Gate(WaitReason.BACKING_OFF, "its gang was refused; tries again at 12:00", blocks_line=True)
    place_on = PlaceOn(state, placer, SEED)
    first = schedule_fifo(place_on, FifoLines([fj("r", 1, at=1.0, gate=refused), fj("n", 1, at=2.0)]))
    assert verdicts(first) == {"r": WaitReason.QUEUE_REFUSED, "n": "admit"}
    second = schedule_fifo(place_on, FifoLines([fj("b", 1, at=1.0, gate=backing), fj("m", 1, at=2.0)]))
    assert verdicts(second) == {"b": WaitReason.BACKING_OFF, "m": WaitReason.WAITING}


def test_never_fits_fails_without_blocking_unless_the_job_ran_before() -> None:
    state, placer = cluster(1)
    jobs = [fj("wide", 16, tp=16, at=1.0), fj("next", 1, at=2.0)]
    decisions = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(jobs))
    wide = decisions[0]
    assert isinstance(wide, Wait) and wide.permanent and verdicts(decisions)["next"] == "admit"
    state, placer = cluster(1)
    jobs = [fj("wide", 16, tp=16, at=1.0, ran_before=True), fj("next", 1, at=2.0)]
    decisions = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(jobs))
    wide = decisions[0]
    assert isinstance(wide, Wait) and not wide.permanent and wide.reason is WaitReason.UNSCHEDULABLE
    assert verdicts(decisions)["next"] == WaitReason.WAITING


job_strategy = st.tuples(
    st.sampled_from(["a", "b", "c"]),  # queue
    st.sampled_from([1, 2, 4, 8, 16]),  # GPUs
    st.integers(0, 2),  # priority
    st.integers(0, 20),  # queue time
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(job_strategy, min_size=1, max_size=25),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 24)),
    st.integers(0, 24),
)
def test_strict_fifo_properties(specs, caps, held) -> None:
    state, placer = cluster(3)
    if held:
        state.allocate(Allocation("held", tuple((g,) for g in range(held)), 10.0))
    jobs = [fj(f"j{i:02d}", gpus, queue, float(at), priority) for i, (queue, gpus, priority, at) in enumerate(specs)]
    decisions = schedule_fifo(PlaceOn(state, placer, SEED), FifoLines(jobs, {}, caps.get))
    assert sorted(d.job_id for d in decisions) == sorted(j.spec.job_id for j in jobs), "one decision per job"
    by_id = {j.spec.job_id: j for j in jobs}
    admitted: dict[str, int] = {}
    blocked: set[str] = set()
    for decision in decisions:
        job = by_id[decision.job_id]
        if isinstance(decision, Admit):
            assert job.queue not in blocked, "nothing is admitted behind a blocked head of its queue"
            admitted[job.queue] = admitted.get(job.queue, 0) + job.spec.num_gpus
            assert decision.job_id in state.allocations
        else:
            assert decision.job_id not in state.allocations
            if decision.reason is WaitReason.WAITING:
                assert job.queue in blocked
            elif not decision.permanent:
                blocked.add(job.queue)
    for queue, gpus in admitted.items():
        assert caps.get(queue) is None or gpus <= caps[queue], "a queue's cap holds"
    assert state.counts()["allocated"] == held + sum(admitted.values())
