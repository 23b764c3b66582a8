"""Broken or drained trays under a job placed over NVLink cliques: the failure policy, carried out on trays.

A tray record's pods are whole trays (``layout: trays``), so a tray that is gone, NotReady or under a NoExecute
taint (``FailureKind.NODE``), or has a GPU reported unhealthy (``FailureKind.GPU``), breaks the pod on it; a
tray an admin drained (``FailureKind.DRAINED``) is handed in by the drain step (``plan/failure/draining.py``) once the
job had its checkpoint signal and grace period. What happens is the core's failure decision,
:func:`paralleljob.core.failure.repair.decide_repair`, as for a job on HGX nodes and as in the simulator: maxRestarts
reached gives up, no room gives up or requeues by ``onUnplaceable``, a drain counts no restart and never
gives up. The placer it is handed is the NVLink placer on the view's NVLink topology (``core/nvl72/nvlink``), whose
repair keeps each clique the job used where the clique's whole free trays (spares included) can take the
broken trays' ranks, so the clique's ComputeDomain stays the same; when a clique has no whole free tray left
the job is placed afresh over every clique. ``strategy``: minimal re-creates only the pods whose tray changed,
full re-creates every pod of the job (docs/nvl72.md, "Failures"). A tray pod that fails on healthy hardware
is restarted on its tray (:func:`restart_failed_trays`). A gone tray keeps its clique in the view
(``clusterview``: the domains of a live tray with the same label), which is what lets the repair stay inside it.
A pod group on trays (``plan/groups/traygroups``) goes through the same decision; its repair is held to its clique,
whose channel template its pods name, and its pods are the owner's to replace (``podgroups.finish_group``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from paralleljob.core.cluster import Allocation, GPUHealth
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.failure.elastic_failure import counts_as_restart
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import (
    FailureAction,
    FailureKind,
    FailureReport,
    GiveUp,
    Requeue,
    decide_repair,
)
from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Event
from paralleljob.core.nvl72.cliques import clique_index
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.placing.eligibility import NodeFilter, restricted, within_domain
from paralleljob.core.placing.placement import Placement
from paralleljob.core.timing.cost import CostModel, cost_model
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.status.records import PlacementRecord, cost_to_status
from paralleljob.k8s.plan.admission.trayadmission import TRAY_PLACER, nvlink_topology, seen_as, tray_record
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.outcomes import open_failure, rescheduled, unrepaired
from paralleljob.k8s.plan.groups.traygroups import clique_trays
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.pods.podsync import delete_all, is_finished
from paralleljob.k8s.view.clusterview import ClusterView

_BROKEN = (GPUHealth.OFFLINE, GPUHealth.RESETTING)


@dataclass(frozen=True)
class _NoCliques:
    """The placer when the cluster has no NVLink clique of several trays left: the policy still decides
    (maxRestarts, onUnplaceable), and the refusal says why."""

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement:
        raise PlacementInfeasible(job.job_id, ["the cluster has no NVLink clique of several trays left"])


def broken_trays(
    view: ClusterView, record: PlacementRecord, finished: Mapping[str, int] | None = None
) -> Breakage | None:
    """The record's trays that can no longer run their pod (``slots``: their indices in ``record.trays``),
    typed: NODE when a tray is gone or may not run work, else GPU. Drained trays are not broken: the drain
    step moves them (``plan/failure/draining.py``); nor are those whose pod exited 0 (``finished``)."""
    hit: list[int] = []
    by_cause: dict[str, list[str]] = {}
    node_down = False
    for i, tray in enumerate(record.trays):
        if finished and is_finished(tray, finished):
            continue
        info = view.nodes.get(tray.node)
        ids = view.slot_gpus(tray)
        if info is None or ids is None:
            cause, node_down = f"node {tray.node} is gone", True
        elif not info.runs_work:
            cause, node_down = info.why_closed(), True
        elif any(view.state.health[g] in _BROKEN for g in ids):
            bad = sorted(set(tray.gpu_indices) & info.broken_gpus())
            cause = f"GPU {','.join(map(str, bad))} on {tray.node} reported unhealthy"
        else:
            continue
        hit.append(i)
        by_cause.setdefault(cause, []).append(tray.name)
    if not hit:
        return None
    message = "; ".join(f"{cause} (pods {', '.join(pods)})" for cause, pods in by_cause.items())
    nodes = tuple(dict.fromkeys(record.trays[i].node for i in hit))
    kind = FailureKind.NODE if node_down else FailureKind.GPU
    return Breakage(kind, tuple(hit), nodes, tuple(record.trays[i].name for i in hit), message)


def _inside_clique(node_filter: NodeFilter | None, trays: list[int] | None) -> NodeFilter | None:
    """``node_filter`` narrowed to ``trays`` (a pod group's clique); unchanged when the clique is unknown."""
    if trays is None:
        return node_filter
    base = node_filter or NodeFilter()
    allowed = frozenset(trays) if base.allowed is None else base.allowed & frozenset(trays)
    why = (*base.why, "a pod group's repair stays inside its clique (its pods name that ComputeDomain's channel)")
    return replace(base, allowed=allowed, why=why)


def _groups_on(view: ClusterView, key: str, nodes: Sequence[str]) -> tuple[int, ...]:
    """The job's TP groups with a GPU on ``nodes`` (what the core's report names; informative for hardware)."""
    allocation = view.state.allocations.get(key)
    if allocation is None:
        return ()
    topology, on = view.topology, set(nodes)
    names, gpu_node = topology.node_names, topology.gpu_node
    return tuple(g for g, group in enumerate(allocation.groups) if any(names[gpu_node[x]] in on for x in group))


def repair_trays(
    ctx: PassContext, held: HeldJob, breakage: Breakage, node_filter: NodeFilter | None, gang: Gang
) -> PlacementRecord | None:
    """Carry out the core's failure decision for ``breakage`` (``slots``: indices in ``record.trays``): the
    broken trays' pods move (or the job is re-placed), or the job goes back in the queue, or fails. Returns
    the new record, None when the job left the cluster. Mutates the view's state (the job's GPUs move, or are
    freed). ``node_filter``: the nodes the job's template allows; moved trays go only there, as on HGX nodes.
    ``gang``: the job's kind; pods another controller made (a pod group's) name their clique's channel
    template, so their repair stays inside that clique."""
    actions, job, request, record, view = held.actions, held.job, held.request, held.record, ctx.view
    draft, policy, kind = actions.draft, request.failure, breakage.kind
    maintenance = kind.maintenance
    failure = open_failure(ctx, held, breakage)
    spec = replace(request.spec, job_id=job.key)
    model = cost_model(request.cost_model)
    report = FailureReport(kind, _groups_on(view, job.key, breakage.nodes), job.restarts)
    topology = nvlink_topology(view)
    in_use = [view.node_index[t.node] for t in record.trays if t.node in view.node_index]
    allowed = within_domain(node_filter, in_use)
    if topology is not None and not gang.kind.renders_pods:
        allowed = _inside_clique(allowed, clique_trays(clique_index(topology).tray_nodes, in_use))
    if topology is None:
        decision = decide_repair(view.state, _NoCliques(), spec, model, policy, report)
    else:
        with seen_as(view.state, topology) as state, restricted(state, spec, allowed):
            placer = NVLinkPlacer(state, TRAY_PLACER, 0, request.rank_order)
            decision = decide_repair(state, placer, spec, model, policy, report)
    restarts = job.restarts + counts_as_restart(kind, decision)  # the one rule, as on HGX (failures.handle)
    if isinstance(decision, GiveUp | Requeue):
        unrepaired(ctx, held, decision, failure, restarts, " inside the NVLink cliques")
        return None
    placement = decision.placement
    if placement is None:  # a hardware decision always carries a placement; kept for the type
        raise ValueError(f"{job.key}: the core's tray repair came back without a placement")
    epoch = job.placement_epoch + 1
    fresh = tray_record(view, job, request, placement, epoch, placement.reasons)
    # minimal: a pod whose tray, GPUs and ranks are unchanged keeps running (same incarnation); full: all restart
    whole = policy.strategy is RecoveryStrategy.FULL
    old = {t.name: t for t in record.trays}
    trays = []
    for tray in fresh.trays:
        before = old.get(tray.name)
        same = before is not None and (before.node, before.gpu_indices) == (tray.node, tray.gpu_indices)
        trays.append(replace(tray, incarnation=before.incarnation) if same and not whole and before else tray)
    new = replace(fresh, trays=tuple(trays))
    moved = [t.name for t in new.trays if old.get(t.name) != t]
    what = "moved off the drained trays" if maintenance else f"{policy.strategy.value} tray repair"
    note = placement.reasons[-1] if placement.reasons else ""  # the NVLink placer's repair note comes last
    text = f"{what}: {len(moved)} pod(s) re-created ({', '.join(moved)})" + (f"; {note}" if note else "")
    failure.update(action=FailureAction.RESCHEDULED.value, costAfterMs=round(placement.cost.total_ms, 6))
    draft.set(communicationCost=cost_to_status(placement.cost, request.cost_model))
    rescheduled(ctx, held, new, text, failure, restarts)
    return new


def restart_failed_trays(ctx: PassContext, held: HeldJob, failed: Sequence[PodInfo]) -> PlacementRecord | None:
    """Worker pods of a tray record that failed (the hardware is fine): core.failure.repair.decide_repair applies the
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
    restarts = job.restarts + counts_as_restart(FailureKind.WORKER, decision)
    draft.set(placement=new.to_status(), placementEpoch=epoch, restarts=restarts, lastFailure=failure)
    draft.condition("Bound", "False", "Repairing", text, now)
    actions.note("Normal", "Rescheduled", f"{text} ({', '.join(restarted)})")
    actions.failure_action = FailureAction.RESCHEDULED
    return new
