"""Admission of queued jobs: in order, each placed by the core or told why it waits.

Order within a queue: higher priority first, then the time it (re)entered the queue. With strict FIFO
(the default, like Kueue's StrictFIFO) a queue's head that does not fit blocks the jobs behind it, so a
large job is never starved by a stream of small ones; queues never block each other. A queue's ``maxGPUs``
caps what its running jobs hold; a job naming a queue that does not exist waits (``QueueNotFound``) and is
never placed uncapped (the ``default`` queue needs no object: without one it has no cap, as before). Jobs that
can never fit (a TP group larger than any eligible node, more GPUs than the eligible nodes have, a template
constraint no node satisfies) fail with the reason before any queue rule is applied, wherever they stand in
their queue — unless they ran before, in which case the missing capacity is assumed to be a failure that
will be repaired. Every job is placed through its node filter (``eligibility.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.cluster import Allocation
from paralleljob.core.cost import CostBreakdown
from paralleljob.core.elastic import resized
from paralleljob.core.eligibility import FilteredPlacer, NodeFilter, never_fits
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.gates import Entry, WaitReason, entry_gate, quota_refusal
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event
from paralleljob.core.placement import Placement
from paralleljob.k8s.edge.constants import DEFAULT_QUEUE
from paralleljob.k8s.edge.queues import QueueInfo
from paralleljob.k8s.edge.records import PlacementRecord, PodSlot, cost_to_status, pod_name
from paralleljob.k8s.edge.specs import JobObject, JobRequest
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.checkpointing import checkpoint_status
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.elastic import write_status
from paralleljob.k8s.plan.elastic_admission import place_elastic, shrink_growth_replicas
from paralleljob.k8s.plan.eligibility import Eligibility
from paralleljob.k8s.plan.podsync import sync_pods
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.plan.trayadmission import (
    admission_topology,
    place_rigid,
    spans_trays,
    spares_for,
    tray_record,
)
from paralleljob.k8s.view.clusterview import ClusterView


def queue_order(jobs: Sequence[tuple[JobObject, JobRequest]]) -> list[tuple[JobObject, JobRequest]]:
    return sorted(
        jobs, key=lambda item: (item[1].queue, -item[1].priority, item[0].queued_at, item[0].created, item[0].key)
    )


def new_record(
    view: ClusterView,
    job: JobObject,
    request: JobRequest,
    groups: Sequence[Sequence[int]],
    epoch: int,
    placement_reasons: Sequence[str],
    cost: CostBreakdown,
) -> PlacementRecord:
    spec = request.spec
    slots = []
    for g, gpus in enumerate(groups):
        node, indices = view.locate(gpus)
        replica, stage = divmod(g, spec.pp)
        slots.append(PodSlot(pod_name(job.name, replica, stage), replica, stage, node, indices, epoch))
    return PlacementRecord(
        epoch,
        request.cost_model,
        spec.tp,
        spec.pp,
        spec.dp,
        tuple(slots),
        rank_order=request.rank_order,
        cost=cost,
        reasons=tuple(placement_reasons),
    )


@dataclass(frozen=True, slots=True)
class _Line:
    """One FIFO pass over the queues: what it has placed and blocked so far (the containers change)."""

    placer: FilteredPlacer
    strict_fifo: bool
    in_use: dict[str, int]  # queue -> GPUs its running and just-admitted jobs hold
    blocked: dict[str, str] = field(default_factory=dict)  # queue -> the job at its head that does not fit
    durations: list[float] = field(default_factory=list)  # seconds each placement decision took


def admit_all(
    ctx: PassContext, queued: Sequence[tuple[JobObject, JobRequest]], in_use: dict[str, int], strict_fifo: bool
) -> list[float]:
    """Place what fits, in order; returns how long each placement decision took (seconds). ``in_use``
    (queue -> GPUs held) grows with every admission."""
    view = ctx.view
    filtered = FilteredPlacer(ctx.placer, view.state, node_filters(ctx.eligibility))
    line = _Line(filtered, strict_fifo, in_use)
    for job, request in queue_order(queued):
        try:
            if refuse_before_queueing(ctx, job, request):
                continue
            _admit_one(ctx, line, job, request)
        except Exception as exc:  # one bad object must not stop the queue; its status says what happened
            view.state.release(job.key)
            actions = ctx.actions_for(job)
            # drop whatever was half decided for it; only the error is written
            actions.draft = StatusDraft(job.status.raw, job.phase, job.generation)
            actions.creates.clear()
            actions.binds.clear()
            actions.compute_domains.clear()
            actions.events.clear()
            actions.service = None
            actions.placed_cost = None
            actions.draft.condition(
                "ReconcileError", "True", "InternalError", f"the operator could not place this job: {exc!r}", ctx.now
            )
    return line.durations


def node_filters(eligibility: Eligibility | None) -> Callable[[JobSpec], NodeFilter | None]:
    def filter_for(spec: JobSpec) -> NodeFilter | None:
        return eligibility.filter_for(spec.job_id, spec) if eligibility is not None else None

    return filter_for


def unknown_queue(request: JobRequest, queues: Mapping[str, QueueInfo]) -> str:
    """Why the job's queue is unusable because it does not exist (empty: it exists, or is the default)."""
    if request.queue == DEFAULT_QUEUE or request.queue in queues:
        return ""
    return (
        f"queue {request.queue} does not exist: create the ParallelJobQueue {request.queue} or fix spec.queue;"
        " the job waits and is not placed outside a queue's quota"
    )


def refuse_before_queueing(ctx: PassContext, job: JobObject, request: JobRequest) -> bool:
    """What is decided for every queued job whatever its place in line: a job that can never fit fails now,
    a job whose queue does not exist waits with the reason. True when the job goes no further this pass."""
    actions, view, now, eligibility = ctx.actions_for(job), ctx.view, ctx.now, ctx.eligibility
    if not view.empty and not job.ever_ran:
        # an elastic job can never fit only when its minimum cannot
        spec = request.spec if request.elastic is None else resized(request.spec, request.elastic.min)
        node_filter = eligibility.filter_for(job.key, spec, with_usage=False) if eligibility else None
        reasons = never_fits(admission_topology(view, request), spec, node_filter)
        if reasons:
            fail_unschedulable(actions, "; ".join(reasons), now)
            return True
    missing = unknown_queue(request, ctx.queues)
    if missing:
        placed = [c for c in job.status.conditions if c.get("type") == "Placed"]
        if not placed or placed[0].get("reason") != WaitReason.QUEUE_NOT_FOUND:
            # once when the job starts waiting for the queue, not on every pass while it waits
            actions.note("Warning", WaitReason.QUEUE_NOT_FOUND, missing)
        actions.draft.condition("Placed", "False", WaitReason.QUEUE_NOT_FOUND, missing, now)
        # status.message said "waits for room in queue X" since acceptance: there is no such queue to wait in
        actions.draft.set(reason=WaitReason.QUEUE_NOT_FOUND.value, message=missing)
        return True
    return False


def entry_of(ctx: PassContext, job: JobObject, request: JobRequest, making_room: str | None = None) -> Entry:
    """The values core.gates.entry_gate checks, for ``job``."""
    queue = ctx.queues.get(request.queue)
    return Entry(
        namespace=job.namespace,
        queue=request.queue,
        served_namespaces=queue.namespaces if queue is not None else (),
        backoff=ctx.holds.get(job.key) if ctx.holds else None,
        making_room=making_room,
        has_gpu_nodes=not ctx.view.empty,
    )


def fail_unschedulable(actions: JobActions, message: str, now: str) -> None:
    actions.draft.apply(Event.REJECTED, "Unschedulable", f"can never fit this cluster: {message}", now)
    actions.draft.set(completionTime=now)
    actions.note("Warning", "Unschedulable", f"can never fit this cluster: {message}")


def _admit_one(ctx: PassContext, line: _Line, job: JobObject, request: JobRequest) -> None:
    actions, view, now, clock = ctx.actions_for(job), ctx.view, ctx.now, ctx.clock
    placer, in_use, blocked, durations = line.placer, line.in_use, line.blocked, line.durations
    draft = actions.draft
    spec = request.spec
    queue = ctx.queues.get(request.queue)
    gate = entry_gate(entry_of(ctx, job, request))
    if gate is not None:
        draft.condition("Placed", "False", gate.reason, gate.message, now)
        if gate.blocks_line:
            blocked[request.queue] = job.name
        return
    if line.strict_fifo and request.queue in blocked:
        why = f"waiting behind {blocked[request.queue]} in queue {request.queue} (strict FIFO)"
        draft.condition("Placed", "False", WaitReason.WAITING, why, now)
        return
    cap = queue.max_gpus if queue is not None else None
    # An elastic job is guaranteed only its minimum: the quota must hold that much, growth takes what is left.
    needed = spec.num_gpus if request.elastic is None else spec.tp * spec.pp * request.elastic.min
    refusal = quota_refusal(request.queue, in_use.get(request.queue, 0), needed, cap)
    if refusal is not None:
        draft.condition("Placed", "False", WaitReason.QUEUE_FULL, refusal, now)
        blocked[request.queue] = job.name
        return
    started = clock()
    try:
        if request.elastic is not None:
            room = None if cap is None else cap - in_use.get(request.queue, 0)
            placement, extra = place_elastic(view.state, placer, request, room)
            request = dataclasses.replace(request, spec=resized(spec, placement.dp))
            spec = request.spec
        else:
            node_filter = ctx.eligibility.filter_for(job.key, spec)
            spares = spares_for(view, queue)
            placement, extra = place_rigid(view, placer, request, job.key, node_filter, spares), ()
    except PlacementInfeasible as exc:
        # Before it waits: growth replicas of lower-priority elastic jobs, the cheapest preemption.
        taken = None if exc.permanent else shrink_growth_replicas(ctx, job, request)
        if taken is None:
            durations.append(clock() - started)
            message = "; ".join(exc.reasons)
            if exc.permanent and not job.ever_ran:
                fail_unschedulable(actions, message, now)
            else:
                draft.condition("Placed", "False", WaitReason.UNSCHEDULABLE, message, now)
                blocked[request.queue] = job.name
            return
        placement, extra = taken
    durations.append(clock() - started)
    view.state.allocate(Allocation(job.key, placement.groups, spec.memory_per_gpu_gb))
    in_use[request.queue] = in_use.get(request.queue, 0) + spec.num_gpus
    record_admission(ctx, job, request, placement, extra)
    if request.elastic is not None:
        write_status(actions.draft, request.elastic, spec.dp, None)


def record_admission(
    ctx: PassContext, job: JobObject, request: JobRequest, placement: Placement, extra_reasons: Sequence[str] = ()
) -> None:
    """Queued -> Placing with the placement recorded in the status, and the pods to create and bind (the
    executor writes the status first). The caller has already allocated the placement in ``view.state``."""
    actions, view, now, pods = ctx.actions_for(job), ctx.view, ctx.now, ctx.pods_of(job)
    draft = actions.draft
    epoch = job.placement_epoch + 1
    reasons = (*extra_reasons, *placement.reasons)
    if spans_trays(view, placement.groups):
        record = tray_record(view, job, request, placement.groups, epoch, reasons, placement.cost)
    else:
        record = new_record(view, job, request, placement.groups, epoch, reasons, placement.cost)
    cost = placement.cost
    message = (
        f"{request.spec.describe()} on {', '.join(record.nodes)}; cost {cost.total_ms:.3f} ms"
        f" (bottleneck {cost.bottleneck})"
    )
    if extra_reasons:
        message += f"; {'; '.join(extra_reasons)}"
    draft.apply(Event.ADMITTED, "Placed", message, now)
    draft.set(
        placement=record.to_status(),
        placementEpoch=epoch,
        communicationCost=cost_to_status(cost, request.cost_model),
        nodes=",".join(record.nodes),
        checkpoint=checkpoint_status(request, len(record.nodes)),
    )
    # "Accepted" then "Placed" in one pass says nothing "Placed" alone does not; one Event write less.
    actions.events = [e for e in actions.events if e.reason != "Accepted"]
    actions.note("Normal", "Placed", message)
    actions.placed_cost = {"tp": cost.tp_ms, "pp": cost.pp_ms, "dp": cost.dp_ms, "total": cost.total_ms}
    sync_pods(actions, job, request, record, pods, view.nodes, ctx.gpu_holders)
