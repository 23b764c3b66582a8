"""How a running job turns wall time into work, with checkpoints, and how much a failure throws away.

Work is measured in trace seconds: a job's trace duration is its total work, done at rate 1 on the best
placement the cluster allows. On a worse placement the rate is ``1 / slowdown`` (see ``core/timing/steptime.py``).

A run segment (from a start or restart to the next interruption) alternates ``interval`` wall seconds of
computing with ``cost`` wall seconds of writing a checkpoint, which makes no progress. Work counts as saved
once the checkpoint that holds it is written; a failure loses everything since. No checkpoint is written
after the last piece of work. With no failures to guard against the interval is infinite: no checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paralleljob.core.failure.checkpoint import job_mtbf_seconds, young_daly_interval_seconds

NO_CHECKPOINTS = math.inf


@dataclass(frozen=True, slots=True)
class CheckpointPlan:
    interval_s: float  # wall seconds of computing between checkpoints (inf: never checkpoint)
    cost_s: float  # wall seconds to write one

    @property
    def period_s(self) -> float:
        return self.interval_s + self.cost_s


def plan_for(
    nodes: int, rate_per_1000_node_days: float, cost_s: float, fixed_interval_s: float | None
) -> CheckpointPlan:
    """A fixed interval if one is given, else Young/Daly for a job on ``nodes`` nodes at this failure rate."""
    if fixed_interval_s is not None:
        return CheckpointPlan(fixed_interval_s, cost_s)
    if rate_per_1000_node_days <= 0 or cost_s <= 0:
        return CheckpointPlan(NO_CHECKPOINTS, cost_s)
    mtbf = job_mtbf_seconds(max(1, nodes), rate_per_1000_node_days)
    return CheckpointPlan(young_daly_interval_seconds(cost_s, mtbf), cost_s)


def progress(elapsed_s: float, rate: float, plan: CheckpointPlan) -> tuple[float, float]:
    """(work done, work saved) after ``elapsed_s`` wall seconds of a segment."""
    if elapsed_s <= 0:
        return 0.0, 0.0
    if math.isinf(plan.interval_s):
        return elapsed_s * rate, 0.0
    periods = math.floor(elapsed_s / plan.period_s)
    into = elapsed_s - periods * plan.period_s
    saved = periods * plan.interval_s * rate
    return saved + min(into, plan.interval_s) * rate, saved


def wall_time_for(work: float, rate: float, plan: CheckpointPlan) -> float:
    """Wall seconds a segment needs to do ``work``, checkpoints included."""
    if work <= 0:
        return 0.0
    compute = work / rate
    if math.isinf(plan.interval_s):
        return compute
    checkpoints = max(0, math.ceil(compute / plan.interval_s) - 1)
    return compute + checkpoints * plan.cost_s
