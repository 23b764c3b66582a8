"""The core's queue policies (``core.admit.queueing`` + ``core.admit.admission``) in the simulator.

The core plans a whole scheduling pass at once: ordering (starvation guard, DRF fair share over tenants,
priority with aging), a reservation for the first blocked job, backfill that cannot delay it, and
preemption that frees a whole domain at the least lost work. :class:`CoreQueue` keeps the waiting jobs and
turns the simulator's view into the core's snapshot types; the engine carries out the plan's decisions
exactly as the operator would. Tenants are the trace's tenant column, each a queue of weight 1 unless
``--quotas`` gives them weights, guarantees and maxima (sim/workload/quotas.py).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence

from paralleljob.core.admit import queueing
from paralleljob.core.admit.queueing import PendingJob, QueueSpec
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.policies import WaitingJob

PRESETS: dict[str, queueing.QueuePolicy] = {
    # Core ordering, strict: the same semantics as the built-in FIFO, through the core's pass.
    "core-fifo": queueing.QueuePolicy(ordering="fifo", fair_share=False, backfill=False, preemption=False),
    # DRF fair share between tenants, still strict behind a blocked head (no backfill, no preemption).
    "core-fair-strict": queueing.QueuePolicy(backfill=False, preemption=False),
    # Fair share plus backfill that cannot delay the reserved head job.
    "core-fair-backfill": queueing.QueuePolicy(preemption=False),
    # Everything on: priority with aging, DRF fair share, backfill, checkpoint-aware preemption.
    "core-fair": queueing.QueuePolicy(),
}


class CoreQueue:
    def __init__(self, name: str, policy: queueing.QueuePolicy, queues: Sequence[QueueSpec] = ()) -> None:
        self.name = name
        self.policy = policy
        self.queues = tuple(queues)
        self._waiting: dict[str, WaitingJob] = {}
        self.jain: list[float] = []  # Jain's index after every pass, for the metrics

    def add(self, job: WaitingJob, now: float) -> None:
        self._waiting[job.job_id] = job

    def remove(self, job_id: str) -> None:
        del self._waiting[job_id]

    def candidates(self, now: float) -> Iterator[WaitingJob]:
        yield from sorted(self._waiting.values(), key=lambda w: w.order)

    def __len__(self) -> int:
        return len(self._waiting)

    def pending(self, jobs: Mapping[str, SimJob], gated: Collection[str] = ()) -> list[PendingJob]:
        """The core's view of the waiting jobs but ``gated`` (an entry check holds them); the expected run
        time is the work they have left."""
        out = []
        for waiting in self.candidates(0.0):
            if waiting.job_id in gated:
                continue
            job = jobs[waiting.job_id]
            out.append(PendingJob(job.spec, waiting.tenant, waiting.submit_s, job.work_left, job.ran_before))
        return out


def last_checkpoint_at(job: SimJob, now: float) -> float | None:
    """When the running job last finished writing a checkpoint in its current segment (None: not yet)."""
    plan = job.plan
    if math.isinf(plan.interval_s) or now <= job.segment_start:
        return None
    periods = math.floor((now - job.segment_start) / plan.period_s)
    return job.segment_start + periods * plan.period_s if periods else None


def make_core_queue(name: str, queues: Sequence[QueueSpec] = ()) -> CoreQueue | None:
    """The core queue ``name`` with the tenants' queue objects (quotas), or None for a built-in queue."""
    policy = PRESETS.get(name)
    return None if policy is None else CoreQueue(name, policy, queues)
