"""Carrying out a share job's failure policy: the core's answer (``core.slices.sharerepair``) written as status,
Events and pods, as ``repair.py`` writes a slice job's.

The job's shares and the cluster's are read from the pass's view (``mpsbook.py``); a share on a broken GPU or
on a node that is gone is released first, so the ranks that move are packed where the packing rule says (onto
a GPU of the job's pool, namespace and percent, already shared where one has room), the others keep their
shares. A move holds its new GPU in the view's state at once, so nothing else of the pass takes it whole.
"""

from __future__ import annotations

from dataclasses import replace

from paralleljob.core.failure.elastic_failure import counts_as_restart
from paralleljob.core.failure.repair import FailureAction, FailureReport, GiveUp, Requeue
from paralleljob.core.slices.sharerepair import decide_share_repair
from paralleljob.core.slices.sharing import MpsShare, NodeGpus, Placement
from paralleljob.core.slices.slicerepair import SlicesMoved
from paralleljob.k8s.edge.status.records import MpsGrant, PlacementRecord
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.outcomes import open_failure, rescheduled, unrepaired
from paralleljob.k8s.plan.kinds.base import GangKind
from paralleljob.k8s.plan.slices.mpsadmission import hold_shares, shares_for
from paralleljob.k8s.plan.slices.mpsbook import mps_nodes, share_of


def held_shares(nodes: list[NodeGpus], namespace: str, record: PlacementRecord) -> list[Placement | None]:
    """The record's shares as the core's placements, each sized on its GPU (None: the nodes no longer show
    that GPU: its node gone, or no longer a DRA node)."""
    by_name = {n.name: n for n in nodes}
    out: list[Placement | None] = []
    for slot in record.slots:
        node, index = by_name.get(slot.node), slot.gpu_indices[0]
        if node is None or index >= len(node.gpus) or slot.mps is None:
            out.append(None)
            continue
        share = share_of(namespace, slot.mps.percent, node.gpus[index].memory_gb)
        out.append(Placement(slot.node, (index,), share, ""))
    return out


def repair_shares(ctx: PassContext, held: HeldJob, breakage: Breakage, kind: GangKind) -> PlacementRecord | None:
    """Carry out the failure policy for ``breakage``; the repaired record, or None when the job left."""
    job, request, record = held.job, held.request, held.record
    policy, maintenance = request.failure, breakage.kind.maintenance
    failure = open_failure(ctx, held, breakage)
    node_filter = ctx.eligibility.filter_for(job.key, request.spec, with_usage=False)
    nodes = mps_nodes(ctx.view, lambda n: node_filter is None or node_filter.admits(n), ctx.shares_placed)
    report = FailureReport(breakage.kind, breakage.slots, job.restarts)
    percent = request.mps_percent or (record.slots[0].mps.percent if record.slots[0].mps is not None else 0)
    share_for = shares_for(nodes, job.namespace, percent)
    decision = decide_share_repair(nodes, held_shares(nodes, job.namespace, record), share_for, policy, report)
    restarts = job.restarts + counts_as_restart(breakage.kind, decision)
    if isinstance(decision, GiveUp | Requeue):
        unrepaired(ctx, held, decision, failure, restarts)
        return None
    epoch = job.placement_epoch + 1
    slots = list(record.slots)
    for i, rank in enumerate(decision.ranks):
        slot = replace(slots[rank], incarnation=epoch)
        if isinstance(decision, SlicesMoved):
            moved = decision.placements[i]
            assert isinstance(moved, Placement) and isinstance(moved.grant, MpsShare), "a share placement"
            slot = replace(slot, node=moved.node, gpu_indices=moved.gpus, mps=MpsGrant(moved.grant.compute_pct))
            hold_shares(ctx, job.namespace, [slot])
        slots[rank] = slot
    new_record = replace(record, epoch=epoch, slots=tuple(slots), reasons=decision.reasons)
    changed = [s for s, old in zip(slots, record.slots, strict=True) if s != old]
    message = kind.repaired(record, changed, policy.strategy.value, maintenance)
    failure.update(action=FailureAction.RESCHEDULED.value)
    rescheduled(ctx, held, new_record, message, failure, restarts)
    return new_record
