"""One scheduling pass: which waiting jobs start now, which wait and why, whom to preempt.

The pass walks the waiting jobs in queue order (``queueing.order``, re-ranked after every admission so
fair share reacts to what was just admitted). The first job that does not fit becomes the *head*: it gets a
reservation, and with backfill on, later jobs may start only if they cannot delay it: either they end
before the head's earliest start (its shadow time) or they avoid the GPUs reserved for it. Without backfill
every job behind a blocked head waits. With preemption on, a blocked head that outranks running jobs (or
reclaims its queue's guarantee from borrowers) gets victims chosen by ``preemption``.

The pass allocates admitted jobs in ``state`` (the caller's in-memory model) and returns every decision
as a value, each with its reasons, for the shell to carry out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.cost import CostModel
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.gates import WaitReason
from paralleljob.core.job import JobSpec
from paralleljob.core.placement import Placement, PlacerLike
from paralleljob.core.preemption import PreemptionChoice, PreemptionTrial, choose_victims
from paralleljob.core.queueing import (
    PendingJob,
    QueueBook,
    QueuePolicy,
    QueueSpec,
    RunningJob,
    effective_priority,
    order_key,
    starving,
)

RESERVATION = "__reservation__"


@dataclass(frozen=True, slots=True)
class Admit:
    job_id: str
    queue: str
    placement: Placement
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Wait:
    job_id: str
    queue: str
    reasons: tuple[str, ...]
    permanent: bool = False  # can never fit: the shell should fail the job
    reason: WaitReason = WaitReason.UNSCHEDULABLE


@dataclass(frozen=True, slots=True)
class Reserve:
    job_id: str
    queue: str
    start_by: float  # shadow time: when it can start at the latest (inf: unknown)
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Preempt:
    victims: tuple[str, ...]
    for_job: str
    grace_period_s: float
    lost_work_gpu_s: float
    reasons: tuple[str, ...]


Decision = Admit | Wait | Reserve | Preempt


@dataclass(frozen=True, slots=True)
class SchedulingPlan:
    decisions: tuple[Decision, ...]
    jain_index: float

    def admitted(self) -> list[Admit]:
        return [d for d in self.decisions if isinstance(d, Admit)]

    def of(self, job_id: str) -> list[Decision]:
        return [d for d in self.decisions if getattr(d, "job_id", getattr(d, "for_job", None)) == job_id]


@dataclass
class _Head:
    pending: PendingJob
    shadow: float
    reserved: tuple[int, ...]  # GPUs free now that the head will need at its shadow time


Models = CostModel | Callable[[JobSpec], CostModel]  # one model for all jobs, or each job's own


def schedule(
    state: ClusterState,
    placer: PlacerLike,
    model: Models,
    pending: Sequence[PendingJob],
    running: Sequence[RunningJob],
    queues: Sequence[QueueSpec],
    policy: QueuePolicy,
    now: float,
) -> SchedulingPlan:
    topo = state.topology
    total_memory = sum(c * m for c, m in zip(topo.node_gpu_count, topo.node_gpu_memory_gb, strict=True))
    book = QueueBook.of(queues, running, topo.num_gpus, total_memory)
    lines = _queue_lines(pending, policy, now)
    decisions: list[Decision] = []
    head: _Head | None = None
    while lines:
        name = min(lines, key=lambda q: order_key(lines[q][0], book, policy, now))
        job = lines[name].pop(0)
        if not lines[name]:
            del lines[name]
        spec = job.job
        job_model = model(spec) if callable(model) else model
        refusal = book.quota_refusal(job.queue, spec)
        if refusal is not None:
            decisions.append(Wait(spec.job_id, job.queue, (refusal,), reason=WaitReason.QUEUE_FULL))
            continue
        if head is not None and not policy.backfill:
            behind = (f"waits behind {head.pending.job.job_id} (no backfill)",)
            decisions.append(Wait(spec.job_id, job.queue, behind, reason=WaitReason.WAITING))
            continue
        try:
            placement, why = _try_place(state, placer, job_model, job, head, now)
        except PlacementInfeasible as exc:
            if exc.permanent:
                decisions.append(Wait(spec.job_id, job.queue, exc.reasons, permanent=True))
                continue
            if head is None:
                head, blocked = _block(_Pass(state, placer, running, book, policy, now), job_model, job, exc)
                decisions.extend(blocked)
            else:
                decisions.append(Wait(spec.job_id, job.queue, exc.reasons))
            continue
        state.allocate(Allocation(spec.job_id, placement.groups, spec.memory_per_gpu_gb))
        book.add(job.queue, spec)
        decisions.append(Admit(spec.job_id, job.queue, placement, (*why, *placement.reasons)))
    demanding = sorted({p.queue for p in pending} | {r.queue for r in running})
    return SchedulingPlan(tuple(decisions), book.jain_index(demanding))


def _queue_lines(pending: Sequence[PendingJob], policy: QueuePolicy, now: float) -> dict[str, list[PendingJob]]:
    lines: dict[str, list[PendingJob]] = {}
    for job in pending:
        lines.setdefault(job.queue, []).append(job)
    for line in lines.values():
        line.sort(
            key=lambda p: (
                0 if starving(p, policy, now) else 1,
                -effective_priority(p, policy, now),
                p.submitted_at,
                p.job.job_id,
            )
        )
    return lines


def _try_place(
    state: ClusterState, placer: PlacerLike, model: CostModel, job: PendingJob, head: _Head | None, now: float
) -> tuple[Placement, tuple[str, ...]]:
    """Place ``job`` now without delaying the head (when there is one)."""
    if head is None:
        return placer.place(job.job, model), ()
    runtime = job.expected_runtime_s
    if runtime is not None and now + runtime <= head.shadow:
        return placer.place(job.job, model), (
            f"backfilled: ends by {now + runtime:.0f}s, before {head.pending.job.job_id} can start",
        )
    reserved = [g for g in head.reserved if state.owner[g] is None and state.eligible(g, 0.0)]
    if reserved:
        state.assume(RESERVATION, reserved)
    try:
        placement = placer.place(job.job, model)
    finally:
        if reserved:
            state.forget(RESERVATION)
    return placement, (f"backfilled around the GPUs reserved for {head.pending.job.job_id}",)


@dataclass(frozen=True, slots=True)
class _Pass:
    """What one scheduling pass decides against: the state, the placer, who runs, the queues' books, the
    policy and the time (the containers are the pass's own, updated as it admits)."""

    state: ClusterState
    placer: PlacerLike
    running: Sequence[RunningJob]
    book: QueueBook
    policy: QueuePolicy
    now: float


def _block(
    pass_: _Pass, model: CostModel, job: PendingJob, refusal: PlacementInfeasible
) -> tuple[_Head, tuple[Decision, ...]]:
    """The first job that does not fit: reserve for it, and preempt for it when the policy allows. Returns
    the head and the decisions about it (a Preempt, if any, then its Reserve)."""
    state, placer, running, policy, now = pass_.state, pass_.placer, pass_.running, pass_.policy, pass_.now
    spec = job.job
    decisions: list[Decision] = []
    choice: PreemptionChoice | None = None
    if policy.preemption:
        choice = choose_victims(PreemptionTrial(state, placer, model, job), running, pass_.book, now)
    if choice is not None:
        decisions.append(
            Preempt(choice.victims, spec.job_id, policy.grace_period_s, choice.lost_work_gpu_s, choice.reasons)
        )
        shadow = now + policy.grace_period_s
        reserved = choice.placement.gpus
        why = f"reserved after preempting {', '.join(choice.victims)}"
    else:
        shadow, reserved = _shadow(state, placer, model, spec, running, now)
        why = (
            f"reserved: earliest start at {shadow:.0f}s when running jobs end"
            if math.isfinite(shadow)
            else "reserved: no known end time frees enough GPUs yet"
        )
    decisions.append(Reserve(spec.job_id, job.queue, shadow, (*refusal.reasons, why)))
    return _Head(job, shadow, reserved), tuple(decisions)


def _shadow(
    state: ClusterState,
    placer: PlacerLike,
    model: CostModel,
    spec: JobSpec,
    running: Sequence[RunningJob],
    now: float,
) -> tuple[float, tuple[int, ...]]:
    """When the head could start if running jobs end as expected, and the GPUs it would get then.

    Ends are replayed in order; the state is only touched (released, placed on, restored) once the GPUs
    freed so far could hold the head's TP groups, so a long list of running jobs costs a count each."""
    ending = sorted(
        (r for r in running if r.expected_end_at is not None and r.job.job_id in state.allocations),
        key=lambda r: (r.expected_end_at or 0.0, r.job.job_id),
    )
    topo, t, mem = state.topology, spec.tp, spec.memory_per_gpu_gb
    slots = state.domain_slots(topo.top, 0, t, mem) if topo.top else state.node_slots(0, t, mem)
    freed: dict[int, int] = {}
    for i, job in enumerate(ending):
        for gpu in state.allocations[job.job.job_id].gpus:
            node = topo.gpu_node[gpu]
            if state.health[gpu] is GPUHealth.HEALTHY and state.node_schedulable[node] and state.memory_ok(node, mem):
                before = (state.usable_free(node) + freed.get(node, 0)) // t
                freed[node] = freed.get(node, 0) + 1
                slots += (state.usable_free(node) + freed[node]) // t - before
        if slots < spec.num_groups:
            continue
        released = [a for a in (state.release(r.job.job_id) for r in ending[: i + 1]) if a is not None]
        try:
            placement = placer.place(spec, model)
        except PlacementInfeasible:
            continue
        finally:
            for allocation in reversed(released):
                state.allocate(allocation)
        return max(now, float(job.expected_end_at or now)), placement.gpus
    return math.inf, ()
