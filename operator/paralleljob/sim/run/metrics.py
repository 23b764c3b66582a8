"""Metrics of one simulation run, as plain JSON-ready values.

Floats are rounded to a fixed number of decimals and dicts are written with sorted keys, so the same run
gives the same bytes. Percentiles use the nearest-rank method (no interpolation to disagree about).

Definitions:
* JCT: finish - submit, for jobs that finished. Queueing delay: first start - submit, for jobs that started.
* GPU allocation: GPU-seconds allocated / (GPUs x simulated time), time-weighted and exact.
* Fragmentation (per sample): free GPUs stranded on a node where some GPU is allocated, as a share of all
  GPUs of the cluster (not of the free ones, which jumps to 100% as soon as the last whole node is taken).
* Makespan: the last finish - the first submit. Allocation over the busy period: the same ratio as GPU
  allocation, over [first submit, last submit] only, where every policy is offered the same load.
* Empty sets (no job completed, none started) give ``None`` (``null`` in JSON, "n/a" in reports), not 0.
* Communication cost: the cost model's total_ms of each job's first placement, over multi-GPU jobs.
* Span: multi-GPU jobs by the lowest topology level that holds their first placement (node, rack, ...).
* ETTR (effective training time ratio): trace GPU-time / GPU-time from first start to finish, completed jobs.
* Finish-time ratio (Themis-style fairness): JCT / trace duration per completed job (1 = as if alone).
* Goodput lost to failures: GPU-hours of computing whose work was thrown away (since the last checkpoint),
  plus GPU-hours held while jobs restarted after a failure (an elastic drop included). GPUs held idle by a
  move back or an elastic grow or shrink are not in it: no failure caused them (the engine reports them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from paralleljob.sim.run.jobs import SimJob

DECIMALS = 6


def rounded(value: Any) -> Any:
    """A copy with every float rounded (and -0.0 and non-finite values made JSON-safe)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, DECIMALS) + 0.0
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, mean, p50, p99, max; every statistic None when there is no value (no made-up zeros)."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {
        "count": len(ordered),
        "mean": math.fsum(ordered) / len(ordered),
        "p50": percentile(ordered, 50),
        "p99": percentile(ordered, 99),
        "max": ordered[-1],
    }


@dataclass
class Series:
    """Samples over time: (time_s, allocated share, fragmentation, queued jobs, running jobs)."""

    time_s: list[float] = field(default_factory=list)
    allocation: list[float] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    free: list[float] = field(default_factory=list)  # free healthy GPUs, share of the cluster
    queued: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[Any]]:
        return {
            "time_s": self.time_s,
            "allocation": self.allocation,
            "fragmentation": self.fragmentation,
            "free": self.free,
            "queued": self.queued,
            "running": self.running,
        }


@dataclass
class FailureTally:
    injected: int = 0
    by_cause: Counter[str] = field(default_factory=Counter)
    by_scope: Counter[str] = field(default_factory=Counter)
    on_broken_hardware: int = 0  # hit hardware that was already down: nothing more breaks
    jobs_interrupted: int = 0
    recovered_in_place: int = 0  # minimal or full repair succeeded right away
    requeued: int = 0  # no room: back in the queue
    gave_up: int = 0  # maxRestarts reached, or no room with onUnplaceable Fail: the job failed
    preemptions_cancelled: int = 0  # no longer standing (core.admit.preemption): the victim kept running


def job_metrics(
    jobs: Sequence[SimJob], total_gpus: int, elapsed_s: float, allocated_gpu_s: float, unhealthy_gpu_s: float
) -> dict[str, Any]:
    done = [j for j in jobs if j.finished is not None]
    finishes = [j.finished for j in done if j.finished is not None]
    started = [j for j in jobs if j.first_start is not None]
    multi = [j for j in started if j.num_gpus > 1]
    capacity = total_gpus * elapsed_s
    lost_gpu_s = math.fsum(j.lost_gpu_s for j in jobs)
    restart_gpu_s = math.fsum(j.restart_gpu_s for j in jobs)
    return {
        "jobs": {
            "submitted": len(jobs),
            "completed": len(done),
            "rejected": sum(1 for j in jobs if j.rejected_reason),
            "failed": sum(1 for j in jobs if j.gave_up),
            "unfinished": len(jobs) - len(done) - sum(1 for j in jobs if j.rejected_reason or j.gave_up),
            "restarted": sum(1 for j in jobs if j.restarts),
            "preempted": sum(j.preemptions for j in jobs),
        },
        "makespan_s": max(finishes) - min(j.trace.submit_s for j in jobs) if finishes else None,
        "jct_s": summary([j.finished - j.trace.submit_s for j in done if j.finished is not None]),
        "queueing_delay_s": summary([j.first_start - j.trace.submit_s for j in started if j.first_start is not None]),
        "ettr": ettr(done),
        "finish_time_ratio": summary(
            [(j.finished - j.trace.submit_s) / j.trace.duration_s for j in done if j.finished and j.trace.duration_s]
        ),
        "gpu_allocation": allocated_gpu_s / capacity if capacity else 0.0,
        "gpu_unhealthy_share": unhealthy_gpu_s / capacity if capacity else 0.0,
        "comm_cost_ms_multi_gpu_jobs": summary([j.first_cost_ms or 0.0 for j in multi]),
        "slowdown_multi_gpu_jobs": summary([j.first_slowdown or 1.0 for j in multi]),
        "tp_groups_across_nodes": sum(j.tp_groups_split for j in jobs),
        "jobs_with_tp_groups_across_nodes": sum(1 for j in jobs if j.tp_groups_split),
        "placements": sum(j.placements for j in jobs),
        "goodput_lost": {
            "lost_work_gpu_hours": lost_gpu_s / 3600.0,
            "restart_gpu_hours": restart_gpu_s / 3600.0,
            "total_gpu_hours": (lost_gpu_s + restart_gpu_s) / 3600.0,
            "share_of_capacity": (lost_gpu_s + restart_gpu_s) / capacity if capacity else 0.0,
        },
    }


def ettr(done: Sequence[SimJob]) -> float | None:
    """Effective training time ratio, GPU-weighted over completed jobs: the GPU-time a job needs on the ideal
    placement without failures (its trace duration) over the GPU-time from its first start to its finish.
    Placement slowdown, lost work, restarts, checkpoint writes and waits after a requeue all lower it."""
    need = math.fsum(j.trace.duration_s * j.num_gpus for j in done)
    held = math.fsum(
        (j.finished - j.first_start) * j.num_gpus for j in done if j.finished and j.first_start is not None
    )
    return need / held if held > 0 else None


def failure_metrics(tally: FailureTally) -> dict[str, Any]:
    return {
        "injected": tally.injected,
        "by_cause": dict(sorted(tally.by_cause.items())),
        "by_scope": dict(sorted(tally.by_scope.items())),
        "on_broken_hardware": tally.on_broken_hardware,
        "jobs_interrupted": tally.jobs_interrupted,
        "recovered_in_place": tally.recovered_in_place,
        "requeued": tally.requeued,
        "gave_up": tally.gave_up,
    }


def mean_fragmentation(series: Series) -> float | None:
    return math.fsum(series.fragmentation) / len(series.fragmentation) if series.fragmentation else None
