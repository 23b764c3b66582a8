"""The failure policy for a job of MPS shares: which ranks restart, move or end the job, as one decision.

A share job runs one rank per pod, each an MPS client of one GPU (``sharing.Placement`` with an ``MpsShare``).
The policy reads the job's ``failurePolicy`` as the MIG-slice repair does (``slicerepair.py``): ``maxRestarts``
ends the job; a crashed worker restarts on its own share (``minimal``: that rank, ``full``: every rank);
broken hardware under a share (its GPU, its node) moves the broken ranks (``minimal``) or every rank
(``full``) to new shares under the packing rule, of the same pool (namespace and percent); with no room the
job is requeued or failed (``onUnplaceable``). An MPS server is shared by every client of its GPU, so a
broken GPU breaks every share job on it at once: each is repaired by its own policy.
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import (
    FailurePolicy,
    FailureReport,
    GiveUp,
    GiveUpReason,
    OnUnplaceable,
    Requeue,
)
from paralleljob.core.slices.sharing import MpsShare, NodeGpus, Placement, apply, pack
from paralleljob.core.slices.slicerepair import SliceRepair, SlicesMoved, SlicesRestarted


def decide_share_repair(
    nodes: Sequence[NodeGpus],
    held: Sequence[Placement | None],
    share_for: dict[float, MpsShare],
    policy: FailurePolicy,
    failure: FailureReport,
) -> SliceRepair:
    """``held``: the job's shares by rank, as they are in ``nodes`` (which already show the broken hardware
    unhealthy; None for a rank whose share ``nodes`` do not show, its node gone); ``failure.groups`` the ranks
    it hit; ``share_for``: the job's share on a GPU of each memory size (GB) that ``nodes`` have."""
    if failure.restarts >= policy.max_restarts and not failure.kind.maintenance:
        return GiveUp(GiveUpReason.MAX_RESTARTS, (f"maxRestarts {policy.max_restarts} reached",))
    whole = policy.strategy is RecoveryStrategy.FULL
    ranks = tuple(range(len(held))) if whole else tuple(sorted(set(failure.groups)))
    if not failure.kind.hardware:
        what = "every rank" if whole else f"{len(ranks)} rank(s)"
        return SlicesRestarted(ranks, (f"{what} restarted on the same MPS shares",))
    free = list(nodes)
    for rank in ranks:
        if (share := held[rank]) is not None:
            free = list(apply(free, share, release=True))
    placements = []
    try:
        for rank in ranks:
            placement = pack_share(free, share_for, f"rank {rank}")
            free = list(apply(free, placement))
            placements.append(placement)
    except PlacementInfeasible as exc:
        if policy.on_unplaceable is OnUnplaceable.REQUEUE or failure.kind.maintenance:
            return Requeue(tuple(exc.reasons))
        return GiveUp(GiveUpReason.NO_ROOM, tuple(exc.reasons))
    reasons = tuple(f"rank {rank}: {p.why}" for rank, p in zip(ranks, placements, strict=True))
    return SlicesMoved(ranks, tuple(placements), reasons)


def pack_share(nodes: Sequence[NodeGpus], share_for: dict[float, MpsShare], label: str) -> Placement:
    """The share packed (``sharing.pack``) over the nodes of each GPU memory size, smallest size first, the
    first that fits: a share's memory is its fraction of its GPU's, so each size has its own share (a
    cluster of one GPU model, the usual case, is one call)."""
    reasons: list[str] = []
    for memory, share in sorted(share_for.items()):
        group = [n for n in nodes if n.gpus and n.gpus[0].memory_gb == memory]
        try:
            return pack(share, group, label)
        except PlacementInfeasible as exc:
            reasons.extend(exc.reasons)
    raise PlacementInfeasible(label, reasons or ["no node holds an MPS share"])
