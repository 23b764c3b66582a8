"""One scheduling pass: which waiting jobs start now, which wait and why, whom to preempt.

The pass walks the waiting jobs in queue order (``queueing.order``, re-ranked after every admission so
fair share reacts to what was just admitted). The first job that does not fit becomes the *head*: it gets a
reservation, and with backfill on, later jobs may start only if they cannot delay it: either they end
before the head's earliest start (its shadow time) or they avoid the GPUs reserved for it. Without backfill
every job behind a blocked head waits. With preemption on, a blocked head that outranks running jobs (or
reclaims its queue's guarantee from borrowers) gets victims chosen by ``preemption``.

The pass allocates admitted jobs in ``state`` (the caller's in-memory model) and returns every decision
as a value, each with its reasons, for the shell to carry out.

Elastic jobs (``QueueSnapshot.elastic``: job id -> its range) go through the same functions as in the FIFO path
(``core/elastic.py``): a waiting one counts against its queue's quota at its minimum only and is admitted
at the largest size up to its desired one that fits now (``place_largest``, capped by the queue's headroom;
the book then counts what it holds). Before whole gangs are evicted for a blocked head, rigid or elastic,
growth replicas of lower-priority running elastic jobs are taken, highest replica first (``shrink_for``): a
``ShrinkReplicas`` decision, and the head is admitted at once on the GPUs they held
(``takes_growth_replicas``: the FIFO path, which evicts no whole gang, gives them to rigid jobs only).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.gates import WaitReason, fails_for_good
from paralleljob.core.admit.preemption import PreemptionChoice, PreemptionTrial, choose_victims
from paralleljob.core.admit.queueing import (
    PendingJob,
    QueueBook,
    QueuePolicy,
    QueueSpec,
    RunningJob,
    effective_priority,
    order_key,
    starving,
)
from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.elastic import (
    ElasticHolding,
    ElasticRange,
    Resize,
    place_largest,
    resized,
    shrink_for,
    takes_growth_replicas,
)
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel

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
    permanent: bool = False  # can never fit and never ran (gates.fails_for_good): the shell fails the job
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


@dataclass(frozen=True, slots=True)
class ShrinkReplicas:
    """Growth replicas taken from lower-priority elastic jobs for ``for_job`` (admitted next, on their GPUs)."""

    for_job: str
    resizes: tuple[Resize, ...]
    reasons: tuple[str, ...]


Decision = Admit | Wait | Reserve | Preempt | ShrinkReplicas


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


@dataclass(frozen=True, slots=True)
class PlaceOn:
    """How a pass places jobs: on ``state`` (the caller's in-memory model; the pass allocates each admission
    in it), with ``placer``, priced by ``model``. Shared by both admission passes (this one and ``fifo.py``)."""

    state: ClusterState
    placer: PlacerLike
    model: Models

    def model_of(self, spec: JobSpec) -> CostModel:
        return self.model(spec) if callable(self.model) else self.model


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """The queues as a pass finds them at ``now``: the jobs waiting and running in them, their specs, and the
    range of every elastic job, waiting (its spec at any size: it is guaranteed min) or running (its spec at
    the size it holds; only those listed may lose growth replicas)."""

    pending: Sequence[PendingJob]
    running: Sequence[RunningJob]
    queues: Sequence[QueueSpec]
    now: float
    elastic: Mapping[str, ElasticRange] = field(default_factory=dict)


def schedule(place_on: PlaceOn, seen: QueueSnapshot, policy: QueuePolicy) -> SchedulingPlan:
    """One pass over ``seen``'s waiting jobs, placed as ``place_on`` says (admissions allocated in its state)."""
    state, placer, running, now = place_on.state, place_on.placer, seen.running, seen.now
    topo = state.topology
    total_memory = sum(c * m for c, m in zip(topo.node_gpu_count, topo.node_gpu_memory_gb, strict=True))
    ranges = dict(seen.elastic)
    pending = [
        dataclasses.replace(p, job=resized(p.job, ranges[p.job.job_id].min)) if p.job.job_id in ranges else p
        for p in seen.pending
    ]
    book = QueueBook.of(seen.queues, running, topo.num_gpus, total_memory)
    holdings = {
        r.job.job_id: ElasticHolding(r.job, state.allocations[r.job.job_id].groups, ranges[r.job.job_id], r.preemptible)
        for r in running
        if r.job.job_id in ranges and r.job.job_id in state.allocations
    }
    queue_of = {r.job.job_id: r.queue for r in running}
    lines = _queue_lines(pending, policy, now)
    decisions: list[Decision] = []
    head: _Head | None = None
    while lines:
        name = min(lines, key=lambda q: order_key(lines[q][0], book, policy, now))
        job = lines[name].pop(0)
        if not lines[name]:
            del lines[name]
        spec = job.job
        job_model = place_on.model_of(spec)
        refusal = book.quota_refusal(job.queue, spec)
        if refusal is not None:
            decisions.append(Wait(spec.job_id, job.queue, (refusal,), reason=WaitReason.QUEUE_FULL))
            continue
        if head is not None and not policy.backfill:
            behind = (f"waits behind {head.pending.job.job_id} (no backfill)",)
            decisions.append(Wait(spec.job_id, job.queue, behind, reason=WaitReason.WAITING))
            continue
        place = _placing(PlaceOn(state, placer, job_model), spec, ranges.get(spec.job_id), book, job.queue)
        try:
            placement, why = _try_place(state, place, job, head, now)
        except PlacementInfeasible as exc:
            if fails_for_good(exc.permanent, job.ran_before):
                decisions.append(Wait(spec.job_id, job.queue, exc.reasons, permanent=True))
                continue
            shrunk = None
            if head is None and policy.preemption and holdings and takes_growth_replicas(
                spec.job_id in ranges, whole_gangs_next=True
            ):
                shrunk = _shrink(PlaceOn(state, placer, job_model), job, holdings, book, queue_of)
            if shrunk is not None:
                decisions.append(shrunk[0])
                placement, why = shrunk[1], shrunk[0].reasons
            elif head is None:
                head, blocked = _block(_Pass(state, placer, running, book, policy, now), job_model, job, exc)
                decisions.extend(blocked)
                continue
            else:
                decisions.append(Wait(spec.job_id, job.queue, exc.reasons))
                continue
        if spec.job_id in ranges:
            spec = resized(spec, placement.dp)
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


Place = Callable[[], tuple[Placement, tuple[str, ...]]]


def _placing(place_on: PlaceOn, spec: JobSpec, rng: ElasticRange | None, book: QueueBook, queue: str) -> Place:
    """How ``spec`` is placed: as it is, or (elastic) at the largest size the cluster and its queue's
    headroom allow, never below min."""
    state, placer, model = place_on.state, place_on.placer, place_on.model_of(spec)
    if rng is None:
        return lambda: (placer.place(spec, model), ())
    cap = book.spec(queue).max_gpus
    room = None if cap is None else cap - book.used(queue).gpus
    return lambda: place_largest(state, placer, spec, rng, model, room)


def _try_place(state: ClusterState, place: Place, job: PendingJob, head: _Head | None, now: float) -> tuple[
    Placement, tuple[str, ...]
]:
    """Place ``job`` now without delaying the head (when there is one)."""
    if head is None:
        return place()
    runtime = job.expected_runtime_s
    if runtime is not None and now + runtime <= head.shadow:
        placement, why = place()
        return placement, (
            *why, f"backfilled: ends by {now + runtime:.0f}s, before {head.pending.job.job_id} can start",
        )
    reserved = [g for g in head.reserved if state.owner[g] is None and state.eligible(g, 0.0)]
    if reserved:
        state.assume(RESERVATION, reserved)
    try:
        placement, why = place()
    finally:
        if reserved:
            state.forget(RESERVATION)
    return placement, (*why, f"backfilled around the GPUs reserved for {head.pending.job.job_id}")


def _shrink(
    place_on: PlaceOn,
    job: PendingJob,
    holdings: dict[str, ElasticHolding],
    book: QueueBook,
    queue_of: Mapping[str, str],
) -> tuple[ShrinkReplicas, Placement] | None:
    """Growth replicas of lower-priority elastic jobs for ``job`` (the FIFO path's ``shrink_for``), applied
    to ``state``, the book and ``holdings`` so the rest of the pass sees the jobs at their new sizes."""
    state = place_on.state
    shrink = shrink_for(state, place_on.placer, place_on.model_of(job.job), job.job, list(holdings.values()))
    if shrink is None:
        return None
    for resize in shrink.resizes:
        held = holdings[resize.job_id]
        state.release(resize.job_id)
        state.allocate(Allocation(resize.job_id, resize.groups, held.job.memory_per_gpu_gb))
        smaller = resized(held.job, resize.after)
        book.remove(queue_of[resize.job_id], held.job)
        book.add(queue_of[resize.job_id], smaller)
        holdings[resize.job_id] = dataclasses.replace(held, job=smaller, groups=resize.groups)
    return ShrinkReplicas(job.job.job_id, shrink.resizes, shrink.reasons), shrink.placement


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
