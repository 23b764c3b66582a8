"""Carrying out a share job's failure policy: the core's answer (``core.slices.sharerepair``) written as status,
Events and pods, as ``repair.py`` writes a slice job's.

The job's shares and the cluster's are read from the pass's view (``mpsbook.py``); a share on a broken GPU or
on a node that is gone is released first, so the ranks that move are packed where the packing rule says (onto
a GPU of the job's pool, namespace and percent, already shared where one has room), the others keep their
shares. A move holds its new GPU in the view's state at once, so nothing else of the pass takes it whole.
"""

from __future__ import annotations

from dataclasses import replace

from paralleljob.core.failure.repair import FailureReport
from paralleljob.core.slices.pools import PoolPlacement
from paralleljob.core.slices.sharerepair import decide_share_repair
from paralleljob.core.slices.sharing import MpsShare, NodeGpus, Placement
from paralleljob.k8s.edge.status.records import MpsGrant, PlacementRecord, PodSlot
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.outcomes import open_failure
from paralleljob.k8s.plan.kinds.base import GangKind
from paralleljob.k8s.plan.slices.mpsadmission import hold_shares, shares_for
from paralleljob.k8s.plan.slices.mpsbook import mps_nodes, share_of
from paralleljob.k8s.plan.slices.repair import carry_out


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
    policy = request.failure
    failure = open_failure(ctx, held, breakage)
    node_filter = ctx.eligibility.filter_for(job.key, request.spec, with_usage=False)
    nodes = mps_nodes(ctx.view, lambda n: node_filter is None or node_filter.admits(n), ctx.shares_placed)
    report = FailureReport(breakage.kind, breakage.slots, job.restarts)
    percent = request.mps_percent or (record.slots[0].mps.percent if record.slots[0].mps is not None else 0)
    share_for = shares_for(nodes, job.namespace, percent)
    decision = decide_share_repair(nodes, held_shares(nodes, job.namespace, record), share_for, policy, report)

    def moved_slot(slot: PodSlot, moved: Placement | PoolPlacement) -> PodSlot:
        assert isinstance(moved, Placement) and isinstance(moved.grant, MpsShare), "a share placement"
        slot = replace(slot, node=moved.node, gpu_indices=moved.gpus, mps=MpsGrant(moved.grant.compute_pct))
        hold_shares(ctx, job.namespace, [slot])
        return slot

    return carry_out(ctx, held, breakage, kind, failure, decision, moved_slot)
