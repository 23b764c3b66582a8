"""The job lifecycle as one table: (phase, event) -> next phase. Nothing else decides a phase."""

from __future__ import annotations

import enum

from paralleljob.core.errors import IllegalTransition


class Phase(enum.Enum):
    PENDING = "Pending"
    QUEUED = "Queued"
    PLACING = "Placing"
    RUNNING = "Running"
    RECOVERING = "Recovering"
    PREEMPTED = "Preempted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class Event(enum.Enum):
    ACCEPTED = "Accepted"  # spec validated, waiting for room
    REJECTED = "Rejected"  # can never run (bad spec, never fits)
    ADMITTED = "Admitted"  # a placement was chosen and recorded
    BOUND = "Bound"  # every pod of the gang is bound
    BIND_FAILED = "BindFailed"  # the gang was rolled back
    HARDWARE_FAILED = "HardwareFailed"  # a node or GPU under the job broke
    WORKER_FAILED = "WorkerFailed"  # a worker pod failed
    REPAIRED = "Repaired"
    MIGRATED = "Migrated"  # moved at a checkpoint boundary to a cheaper placement (re-optimisation)
    DRAINED = "Drained"  # moved off GPUs an admin drained for maintenance (not a failure)
    REQUEUED = "Requeued"  # no room now; wait in line again
    GAVE_UP = "GaveUp"  # no room and policy Fail, or maxRestarts exhausted
    PREEMPTED = "Preempted"
    COMPLETED = "Completed"


P, E = Phase, Event
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (P.PENDING, E.ACCEPTED): P.QUEUED,
    (P.PENDING, E.REJECTED): P.FAILED,
    (P.QUEUED, E.ADMITTED): P.PLACING,
    (P.QUEUED, E.REJECTED): P.FAILED,
    (P.PLACING, E.BOUND): P.RUNNING,
    (P.PLACING, E.BIND_FAILED): P.QUEUED,
    (P.PLACING, E.HARDWARE_FAILED): P.RECOVERING,
    (P.PLACING, E.REJECTED): P.FAILED,  # the API refused the pods (e.g. an invalid template)
    (P.RUNNING, E.HARDWARE_FAILED): P.RECOVERING,
    (P.RUNNING, E.WORKER_FAILED): P.RECOVERING,
    (P.RUNNING, E.PREEMPTED): P.PREEMPTED,
    (P.RUNNING, E.COMPLETED): P.SUCCEEDED,
    (P.RUNNING, E.GAVE_UP): P.FAILED,
    (P.RUNNING, E.MIGRATED): P.RECOVERING,  # the gang restarts on its new placement, as after a repair
    (P.RUNNING, E.DRAINED): P.RECOVERING,
    (P.PLACING, E.DRAINED): P.RECOVERING,
    (P.RECOVERING, E.DRAINED): P.RECOVERING,
    (P.RECOVERING, E.REPAIRED): P.RUNNING,
    (P.RECOVERING, E.REQUEUED): P.QUEUED,
    (P.RECOVERING, E.GAVE_UP): P.FAILED,
    (P.RECOVERING, E.HARDWARE_FAILED): P.RECOVERING,
    (P.RECOVERING, E.WORKER_FAILED): P.RECOVERING,
    (P.PREEMPTED, E.REQUEUED): P.QUEUED,
}
del P, E


def transition(phase: Phase, event: Event) -> Phase:
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise IllegalTransition(phase.value, event.value) from None
