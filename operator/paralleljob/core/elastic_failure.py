"""The failure path's elastic rule, one function for both shells: when lost hardware leaves no room to
repair a job (the core's ``decide_repair`` says Requeue, or gives up for want of room), an elastic job drops
its broken replicas instead, as long as it keeps at least its minimum (``elastic.drop_broken``); the other
replicas keep their GPUs and are not rescheduled. A worker crash is never a reason to drop (the worker is
restarted in place), nor is reaching ``maxRestarts`` (the policy's verdict stands).

Kept apart from ``elastic.py`` because it reads ``repair``'s decisions, and ``repair`` sits below the
elastic rules in no particular order: this module may import both."""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.cluster import ClusterState
from paralleljob.core.elastic import ElasticRange, Groups, Resize, drop_broken
from paralleljob.core.job import JobSpec
from paralleljob.core.repair import GiveUp, GiveUpReason, RepairDecision, Requeue


def no_room(decision: RepairDecision) -> bool:
    """Whether ``decision`` came from a repair that found no room (not from the restart limit)."""
    return isinstance(decision, Requeue) or (
        isinstance(decision, GiveUp) and decision.reason is not GiveUpReason.MAX_RESTARTS
    )


def drop_instead(
    state: ClusterState,
    job: JobSpec,
    groups: Groups,
    rng: ElasticRange | None,
    decision: RepairDecision,
    hardware: bool,
    broken_groups: Sequence[int] = (),
) -> Resize | None:
    """The resize that replaces ``decision`` for an elastic job that lost hardware with no room to repair:
    ``groups`` is what it held before the repair was tried, ``broken_groups`` the TP groups the shell found
    broken. ``None``: ``decision`` stands (rigid, a crash, the restart limit, a repair that worked, or below
    min)."""
    if rng is None or not hardware or not groups or not no_room(decision):
        return None
    return drop_broken(state, job, groups, rng, broken_groups)
