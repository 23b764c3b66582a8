"""What a job's status, Events and pods become when hardware breaks under it (:func:`open_failure`) and when the
failure policy's answer is carried out (:func:`rescheduled`, :func:`requeue`, :func:`give_up`): one home for
the HGX failure handler (``failures.py``), the NVL72 tray repair (``kinds/trayrepair.py``) and the MIG-slice
repair (``slices/repair.py``), which differ in how they repair, not in how an outcome is recorded.

``failure`` is the ``status.lastFailure`` draft the handler filled (time, kind, reason, message, nodes,
pods); a drain (``maintenance``) writes ``status.lastDrain`` instead, keeps the job's place in line, posts
Normal Events and counts no failure.
"""

from __future__ import annotations

from paralleljob.core.failure.repair import FailureAction, FailureKind, GiveUp, GiveUpReason, Requeue
from paralleljob.core.lifecycle import Event, Phase
from paralleljob.k8s.edge.parse.queues import requeue_stamp
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.pods.podsync import delete_all
from paralleljob.k8s.plan.status import StatusDraft


def open_failure(ctx: PassContext, held: HeldJob, breakage: Breakage) -> dict[str, object]:
    """The job learns what broke: its phase event (a drain is not a failure; a worker failing again while the
    job recovers changes no phase), an Event, the recovery clock started; returns the ``status.lastFailure``
    draft the outcome completes."""
    actions, record, now, maintenance = held.actions, held.record, ctx.now, breakage.kind.maintenance
    event = Event.DRAINED if maintenance else Event.HARDWARE_FAILED if breakage.hardware else Event.WORKER_FAILED
    if actions.draft.phase is not Phase.RECOVERING or event is not Event.WORKER_FAILED:
        actions.draft.apply(event, breakage.kind, breakage.message, now)
    actions.note("Normal" if maintenance else "Warning", breakage.kind, breakage.message)
    actions.recovery_started = not maintenance  # the recovery-time metric is about failures
    return {
        "time": now,
        "kind": breakage.kind.value,
        "reason": breakage.kind.value,
        "message": breakage.message,
        "nodes": list(breakage.nodes),
        "pods": list(breakage.pods),
        "costBeforeMs": round(record.cost.total_ms, 6) if record.cost else None,
    }


def rescheduled(
    ctx: PassContext,
    held: HeldJob,
    new_record: PlacementRecord,
    message: str,
    failure: dict[str, object],
    restarts: int,
) -> None:
    """The repair worked: the new record in the status, the job Repairing until its pods are bound again."""
    actions, now = held.actions, ctx.now
    maintenance = FailureKind(str(failure["kind"])).maintenance
    actions.draft.set(
        placement=new_record.to_status(),
        placementEpoch=new_record.epoch,
        nodes=",".join(new_record.nodes),
        restarts=restarts,
    )
    record_failure(actions.draft, failure, maintenance)
    actions.draft.condition("Bound", "False", "Repairing", message, now)
    actions.draft.condition("Placed", "True", "Repaired", f"{message}; now on {', '.join(new_record.nodes)}", now)
    actions.note("Normal", "Rescheduled", message)
    actions.failure_action = None if maintenance else FailureAction.RESCHEDULED


def unrepaired(
    ctx: PassContext,
    held: HeldJob,
    decision: GiveUp | Requeue,
    failure: dict[str, object],
    restarts: int,
    inside: str = "",
) -> None:
    """Carry out the core's GiveUp or Requeue for a broken job. ``inside``: where room was looked for, as
    the messages say it (" inside the NVLink cliques")."""
    if isinstance(decision, GiveUp):
        why = "; ".join(decision.reasons)
        at_limit = decision.reason is GiveUpReason.MAX_RESTARTS
        give_up(
            ctx,
            held,
            f"{failure['message']}; {why}" if at_limit else f"no room to repair{inside}: {why}",
            failure,
            restarts,
        )
        return
    maintenance = FailureKind(str(failure["kind"])).maintenance
    what = "move off the drained GPUs" if maintenance else "repair"
    message = f"no room to {what}{inside}: {'; '.join(decision.reasons)}; back in the queue"
    requeue(ctx, held, failure, message, restarts, maintenance)


def record_failure(draft: StatusDraft, failure: dict[str, object], maintenance: bool) -> None:
    """``status.lastFailure``, or ``status.lastDrain`` for a drain (which leaves the last failure as it was)."""
    kept = {k: v for k, v in failure.items() if v is not None}
    if maintenance:
        draft.set(lastDrain=kept)
    else:
        draft.set(lastFailure=kept)


def requeue(
    ctx: PassContext, held: HeldJob, failure: dict[str, object], message: str, restarts: int, maintenance: bool
) -> None:
    """The core said Requeue (``onUnplaceable: Requeue``): its GPUs are already freed in the view. Its hardware
    broke, not the job: it keeps its place in line (its ``queuedAt``) unless its queue's ``requeueOrder`` is
    Back; a drained job always keeps it, as a preempted one does (``core.admit.fifo.keeps_place``, both)."""
    actions, now = held.actions, ctx.now
    draft = actions.draft
    failure.update(action=FailureAction.REQUEUED.value)
    draft.apply(Event.REQUEUED, "Requeued", message, now)
    kind = FailureKind(str(failure["kind"]))
    queued_at = requeue_stamp(ctx.queues.get(held.request.queue), kind, held.job.queued_at, now)
    draft.set(placement=None, communicationCost=None, nodes=None, restarts=restarts, queuedAt=queued_at)
    record_failure(draft, failure, maintenance)
    actions.note("Normal" if maintenance else "Warning", "Requeued", message)
    actions.failure_action = None if maintenance else FailureAction.REQUEUED
    delete_all(actions, held.pods, ctx.view.nodes, "job requeued after a failure")


def give_up(ctx: PassContext, held: HeldJob, why: str, failure: dict[str, object], restarts: int) -> None:
    """The core said GiveUp (maxRestarts reached, or no room with ``onUnplaceable: Fail``): GPUs already freed."""
    actions, now = held.actions, ctx.now
    failure.update(action=FailureAction.FAILED.value)
    actions.draft.apply(Event.GAVE_UP, "GaveUp", why, now)
    actions.draft.set(restarts=restarts, completionTime=now)
    record_failure(actions.draft, failure, False)
    actions.note("Warning", "Failed", why)
    actions.failure_action = FailureAction.FAILED
    delete_all(actions, held.pods, ctx.view.nodes, "job failed")
