"""The MPS-share layout: one pod per rank, each an MPS client of one GPU (``spec.gpuSharing.mps``).

What breaks a pod is its node or its GPU (an unhealthy GPU fails every share on it: its MPS server serves
every client there), or the pod itself failing (``failure/failures.detect``, as on HGX nodes: a share's slot
names its one GPU). The failure policy is the core's ``sharerepair.decide_share_repair``, carried out by
``slices/mpsrepair.py``: the broken ranks (``minimal``) or all (``full``) get new shares under the packing
rule, a crashed worker restarts on its share, and with no room or at ``maxRestarts`` the job is requeued or
fails. A share job is never moved for a lower communication cost (it has none).
"""

from __future__ import annotations

from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.failure.breakage import Breakage
from paralleljob.k8s.plan.failure.failures import detect
from paralleljob.k8s.plan.kinds.base import Gang
from paralleljob.k8s.plan.kinds.migslices import MigSlices
from paralleljob.k8s.plan.pods.podsync import SyncResult
from paralleljob.k8s.plan.slices.mpsrepair import repair_shares


class MpsShares(MigSlices):
    """The slices' layout (failure, move, no move for cost), with a share's breakage and repair."""

    name = "MPS shares"

    def breakage(self, ctx: PassContext, held: HeldJob, seen: SyncResult, gang: Gang) -> Breakage | None:
        names = gang.kind.pod_names(held.record, held.pods)
        return detect(ctx.view, held.job, held.record, seen.failed, names)

    def repair(self, ctx: PassContext, held: HeldJob, breakage: Breakage, gang: Gang) -> PlacementRecord | None:
        return repair_shares(ctx, held, breakage, gang.kind)


SHARES = MpsShares()
