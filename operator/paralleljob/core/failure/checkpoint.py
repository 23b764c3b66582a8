"""Checkpoint advice: where to cut a pipeline for a checkpoint, and how often to take one."""

from __future__ import annotations

import math
from collections.abc import Sequence

from paralleljob.core.errors import InvalidRequest

SECONDS_PER_DAY = 86_400.0


def checkpointable_boundary(pp: int, activation_sizes: Sequence[float] | None = None) -> int:
    """The stage boundary to checkpoint at: the midpoint ``pp // 2`` by default; with per-stage
    activation sizes, the stage with the smallest activation, ties broken toward the midpoint."""
    if pp < 1:
        raise InvalidRequest(f"pipeline_parallel_size must be >= 1, got {pp}")
    if pp == 1:
        return 0
    mid = pp // 2
    if not activation_sizes:
        return mid
    if len(activation_sizes) != pp:
        raise InvalidRequest(f"need {pp} activation sizes, one per stage, got {len(activation_sizes)}")
    if any(not math.isfinite(a) or a < 0 for a in activation_sizes):
        raise InvalidRequest("activation sizes must be finite and >= 0")
    return min(range(pp), key=lambda s: (activation_sizes[s], abs(s - mid), s))


def job_mtbf_seconds(nodes: int, failures_per_1000_node_days: float) -> float:
    """Mean time between failures of a job spanning ``nodes`` nodes, from a per-node failure rate."""
    if nodes < 1 or failures_per_1000_node_days <= 0:
        raise InvalidRequest("need >= 1 node and a positive failure rate")
    per_day = failures_per_1000_node_days / 1000.0 * nodes
    return SECONDS_PER_DAY / per_day


def young_daly_interval_seconds(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """The Young/Daly optimum sqrt(2 C MTBF) between checkpoints."""
    if checkpoint_cost_s <= 0 or mtbf_s <= 0:
        raise InvalidRequest("checkpoint cost and MTBF must be positive")
    return math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)
