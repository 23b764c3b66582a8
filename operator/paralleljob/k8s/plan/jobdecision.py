"""One job's step in a pass: what its object, its recorded placement and its pods say must happen now.

A job being deleted, invalid or finished gets its pods deleted; a new one is accepted into its queue; a
waiting one (and a pod group whose pods are all there) is handed back to try admission; a placed one keeps
its placement, or is repaired (broken hardware, crashed workers, a drained node), moved to a better
placement, resized (elastic), bound or completed. The decision is written into the job's ``JobActions``
(status draft, pods to create or delete) and the pass's view state (GPUs released or taken); nothing here
talks to the API.
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.lifecycle import Event, Phase
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.actions import ACTIVE, JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.draining import off_drained
from paralleljob.k8s.plan.groups.podgroups import slot_pods
from paralleljob.k8s.plan.kinds.base import Gang, GangKind
from paralleljob.k8s.plan.kinds.gangs import gang_of
from paralleljob.k8s.plan.moves.preempting import continue_preemption
from paralleljob.k8s.plan.moves.reoptimizing import reconsider
from paralleljob.k8s.plan.pods.podsync import delete_all
from paralleljob.k8s.plan.status import StatusDraft
from paralleljob.k8s.view.clusterview import ClusterView


def _base_fields(draft: StatusDraft, job: JobObject, gang: Gang | None, now: str) -> None:
    draft.set(observedGeneration=job.generation)
    if any(c.get("type") == "ReconcileError" and c.get("status") == "True" for c in job.status.conditions):
        draft.condition("ReconcileError", "False", "Resolved", "handled normally again", now)
    if job.request is not None:
        spec = job.request.spec
        draft.set(shape=f"{spec.tp}x{spec.pp}x{spec.dp}", gpus=spec.num_gpus)
        accepted = job.status.condition("Accepted")
        if accepted and accepted.get("status") == "True" and "waits for room" in str(accepted.get("message")):
            # accepted by an older operator, whose Accepted condition said "waits for room" for the job's life
            message = f"{job.request.describe()} accepted into queue {job.request.queue}"
            draft.condition("Accepted", "True", "Valid", message, now)
    draft.data.setdefault("restarts", 0)
    if job.request is not None and gang is not None:
        running = job.record.dp if job.record is not None and draft.phase in ACTIVE else 0
        gang.sizing.write_status(draft, job.request, running)


def _fail_invalid(actions: JobActions, why: str, now: str) -> None:
    draft = actions.draft
    reason = actions.job.invalid_reason
    if draft.phase is Phase.PLACING:
        draft.apply(Event.BIND_FAILED, reason, why, now)
    if draft.phase in (Phase.PENDING, Phase.QUEUED):
        draft.apply(Event.REJECTED, reason, why, now)
    elif draft.phase in (Phase.RUNNING, Phase.RECOVERING):
        draft.apply(Event.GAVE_UP, reason, why, now)
    draft.set(completionTime=now)
    actions.note("Warning", reason, why)


def _requeue_lost(actions: JobActions, view: ClusterView, pods: Sequence[PodInfo], why: str, now: str) -> None:
    """The job's placement cannot be used (its record is unreadable, or its gang could not be bound)."""
    draft = actions.draft
    view.state.release(actions.job.key)
    if draft.phase is Phase.PLACING:
        draft.apply(Event.BIND_FAILED, "BindFailed", f"gang rolled back: {why}", now)
    else:
        if draft.phase is Phase.RUNNING:
            draft.apply(Event.HARDWARE_FAILED, "PlacementLost", why, now)
        draft.apply(Event.REQUEUED, "Requeued", f"placement lost: {why}", now)
    draft.set(placement=None, communicationCost=None, nodes=None, queuedAt=now)
    actions.note("Warning", "RolledBack", why)
    delete_all(actions, pods, view.nodes, "gang rolled back")


def _finished(
    draft: StatusDraft, job: JobObject, record: PlacementRecord, pods: Sequence[PodInfo], kind: GangKind
) -> dict[str, int]:
    """The job's finished ranks (``GangKind.finished_ranks``), written down as soon as one is seen: its pod may
    be deleted at any time after it ends (the pod GC), and only the status remembers it then."""
    finished = kind.finished_ranks(record, pods, job.uid, job.status.succeeded_pods)
    if finished != job.status.succeeded_pods:
        draft.set(succeededPods=finished or None)
    return finished


def decide_job(ctx: PassContext, actions: JobActions, job: JobObject) -> tuple[JobObject, JobRequest] | None:
    """Decide one job; returns it when it should try admission this pass."""
    view, eligibility, now, now_s = ctx.view, ctx.eligibility, ctx.now, ctx.now_s
    pods = ctx.pods_of(job)
    draft = actions.draft
    if job.deleting:
        delete_all(actions, pods, view.nodes, "ParallelJob is being deleted")
        return None
    request = job.request
    # the job's kind, layout and sizing, read once from its request and record (plan/kinds)
    gang = None if request is None else gang_of(request, job.record, job.key in ctx.pod_groups)
    _base_fields(draft, job, gang, now)
    if request is None or gang is None:
        if not draft.phase.terminal:
            _fail_invalid(actions, job.invalid, now)
            view.state.release(job.key)
        delete_all(actions, pods, view.nodes, "invalid ParallelJob")
        return None
    if draft.phase is Phase.FAILED:
        delete_all(actions, pods, view.nodes, "ParallelJob failed")
        return None
    if draft.phase is Phase.SUCCEEDED:
        return None
    if draft.phase is Phase.PENDING:
        draft.apply(Event.ACCEPTED, "Queued", f"{request.describe()} waits for room in queue {request.queue}", now)
        # The Accepted condition outlives the wait (it stays True while the job runs): it says what was
        # accepted, not "waits for room", which a Running job would otherwise show for good.
        accepted = f"{request.describe()} accepted into queue {request.queue}"
        draft.condition("Accepted", "True", "Valid", accepted, now)
        # Its place in line is its creation, the order it already had before this first write: stamping the
        # pass time here moved a new job from ahead of a just-accepted head to behind it between two passes.
        draft.set(queuedAt=job.created or now)
        actions.note("Normal", "Accepted", f"{request.describe()} accepted")
    if draft.phase is Phase.PREEMPTED:
        # back in line at its old place (queuedAt unchanged), with its restart count
        draft.apply(Event.REQUEUED, "Requeued", "preempted; back in the queue at its place", now)
        draft.set(queuedAt=job.status.queued_at or now)
    if draft.phase is Phase.QUEUED:
        ready = gang.kind.queued(ctx, actions, job, pods)
        return None if ready is None else (job, ready)
    # Placing, Running, Recovering: hold the recorded placement
    record = job.record
    if record is None or job.record_error:
        _requeue_lost(actions, view, pods, job.record_error or "the status has no placement", now)
        return None
    if job.key in ctx.invalid_pods:
        # The template itself is wrong (the API said 400/422): retrying cannot help, so fail with the reason.
        why = f"the API server refused the job's pods: {ctx.invalid_pods[job.key]}; fix spec.template"
        _requeue_lost(actions, view, pods, why, now)
        draft.apply(Event.REJECTED, "InvalidPodTemplate", why, now)
        draft.set(completionTime=now)
        return None
    if job.key in ctx.bind_failures:
        _requeue_lost(actions, view, pods, ctx.bind_failures[job.key], now)
        return None
    if continue_preemption(actions, pods, view.nodes, ctx.jobs, now, now_s):
        return None  # its GPUs stay held in this pass's view: its pods are still going away
    finished = _finished(draft, job, record, pods, gang.kind)
    held = HeldJob(actions, job, request, record, pods, finished)
    seen = gang.kind.observe(record, pods, job.uid, finished)
    if gang.kind.owner_gone(ctx, actions, pods) or gang.layout.failure(ctx, held, seen, gang):
        return None
    names = {
        s.name: p.name for s, (_, p) in zip(record.pod_slots, slot_pods(record, pods), strict=True) if p is not None
    }
    # A job some of whose ranks have finished is ending: it is not moved for a drain, a better placement or
    # a size (each re-creates pods, and a finished rank's would run its training again).
    if not finished and (drained := off_drained(ctx, held, names)):
        gang.layout.move(ctx, held, drained, gang)
        return None
    if seen.bound == seen.total and gang.kind.renders_pods and not finished:  # nor another controller's pods
        node_filter = eligibility.filter_for(job.key, request.spec)
        migrated = reconsider(ctx, held, node_filter)
        if migrated is not None:
            gang.kind.sync(ctx, held, migrated)
            return None
    gang.kind.sync(ctx, held, record)
    if seen.bound == seen.total:
        if draft.phase is Phase.PLACING:
            draft.apply(Event.BOUND, "Running", f"all {seen.total} pods bound on {', '.join(record.nodes)}", now)
            draft.set(startTime=draft.data.get("startTime") or now)
            draft.condition("Healthy", "True", "Running", "all pods bound to healthy GPUs", now)
            actions.gang_bound = True
        elif draft.phase is Phase.RECOVERING:
            draft.apply(
                Event.REPAIRED, "Repaired", f"all {seen.total} pods bound again on {', '.join(record.nodes)}", now
            )
            actions.note("Normal", "Repaired", f"all {seen.total} pods bound on {', '.join(record.nodes)}")
            actions.recovery_done = True
        if seen.succeeded == seen.total and draft.phase is Phase.RUNNING:
            draft.apply(Event.COMPLETED, "Completed", f"all {seen.total} workers succeeded", now)
            draft.set(completionTime=now, succeededPods=None)  # all of them: the list has served its purpose
            actions.note("Normal", "Completed", f"all {seen.total} workers succeeded")
            view.state.release(job.key)
        elif draft.phase is Phase.RUNNING and not finished and (resized := gang.sizing.resize(ctx, held)) is not None:
            gang.kind.sync(ctx, held, resized)
    return None
