"""The HGX layout: one pod per TP group, on one node whose GPUs are its NVLink domain.

What breaks a pod is its node or one of its GPUs, or the pod itself failing (``failures.detect``); the failure
policy (``core.failure.repair.decide_repair``, through ``failures.handle``) moves the broken groups' pods, restarts the
failed ones, requeues or fails the job, and an elastic job may drop the broken replica instead.
"""

from __future__ import annotations

from dataclasses import replace

from paralleljob.core.failure.repair import best_placement_now, pods_to_move
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.eligibility import NodeFilter, restricted
from paralleljob.core.placing.placement import Placement
from paralleljob.core.timing.cost import cost_model
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.failures import detect, handle
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.pods.podsync import SyncResult


class HgxNodes:
    name = "HGX nodes"

    def failure(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> bool:
        names = gang.kind.pod_names(held.record, held.pods)
        breakage = detect(ctx.view, held.job, held.record, seen.failed, names, held.finished)
        if breakage is None or (held.actions.draft.phase is Phase.PLACING and not breakage.hardware):
            return False  # a worker cannot fail before the gang runs
        self.move(ctx, held, breakage, gang)
        return True

    def move(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> None:
        node_filter = ctx.eligibility.filter_for(held.job.key, held.request.spec, with_usage=False)
        repaired = handle(ctx, held, breakage, node_filter, gang)
        if repaired is not None:
            gang.kind.sync(ctx, held, repaired)

    def best_now(self, ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None) -> Placement | None:
        spec = held.request.spec
        with restricted(ctx.view.state, spec, node_filter):
            return best_placement_now(ctx.view.state, ctx.placer, spec, cost_model(held.request.cost_model))

    def pods_to_move(self, ctx: PassContext, held: HeldJob, best: Placement) -> int:
        return pods_to_move(ctx.view.state.allocations[held.job.key].groups, best.groups)

    def moved(
        self, ctx: PassContext, held: HeldJob, best: Placement, epoch: int, reasons: tuple[str, ...]
    ) -> PlacementRecord:
        slots = []
        for slot, gpus in zip(held.record.slots, best.groups, strict=True):
            node, indices = ctx.view.locate(gpus)
            # every pod restarts from the checkpoint: the collective groups are rebuilt with the moved ranks
            slots.append(PodSlot(slot.name, slot.replica, slot.stage, node, indices, epoch))
        return replace(held.record, epoch=epoch, slots=tuple(slots), cost=best.cost, reasons=reasons)


HGX = HgxNodes()
