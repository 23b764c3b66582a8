"""Per-tenant accounting of a run: GPUs held now and at the peak, GPU-seconds, and the per-tenant report.

The engine calls :meth:`TenantBook.add` whenever an allocation is counted or released, so a tenant's
GPU-seconds are exact (integrated between changes), and its peak is the most it ever held at once: the
figure a quota's maximum is checked against. GPU-seconds above the guarantee are the borrowed ones, the
only ones the core lets another queue take back by preemption.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from paralleljob.core.admit.queueing import QueueSpec
from paralleljob.sim.run.jobs import SimJob
from paralleljob.sim.run.metrics import summary


class TenantBook:
    def __init__(self, quotas: Sequence[QueueSpec] = ()) -> None:
        self.quotas = {q.name: q for q in quotas}
        self.gpus: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self._gpu_s: dict[str, float] = {}
        self._borrowed_gpu_s: dict[str, float] = {}
        self._since: dict[str, float] = {}

    def add(self, tenant: str, gpus: int, now: float) -> None:
        held = self.gpus.get(tenant, 0)
        elapsed = now - self._since.get(tenant, now)
        quota = self.quotas.get(tenant)
        guaranteed = quota.guaranteed_gpus if quota is not None else 0
        self._gpu_s[tenant] = self._gpu_s.get(tenant, 0.0) + held * elapsed
        self._borrowed_gpu_s[tenant] = self._borrowed_gpu_s.get(tenant, 0.0) + max(0, held - guaranteed) * elapsed
        self._since[tenant] = now
        self.gpus[tenant] = held + gpus
        self.peak[tenant] = max(self.peak.get(tenant, 0), held + gpus)

    def over_quota(self) -> list[str]:
        """Tenants holding more GPUs now than their quota's maximum (the engine's invariant check)."""
        return [
            f"tenant {q.name!r} holds {self.gpus.get(q.name, 0)} GPUs, above its max {q.max_gpus}"
            for q in self.quotas.values()
            if q.max_gpus is not None and self.gpus.get(q.name, 0) > q.max_gpus
        ]

    def metrics(self, jobs: Sequence[SimJob], cluster_gpus: int, now: float) -> dict[str, Any]:
        """Per tenant: jobs, queueing delay, JCT, share of all allocated GPU-seconds, peak GPUs, preemptions
        of its jobs, and its quota (guarantee as a share of the cluster, maximum, GPU-hours borrowed above the
        guarantee)."""
        for tenant in list(self.gpus):
            self.add(tenant, 0, now)  # bring the GPU-seconds up to now
        total = math.fsum(self._gpu_s.values())
        by_tenant: dict[str, list[SimJob]] = {}
        for job in jobs:
            by_tenant.setdefault(job.trace.tenant, []).append(job)
        out: dict[str, Any] = {}
        for tenant, own in sorted(by_tenant.items()):
            gpu_s = self._gpu_s.get(tenant, 0.0)
            quota = self.quotas.get(tenant)
            started = [j.first_start - j.trace.submit_s for j in own if j.first_start is not None]
            row: dict[str, Any] = {
                "jobs": len(own),
                "queueing_delay_s": summary(started),
                "jct_s": summary([j.finished - j.trace.submit_s for j in own if j.finished is not None]),
                "gpu_hours": gpu_s / 3600.0,
                "gpu_share": gpu_s / total if total > 0 else None,
                "peak_gpus": self.peak.get(tenant, 0),
                "preemptions": sum(j.preemptions for j in own),
            }
            if quota is not None:
                row["quota"] = {
                    "weight": quota.weight,
                    "guaranteed_gpus": quota.guaranteed_gpus,
                    "guaranteed_share": quota.guaranteed_gpus / cluster_gpus,
                    "max_gpus": quota.max_gpus,
                    "borrowed_gpu_hours": self._borrowed_gpu_s.get(tenant, 0.0) / 3600.0,
                }
            out[tenant] = row
        return out
