"""Carrying out a slice job's failure policy: the core's answer (``core.slices.slicerepair``) written as status,
Events and pods, as ``failure/failures.py`` writes a gang's.

The job's slices and the cluster's are read from the pass's view (``book.py``, and ``poolbook.py`` for slices
the device plugin hands out, moved by node and profile); a slice on a broken GPU or on a node that is gone
is released first, so the ranks that move are packed where the packing rule says, the
others keep their slices. A move holds its new GPU sliced in the view's state at once, so nothing else of the
pass takes it whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from paralleljob.core.failure.elastic_failure import counts_as_restart
from paralleljob.core.failure.repair import FailureAction, FailureReport, GiveUp, Requeue
from paralleljob.core.slices.mig import MigProfile, MigSlice
from paralleljob.core.slices.pools import PoolPlacement
from paralleljob.core.slices.sharing import NodeGpus, Placement
from paralleljob.core.slices.slicerepair import SliceRepair, SlicesMoved, decide_pool_repair, decide_slice_repair
from paralleljob.k8s.edge.status.records import MigGrant, PlacementRecord, PodSlot
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.outcomes import open_failure, rescheduled, unrepaired
from paralleljob.k8s.plan.kinds.base import GangKind
from paralleljob.k8s.plan.slices.book import named_profile, shared_nodes
from paralleljob.k8s.plan.slices.poolbook import held_pool_slices, placed_use, pool_nodes
from paralleljob.k8s.view.clusterview import hold_slice


def held_slices(nodes: list[NodeGpus], record: PlacementRecord) -> list[Placement | None]:
    """The record's slices as the core's placements, each profile as its GPU's shape names it (None: the
    nodes no longer show that GPU or profile: a node gone, or no longer publishing MIG devices)."""
    by_name = {n.name: n for n in nodes}
    out: list[Placement | None] = []
    for slot in record.slots:
        node, index, grant = by_name.get(slot.node), slot.gpu_indices[0], slot.mig
        shape = node.gpus[index].shape if node is not None and index < len(node.gpus) else None
        profile = named_profile(shape, grant.profile) if shape is not None and grant is not None else None
        if profile is None or grant is None or grant.start is None:
            out.append(None)
        else:
            out.append(Placement(slot.node, (index,), MigSlice(profile, grant.start), ""))
    return out


def offered_profile(nodes: list[NodeGpus], name: str) -> MigProfile | None:
    """``name`` as some node's GPU shapes it (the first found), None when no node offers it."""
    for node in nodes:
        for gpu in node.gpus:
            if gpu.shape is not None and (profile := named_profile(gpu.shape, name)) is not None:
                return profile
    return None


def repair_slices(ctx: PassContext, held: HeldJob, breakage: Breakage, kind: GangKind) -> PlacementRecord | None:
    """Carry out the failure policy for ``breakage``; the repaired record, or None when the job left."""
    job, request, record = held.job, held.request, held.record
    policy = request.failure
    failure = open_failure(ctx, held, breakage)
    report = FailureReport(breakage.kind, breakage.slots, job.restarts)
    if record.pooled:
        used = (ctx.pool_held, placed_use(ctx.pool_slices_placed))
        pools = pool_nodes(ctx.view, used, request)
        decision = decide_pool_repair(pools, held_pool_slices(pools, record), request.mig_profile, policy, report)
    else:
        node_filter = ctx.eligibility.filter_for(job.key, request.spec, with_usage=False)
        nodes = shared_nodes(ctx.view, lambda n: node_filter is None or node_filter.admits(n), ctx.slices_placed)
        profile = offered_profile(nodes, request.mig_profile)
        decision = decide_slice_repair(nodes, held_slices(nodes, record), profile, policy, report)

    def moved_slot(slot: PodSlot, moved: Placement | PoolPlacement) -> PodSlot:
        if isinstance(moved, PoolPlacement):
            ctx.pool_slices_placed.setdefault(moved.node, []).append(moved.profile)
            return replace(slot, node=moved.node, gpu_indices=(), mig=MigGrant(moved.profile, None))
        assert isinstance(moved.grant, MigSlice), "a slice placement grants a MIG slice"
        hold_slice(ctx.view, moved.node, moved.gpus[0])
        grant = MigGrant(moved.grant.profile.name, moved.grant.start)
        ctx.slices_placed.setdefault((moved.node, moved.gpus[0]), []).append(grant)
        return replace(slot, node=moved.node, gpu_indices=moved.gpus, mig=grant)

    return carry_out(ctx, held, breakage, kind, failure, decision, moved_slot)


def carry_out(  # params: one repair as both slice repairs decide it: the job (held), what broke (breakage, kind,
    # failure), the core's answer and how a moved rank's pod slot changes
    ctx: PassContext,
    held: HeldJob,
    breakage: Breakage,
    kind: GangKind,
    failure: dict[str, object],
    decision: SliceRepair,
    moved_slot: Callable[[PodSlot, Placement | PoolPlacement], PodSlot],
) -> PlacementRecord | None:
    """The core's ``decision`` for a job of slices or shares written: the job ends or is requeued (None), or
    its ranks restart, those moved taking ``moved_slot(slot, new placement)`` (which also holds the new place
    for the rest of the pass); the repaired record."""
    job, record, policy = held.job, held.record, held.request.failure
    restarts = job.restarts + counts_as_restart(breakage.kind, decision)
    if isinstance(decision, GiveUp | Requeue):
        unrepaired(ctx, held, decision, failure, restarts)
        return None
    epoch = job.placement_epoch + 1
    slots = list(record.slots)
    for i, rank in enumerate(decision.ranks):
        slot = replace(slots[rank], incarnation=epoch)
        if isinstance(decision, SlicesMoved):
            slot = moved_slot(slot, decision.placements[i])
        slots[rank] = slot
    new_record = replace(record, epoch=epoch, slots=tuple(slots), reasons=decision.reasons)
    changed = [s for s, old in zip(slots, record.slots, strict=True) if s != old]
    message = kind.repaired(record, changed, policy.strategy.value, breakage.kind.maintenance)
    failure.update(action=FailureAction.RESCHEDULED.value)
    rescheduled(ctx, held, new_record, message, failure, restarts)
    return new_record
