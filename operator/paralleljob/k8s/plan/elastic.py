"""A placed job at the size it runs with: what every step of the pass (repair, pods, quotas) and the web view
handle an elastic job as. The job's sizing (``plan/kinds``) says what that size is: its record's replicas
for an elastic job, not ``spec.parallelism.data``, the size it wants; a rigid job's request as it is.
"""

from __future__ import annotations

from paralleljob.k8s.edge.specs import JobObject
from paralleljob.k8s.plan.kinds.picker import sizing_of


def at_current_size(job: JobObject) -> JobObject:
    """``job`` with its request at the replicas its record holds (unchanged when rigid or not placed)."""
    request, record = job.request, job.record
    if request is None or record is None or job.record_error:
        return job
    return sizing_of(request).as_placed(job, record)
