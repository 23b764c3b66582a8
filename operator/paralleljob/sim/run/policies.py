"""The policies a simulation selects by name: a placement policy and a queue policy.

Placement policies wrap placers from the core, imported, never copied: ``ours`` is the core
:class:`~paralleljob.core.placing.placer.Placer` with minimal recovery (``ours-full``: with full recovery, to
measure what the minimal repair buys or costs); ``first-fit`` and ``best-fit`` are the
baselines of :mod:`paralleljob.core.placing.baselines`, ``volcano`` the tier-scoring one of
:mod:`paralleljob.sim.run.volcano`; the baselines re-place the whole job on failure (the job restarts
elsewhere, as a plain gang scheduler would do it).

Queue policies keep the waiting jobs for one of the core's two passes, which decide order, admission and
preemption: :class:`FifoQueue` for the operator's own strict FIFO pass (``core.admit.fifo``, called by the engine
exactly as the operator calls it), one line for the whole trace; ``sim/run/core_queue.py`` for the core's
queueing planner. There is no plug-in queue: a policy the operator does not run would measure nothing it
ships.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from paralleljob.core.admit.fifo import FifoPolicy
from paralleljob.core.cluster import ClusterState
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.moves import MoveBounds
from paralleljob.core.nvl72.cliquebaseline import CliqueBestFitPlacer
from paralleljob.core.nvl72.nvlink import NVLinkPlacer
from paralleljob.core.placing.baselines import BestFitDomainPlacer, FirstFitPlacer
from paralleljob.core.placing.placement import PlacerLike
from paralleljob.core.placing.placer import OPERATOR_PLACER, Placer
from paralleljob.sim.run.volcano import VolcanoTierPlacer


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    name: str
    make_placer: Callable[[ClusterState], PlacerLike]
    # Minimal/full use the core's recover(); None re-places the whole job with this policy's own placer.
    recovery: RecoveryStrategy | None
    description: str
    # Move a job back to a cheaper placement at a checkpoint boundary when core.reoptimize says so.
    reoptimize: bool = False
    # Free room for a head that fits nowhere only because the free GPUs are scattered (core.moves), within
    # these bounds; ``relocate`` False stops the jobs in the way instead (the preemption baseline).
    moves: MoveBounds | None = None
    relocate: bool = True


PLACEMENT_POLICIES: dict[str, PlacementPolicy] = {
    "ours": PlacementPolicy(
        "ours", Placer, RecoveryStrategy.MINIMAL, "core Placer (cost-optimal placement) + minimal recovery"
    ),
    "ours-full": PlacementPolicy(
        "ours-full", Placer, RecoveryStrategy.FULL, "core Placer (cost-optimal placement) + full recovery"
    ),
    "ours-reopt": PlacementPolicy(
        "ours-reopt", Placer, RecoveryStrategy.MINIMAL,
        "core Placer + minimal recovery + migration back at a checkpoint (core.reoptimize)", reoptimize=True,
    ),
    "ours-full-reopt": PlacementPolicy(
        "ours-full-reopt", Placer, RecoveryStrategy.FULL,
        "core Placer + full recovery + migration back at a checkpoint (core.reoptimize)", reoptimize=True,
    ),
    "first-fit": PlacementPolicy(
        "first-fit", FirstFitPlacer, None, "FIFO + first-fit: first free GPUs in id order (topology-unaware)"
    ),
    "best-fit": PlacementPolicy(
        "best-fit", BestFitDomainPlacer, None, "FIFO + best-fit by domain (Kueue-TAS-like, no cost model)"
    ),
    "volcano": PlacementPolicy(
        "volcano", VolcanoTierPlacer, None, "FIFO + Volcano-style tier scoring, binpack pod by pod (rank-blind)"
    ),
    # NVLink cliques (GB200 NVL72, docs/nvl72.md): ours and the peers' "TP group in one clique" baseline, each
    # with no warm spare and with 2 spare trays per clique. Ours repairs and moves back as the operator does by
    # default (strategy minimal, MigrateAtCheckpoint); the baseline re-places the whole job through its placer.
    "ours-nvl72": PlacementPolicy(
        "ours-nvl72", lambda state: NVLinkPlacer(state, OPERATOR_PLACER), RecoveryStrategy.MINIMAL,
        "core NVLink placer (cost-optimal on whole trays of cliques), no spares, minimal repair + move back",
        reoptimize=True,
    ),
    "ours-nvl72-spares2": PlacementPolicy(
        "ours-nvl72-spares2", lambda state: NVLinkPlacer(state, OPERATOR_PLACER, spares=2), RecoveryStrategy.MINIMAL,
        "core NVLink placer, 2 warm spare trays per clique, repairs inside the clique, moves back",
        reoptimize=True,
    ),
    # 16 usable trays per rack (2 warm spares, as providers guarantee) and moves that free room for a head
    # job (core.moves, sim/run/roommoves.py); the baseline stops the same jobs instead of moving them.
    "ours-nvl72-moves": PlacementPolicy(
        "ours-nvl72-moves", lambda state: NVLinkPlacer(state, OPERATOR_PLACER, spares=2), RecoveryStrategy.MINIMAL,
        "core NVLink placer, 2 spare trays per clique, moves jobs at their checkpoints to free room (core.moves)",
        moves=MoveBounds(), reoptimize=True,
    ),
    "ours-nvl72-preempt": PlacementPolicy(
        "ours-nvl72-preempt", lambda state: NVLinkPlacer(state, OPERATOR_PLACER, spares=2), RecoveryStrategy.MINIMAL,
        "core NVLink placer, 2 spare trays per clique, stops and requeues the jobs in the way (preemption)",
        moves=MoveBounds(), relocate=False, reoptimize=True,
    ),
    "clique-best-fit": PlacementPolicy(
        "clique-best-fit", CliqueBestFitPlacer, None, "each TP group in one clique, otherwise best-fit; no spares"
    ),
    "clique-best-fit-spares2": PlacementPolicy(
        "clique-best-fit-spares2", lambda state: CliqueBestFitPlacer(state, spares=2), None,
        "each TP group in one clique, otherwise best-fit; 2 warm spare trays per clique",
    ),
}


def placement_policy(name: str) -> PlacementPolicy:
    try:
        return PLACEMENT_POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {sorted(PLACEMENT_POLICIES)}") from None


@dataclass(frozen=True, slots=True)
class WaitingJob:
    """What a queue policy knows of a waiting job. ``order`` is its arrival rank, kept across requeues."""

    job_id: str
    order: int
    submit_s: float
    num_gpus: int
    tenant: str
    priority: int


@dataclass(frozen=True, slots=True)
class SimRunningJob:
    """A running job as the simulator's queue policies see it (the core's queueing pass has its own ``RunningJob``)."""

    job_id: str
    num_gpus: int
    tenant: str
    priority: int
    started_s: float


class FifoQueue:
    """The waiting jobs of the core's FIFO pass (``core.admit.fifo``): by arrival, a requeued job back at its
    original place. Strict by default: the head blocks everyone behind it (no backfill), and nobody is
    preempted; ``blocking`` False skips a head that does not fit."""

    name = "fifo"

    def __init__(self, blocking: bool = True) -> None:
        self.blocking = blocking
        self.policy = FifoPolicy(strict=blocking)
        self._keys: list[int] = []  # sorted arrival ranks
        self._jobs: dict[int, WaitingJob] = {}
        self._order_of: dict[str, int] = {}

    def add(self, job: WaitingJob, now: float) -> None:
        if job.order in self._jobs:
            raise ValueError(f"job {job.job_id!r} is already waiting")
        bisect.insort(self._keys, job.order)
        self._jobs[job.order] = job
        self._order_of[job.job_id] = job.order

    def remove(self, job_id: str) -> None:
        order = self._order_of.pop(job_id)
        del self._keys[bisect.bisect_left(self._keys, order)]
        del self._jobs[order]

    def candidates(self, now: float) -> Iterator[WaitingJob]:
        # A snapshot, so the engine may remove the job it is looking at.
        for key in list(self._keys):
            job = self._jobs.get(key)
            if job is not None:
                yield job

    def __len__(self) -> int:
        return len(self._keys)


QUEUE_POLICIES: dict[str, Callable[[], FifoQueue]] = {
    "fifo": FifoQueue,
    "fifo-skip": lambda: FifoQueue(blocking=False),
}


def queue_policy(name: str) -> FifoQueue:
    try:
        return QUEUE_POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown queue policy {name!r}; choose from {sorted(QUEUE_POLICIES)}") from None
