"""Checkpoint-aware preemption of a running job, carried by its status so any pass can finish it.

Starting: ``status.preemption {deadline, for, requestedAt}``, the condition ``PreemptionPending=True``, a
Warning Event, and the annotation ``paralleljob.dev/checkpoint-requested=<deadline>`` on every pod of the
victim (the training code's signal to checkpoint now). The pods keep running until the deadline.

Finishing (the first pass at or after the deadline, by this operator or one that took over): the pods are
deleted and the job goes Running -> Preempted; the next pass moves it Preempted -> Queued with its
``queuedAt`` (its place in line) and its restart count unchanged. The GPUs stay held until its pods are
gone, so the job it made room for is admitted on a later pass, on free GPUs.

Cancelling: when the core says the preemption no longer stands (``core.admit.preemption.preemption_stands``:
the job it makes room for is gone or no longer waiting, or the victim is not Running), the victim keeps running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paralleljob.core.admit.preemption import preemption_stands
from paralleljob.core.lifecycle import Event, Phase
from paralleljob.k8s.edge.constants import CHECKPOINT_REQUESTED_ANNOTATION
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.queues import format_time, preemption_of
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.plan.actions import JobActions, PodAnnotate, added
from paralleljob.k8s.plan.pods.podsync import delete_all

PENDING_CONDITION = "PreemptionPending"


def start_preemption(actions: JobActions, for_job: str, deadline: float, why: str, now: str) -> None:
    """Record the preemption on the victim (idempotent: a deadline already set is never moved)."""
    draft = actions.draft
    if preemption_of(draft.data) is not None:
        return
    stamp = format_time(deadline)
    draft.set(preemption={"deadline": stamp, "for": for_job, "requestedAt": now})
    message = f"preempted for {for_job}: checkpoint now; its pods are deleted at {stamp} ({why})"
    draft.condition(PENDING_CONDITION, "True", "CheckpointRequested", message, now)
    actions.note("Warning", "PreemptionPending", message)


def request_checkpoint(actions: JobActions, pods: Sequence[PodInfo], deadline: str) -> None:
    """The checkpoint-now signal on each of the job's live pods that does not carry it yet."""
    asked = {(a.namespace, a.name) for a in actions.annotates}
    for pod in pods:
        if pod.deleting or pod.terminal or pod.checkpoint_requested == deadline or (pod.namespace, pod.name) in asked:
            continue
        actions.annotates = added(
            actions.annotates,
            PodAnnotate(pod.namespace, pod.name, pod.uid, {CHECKPOINT_REQUESTED_ANNOTATION: deadline}),
        )


def making_room(jobs: Sequence[JobObject]) -> dict[str, tuple[float, list[str]]]:
    """Waiting job -> (latest deadline, victims) for every preemption still under way."""
    out: dict[str, tuple[float, list[str]]] = {}
    for job in jobs:
        pending = preemption_of(job.status.raw)
        if pending is None or job.phase is not Phase.RUNNING or job.deleting:
            continue
        deadline, for_job = pending
        before = out.get(for_job, (deadline, []))
        out[for_job] = (max(before[0], deadline), [*before[1], job.key])
    return out


def continue_preemption(
    actions: JobActions,
    pods: Sequence[PodInfo],
    nodes: Mapping[str, NodeInfo],
    jobs: Mapping[str, JobObject],
    now: str,
    now_s: float,
) -> bool:
    """For a Running job with a preemption under way: finish it at the deadline (True: the job stopped this
    pass), cancel it when nobody waits for it any more, else keep signalling its pods. False otherwise."""
    draft = actions.draft
    pending = preemption_of(draft.data)
    if pending is None:
        return False
    deadline, for_job = pending
    waiting = jobs.get(for_job)
    standing = preemption_stands(draft.phase, for_job, None if waiting is None or waiting.deleting else waiting.phase)
    if not standing.stands:
        draft.set(preemption=None)
        draft.condition(PENDING_CONDITION, "False", "Cancelled", f"preemption cancelled: {standing.why}", now)
        return False
    if now_s < deadline:
        request_checkpoint(actions, pods, format_time(deadline))
        return False
    message = f"preempted for {for_job}: grace period ended at {format_time(deadline)}; back in the queue"
    draft.apply(Event.PREEMPTED, "Preempted", message, now)
    draft.condition(PENDING_CONDITION, "False", "Preempted", message, now)
    draft.condition("Bound", "False", "Preempted", message, now)
    draft.set(preemption=None, placement=None, communicationCost=None, nodes=None)
    actions.note("Warning", "Preempted", message)
    delete_all(actions, pods, nodes, f"preempted for {for_job}")
    return True


def pending_deadlines(jobs: Sequence[JobActions]) -> list[float]:
    """The deadlines of every preemption still under way after this pass's decisions."""
    out = []
    for actions in jobs:
        pending = preemption_of(actions.draft.data)
        if pending is not None and actions.draft.phase is Phase.RUNNING:
            out.append(pending[0])
    return out
