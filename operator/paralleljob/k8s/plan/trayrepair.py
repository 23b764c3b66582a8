"""Broken trays under a job placed over NVLink cliques: the NVLink placer's repair, carried out.

A tray record's pods are whole trays (``layout: trays``), so a tray that is gone, NotReady, cordoned under a
NoExecute taint or has a GPU reported unhealthy breaks the pod on it. The repair is core/nvlink's: each
clique the job used keeps its ranks where its whole free trays (spares included) can take the broken trays'
ranks, so only the pods of the broken trays move, to free trays of the same clique, and the clique's
ComputeDomain (named after the job and the clique) stays the same; when a clique has no whole free tray left
the job is placed afresh over every clique, and the status says so; when nothing holds it the job goes back
in the queue with the placer's reasons. A tray pod that fails on healthy hardware is restarted on its tray
by the failure policy (:func:`restart_failed_trays`). A gone tray keeps its clique in the view (``clusterview``: the
domains of a live tray with the same label), which is what lets the repair stay inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from paralleljob.core.cluster import Allocation, GPUHealth
from paralleljob.core.cost import cost_model
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.lifecycle import Event, Phase
from paralleljob.core.nvlink import NVLinkPlacer
from paralleljob.core.recovery import RecoveryStrategy
from paralleljob.core.repair import FailureAction, FailureKind, FailureReport, GiveUp, decide_repair
from paralleljob.k8s.edge.pods import PodInfo
from paralleljob.k8s.edge.queues import requeue_stamp
from paralleljob.k8s.edge.records import PlacementRecord, cost_to_status
from paralleljob.k8s.edge.trayrecords import TraySlot
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.podsync import delete_all
from paralleljob.k8s.plan.trayadmission import TRAY_PLACER, nvlink_topology, seen_as, tray_record
from paralleljob.k8s.view.clusterview import ClusterView

_BROKEN = (GPUHealth.OFFLINE, GPUHealth.RESETTING)


def broken_trays(view: ClusterView, record: PlacementRecord) -> list[tuple[TraySlot, str]]:
    """The record's trays that can no longer run their pod, each with why."""
    out = []
    for tray in record.trays:
        info = view.nodes.get(tray.node)
        if info is None:
            out.append((tray, f"node {tray.node} is gone"))
        elif not info.runs_work:
            out.append((tray, info.why_closed()))
        else:
            ids = view.slot_gpus(tray)
            # a drained tray is still repaired as before (moved at once, counted): the drain's checkpoint
            # wait (plan/draining.py) covers TP-group records only so far (docs/operator.md, "Drains")
            drained = set(tray.gpu_indices) & info.drained_gpus
            if ids is None or drained or any(view.state.health[g] in _BROKEN for g in ids):
                bad = sorted(set(tray.gpu_indices) & (info.broken_gpus() | info.drained_gpus))
                out.append((tray, f"GPU {','.join(map(str, bad))} on {tray.node} reported unhealthy"))
    return out


def repair_trays(ctx: PassContext, held: HeldJob, broken: list[tuple[TraySlot, str]]) -> PlacementRecord | None:
    """Move the broken trays' pods (or re-place the job); None when it went back in the queue. Mutates the
    view's state: the job's GPUs move, or are freed."""
    actions, job, request, record, view, now = held.actions, held.job, held.request, held.record, ctx.view, ctx.now
    draft = actions.draft
    kind = FailureKind.GPU if all("unhealthy" in why for _, why in broken) else FailureKind.NODE
    message = "; ".join(f"{why} (pod {tray.name})" for tray, why in broken)
    if draft.phase is not Phase.RECOVERING:
        draft.apply(Event.HARDWARE_FAILED, kind, message, now)
    actions.note("Warning", kind, message)
    actions.recovery_started = True
    restarts = job.restarts + 1
    failure: dict[str, object] = {
        "time": now,
        "kind": kind.value,
        "reason": kind.value,
        "message": message,
        "nodes": sorted({tray.node for tray, _ in broken}),
        "pods": [tray.name for tray, _ in broken],
    }
    spec = replace(request.spec, job_id=job.key)
    topology = nvlink_topology(view)
    previous = view.state.allocations.get(job.key)
    view.state.release(job.key)
    try:
        if topology is None or previous is None:
            raise PlacementInfeasible(job.key, ["the cluster has no NVLink clique of several trays left"])
        with seen_as(view.state, topology) as state:
            placer = NVLinkPlacer(state, TRAY_PLACER, 0, request.rank_order)
            placement = placer.place(spec, cost_model(request.cost_model), previous)
    except PlacementInfeasible as exc:
        why = f"no room to repair inside the NVLink cliques: {'; '.join(exc.reasons)}; back in the queue"
        failure.update(action=FailureAction.REQUEUED.value)
        draft.apply(Event.REQUEUED, "Requeued", why, now)
        # broken hardware, not the job's fault: at its place unless its queue says the back (requeueOrder)
        queued_at = requeue_stamp(ctx.queues.get(request.queue), True, job.queued_at, now)
        draft.set(placement=None, communicationCost=None, nodes=None, restarts=restarts, queuedAt=queued_at)
        draft.set(lastFailure=failure)
        actions.note("Warning", "Requeued", why)
        actions.failure_action = FailureAction.REQUEUED
        delete_all(actions, held.pods, view.nodes, "job requeued after a tray failed")
        return None
    view.state.allocate(Allocation(job.key, placement.groups, spec.memory_per_gpu_gb))
    epoch = job.placement_epoch + 1
    fresh = tray_record(view, job, request, placement.groups, epoch, placement.reasons, placement.cost)
    # A pod whose tray, GPUs and ranks are unchanged keeps running (same incarnation): only moved ones restart.
    old = {t.name: t for t in record.trays}
    trays = []
    for tray in fresh.trays:
        before = old.get(tray.name)
        same = before is not None and (before.node, before.gpu_indices) == (tray.node, tray.gpu_indices)
        trays.append(replace(tray, incarnation=before.incarnation) if same and before is not None else tray)
    new = replace(fresh, trays=tuple(trays))
    moved = [t.name for t in new.trays if old.get(t.name) != t]
    inside = next((r for r in placement.reasons if r.startswith(("repaired inside", "no spare tray"))), "")
    text = f"tray repair: {len(moved)} pod(s) re-created ({', '.join(moved)})" + (f"; {inside}" if inside else "")
    failure.update(action=FailureAction.RESCHEDULED.value, costAfterMs=round(placement.cost.total_ms, 6))
    draft.set(
        placement=new.to_status(),
        placementEpoch=epoch,
        communicationCost=cost_to_status(placement.cost, request.cost_model),
        nodes=",".join(new.nodes),
        restarts=restarts,
        lastFailure=failure,
    )
    draft.condition("Bound", "False", "Repairing", text, now)
    draft.condition("Placed", "True", "Repaired", f"{text}; now on {', '.join(new.nodes)}", now)
    actions.note("Normal", "Rescheduled", text)
    actions.failure_action = FailureAction.RESCHEDULED
    return new


def restart_failed_trays(ctx: PassContext, held: HeldJob, failed: Sequence[PodInfo]) -> PlacementRecord | None:
    """Worker pods of a tray record that failed (the hardware is fine): core.repair.decide_repair applies the
    failure policy (maxRestarts, restart only the failed pods or the whole gang); the restarted trays' pods
    get a new incarnation and are re-created on the same trays. None when the job gave up."""
    actions, job, request, record, view, now = held.actions, held.job, held.request, held.record, ctx.view, ctx.now
    draft = actions.draft
    policy = request.failure
    message = "; ".join(f"pod {p.name} failed: {p.failure or 'no reason given'}" for p in failed)
    draft.apply(Event.WORKER_FAILED, FailureKind.WORKER, message, now)
    actions.note("Warning", FailureKind.WORKER, message)
    actions.recovery_started = True
    spec = replace(request.spec, job_id=job.key)
    report = FailureReport(FailureKind.WORKER, (), job.restarts)
    decision = decide_repair(view.state, ctx.placer, spec, cost_model(request.cost_model), policy, report)
    failure: dict[str, object] = {
        "time": now,
        "kind": FailureKind.WORKER.value,
        "reason": FailureKind.WORKER.value,
        "message": message,
        "nodes": sorted({p.node for p in failed}),
        "pods": [p.name for p in failed],
    }
    if isinstance(decision, GiveUp):  # maxRestarts: decide_repair released the job's GPUs
        why = f"{message}; {'; '.join(decision.reasons)}"
        failure.update(action=FailureAction.FAILED.value)
        draft.apply(Event.GAVE_UP, "GaveUp", why, now)
        draft.set(completionTime=now, lastFailure=failure)
        actions.note("Warning", "Failed", why)
        actions.failure_action = FailureAction.FAILED
        delete_all(actions, held.pods, view.nodes, "job failed")
        return None
    epoch = job.placement_epoch + 1
    names = {p.name for p in failed}
    whole = policy.strategy is RecoveryStrategy.FULL
    trays = tuple(replace(t, incarnation=epoch) if whole or t.name in names else t for t in record.trays)
    new = replace(record, epoch=epoch, trays=trays)
    restarted = [t.name for t in new.trays if t.incarnation == epoch]
    text = f"{'whole gang' if whole else f'{len(restarted)} tray pod(s)'} restarted on the same trays"
    failure.update(action=FailureAction.RESCHEDULED.value)
    draft.set(placement=new.to_status(), placementEpoch=epoch, restarts=job.restarts + 1, lastFailure=failure)
    draft.condition("Bound", "False", "Repairing", text, now)
    actions.note("Normal", "Rescheduled", f"{text} ({', '.join(restarted)})")
    actions.failure_action = FailureAction.RESCHEDULED
    return new
