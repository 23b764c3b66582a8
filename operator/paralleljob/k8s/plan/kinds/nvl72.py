"""The NVL72 layout: one pod per whole tray of an NVLink clique, one ComputeDomain per clique the job uses.

What breaks a pod is its tray (gone, NotReady, tainted) or a GPU on it (``trayrepair.broken_trays``); the
failure policy is the core's, carried out on trays (``trayrepair.repair_trays``: the broken trays' pods move
inside their clique while it has whole free trays, else the job is placed afresh); a tray pod that failed on
healthy hardware restarts on its tray (``trayrepair.restart_failed_trays``).
"""

from __future__ import annotations

from dataclasses import replace

from paralleljob.core.failure.repair import best_placement_now
from paralleljob.core.lifecycle import Phase
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.nvl72.traypods import tray_pods_to_move
from paralleljob.core.placing.eligibility import NodeFilter, restricted
from paralleljob.core.placing.placement import Placement
from paralleljob.core.timing.cost import cost_model
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.admission.trayadmission import TRAY_PLACER, nvlink_topology, seen_as, spares_for, tray_record
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.kinds.trayrepair import broken_trays, repair_trays, restart_failed_trays
from paralleljob.k8s.plan.pods.podsync import SyncResult


class Nvl72Trays:
    name = "NVL72 trays"

    def failure(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> bool:
        broken = broken_trays(ctx.view, held.record, held.finished)
        if broken is not None:
            self.move(ctx, held, broken, gang)
            return True
        if not seen.failed or held.actions.draft.phase is Phase.PLACING:
            return False
        restarted = restart_failed_trays(ctx, held, seen.failed)
        if restarted is not None:
            gang.kind.sync(ctx, held, restarted)
        return True

    def move(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> None:
        node_filter = ctx.eligibility.filter_for(held.job.key, held.request.spec, with_usage=False)
        repaired = repair_trays(ctx, held, breakage, node_filter, gang)
        if repaired is not None:
            gang.kind.sync(ctx, held, repaired)

    def best_now(self, ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None) -> Placement | None:
        # over whole trays (the NVLink placer), warm spares held back as for a new gang
        view, request = ctx.view, held.request
        topology = nvlink_topology(view)
        if topology is None:
            return None
        spares = spares_for(view, ctx.queues.get(request.queue))
        spec = replace(request.spec, job_id=held.job.key)
        with seen_as(view.state, topology) as state, restricted(state, spec, node_filter):
            placer = NVLinkPlacer(state, TRAY_PLACER, spares, request.rank_order)
            return best_placement_now(state, placer, spec, cost_model(request.cost_model))

    def pods_to_move(self, ctx: PassContext, held: HeldJob, best: Placement) -> int:
        spec, current = held.request.spec, ctx.view.state.allocations[held.job.key].groups
        shape = (spec.tp, spec.pp, spec.dp)
        return tray_pods_to_move(ctx.view.topology, shape, held.request.rank_order, current, best.groups)

    def moved(
        self, ctx: PassContext, held: HeldJob, best: Placement, epoch: int, reasons: tuple[str, ...]
    ) -> PlacementRecord:
        return tray_record(ctx.view, held.job, held.request, best, epoch, reasons)


TRAYS = Nvl72Trays()
