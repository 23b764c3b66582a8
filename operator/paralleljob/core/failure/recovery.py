"""Repairing a job whose GPUs failed: ``full`` re-places the whole job, ``minimal`` moves only the TP
groups that sat on broken hardware, to spares as close to their old place as possible.

Both release the job first (it may reuse its own healthy GPUs), then place and allocate; when no room is
left the job stays released and the outcome says ``killed``. Cost before and after are reported so a
user sees what the repair cost them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from paralleljob.core.cluster import Allocation, ClusterState, GPUHealth
from paralleljob.core.errors import InvalidRequest, PlacementInfeasible
from paralleljob.core.job import JobSpec
from paralleljob.core.placing.placement import Placement
from paralleljob.core.placing.placer import Placer
from paralleljob.core.timing.cost import CostBreakdown, CostModel
from paralleljob.core.timing.evaluate import node_level_cost, placement_cost

# Health that takes a GPU away from the job running on it (Degraded GPUs keep their job).
BROKEN = frozenset({GPUHealth.OFFLINE, GPUHealth.RESETTING})


class RecoveryStrategy(enum.Enum):
    FULL = "full"
    MINIMAL = "minimal"

    @classmethod
    def parse(cls, value: str | RecoveryStrategy) -> RecoveryStrategy:
        if isinstance(value, RecoveryStrategy):
            return value
        try:
            return cls(value)
        except ValueError:
            raise InvalidRequest(f"unknown recovery strategy {value!r}; use 'full' or 'minimal'") from None


class RecoveryAction(enum.StrEnum):
    """What ``recover`` did; the seed's facade reports the value as is."""

    RESCHEDULED = "rescheduled"
    KILLED = "killed"


@dataclass(frozen=True, slots=True)
class RecoveryOutcome:
    job_id: str
    action: RecoveryAction
    strategy: RecoveryStrategy
    old: Allocation
    new: Placement | None
    cost_before: CostBreakdown
    cost_after: CostBreakdown | None
    moved_gpus: int
    reasons: tuple[str, ...]


def affected_groups(state: ClusterState, allocation: Allocation) -> list[int]:
    """TP groups holding a broken (Offline or Resetting) GPU.

    A cordon does not affect running groups; a node that stops running work (NotReady, deleted) reaches
    the core as all of its GPUs turning Offline, which the shells report."""
    out = []
    for g, group in enumerate(allocation.groups):
        if any(state.health[gpu] in BROKEN for gpu in group):
            out.append(g)
    return out


def recover(
    state: ClusterState, placer: Placer, job: JobSpec, model: CostModel, strategy: RecoveryStrategy
) -> RecoveryOutcome:
    """Re-place ``job`` after a failure, mutating ``state``: the old GPUs are released, the new ones
    allocated (or none, when the job had to be killed)."""
    old = state.allocations[job.job_id]
    topo = state.topology
    before = placement_cost(topo, job, old.groups, model)
    # With every TP group broken every pod restarts wherever it goes, so staying near the old nodes keeps
    # nothing; it only took the damaged node's last GPUs on an equal-cost tie where a new job would have gone
    # to the node the packing order names (issue 43: one such tie changed a small-node FIFO run by 28%).
    whole = not any(all(state.health[gpu] not in BROKEN for gpu in group) for group in old.groups)
    state.release(job.job_id)
    placement: Placement | None = None
    reasons: list[str] = []
    try:
        if whole:
            reasons.append("every TP group is on broken hardware: placed afresh, as a new job would be")
        elif strategy is RecoveryStrategy.MINIMAL:
            placement = _minimal(placer, job, model, old)
            if placement is None:
                reasons.append("no spare close enough for a minimal repair; re-placing the whole job")
            elif placement.cost.total_ms > before.total_ms + 1e-6:
                reasons.append(_full_alternative(placer, job, model, old))
        if placement is None:
            placement = placer.place(job, model, previous=None if whole else old)
    except PlacementInfeasible as exc:
        reasons.extend(exc.reasons)
        return RecoveryOutcome(job.job_id, RecoveryAction.KILLED, strategy, old, None, before, None, 0, tuple(reasons))
    state.allocate(Allocation(job.job_id, placement.groups, job.memory_per_gpu_gb))
    moved = sum(
        1 for a, b in zip(old.groups, placement.groups, strict=True) for x, y in zip(a, b, strict=True) if x != y
    )
    reasons.extend(placement.reasons)
    reasons.append(f"cost {before.total_ms:.3f} ms -> {placement.cost.total_ms:.3f} ms; {moved} rank(s) moved")
    return RecoveryOutcome(
        job.job_id, RecoveryAction.RESCHEDULED, strategy, old, placement, before, placement.cost, moved, tuple(reasons)
    )


def _minimal(placer: Placer, job: JobSpec, model: CostModel, old: Allocation) -> Placement | None:
    topo = placer.topology
    old_nodes = [topo.gpu_node[group[0]] for group in old.groups]
    intact = [all(placer.state.eligible(g, job.memory_per_gpu_gb) for g in group) for group in old.groups]
    layout = placer.keep_and_repair(job, model, old_nodes, intact)
    if layout is None:
        return None
    cost = node_level_cost(topo, job, layout, model)
    groups = placer.choose_gpus(job, layout, old)
    moved_groups = sum(1 for a, b in zip(old.groups, groups, strict=True) if a != b)
    reasons = (f"minimal repair: {moved_groups} TP group(s) moved, the rest stay where they were",)
    return Placement(job.job_id, job.pp, job.dp, tuple(layout), groups, cost, cost.total_ms, False, reasons)


def _full_alternative(placer: Placer, job: JobSpec, model: CostModel, old: Allocation) -> str:
    """What a full re-placement would have cost, so a user can tell whether switching policy pays."""
    try:
        full = placer.place(job, model, previous=old)
    except PlacementInfeasible:
        return "no full re-placement exists either"
    moved = sum(
        1 for a, b in zip(old.groups, full.groups, strict=True) for x, y in zip(a, b, strict=True) if x != y
    )
    return (
        f"the minimal repair raises the cost; a full re-placement would cost {full.cost.total_ms:.3f} ms"
        f" and move {moved} rank(s) (failurePolicy.strategy: full)"
    )
