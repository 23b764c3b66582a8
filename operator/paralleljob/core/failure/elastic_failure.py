"""The failure path's last two rules, one home for both shells (and every kind of gang):

- :func:`drop_instead`: when lost hardware would take an elastic job off its GPUs (the core's
  ``decide_repair`` says Requeue, or GiveUp: no room, or the restart limit), the job drops its broken replicas
  instead, as long as it keeps at least its minimum (``elastic.drop_broken``); the other replicas keep their
  GPUs and are not rescheduled. A worker crash is never a reason to drop (the worker is restarted in place).
- :func:`counts_as_restart`: whether a failure's outcome adds one to the job's restarts, the count that
  ``maxRestarts`` bounds. A repair, a requeue or a give-up for want of room counts; a drain (maintenance),
  a give-up at the limit (no restart happens) and a drop (no pod restarts: the job shrinks) do not. Drops are
  bounded by ``minData`` alone: once the job is at its minimum a further loss is a failure like a rigid
  job's, and is counted then.

Kept apart from ``elastic.py`` because it reads ``repair``'s decisions, and ``repair`` sits below the
elastic rules in no particular order: this module may import both."""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.cluster import ClusterState
from paralleljob.core.elastic import ElasticRange, Groups, Resize, drop_broken
from paralleljob.core.failure.repair import FailureKind, GiveUp, GiveUpReason, RepairDecision, Rescheduled
from paralleljob.core.job import JobSpec
from paralleljob.core.slices.slicerepair import SliceRepair

# what the shells carry out: the policy's decision (a gang's, or a MIG-slice job's), or a drop
FailureOutcome = RepairDecision | SliceRepair | Resize


def drop_instead(  # params: the job as placed (spec, groups, range) on the state, and the failure as decided
    state: ClusterState,
    job: JobSpec,
    groups: Groups,
    rng: ElasticRange | None,
    decision: RepairDecision,
    hardware: bool,
    broken_groups: Sequence[int] = (),
) -> Resize | None:
    """The resize that replaces ``decision`` for an elastic job that lost hardware and would leave its GPUs
    (Requeue or GiveUp, the restart limit included: a drop restarts no pod, so the limit does not forbid it):
    ``groups`` is what it held before the repair was tried, ``broken_groups`` the TP groups the shell found
    broken. ``None``: ``decision`` stands (rigid, a crash, a repair that worked, or below min)."""
    if rng is None or not hardware or not groups or isinstance(decision, Rescheduled):
        return None
    return drop_broken(state, job, groups, rng, broken_groups)


def counts_as_restart(kind: FailureKind, outcome: FailureOutcome) -> bool:
    """Whether the failure ``kind`` carried out as ``outcome`` counts against ``maxRestarts``; the operator
    (``status.restarts``) and the simulator (``SimJob.restarts``) add exactly this."""
    if kind.maintenance or isinstance(outcome, Resize):
        return False
    return not (isinstance(outcome, GiveUp) and outcome.reason is GiveUpReason.MAX_RESTARTS)
