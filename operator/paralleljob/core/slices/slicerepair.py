"""The failure policy for a job of MIG slices: which ranks restart, move or end the job, as one decision.

A slice job runs one rank per pod, each on one slice of one GPU (``sharing.Placement``). What breaks it is a
GPU or node under a slice (hardware) or a pod failing (worker). The policy is the job's ``failurePolicy``, read
the way ``repair.decide_repair`` reads it for whole-GPU gangs: ``maxRestarts`` ends the job; a crashed worker
restarts on its own slice (``minimal``: that rank, ``full``: every rank); broken hardware moves the broken
ranks' slices (``minimal``) or every rank's (``full``) under the packing rule (``sharing.pack``); with no room
the job is requeued or failed (``onUnplaceable``). A slice job has no communication cost to keep low, so a
move is only a new slice, never a re-optimised layout. Slices the device plugin hands out (``pools.py``: the
operator knows node and profile, not the GPU) follow the same policy, moved by node (:func:`decide_pool_repair`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
from paralleljob.core.slices.mig import MigProfile
from paralleljob.core.slices.pools import PoolPlacement, ProfilePool, place_ranks, take
from paralleljob.core.slices.sharing import NodeGpus, Placement, apply, pack, pack_each


@dataclass(frozen=True, slots=True)
class SlicesRestarted:
    """The ranks restart where they are (a worker failure): their pods are made again."""

    ranks: tuple[int, ...]
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SlicesMoved:
    """``ranks`` go to ``placements`` (one each, same order); the other ranks keep their slices."""

    ranks: tuple[int, ...]
    placements: tuple[Placement, ...] | tuple[PoolPlacement, ...]
    reasons: tuple[str, ...]


SliceRepair = SlicesRestarted | SlicesMoved | Requeue | GiveUp


def unmoved(
    count: int, policy: FailurePolicy, failure: FailureReport, what: str = "MIG slices"
) -> SliceRepair | tuple[int, ...]:
    """The decision when nothing moves (at ``maxRestarts``, or a worker restarting where it is, on the same
    ``what``), else the ranks to move: the broken ones (``minimal``) or all ``count`` (``full``)."""
    if failure.restarts >= policy.max_restarts and not failure.kind.maintenance:
        return GiveUp(GiveUpReason.MAX_RESTARTS, (f"maxRestarts {policy.max_restarts} reached",))
    whole = policy.strategy is RecoveryStrategy.FULL
    ranks = tuple(range(count)) if whole else tuple(sorted(set(failure.groups)))
    if not failure.kind.hardware:
        who = "every rank" if whole else f"{len(ranks)} rank(s)"
        return SlicesRestarted(ranks, (f"{who} restarted on the same {what}",))
    return ranks


def _no_room(policy: FailurePolicy, failure: FailureReport, exc: PlacementInfeasible) -> Requeue | GiveUp:
    if policy.on_unplaceable is OnUnplaceable.REQUEUE or failure.kind.maintenance:
        return Requeue(tuple(exc.reasons))
    return GiveUp(GiveUpReason.NO_ROOM, tuple(exc.reasons))


def decide_slice_repair(
    nodes: Sequence[NodeGpus],
    held: Sequence[Placement | None],
    profile: MigProfile | None,
    policy: FailurePolicy,
    failure: FailureReport,
) -> SliceRepair:
    """``held``: the job's slices by rank, as they are in ``nodes`` (which already show the broken hardware
    unhealthy; None for a rank whose slice ``nodes`` do not show, its node gone); ``failure.groups`` the ranks
    it hit; ``profile`` the slices' profile as some node offers it (None: no node offers it any more)."""
    ranks = unmoved(len(held), policy, failure)
    if not isinstance(ranks, tuple):
        return ranks
    if profile is None:
        return _no_room(
            policy, failure, PlacementInfeasible("slices", ["no node offers the job's MIG profile any more"])
        )
    return moved_on_gpus(nodes, held, ranks, lambda free, label: pack(profile, free, label), policy, failure)


def moved_on_gpus(
    nodes: Sequence[NodeGpus],
    held: Sequence[Placement | None],
    ranks: tuple[int, ...],
    place: Callable[[Sequence[NodeGpus], str], Placement],
    policy: FailurePolicy,
    failure: FailureReport,
) -> SliceRepair:
    """``ranks`` given back their places in ``held`` and placed again one after the other by ``place`` (a
    slice or a share packed over the GPUs left, labelled by rank), or the decision when one does not fit."""
    free = list(nodes)
    for rank in ranks:
        if (old := held[rank]) is not None:
            free = list(apply(free, old, release=True))
    try:
        placements = pack_each(free, [f"rank {rank}" for rank in ranks], place)
    except PlacementInfeasible as exc:
        return _no_room(policy, failure, exc)
    reasons = tuple(f"rank {rank}: {p.why}" for rank, p in zip(ranks, placements, strict=True))
    return SlicesMoved(ranks, tuple(placements), reasons)


def decide_pool_repair(
    pools: Sequence[ProfilePool],
    held: Sequence[PoolPlacement | None],
    profile: str,
    policy: FailurePolicy,
    failure: FailureReport,
) -> SliceRepair:
    """The same policy for slices the device plugin placed (``pools.py``): ``held`` by rank as ``pools``
    count them (None: not counted there, its node gone); the broken ranks' slices are given back and they
    move to nodes with ``profile`` free. ``pools`` show a node under the failure closed, so nothing moves
    back onto it while the operator cannot tell which slices its broken GPU held."""
    ranks = unmoved(len(held), policy, failure)
    if not isinstance(ranks, tuple):
        return ranks
    free: Sequence[ProfilePool] = pools
    for rank in ranks:
        if (slice_ := held[rank]) is not None:
            free = take(free, slice_, release=True)
    try:
        placements = place_ranks(profile, len(ranks), free, "slices")
    except PlacementInfeasible as exc:
        return _no_room(policy, failure, exc)
    reasons = tuple(f"rank {rank}: {p.why}" for rank, p in zip(ranks, placements, strict=True))
    return SlicesMoved(ranks, tuple(placements), reasons)
