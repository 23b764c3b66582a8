"""The failure handler: what broke under a running job (:func:`detect`), and carrying out the core's answer.

What to do is decided by :func:`paralleljob.core.failure.repair.decide_repair` (maxRestarts, restart in place for a
crashed worker, minimal or full repair of broken hardware, Requeue or Fail when no room is left), the same
function the simulator calls. This module only translates: the job's record and pods in, the decision out
as status (``lastFailure``, ``restarts``, conditions), an Event and the pods to re-create or delete.

A drain (``FailureKind.DRAINED``, handed in by ``plan/failure/draining.py`` once the job had its checkpoint signal and
grace period) is carried out by the same repair but is not a failure: no restart is counted, the record is
``status.lastDrain`` (``lastFailure`` keeps the last real failure), the Events are Normal, the failure metrics
are not touched, and with no room left the job waits in line at its place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from paralleljob.core.failure.elastic_failure import counts_as_restart, drop_instead
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import (
    FailureKind,
    FailureReport,
    GiveUp,
    Requeue,
    decide_repair,
)
from paralleljob.core.placing.eligibility import NodeFilter, restricted, within_domain
from paralleljob.core.timing.cost import CostBreakdown, cost_model
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot, cost_to_status
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.outcomes import open_failure, record_failure, rescheduled, unrepaired
from paralleljob.k8s.plan.pods.podsync import is_finished
from paralleljob.k8s.view.clusterview import ClusterView

if TYPE_CHECKING:
    from paralleljob.k8s.plan.kinds.base import Gang


def detect(
    view: ClusterView,
    job: JobObject,
    record: PlacementRecord,
    failed: Sequence[PodInfo],
    pod_names: Mapping[str, str] | None = None,
    finished: Mapping[str, int] | None = None,
) -> Breakage | None:
    """What broke under ``job``; ``pod_names``: slot name -> the pod that holds it, where the pods are not
    named after their slots (a pod group's); ``finished``: its ranks that exited 0, whose hardware no longer
    matters (a node scaled down once its pod finished is not a failure of the job)."""
    names_of = pod_names or {}
    if job.key in view.conflicts:
        return Breakage(FailureKind.PLACEMENT_LOST, tuple(range(len(record.slots))), (), (), view.conflicts[job.key])
    done = finished or {}
    broken = [g for g, slot in enumerate(record.slots) if not is_finished(slot, done) and view.broken_gpus(slot)]
    if broken:
        by_cause: dict[str, list[str]] = {}
        nodes: list[str] = []
        node_down = False
        for g in broken:
            slot = record.slots[g]
            info = view.nodes.get(slot.node)
            nodes.append(slot.node)
            if info is None:
                cause = f"node {slot.node} is gone"
                node_down = True
            elif not info.runs_work:
                cause = info.why_closed()
                node_down = True
            else:
                bad = sorted(set(slot.gpu_indices) & info.broken_gpus())
                cause = f"GPU {','.join(map(str, bad))} on {slot.node} reported unhealthy"
            by_cause.setdefault(cause, []).append(names_of.get(slot.name, slot.name))
        kind = FailureKind.NODE if node_down else FailureKind.GPU
        message = "; ".join(f"{cause} (pods {', '.join(pods)})" for cause, pods in by_cause.items())
        names = tuple(names_of.get(record.slots[g].name, record.slots[g].name) for g in broken)
        return Breakage(kind, tuple(broken), tuple(dict.fromkeys(nodes)), names, message)
    if failed:
        index = {slot.name: g for g, slot in enumerate(record.slots)}
        slots = tuple(sorted(index[p.name] for p in failed if p.name in index))
        message = "; ".join(f"pod {p.name} failed: {p.failure or 'no reason given'}" for p in failed)
        return Breakage(
            FailureKind.WORKER,
            slots,
            tuple(dict.fromkeys(p.node for p in failed)),
            tuple(p.name for p in failed),
            message,
        )
    return None


def _slots_from_groups(
    view: ClusterView, old: PlacementRecord, groups: Sequence[Sequence[int]], epoch: int, restart_all: bool
) -> list[PodSlot]:
    slots = []
    for slot, gpus in zip(old.slots, groups, strict=True):
        node, indices = view.locate(gpus)
        same = node == slot.node and indices == slot.gpu_indices
        incarnation = slot.incarnation if same and not restart_all else epoch
        slots.append(PodSlot(slot.name, slot.replica, slot.stage, node, indices, incarnation))
    return slots


def handle(
    ctx: PassContext, held: HeldJob, breakage: Breakage, node_filter: NodeFilter | None, gang: Gang
) -> PlacementRecord | None:
    """Decide the repair for ``breakage``; mutates the view's state (the job's GPUs move or are freed).
    Returns the repaired placement to bring the pods in line with, or None when the job left the cluster.
    ``node_filter``: the nodes the job's template allows (moved groups go only there). The caller (decide)
    never hands a worker failure of a gang still being placed (a worker cannot fail before it runs). ``gang``:
    the job's kind, which says whether it may drop a replica instead and how its repair reads."""
    actions, job, request, record = held.actions, held.job, held.request, held.record
    view, placer, now = ctx.view, ctx.placer, ctx.now
    draft = actions.draft
    policy = request.failure
    maintenance = breakage.kind.maintenance
    failure = open_failure(ctx, held, breakage)
    epoch = job.placement_epoch + 1
    report = FailureReport(breakage.kind, breakage.slots, job.restarts)
    held_groups = view.state.allocations[job.key].groups if job.key in view.state.allocations else ()
    in_use = (view.node_index[s.node] for s in record.slots if s.node in view.node_index)
    with restricted(view.state, request.spec, within_domain(node_filter, in_use)):
        decision = decide_repair(view.state, placer, request.spec, cost_model(request.cost_model), policy, report)
    drop = drop_instead(
        view.state, request.spec, held_groups, gang.sizing.range(request), decision, breakage.hardware, breakage.slots
    )
    restarts = job.restarts + counts_as_restart(breakage.kind, drop or decision)  # a drop is not a restart
    if drop is not None:
        dropped = gang.sizing.dropped(ctx, held, drop, f"after: {breakage.message}")
        after = round(dropped.cost.total_ms, 6) if dropped.cost else None
        failure.update(action="DroppedReplica", costAfterMs=after)
        draft.set(restarts=restarts)
        record_failure(draft, failure, maintenance)
        draft.condition("Placed", "True", "DroppedReplica", f"shrank to {dropped.dp} replicas", now)
        return dropped
    if isinstance(decision, GiveUp | Requeue):
        unrepaired(ctx, held, decision, failure, restarts)
        return None
    if decision.placement is not None:
        full = policy.strategy is RecoveryStrategy.FULL
        slots = _slots_from_groups(view, record, decision.placement.groups, epoch, full)
        cost: CostBreakdown | None = decision.placement.cost
    else:
        restarting = set(decision.restart_groups)
        slots = [
            PodSlot(s.name, s.replica, s.stage, s.node, s.gpu_indices, epoch if g in restarting else s.incarnation)
            for g, s in enumerate(record.slots)
        ]
        cost = record.cost
    # The pods keep the rank order they started with: a replacement is numbered like its siblings.
    new_record = replace(
        record, epoch=epoch, cost_model=request.cost_model, slots=tuple(slots), cost=cost, reasons=decision.reasons
    )
    failure.update(action=decision.action.value, costAfterMs=round(cost.total_ms, 6) if cost else None)
    moved = [s for s, old in zip(slots, record.slots, strict=True) if s != old]
    message = gang.kind.repaired(record, moved, policy.strategy.value, maintenance)
    if cost is not None and record.cost is not None:
        message += f"; cost {record.cost.total_ms:.3f} -> {cost.total_ms:.3f} ms"
    draft.set(communicationCost=cost_to_status(cost, request.cost_model) if cost else None)
    rescheduled(ctx, held, new_record, message, failure, restarts)
    return new_record


