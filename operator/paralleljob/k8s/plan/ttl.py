"""Finished jobs that go away by themselves: ``spec.ttlSecondsAfterFinished``, as batch/v1 Job's field of
that name. A job whose recorded phase is Succeeded or Failed is deleted that many seconds after its
``status.completionTime`` (0: on the next pass); its pods and other owned objects follow through the
garbage collector (their ownerReferences). Until the deadline the job's actions wake the loop then
(``JobActions.wake_at``), so nothing but the clock has to change for the deletion to happen.

Only the recorded phase counts: the pass that finishes a job writes its status and posts its Completed
event first, and a later pass deletes it. The delete itself is the executor's, with the job's UID as
precondition (a job re-created under the same name is another job). Pure: no API, no clock but the pass's.
"""

from __future__ import annotations

from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.plan.actions import JobActions, JobDelete

REASON = "TTLExpired"


def finished_at(actions: JobActions) -> float | None:
    """When the job finished, in epoch seconds: its ``completionTime`` (as this pass leaves it), else the time
    its Succeeded or Failed condition turned True (a status written without the field). None: unknown, and
    such a job is kept rather than deleted at a guessed time."""
    data = actions.draft.data
    stamp = parse_time(data.get("completionTime"))
    if stamp is not None:
        return stamp
    for condition in data.get("conditions") or []:
        if condition.get("type") in ("Succeeded", "Failed") and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def deadline(actions: JobActions) -> float | None:
    """When the finished job is to be deleted; None when it is not finished, has no TTL, or is going already."""
    job = actions.job
    ttl = job.ttl_after_finished
    if ttl is None or job.deleting or not actions.draft.phase.terminal:
        return None
    finished = finished_at(actions)
    return None if finished is None else finished + ttl


def expire(actions: JobActions, now_s: float) -> None:
    """Delete the job once its TTL ran out and its finished status is recorded; wake the loop at the deadline
    before then."""
    due = deadline(actions)
    if due is None:
        return
    job = actions.job
    if due > now_s or not job.phase.terminal or actions.draft.phase is not job.phase:
        # not yet, or its finished status is still to be written: that write's chain wakes the loop anyway
        actions.wake_at = due if actions.wake_at is None else min(actions.wake_at, due)
        return
    when = actions.draft.data.get("completionTime") or "its finish"
    why = f"{job.phase.value} at {when}, ttlSecondsAfterFinished {job.ttl_after_finished}"
    actions.delete_job = JobDelete(job.namespace, job.name, job.uid, why)
    actions.note("Normal", REASON, f"deleting the finished ParallelJob ({why}); its pods go with it")
