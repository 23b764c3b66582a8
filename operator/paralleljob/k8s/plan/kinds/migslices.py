"""The MIG-slice layout: one pod per rank, each on one MIG slice of one GPU (``spec.gpuSharing.migProfile``).

What breaks a pod is its node or its GPU (an unhealthy GPU fails every slice on it), or the pod itself failing
(``failure/failures.detect``, as on HGX nodes: a slice's slot names its one GPU). A slice the device plugin
placed names no GPU: its node gone or down, any GPU there reported unhealthy, or its profile no longer
offered there breaks it (``slices/poolbook.pool_breakage``: the operator cannot tell which GPU it got). The
failure policy is the core's ``slicerepair.decide_slice_repair``, carried out by ``slices/repair.py``: the
broken ranks (``minimal``)
or all (``full``) get new slices under the packing rule, a crashed worker restarts on its slice, and with no
room or at ``maxRestarts`` the job is requeued or fails. A slice job is never moved for a lower communication
cost (it has none), so ``best_now`` offers nothing.
"""

from __future__ import annotations

from paralleljob.core.failure.repair import FailureKind
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.eligibility import NodeFilter
from paralleljob.core.placing.placement import Placement
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.failures import detect
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.pods.podsync import SyncResult
from paralleljob.k8s.plan.slices.book import unpublished
from paralleljob.k8s.plan.slices.poolbook import pool_breakage
from paralleljob.k8s.plan.slices.repair import repair_slices


class MigSlices:
    """A layout of one rank per slice; :class:`MpsShares` is the same with its own breakage and repair."""

    name = "MIG slices"

    def breakage(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> Breakage | None:
        names = gang.kind.pod_names(held.record, held.pods)
        broken = pool_breakage(ctx.view, held.record) if held.record.pooled else None
        found = detect(ctx.view, held.job, held.record, seen.failed, names, held.finished)
        return broken or found or _unpublished(ctx, held)

    def repair(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> PlacementRecord | None:
        return repair_slices(ctx, held, breakage, gang.kind)

    def failure(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> bool:
        breakage = self.breakage(ctx, held, seen, gang)
        if breakage is None or (held.actions.draft.phase is Phase.PLACING and not breakage.hardware):
            return False  # a worker cannot fail before the gang runs
        self.move(ctx, held, breakage, gang)
        return True

    def move(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> None:
        repaired = self.repair(ctx, held, breakage, gang)
        if repaired is not None:
            gang.kind.sync(ctx, held, repaired)

    def best_now(self, ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None) -> Placement | None:
        return None  # a slice has no communication cost to lower

    def pods_to_move(self, ctx: PassContext, held: HeldJob, best: Placement) -> int:
        return 0  # never asked: best_now offers no move

    def moved(
        self, ctx: PassContext, held: HeldJob, best: Placement, epoch: int, reasons: tuple[str, ...]
    ) -> PlacementRecord:
        return held.record  # never asked: best_now offers no move


def _unpublished(ctx: PassContext, held: HeldJob) -> Breakage | None:
    """The slices whose MIG device their node no longer publishes, as a GPU failure under them."""
    ranks = unpublished(ctx.view, held.record)
    if not ranks:
        return None
    slots = [held.record.slots[rank] for rank in ranks]
    gone = ", ".join(f"{s.node} GPU {s.gpu_indices[0]} {s.mig}" for s in slots)
    message = f"MIG devices no longer published: {gone} (pods {', '.join(s.name for s in slots)})"
    nodes = tuple(dict.fromkeys(s.node for s in slots))
    return Breakage(FailureKind.GPU, ranks, nodes, tuple(s.name for s in slots), message)


SLICES = MigSlices()
