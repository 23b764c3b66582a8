"""The failure policy for a job of MPS shares: which ranks restart, move or end the job, as one decision.

A share job runs one rank per pod, each an MPS client of one GPU (``sharing.Placement`` with an ``MpsShare``).
The policy is the MIG-slice repair's, read in one place (``slicerepair.unmoved``, ``moved_on_gpus``):
``maxRestarts`` ends the job; a crashed worker restarts on its own share (``minimal``: that rank, ``full``:
every rank); broken hardware under a share (its GPU, its node) moves the broken ranks (``minimal``) or every
rank (``full``) to new shares under the packing rule, of the same pool (namespace and percent); with no room
the job is requeued or failed (``onUnplaceable``). An MPS server is shared by every client of its GPU, so a
broken GPU breaks every share job on it at once: each is repaired by its own policy.
"""

from __future__ import annotations

from collections.abc import Sequence

from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.failure.repair import FailurePolicy, FailureReport
from paralleljob.core.slices.sharing import MpsShare, NodeGpus, Placement, pack
from paralleljob.core.slices.slicerepair import SliceRepair, moved_on_gpus, unmoved


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
    ranks = unmoved(len(held), policy, failure, "MPS shares")
    if not isinstance(ranks, tuple):
        return ranks
    return moved_on_gpus(nodes, held, ranks, lambda free, label: pack_share(free, share_for, label), policy, failure)


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
