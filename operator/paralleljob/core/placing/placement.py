"""The placer's answer: which node and GPUs each TP group gets, what it costs, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from paralleljob.core.timing.cost import CostBreakdown, CostModel

if TYPE_CHECKING:
    from paralleljob.core.cluster import Allocation
    from paralleljob.core.job import JobSpec


@dataclass(frozen=True, slots=True)
class Placement:
    job_id: str
    pp: int
    dp: int
    group_nodes: tuple[int, ...]  # node of TP group d * pp + p
    groups: tuple[tuple[int, ...], ...]  # GPU ids of TP group d * pp + p, in TP-rank order
    cost: CostBreakdown
    lower_bound_ms: float
    proven_optimal: bool
    reasons: tuple[str, ...]  # the decision record: what was chosen and why

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for group in self.groups for g in group)

    def seed_dict(self) -> dict[str, list[list[int]]]:
        """The seed's placement layout: tp_groups, pp_stages, dp_replicas."""
        pp, dp = self.pp, self.dp
        tp_groups = [list(group) for group in self.groups]
        pp_stages = [[g for d in range(dp) for g in tp_groups[d * pp + p]] for p in range(pp)]
        dp_replicas = [[g for p in range(pp) for g in tp_groups[d * pp + p]] for d in range(dp)]
        return {"tp_groups": tp_groups, "pp_stages": pp_stages, "dp_replicas": dp_replicas}


class PlacerLike(Protocol):
    """Anything that places a job on the state it was built with: the core placer or a baseline."""

    def place(self, job: JobSpec, model: CostModel, previous: Allocation | None = None) -> Placement: ...
