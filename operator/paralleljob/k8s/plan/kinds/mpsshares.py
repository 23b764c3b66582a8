"""The MPS-share layout: one pod per rank, each an MPS client of one GPU (``spec.gpuSharing.mps``).

What breaks a pod is its node or its GPU (an unhealthy GPU fails every share on it: its MPS server serves
every client there), or the pod itself failing (``failure/failures.detect``, as on HGX nodes: a share's slot
names its one GPU). The failure policy is the core's ``sharerepair.decide_share_repair``, carried out by
``slices/mpsrepair.py``: the broken ranks (``minimal``) or all (``full``) get new shares under the packing
rule, a crashed worker restarts on its share, and with no room or at ``maxRestarts`` the job is requeued or
fails. A share job is never moved for a lower communication cost (it has none).
"""

from __future__ import annotations

from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.eligibility import NodeFilter
from paralleljob.core.placing.placement import Placement
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.failures import detect
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.pods.podsync import SyncResult
from paralleljob.k8s.plan.slices.mpsrepair import repair_shares


class MpsShares:
    name = "MPS shares"

    def failure(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> bool:
        names = gang.kind.pod_names(held.record, held.pods)
        breakage = detect(ctx.view, held.job, held.record, seen.failed, names)
        if breakage is None or (held.actions.draft.phase is Phase.PLACING and not breakage.hardware):
            return False  # a worker cannot fail before the gang runs
        self.move(ctx, held, breakage, gang)
        return True

    def move(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> None:
        repaired = repair_shares(ctx, held, breakage, gang.kind)
        if repaired is not None:
            gang.kind.sync(ctx, held, repaired)

    def best_now(self, ctx: PassContext, held: HeldJob, node_filter: NodeFilter | None) -> Placement | None:
        return None  # a share has no communication cost to lower

    def pods_to_move(self, ctx: PassContext, held: HeldJob, best: Placement) -> int:
        return 0  # never asked: best_now offers no move

    def moved(
        self, ctx: PassContext, held: HeldJob, best: Placement, epoch: int, reasons: tuple[str, ...]
    ) -> PlacementRecord:
        return held.record  # never asked: best_now offers no move


SHARES = MpsShares()
