"""Choosing preemption victims: free a whole domain for the waiting job at the least lost work.

A running job may be preempted for a waiting one when it is preemptible and either has a lower priority,
or belongs to a queue that is borrowing above its guarantee while the waiting job's queue is still within
its own. Candidate victim sets are the eligible jobs touching one domain (a node, a rack, ...): evicting a
whole domain's worth of work gives the waiting job a compact, cheap placement instead of scattered holes.
Each candidate is checked by really placing the waiting job after a trial release (then undone), so a
preemption is only proposed when it lets the job run. Among working candidates the one that throws away the
least work wins: the sum over victims of GPUs x time since their last checkpoint.

A preemption under way is carried out at its deadline (the victims' grace period) only if it still stands
(:func:`preemption_stands`): while the victim runs and the job it makes room for still waits. Once that job
is admitted, fails or is deleted, or the victim stopped running meanwhile (a failure, a repair), it is
cancelled and the victim keeps its GPUs; a job still waiting is planned for again by the next pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.admit.queueing import PendingJob, QueueBook, RunningJob
from paralleljob.core.cluster import Allocation, ClusterState
from paralleljob.core.errors import PlacementInfeasible
from paralleljob.core.lifecycle import Phase
from paralleljob.core.placing.placement import Placement, PlacerLike
from paralleljob.core.timing.cost import CostModel

DOMAINS_PER_LEVEL = 12  # candidate domains tried per level, cheapest first
WAITING = frozenset({Phase.PENDING, Phase.QUEUED})


@dataclass(frozen=True, slots=True)
class Standing:
    stands: bool  # False: cancel it, the victim keeps running
    why: str


def preemption_stands(victim: Phase, for_job: str, for_phase: Phase | None) -> Standing:
    """Whether a preemption under way still stands: its victim is in phase ``victim`` and the job it makes
    room for, ``for_job``, in ``for_phase`` (None: gone, or being deleted)."""
    if victim is not Phase.RUNNING:
        return Standing(False, f"the job is {victim.value}")
    if for_phase is None or for_phase not in WAITING:
        return Standing(False, f"{for_job} no longer waits")
    return Standing(True, f"{for_job} still waits")


@dataclass(frozen=True, slots=True)
class PreemptionTrial:
    """The waiting job and what trying it out needs: the state (changed only inside a trial and restored),
    the placer over it and the job's cost model."""

    state: ClusterState
    placer: PlacerLike
    model: CostModel
    waiting: PendingJob

    def place_without(self, victims: Sequence[str]) -> Placement | None:
        """Where the waiting job would go with ``victims`` gone; the state is left as it was."""
        state = self.state
        released: list[Allocation] = []
        try:
            for victim in victims:
                allocation = state.release(victim)
                if allocation is not None:
                    released.append(allocation)
            try:
                return self.placer.place(self.waiting.job, self.model)
            except PlacementInfeasible:
                return None
        finally:
            for allocation in reversed(released):
                state.allocate(allocation)


@dataclass(frozen=True, slots=True)
class PreemptionChoice:
    victims: tuple[str, ...]
    placement: Placement  # where the waiting job goes once the victims have stopped
    lost_work_gpu_s: float
    reasons: tuple[str, ...]


def may_preempt(waiting: PendingJob, victim: RunningJob, book: QueueBook) -> str | None:
    """Why ``victim`` may be preempted for ``waiting``, or None."""
    if not victim.preemptible:
        return None
    if victim.job.priority < waiting.job.priority:
        return f"{victim.job.job_id} has priority {victim.job.priority} < {waiting.job.priority}"
    if (
        victim.queue != waiting.queue
        and book.borrowed_gpus(victim.queue) > 0
        and book.below_guarantee(waiting.queue, waiting.job)
    ):
        return f"{victim.job.job_id}'s queue {victim.queue!r} borrows above its guarantee"
    return None


def choose_victims(
    trial: PreemptionTrial, running: Sequence[RunningJob], book: QueueBook, now: float
) -> PreemptionChoice | None:
    state, waiting = trial.state, trial.waiting
    topo = state.topology
    eligible: dict[str, tuple[RunningJob, str]] = {}
    for job in running:
        if job.job.job_id in state.allocations:
            why = may_preempt(waiting, job, book)
            if why is not None:
                eligible[job.job.job_id] = (job, why)
    if not eligible:
        return None
    need = waiting.job.num_gpus
    memory = waiting.job.memory_per_gpu_gb
    if topo.top:
        free_now = sum(k * c for k, c in enumerate(state.free_histogram(topo.top, 0, memory)))
    else:
        free_now = state.usable_free(0)
    best: PreemptionChoice | None = None
    tried: set[tuple[str, ...]] = set()
    for level in range(topo.top + 1):
        candidates = []
        victims_of: dict[int, set[str]] = {}
        for job_id in eligible:
            for gpu in state.allocations[job_id].gpus:
                dom = topo.domain_of[level][topo.gpu_node[gpu]]
                victims_of.setdefault(dom, set()).add(job_id)
        for dom, in_domain in victims_of.items():
            freed = sum(eligible[v][0].job.num_gpus for v in in_domain)
            if freed + free_now < need:
                continue
            lost = sum(eligible[v][0].lost_work_gpu_s(now) for v in in_domain)
            candidates.append((lost, len(in_domain), dom, tuple(sorted(in_domain))))
        for lost, _, _dom, group in sorted(candidates)[:DOMAINS_PER_LEVEL]:
            if group in tried or (best is not None and lost >= best.lost_work_gpu_s):
                continue
            tried.add(group)
            placement = trial.place_without(group)
            if placement is None:
                continue
            victims = _trim(trial, group, eligible, now)
            lost = sum(eligible[v][0].lost_work_gpu_s(now) for v in victims)
            placement = trial.place_without(victims) or placement
            reasons = (
                f"preempting {len(victims)} job(s) in {_where(state, level, victims)}"
                f" loses {lost:.0f} GPU-seconds of work since their checkpoints",
                *(eligible[v][1] for v in victims),
            )
            best = PreemptionChoice(victims, placement, lost, reasons)
    return best


def _where(state: ClusterState, level: int, victims: Sequence[str]) -> str:
    """Every domain of ``level`` the victims run in ("node a" / "nodes a, b"): a victim on two nodes was said
    to be "in node a", the domain it was chosen to free, as if b kept running."""
    topo = state.topology
    names = sorted(
        {
            topo.domain_names[level][topo.domain_of[level][topo.gpu_node[g]]]
            for v in victims
            for g in state.allocations[v].gpus
        }
    )
    kind = topo.levels[level].name
    return f"{kind} {names[0]}" if len(names) == 1 else f"{kind}s {', '.join(names)}"


def _trim(
    trial: PreemptionTrial, victims: tuple[str, ...], eligible: dict[str, tuple[RunningJob, str]], now: float
) -> tuple[str, ...]:
    """Drop victims the waiting job does not need, most lost work first."""
    kept = list(victims)
    for victim in sorted(victims, key=lambda v: -eligible[v][0].lost_work_gpu_s(now)):
        without = [v for v in kept if v != victim]
        if without and trial.place_without(without) is not None:
            kept = without
    return tuple(sorted(kept))
