"""Queues, quotas and ordering: who goes next, as a pure function of a snapshot.

A queue (tenant) has a weight, a guaranteed number of GPUs it can always reclaim, and a maximum it may
never exceed. Below its guarantee a queue is "nominal"; between guarantee and maximum it is "borrowing"
idle capacity, which other queues may take back by preemption. Jobs are ordered by:

1. starvation guard: a job that has waited longer than ``max_wait_s`` goes first, oldest first;
2. fair share (when on): the queue with the smallest weighted dominant share (DRF over GPUs and GPU
   memory) goes first, so a light tenant is not starved by a heavy one;
3. priority with aging (``aging_per_hour`` priority points per hour waited), then submission time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from paralleljob.core.admit.gates import quota_refusal
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.job import JobSpec


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    weight: float = 1.0
    guaranteed_gpus: int = 0
    max_gpus: int | None = None  # None: no cap beyond the cluster
    namespaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidRequest("a queue needs a name")
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise InvalidRequest(f"queue {self.name!r}: weight must be a positive number")
        if self.guaranteed_gpus < 0:
            raise InvalidRequest(f"queue {self.name!r}: guaranteed GPUs must be >= 0")
        if self.max_gpus is not None and self.max_gpus < self.guaranteed_gpus:
            raise InvalidRequest(f"queue {self.name!r}: max GPUs is below its guarantee")


@dataclass(frozen=True, slots=True)
class PendingJob:
    job: JobSpec
    queue: str
    submitted_at: float
    expected_runtime_s: float | None = None
    ran_before: bool = False  # a "never fits" verdict then waits for repairs (``gates.fails_for_good``)


@dataclass(frozen=True, slots=True)
class RunningJob:
    job: JobSpec
    queue: str
    started_at: float
    last_checkpoint_at: float | None = None
    expected_end_at: float | None = None
    preemptible: bool = True

    def lost_work_gpu_s(self, now: float) -> float:
        """GPU-seconds thrown away if the job stopped now: time since its last checkpoint x its GPUs."""
        since = self.last_checkpoint_at if self.last_checkpoint_at is not None else self.started_at
        return max(0.0, now - since) * self.job.num_gpus


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    ordering: str = "priority"  # "fifo" | "priority"
    fair_share: bool = True
    backfill: bool = True
    preemption: bool = True
    aging_per_hour: float = 1.0
    max_wait_s: float = 24 * 3600.0
    grace_period_s: float = 120.0

    def __post_init__(self) -> None:
        if self.ordering not in ("fifo", "priority"):
            raise InvalidRequest(f"ordering must be 'fifo' or 'priority', got {self.ordering!r}")


@dataclass(frozen=True, slots=True)
class Usage:
    gpus: int = 0
    memory_gb: float = 0.0

    def plus(self, job: JobSpec) -> Usage:
        return Usage(self.gpus + job.num_gpus, self.memory_gb + job.num_gpus * job.memory_per_gpu_gb)


@dataclass
class QueueBook:
    """Per-queue usage of a snapshot, with the cluster totals that shares are measured against."""

    queues: Mapping[str, QueueSpec]
    total_gpus: int
    total_memory_gb: float
    usage: dict[str, Usage] = field(default_factory=dict)

    @classmethod
    def of(
        cls, queues: Iterable[QueueSpec], running: Iterable[RunningJob], total_gpus: int, total_memory_gb: float
    ) -> QueueBook:
        book = cls({q.name: q for q in queues}, total_gpus, total_memory_gb)
        for job in running:
            book.add(job.queue, job.job)
        return book

    def spec(self, queue: str) -> QueueSpec:
        return self.queues.get(queue) or QueueSpec(queue)

    def used(self, queue: str) -> Usage:
        return self.usage.get(queue, Usage())

    def add(self, queue: str, job: JobSpec) -> None:
        self.usage[queue] = self.used(queue).plus(job)

    def remove(self, queue: str, job: JobSpec) -> None:
        used = self.used(queue)
        self.usage[queue] = Usage(used.gpus - job.num_gpus, used.memory_gb - job.num_gpus * job.memory_per_gpu_gb)

    def dominant_share(self, queue: str, extra: JobSpec | None = None) -> float:
        """DRF: the larger of the queue's GPU share and GPU-memory share, divided by its weight."""
        used = self.used(queue) if extra is None else self.used(queue).plus(extra)
        shares = (used.gpus / max(1, self.total_gpus), used.memory_gb / max(1e-9, self.total_memory_gb))
        return max(shares) / self.spec(queue).weight

    def quota_refusal(self, queue: str, job: JobSpec) -> str | None:
        """Why admitting ``job`` would break its queue's maximum, or None."""
        return quota_refusal(queue, self.used(queue).gpus, job.num_gpus, self.spec(queue).max_gpus)

    def borrowed_gpus(self, queue: str) -> int:
        return max(0, self.used(queue).gpus - self.spec(queue).guaranteed_gpus)

    def below_guarantee(self, queue: str, job: JobSpec) -> bool:
        """Whether ``job`` fits inside its queue's guarantee (so it may reclaim borrowed capacity)."""
        return self.used(queue).gpus + job.num_gpus <= self.spec(queue).guaranteed_gpus

    def jain_index(self, demanding: Sequence[str] | None = None) -> float:
        """Jain's fairness index over the queues' weighted dominant shares (1.0 is perfectly fair)."""
        names = list(demanding) if demanding is not None else list(self.queues)
        values = [self.dominant_share(name) for name in names]
        if not values or not any(values):
            return 1.0
        return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def effective_priority(pending: PendingJob, policy: QueuePolicy, now: float) -> float:
    if policy.ordering == "fifo":
        return 0.0
    waited_h = max(0.0, now - pending.submitted_at) / 3600.0
    return pending.job.priority + policy.aging_per_hour * waited_h


def starving(pending: PendingJob, policy: QueuePolicy, now: float) -> bool:
    return now - pending.submitted_at >= policy.max_wait_s


def order_key(p: PendingJob, book: QueueBook, policy: QueuePolicy, now: float) -> tuple[int, float, float, float, str]:
    """Sort key of a waiting job across queues: starving first (oldest first), then the queue's weighted
    dominant share (with fair share on), then priority with aging, then submission time."""
    starved = starving(p, policy, now)
    share = book.dominant_share(p.queue) if policy.fair_share and not starved else 0.0
    return (
        0 if starved else 1,
        p.submitted_at if starved else share,
        -effective_priority(p, policy, now),
        p.submitted_at,
        p.job.job_id,
    )


def order(pending: Sequence[PendingJob], book: QueueBook, policy: QueuePolicy, now: float) -> list[PendingJob]:
    """The order in which jobs are considered, most deserving first; stable for equal keys."""
    return sorted(pending, key=lambda p: order_key(p, book, policy, now))
