"""The NVL72 layout: one pod per whole tray of an NVLink clique, one ComputeDomain per clique the job uses.

What breaks a pod is its tray (gone, NotReady, tainted) or a GPU on it (``trayrepair.broken_trays``); the
failure policy is the core's, carried out on trays (``trayrepair.repair_trays``: the broken trays' pods move
inside their clique while it has whole free trays, else the job is placed afresh); a tray pod that failed on
healthy hardware restarts on its tray (``trayrepair.restart_failed_trays``).
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.records import PlacementRecord
from paralleljob.k8s.edge.trayrecords import TraySlot
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failures import Breakage
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.kinds.trayrepair import broken_trays, repair_trays, restart_failed_trays
from paralleljob.k8s.plan.podsync import SyncResult


class Nvl72Trays:
    name = "NVL72 trays"
    on_trays = True

    def pods(self, record: PlacementRecord) -> Sequence[TraySlot]:
        return record.trays

    def failure(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> bool:
        broken = broken_trays(ctx.view, held.record)
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


TRAYS = Nvl72Trays()
