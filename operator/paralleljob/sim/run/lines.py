"""The operator's FIFO inputs, read from the simulator's state: the queue whose line a job stands in, each
queue's GPUs in use and its cap, each job's entry gate, and whether it ran before; so ``core.admit.fifo``
decides the simulator's FIFO with the operator's caps, gates and rejection rule, never with none.

Without ``--quotas`` the whole trace stands in one line with no cap, as in the operator's ``default`` queue
without a ParallelJobQueue object. With quotas each tenant is a queue (``sim/workload/quotas.py``, as the
core queue policies read them): its own line, capped at its maximum, as a ParallelJobQueue per team.

The entry checks (``core.admit.gates.entry_gate``) are asked with the simulator's facts, on both queue paths:
a tenant is a namespace its own queue serves (unless its quota names other namespaces); nothing backs off,
since the simulator's binds never fail; a preemption is under way for a job on the core's pass while the
victims chosen for it still run (the FIFO path preempts nobody); and the cluster has GPU nodes when its
topology has GPUs. A check that can never say no here is still asked, so a gate added to the list reaches
both shells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from paralleljob.core.admit.fifo import FifoJob, FifoLines
from paralleljob.core.admit.gates import Entry, Gate, entry_gate
from paralleljob.core.elastic import min_gpus
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.tenants import TenantBook


@dataclass(frozen=True, slots=True)
class QueueLines:
    """One FIFO pass's queues: ``tenants`` holds the quotas and the GPUs each tenant holds now; ``default``
    names the one line when there are no quotas; ``has_gpus``: the topology has GPUs."""

    tenants: TenantBook
    default: str
    has_gpus: bool

    def line_of(self, tenant: str) -> str:
        return tenant if self.tenants.quotas else self.default

    def cap(self, line: str) -> int | None:
        quota = self.tenants.quotas.get(line)
        return quota.max_gpus if quota is not None else None

    def gate(self, job: SimJob, making_room: str | None = None) -> Gate | None:
        """``job``'s entry gate (``core.admit.gates.entry_gate``) with the simulator's facts; ``making_room``:
        the preemption under way for it (:meth:`preempting_note`; the core's pass only), None when none is."""
        tenant = job.trace.tenant
        line = self.line_of(tenant)
        quota = self.tenants.quotas.get(line)
        entry = Entry(
            namespace=tenant,
            queue=line,
            served_namespaces=quota.namespaces if quota is not None else (),
            backoff=None,
            making_room=making_room,
            has_gpu_nodes=self.has_gpus,
        )
        return entry_gate(entry)

    @staticmethod
    def preempting_note(victims: Sequence[str], deadline_s: float) -> str:
        """The preemption under way for a job, as the operator's policy admission says it."""
        return f"preempting {', '.join(sorted(victims))}; their pods stop by {deadline_s:.0f}s"

    def fifo_job(self, job: SimJob, rank: float) -> FifoJob:
        """``job`` as the core's FIFO pass sees it; ``rank`` orders its line as the operator's queue time does."""
        guaranteed = min_gpus(job.full_spec, job.elastic) if job.elastic and job.full_spec else None
        return FifoJob(
            job.spec, self.line_of(job.trace.tenant), rank, name=job.job_id, gate=self.gate(job),
            ran_before=job.ran_before, min_gpus=guaranteed,
        )  # fmt: skip

    def of(self, jobs: Sequence[FifoJob]) -> FifoLines:
        """The lines to decide: ``jobs``, the GPUs each queue's jobs hold now, and the caps."""
        in_use: dict[str, int] = {}
        for tenant, gpus in self.tenants.gpus.items():
            line = self.line_of(tenant)
            in_use[line] = in_use.get(line, 0) + gpus
        return FifoLines(jobs, in_use, self.cap)
