"""The failure handler's decisions: what broke under a running job, and what to do about it.

Hardware (a node NotReady, deleted or NoExecute-tainted, a GPU reported unhealthy) is repaired with the
core's ``recover`` — ``minimal`` moves only the broken TP groups, ``full`` re-places and restarts the whole
gang. A crashed worker with healthy hardware keeps its GPUs: ``minimal`` re-creates that pod, ``full`` the
whole gang. No room left means Requeue or Fail per ``onUnplaceable``; ``maxRestarts`` bounds it all. Every
outcome lands in the status (``lastFailure``, ``restarts``, conditions) and as an Event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from paralleljob.core.cluster import Allocation
from paralleljob.core.cost import CostBreakdown, cost_model
from paralleljob.core.eligibility import NodeFilter, restricted
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.lifecycle import Event, Phase
from paralleljob.core.recovery import RecoveryStrategy, recover
from paralleljob.k8s.edge.pods import PodInfo
from paralleljob.k8s.edge.records import PlacementRecord, PodSlot, cost_to_status
from paralleljob.k8s.edge.specs import JobObject
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.podsync import delete_all
from paralleljob.k8s.view.clusterview import ClusterView


@dataclass(frozen=True, slots=True)
class Breakage:
    kind: str  # NodeFailure | GPUFailure | WorkerFailure | PlacementLost
    slots: tuple[int, ...]  # affected TP groups
    nodes: tuple[str, ...]
    pods: tuple[str, ...]
    message: str

    @property
    def hardware(self) -> bool:
        return self.kind != "WorkerFailure"


def detect(
    view: ClusterView,
    job: JobObject,
    record: PlacementRecord,
    failed: Sequence[PodInfo],
    pod_names: Mapping[str, str] | None = None,
) -> Breakage | None:
    """What broke under ``job``; ``pod_names``: slot name -> the pod that holds it, where the pods are not
    named after their slots (a pod group's)."""
    names_of = pod_names or {}
    if job.key in view.conflicts:
        return Breakage("PlacementLost", tuple(range(len(record.slots))), (), (), view.conflicts[job.key])
    broken = [g for g, slot in enumerate(record.slots) if view.broken_gpus(slot)]
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
        kind = "NodeFailure" if node_down else "GPUFailure"
        message = "; ".join(f"{cause} (pods {', '.join(pods)})" for cause, pods in by_cause.items())
        names = tuple(names_of.get(record.slots[g].name, record.slots[g].name) for g in broken)
        return Breakage(kind, tuple(broken), tuple(dict.fromkeys(nodes)), names, message)
    if failed:
        index = {slot.name: g for g, slot in enumerate(record.slots)}
        slots = tuple(sorted(index[p.name] for p in failed if p.name in index))
        message = "; ".join(f"pod {p.name} failed: {p.failure or 'no reason given'}" for p in failed)
        return Breakage(
            "WorkerFailure", slots, tuple(dict.fromkeys(p.node for p in failed)), tuple(p.name for p in failed), message
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
    ctx: PassContext, held: HeldJob, breakage: Breakage, node_filter: NodeFilter | None = None
) -> PlacementRecord | None:
    """Decide the repair for ``breakage``; mutates the view's state (the job's GPUs move or are freed).
    Returns the repaired placement to bring the pods in line with, or None when the job left the cluster.
    ``node_filter``: the nodes the job's template allows (moved groups go only there)."""
    actions, job, request, record = held.actions, held.job, held.request, held.record
    view, placer, now = ctx.view, ctx.placer, ctx.now
    draft = actions.draft
    assert view.state is not None and placer is not None
    policy = request.failure
    event = Event.HARDWARE_FAILED if breakage.hardware else Event.WORKER_FAILED
    if draft.phase is Phase.PLACING and not breakage.hardware:
        return record  # a worker cannot have failed before its gang is running; look again once it is
    if draft.phase is not Phase.RECOVERING or event is Event.HARDWARE_FAILED:
        draft.apply(event, breakage.kind, breakage.message, now)
    actions.note("Warning", breakage.kind, breakage.message)
    actions.recovery_started = True
    restarts = job.restarts + 1
    failure: dict[str, object] = {
        "time": now,
        "kind": breakage.kind,
        "reason": breakage.kind,
        "message": breakage.message,
        "nodes": list(breakage.nodes),
        "pods": list(breakage.pods),
        "costBeforeMs": round(record.cost.total_ms, 6) if record.cost else None,
    }
    if job.restarts >= policy.max_restarts:
        _give_up(ctx, held, f"{breakage.message}; maxRestarts {policy.max_restarts} reached", failure)
        return None
    epoch = int(job.status.get("placementEpoch", record.epoch) or 0) + 1
    model = cost_model(request.cost_model)
    if breakage.hardware:
        full = policy.strategy is RecoveryStrategy.FULL
        try:
            with restricted(view.state, request.spec, node_filter):
                if job.key in view.state.allocations:
                    outcome = recover(view.state, placer, request.spec, model, policy.strategy)
                    new = outcome.new
                    reasons = outcome.reasons
                else:  # the record could not be loaded: place from scratch
                    new = placer.place(request.spec, model)
                    view.state.allocate(Allocation(job.key, new.groups, request.spec.memory_per_gpu_gb))
                    reasons = new.reasons
        except PlacementInfeasible as exc:
            new, reasons = None, exc.reasons
        if new is None:
            _no_room(ctx, held, failure, "; ".join(reasons), restarts)
            return None
        slots = _slots_from_groups(view, record, new.groups, epoch, full)
        cost: CostBreakdown | None = new.cost
        why = list(reasons)
    else:
        failed = set(breakage.slots)
        restart_all = policy.strategy is RecoveryStrategy.FULL
        slots = [
            PodSlot(
                s.name,
                s.replica,
                s.stage,
                s.node,
                s.gpu_indices,
                epoch if restart_all or g in failed else s.incarnation,
            )
            for g, s in enumerate(record.slots)
        ]
        cost = record.cost
        why = [f"{'whole gang' if restart_all else f'{len(failed)} pod(s)'} restarted on the same GPUs"]
    moved = [s.name for s, old in zip(slots, record.slots, strict=True) if s != old]
    # The pods keep the rank order they started with: a replacement is numbered like its siblings.
    new_record = replace(
        record, epoch=epoch, cost_model=request.cost_model, slots=tuple(slots), cost=cost, reasons=tuple(why)
    )
    failure.update(action="rescheduled", costAfterMs=round(cost.total_ms, 6) if cost else None)
    if request.pod_group:
        # The operator creates no pod of a group (docs/pod-groups.md): it can only move the slot and wait.
        ranks = [f"node rank {record.node_rank(s)}" for s, old in zip(slots, record.slots, strict=True) if s != old]
        message = (
            f"{policy.strategy.value} repair: the slot of {', '.join(ranks)} moved to healthy GPUs; the operator"
            " re-creates no pod of a group: it waits for the pods' owner to replace the pod(s) on the broken"
            " hardware and binds the replacement to the new slot"
        )
    else:
        message = f"{policy.strategy.value} repair: {len(moved)} pod(s) re-created ({', '.join(moved)})"
    if cost is not None and record.cost is not None:
        message += f"; cost {record.cost.total_ms:.3f} -> {cost.total_ms:.3f} ms"
    draft.set(
        placement=new_record.to_status(),
        placementEpoch=epoch,
        communicationCost=cost_to_status(cost, request.cost_model) if cost else None,
        nodes=",".join(new_record.nodes),
        restarts=restarts,
        lastFailure={k: v for k, v in failure.items() if v is not None},
    )
    draft.condition("Bound", "False", "Repairing", message, now)
    draft.condition("Placed", "True", "Repaired", f"{message}; now on {', '.join(new_record.nodes)}", now)
    actions.note("Normal", "Rescheduled", message)
    actions.failure_action = "rescheduled"
    return new_record


def _no_room(ctx: PassContext, held: HeldJob, failure: dict[str, object], why: str, restarts: int) -> None:
    actions, job, request, pods = held.actions, held.job, held.request, held.pods
    view, now = ctx.view, ctx.now
    assert view.state is not None
    view.state.release(job.key)
    draft = actions.draft
    if request.failure.on_unplaceable == "Requeue":
        message = f"no room to repair: {why}; back in the queue"
        failure.update(action="requeued")
        draft.apply(Event.REQUEUED, "Requeued", message, now)
        draft.set(
            placement=None,
            communicationCost=None,
            nodes=None,
            restarts=restarts,
            queuedAt=now,
            lastFailure={k: v for k, v in failure.items() if v is not None},
        )
        actions.note("Warning", "Requeued", message)
        actions.failure_action = "requeued"
        delete_all(actions, pods, view.nodes, "job requeued after a failure")
    else:
        _give_up(ctx, held, f"no room to repair: {why}", failure, restarts)


def _give_up(
    ctx: PassContext, held: HeldJob, why: str, failure: dict[str, object], restarts: int | None = None
) -> None:
    actions, job, pods = held.actions, held.job, held.pods
    view, now = ctx.view, ctx.now
    assert view.state is not None
    view.state.release(job.key)
    failure.update(action="failed")
    actions.draft.apply(Event.GAVE_UP, "GaveUp", why, now)
    actions.draft.set(
        restarts=restarts if restarts is not None else job.restarts,
        completionTime=now,
        lastFailure={k: v for k, v in failure.items() if v is not None},
    )
    actions.note("Warning", "Failed", why)
    actions.failure_action = "failed"
    delete_all(actions, pods, view.nodes, "job failed")
