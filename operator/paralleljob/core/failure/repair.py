"""The failure policy as one decision: what happens to a job whose hardware broke or whose worker crashed.

Both shells call :func:`decide_repair` and only carry out its answer: the operator turns it into pods and
status (``k8s/plan/failure/failures.py``), the simulator into events (``sim/run/disruptions.py``). The rules, in order:

1. ``maxRestarts``: a job that has already been restarted that many times gives up (``GiveUp`` with
   ``MAX_RESTARTS``), whatever broke; a drain (``FailureKind.DRAINED``) is maintenance, not a failure, and
   neither counts nor meets this rule.
2. A crashed worker on healthy hardware keeps its GPUs: ``minimal`` restarts the failed TP groups' pods,
   ``full`` the whole gang (``Rescheduled`` with no new placement).
3. Broken hardware is repaired with :func:`~paralleljob.core.failure.recovery.recover` when the placer is the core's
   (``minimal`` moves only the broken groups, ``full`` re-places the job); any other placer (a baseline)
   re-places the whole job from scratch, which is all it knows.
4. No room: ``onUnplaceable`` says ``Requeue`` (back in line, GPUs freed) or ``Fail`` (``GiveUp`` with
   ``NO_ROOM``); a drained job is always requeued (at its place, like a preempted one).

Like ``recover`` it changes ``state`` (the job's GPUs move, or are freed when it leaves); it does no I/O.
Kueue keeps the same split: its ``WaitForPodsReady``/requeue rules decide on values and the job
reconcilers only execute; kube-scheduler's framework likewise returns a typed ``Status`` per plugin.

"Best placement now" (:func:`best_placement_now`), the question behind moving a repaired job back, is here
too, so the operator's re-optimisation and the simulator's ask it the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.failure.keepreplicas import keep_replicas
from paralleljob.core.failure.recovery import RecoveryStrategy, recover
from paralleljob.core.job import JobSpec
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import CostModel


class FailureKind(enum.StrEnum):
    """What broke under a running job; the value is the reason the operator writes (Events, lastFailure)."""

    NODE = "NodeFailure"
    GPU = "GPUFailure"
    WORKER = "WorkerFailure"
    PLACEMENT_LOST = "PlacementLost"
    # Not a failure: an admin drained the job's GPUs for maintenance (``paralleljob drain``). The job's
    # groups there move as after a hardware failure, but no restart is counted against maxRestarts and,
    # when no room is left, it waits in line at its place instead of failing: nothing was the job's fault.
    DRAINED = "Drained"

    @property
    def hardware(self) -> bool:
        """The job's GPUs are taken away (its groups there must move), not a crashed worker on good GPUs."""
        return self is not FailureKind.WORKER

    @property
    def maintenance(self) -> bool:
        """Planned by an admin, not a failure: no restart counted, never GiveUp, no failure recorded."""
        return self is FailureKind.DRAINED


class OnUnplaceable(enum.StrEnum):
    REQUEUE = "Requeue"
    FAIL = "Fail"


class ReoptimizePolicy(enum.StrEnum):
    PROPOSE = "Propose"  # only report that moving back would pay off
    MIGRATE_AT_CHECKPOINT = "MigrateAtCheckpoint"


class GiveUpReason(enum.StrEnum):
    MAX_RESTARTS = "MaxRestartsReached"
    NO_ROOM = "NoRoomToRepair"


class FailureAction(enum.StrEnum):
    """The outcome's name in ``status.lastFailure.action`` and the failures metric's label."""

    RESCHEDULED = "rescheduled"
    REQUEUED = "requeued"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """``spec.failurePolicy``; these defaults are the only ones (the CRD's are checked against them)."""

    strategy: RecoveryStrategy = RecoveryStrategy.MINIMAL
    max_restarts: int = 3
    on_unplaceable: OnUnplaceable = OnUnplaceable.REQUEUE
    reoptimize: ReoptimizePolicy = ReoptimizePolicy.MIGRATE_AT_CHECKPOINT


DEFAULT_FAILURE_POLICY = FailurePolicy()


@dataclass(frozen=True, slots=True)
class FailureReport:
    """One failure under a job: what broke, which TP groups it hit, and how often the job restarted before."""

    kind: FailureKind
    groups: tuple[int, ...]
    restarts: int


@dataclass(frozen=True, slots=True)
class Rescheduled:
    """The job goes on. ``placement``: where it runs now after a hardware repair (already allocated), None
    when a worker restarts on its own GPUs; ``restart_groups``: the TP groups whose pods restart."""

    placement: Placement | None
    restart_groups: tuple[int, ...]
    reasons: tuple[str, ...]
    action: FailureAction = field(default=FailureAction.RESCHEDULED, init=False)


@dataclass(frozen=True, slots=True)
class Requeue:
    """No room to repair: the job's GPUs are freed and it waits in line again. Where it stands is its queue's
    ``requeueOrder`` (``core.admit.fifo.keeps_place``, both shells): at its place by default (its hardware broke, not
    the job), or at the back, as Kueue requeues an evicted workload by its eviction time, so that a job that
    has just failed to fit does not head a strict FIFO line (docs/simulator.md, "Failures against best-fit")."""

    reasons: tuple[str, ...]
    action: FailureAction = field(default=FailureAction.REQUEUED, init=False)


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The job fails for good; its GPUs are freed."""

    reason: GiveUpReason
    reasons: tuple[str, ...]
    action: FailureAction = field(default=FailureAction.FAILED, init=False)


RepairDecision = Rescheduled | Requeue | GiveUp


def decide_repair(
    state: ClusterState,
    placer: PlacerLike,
    job: JobSpec,
    model: CostModel,
    policy: FailurePolicy,
    failure: FailureReport,
) -> RepairDecision:
    """Apply the whole failure policy to ``failure`` under ``job``; ``state`` is updated to match the answer
    (a job that is not in ``state.allocations``, e.g. its record could not be loaded, is placed afresh)."""
    if failure.restarts >= policy.max_restarts and not failure.kind.maintenance:
        state.release(job.job_id)
        return GiveUp(GiveUpReason.MAX_RESTARTS, (f"maxRestarts {policy.max_restarts} reached",))
    if not failure.kind.hardware:
        whole = policy.strategy is RecoveryStrategy.FULL
        groups = tuple(range(job.dp * job.pp)) if whole else tuple(sorted(set(failure.groups)))
        what = "whole gang" if whole else f"{len(groups)} pod(s)"
        return Rescheduled(None, groups, (f"{what} restarted on the same GPUs",))
    before = state.allocations.get(job.job_id)
    placement, reasons = _repair_hardware(state, placer, job, model, policy.strategy)
    if placement is None:
        state.release(job.job_id)
        if policy.on_unplaceable is OnUnplaceable.REQUEUE or failure.kind.maintenance:
            return Requeue(reasons)
        return GiveUp(GiveUpReason.NO_ROOM, reasons)
    if before is None or policy.strategy is RecoveryStrategy.FULL:
        return Rescheduled(placement, tuple(range(len(placement.groups))), reasons)
    return Rescheduled(placement, _moved(before.groups, placement.groups), reasons)


def _repair_hardware(
    state: ClusterState, placer: PlacerLike, job: JobSpec, model: CostModel, strategy: RecoveryStrategy
) -> tuple[Placement | None, tuple[str, ...]]:
    if isinstance(placer, Placer) and job.job_id in state.allocations:
        outcome = recover(state, placer, job, model, strategy)
        return outcome.new, outcome.reasons
    previous = state.release(job.job_id)
    try:
        if strategy is RecoveryStrategy.FULL and isinstance(placer, NVLinkPlacer) and previous is not None:
            placement = placer.place_whole(job, model, previous)
        else:
            placement = placer.place(job, model, previous=previous)
    except PlacementInfeasible as exc:
        return None, tuple(exc.reasons)
    state.allocate(Allocation(job.job_id, placement.groups, job.memory_per_gpu_gb))
    return placement, tuple(placement.reasons)


def _moved(old: Sequence[Sequence[int]], new: Sequence[Sequence[int]]) -> tuple[int, ...]:
    return tuple(g for g, (a, b) in enumerate(zip(old, new, strict=True)) if tuple(a) != tuple(b))


def best_placement_now(state: ClusterState, placer: PlacerLike, job: JobSpec, model: CostModel) -> Placement | None:
    """The placer's choice for a running ``job`` if it were placed now, its own GPUs counted as free; the
    state is left exactly as it was, down to the order in which equal nodes are listed (else every probe
    would change the next tie-break). None: it would not fit anywhere (not even where it is). On a topology
    with NVLink cliques the NVLink placer is asked for a fresh placement near the job's (``place_near``), not
    handed it as ``previous``, which it reads as a repair to make (every healthy tray kept: the job would never
    move back); among equally priced answers it keeps the job's cliques and trays. Elsewhere the answer's
    replicas are renumbered to keep the job's TP groups where they are (:func:`keep_replicas`)."""
    own = state.allocations.get(job.job_id)
    if own is None:
        raise KeyError(f"{job.job_id} holds no GPUs")
    order = state.node_order(job.job_id)
    state.release(job.job_id)
    try:
        if isinstance(placer, NVLinkPlacer):
            return placer.place_near(job, model, own)
        best = placer.place(job, model, previous=None if state.topology.nvlink_level > 0 else own)
        return keep_replicas(own.groups, best, state.topology, job, model)
    except PlacementInfeasible:
        return None
    finally:
        state.allocate(own)
        state.restore_node_order(order)


def pods_to_move(current: Sequence[Sequence[int]], best: Sequence[Sequence[int]]) -> int:
    """TP groups whose GPUs differ between two placements of the same job."""
    return len(_moved(current, best))
