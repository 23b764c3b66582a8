"""Admission of queued jobs by the core's strict FIFO pass (``core.admit.fifo``): each placed or told why it waits.

This module only translates: queued ParallelJobs in (their entry checks evaluated from the objects), the
core's decisions out (the status, the pods). The rules live in ``core.admit.fifo``: order within a queue is
higher priority first, then the time it (re)entered the queue; with strict FIFO (the default, like Kueue's
StrictFIFO) a queue's head that does not fit blocks the jobs behind it; queues never block each other.

A queue's ``maxGPUs`` caps what its running jobs hold; a job naming a queue that does not exist waits
(``QueueNotFound``) and is never placed uncapped (the ``default`` queue needs no object: without one it has
no cap, as before). Jobs that can never fit (a TP group larger than any eligible node, more GPUs than the
eligible nodes have, a template constraint no node satisfies) fail with the reason before any queue rule is
applied, wherever they stand in their queue — unless they ran before, in which case the missing capacity is
assumed to be a failure that will be repaired. Every job is placed through its node filter
(``eligibility.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from paralleljob.core.admit.admission import Admit, PlaceOn, Wait
from paralleljob.core.admit.fifo import (
    FifoHooks,
    FifoJob,
    FifoLines,
    FifoPolicy,
    LineKey,
    fifo_key,
    gate_wait,
    line_key,
    schedule_fifo,
)
from paralleljob.core.admit.gates import Entry, WaitReason, entry_gate, fails_for_good
from paralleljob.core.cluster import Allocation
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event
from paralleljob.core.placing.eligibility import FilteredPlacer, NodeFilter, never_fits
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel, cost_model
from paralleljob.k8s.edge.constants import DEFAULT_QUEUE
from paralleljob.k8s.edge.parse.queues import QueueInfo, parse_time
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, cost_to_status, pod_name
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.admission.eligibility import Eligibility
from paralleljob.k8s.plan.admission.trayadmission import (
    TrayAwarePlacer,
    admission_topology,
    spans_trays,
    tray_record,
    trays_refused,
)
from paralleljob.k8s.plan.context import PassContext
from paralleljob.k8s.plan.kinds.elastic_admission import place_elastic, shrink_growth_replicas
from paralleljob.k8s.plan.kinds.picker import kind_of, sizing_of
from paralleljob.k8s.plan.moves.checkpointing import checkpoint_status
from paralleljob.k8s.plan.pods.podsync import sync_pods
from paralleljob.k8s.plan.slices.book import sliced_note
from paralleljob.k8s.plan.slices.mpsbook import mps_note
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.view.clusterview import ClusterView


def tiebreak(job: JobObject) -> str:
    return f"{job.created} {job.key}"


def line_position(job: JobObject, request: JobRequest) -> LineKey:
    """Where the core FIFO pass puts a queued ParallelJob: ``fifo_key`` of its :func:`fifo_job`. Worked out
    once per job object and request (kept on the object: both are immutable)."""
    cached = job.line_cache
    if cached is not None and cached[0] is request:
        position: LineKey = cached[1]
        return position
    position = line_key(
        request.queue, request.spec.priority, parse_time(job.queued_at) or 0.0, tiebreak(job), request.spec.job_id
    )
    object.__setattr__(job, "line_cache", (request, position))
    return position


def new_record(
    view: ClusterView, job: JobObject, request: JobRequest, placement: Placement, epoch: int, reasons: Sequence[str]
) -> PlacementRecord:
    """The record of ``placement`` (its TP groups and cost) on HGX nodes, one pod per TP group; ``reasons``:
    the record's (the placer's, with what the caller adds)."""
    spec = request.spec
    slots = []
    for g, gpus in enumerate(placement.groups):
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
        cost=placement.cost,
        reasons=tuple(reasons),
    )


class _ShellPlacer:
    """The filtered placer as the core FIFO pass calls it: each call timed (the scheduling histogram), and an
    unexpected error kept for its job's status instead of stopping the queue (the job is refused as "never
    fits" to the core, so it blocks no line unless it ran before)."""

    def __init__(self, inner: PlacerLike, clock: Callable[[], float]) -> None:
        self.inner = inner
        self.clock = clock
        self.durations: list[float] = []
        self.errors: dict[str, Exception] = {}

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        started = self.clock()
        try:
            return self.inner.place(job, model, previous)
        except PlacementInfeasible:
            raise
        except Exception as exc:  # one bad object must not stop the queue; its status says what happened
            self.errors[job.job_id] = exc
            raise PlacementInfeasible(job.job_id, [f"internal error: {exc!r}"], permanent=True) from exc
        finally:
            self.durations.append(self.clock() - started)


def fifo_job(ctx: PassContext, job: JobObject, request: JobRequest) -> FifoJob:
    """The core's view of a queued job: its place in line and its entry checks' verdict."""
    return FifoJob(
        spec=request.spec,
        queue=request.queue,
        queued_at=parse_time(job.queued_at) or 0.0,
        tiebreak=tiebreak(job),
        name=job.name,
        gate=entry_gate(entry_of(ctx, job, request)),
        ran_before=job.ever_ran,
        min_gpus=sizing_of(request).min_gpus(request),
    )


def admit_all(
    ctx: PassContext,
    queued: Sequence[tuple[JobObject, JobRequest]],
    in_use: dict[str, int],
    strict_fifo: bool,
    blocked: Mapping[str, str] | None = None,
) -> tuple[list[float], Sequence[Admit | Wait]]:
    """Place what fits through the core's FIFO pass (``core.admit.fifo``) and write each decision; returns how
    long each placement decision took (seconds) and the core's decisions. ``in_use`` (queue -> GPUs held)
    grows with every admission. ``blocked``: lines held by a head not among ``queued`` (queue -> its name;
    the waiting memo's, ``plan/admission/waiting.py``)."""
    view = ctx.view
    lines: list[FifoJob] = []
    objects: dict[str, tuple[JobObject, JobRequest]] = {}
    for job, request in queued:
        try:
            if refuse_before_queueing(ctx, job, request):
                continue
            lines.append(fifo_job(ctx, job, request))
            objects[request.spec.job_id] = (job, request)
        except Exception as exc:  # one bad object must not stop the queue
            _internal_error(ctx, job, exc)
    extra: dict[str, tuple[str, ...]] = {}  # job id -> what an elastic or shrinking admission adds to its message
    if view.empty:  # every job's entry gate says so (NoGPUNodes)
        decisions: Sequence[Admit | Wait] = [gate_wait(j) for j in sorted(lines, key=fifo_key)]
        durations: list[float] = []
        errors: Mapping[str, Exception] = {}
    else:
        filtered = FilteredPlacer(ctx.placer, view.state, node_filters(ctx.eligibility))
        requests = {job_id: request for job_id, (_, request) in objects.items()}
        # a job larger than a tray takes whole trays of one NVLink clique (plan/admission/trayadmission.py)
        trays = TrayAwarePlacer(view, filtered, requests, node_filters(ctx.eligibility), ctx.queues)
        placer = _ShellPlacer(trays, ctx.clock)
        queues = ctx.queues

        def cap(name: str) -> int | None:
            info = queues.get(name)
            return info.max_gpus if info is not None else None

        models = {name: cost_model(name) for name in {r.cost_model for _, r in objects.values()}}
        decisions = schedule_fifo(
            PlaceOn(view.state, placer, lambda spec: models[objects[spec.job_id][1].cost_model]),
            FifoLines(lines, in_use, cap, blocked or {}),
            FifoPolicy(strict=strict_fifo, groups_in_nodes=not view.nvlink_levels),
            _elastic_hooks(ctx, placer, objects, extra),
        )
        durations, errors = placer.durations, placer.errors
    for decision in decisions:
        job, request = objects[decision.job_id]
        if decision.job_id in errors:
            _internal_error(ctx, job, errors[decision.job_id])
            continue
        try:
            _carry_out(ctx, job, request, decision, (in_use, extra.get(decision.job_id, ())))
        except Exception as exc:
            _internal_error(ctx, job, exc)
    return durations, decisions


def _elastic_hooks(
    ctx: PassContext,
    placer: _ShellPlacer,
    objects: Mapping[str, tuple[JobObject, JobRequest]],
    extra: dict[str, tuple[str, ...]],
) -> FifoHooks:
    """The core pass's elastic hooks over ``plan/kinds/elastic_admission.py``; what they add to an admission's
    message is kept in ``extra``."""

    def place(job: FifoJob, room: int | None) -> Placement:
        placement, reasons = place_elastic(ctx.view.state, placer, objects[job.spec.job_id][1], room)
        extra[job.spec.job_id] = reasons
        return placement

    def take_growth(job: FifoJob) -> Placement | None:
        taken = shrink_growth_replicas(ctx, *objects[job.spec.job_id])
        if taken is None:
            return None
        extra[job.spec.job_id] = taken[1]
        return taken[0]

    return FifoHooks(place, take_growth)


def _carry_out(
    ctx: PassContext,
    job: JobObject,
    request: JobRequest,
    decision: Admit | Wait,
    held_and_reasons: tuple[dict[str, int], tuple[str, ...]],
) -> None:
    in_use, extra = held_and_reasons
    if isinstance(decision, Admit):
        sizing = sizing_of(request)
        request = sizing.at_admitted_size(request, decision.placement.dp)  # admitted at the size that fit
        in_use[request.queue] = in_use.get(request.queue, 0) + request.spec.num_gpus
        record_admission(ctx, job, request, decision.placement, extra)
        sizing.admitted(ctx, ctx.actions_for(job), request)
        return
    actions = ctx.actions_for(job)
    message = "; ".join(decision.reasons)
    if decision.permanent:
        fail_unschedulable(actions, message, ctx.now)
    else:
        if decision.reason is WaitReason.UNSCHEDULABLE:
            message += sliced_note(ctx.view) + mps_note(ctx.view)  # GPUs that slices or shares hold are not whole
        ctx.wait(actions, decision.reason, message)


def _internal_error(ctx: PassContext, job: JobObject, exc: Exception) -> None:
    ctx.view.state.release(job.key)
    actions = ctx.actions_for(job)
    # drop whatever was half decided for it; only the error is written
    actions.draft = StatusDraft(job.status.raw, job.phase, job.generation)
    actions.creates = ()
    actions.binds = ()
    actions.compute_domains = ()
    actions.events = ()
    actions.service = None
    actions.placed_cost = None
    actions.draft.condition(
        "ReconcileError", "True", "InternalError", f"the operator could not place this job: {exc!r}", ctx.now
    )


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
    if not view.empty and not job.ever_ran:  # a job that ran before is never failed here: no count needed
        # an elastic job can never fit only when its minimum cannot
        spec = sizing_of(request).smallest(request)
        node_filter = eligibility.filter_for(job.key, spec, with_usage=False) if eligibility else None
        reasons = never_fits(admission_topology(view, request), spec, node_filter)
        if fails_for_good(bool(reasons), job.ever_ran):  # the core passes' rule, applied before the queue
            reasons += trays_refused(view, request, spec, node_filter)  # only trays would hold it: say why not
            fail_unschedulable(actions, "; ".join(reasons), now)
            return True
    missing = unknown_queue(request, ctx.queues)
    if missing:
        # a Warning once, when the job starts waiting for the queue; status.reason and message say it too
        ctx.wait(actions, WaitReason.QUEUE_NOT_FOUND, missing)
        return True
    return False


def entry_of(ctx: PassContext, job: JobObject, request: JobRequest, making_room: str | None = None) -> Entry:
    """The values core.admit.gates.entry_gate checks, for ``job``."""
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
        record = tray_record(view, job, request, placement, epoch, reasons)
    else:
        record = new_record(view, job, request, placement, epoch, reasons)
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
    if kind_of(request).renders_pods:  # a pod group's pods are only annotated and bound (its kind's finish)
        sync_pods(actions, job, request, record, pods, view.nodes, ctx.gpu_holders)
