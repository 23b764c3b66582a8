"""The one place a job's kind is read from its parsed request: :func:`kind_of` (``kinds/sizings`` reads its
sizing, ``kinds/gangs`` adds the layout, read from the record, and composes the three).

:func:`at_current_size` gives a placed job at the size its sizing says it runs with: what every step of the
pass (repair, pods, quotas) and the web view handle it as (an elastic job: its record's replicas, not
``spec.parallelism.data``, the size it wants).

``spec.podGroup`` picks the kind (a native PodGroup when Kubernetes' own gang object declared it). This
module loads no layout, so the NVL72 admission (``plan/admission/trayadmission``), which the tray layout itself builds
on, may ask :func:`may_take_trays`.
"""

from __future__ import annotations

from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.plan.kinds.adopted import ADOPTED_GROUP
from paralleljob.k8s.plan.kinds.base import GangKind
from paralleljob.k8s.plan.kinds.native import NATIVE_GROUP
from paralleljob.k8s.plan.kinds.operated import PARALLEL_JOB
from paralleljob.k8s.plan.kinds.sizings import sizing_of

# sizing_of is kinds/sizings'; the driver asks this one module for a job's kind and sizing
__all__ = ["KINDS", "at_current_size", "kind_of", "may_take_trays", "sizing_of", "why_no_trays"]

KINDS: tuple[GangKind, ...] = (PARALLEL_JOB, ADOPTED_GROUP, NATIVE_GROUP)


def kind_of(request: JobRequest, native: bool = False) -> GangKind:
    """Who makes ``request``'s pods; ``native``: a Kubernetes PodGroup declared the group."""
    if not request.pod_group:
        return PARALLEL_JOB
    return NATIVE_GROUP if native else ADOPTED_GROUP


def may_take_trays(request: JobRequest) -> bool:
    """Whether admission may place ``request`` over whole NVL72 trays: its kind's and its sizing's answer."""
    return kind_of(request).may_take_trays(request) and sizing_of(request).may_take_trays(request)


def why_no_trays(request: JobRequest) -> str:
    """Why admission may not place ``request`` over whole NVL72 trays ("" when it may): what its refusal says
    when only trays could hold it."""
    kind = kind_of(request)
    if not kind.may_take_trays(request):
        return (
            f"a {kind.name} takes NVL72 trays only when each of its pods asks for one whole tray, fewer GPUs than"
            ' its TP (docs/pod-groups.md "On NVL72 racks")'
        )
    if not sizing_of(request).may_take_trays(request):
        return (
            "an elastic job is not placed over NVL72 trays: each of its TP groups must fit one node or tray (a TP"
            " group across trays needs its clique's ComputeDomain, which replicas that come and go do not keep);"
            " a rigid job of this shape is"
        )
    return ""


def at_current_size(job: JobObject) -> JobObject:
    """``job`` with its request at the replicas its record holds (unchanged when rigid or not placed)."""
    request, record = job.request, job.record
    if request is None or record is None or job.record_error:
        return job
    return sizing_of(request).as_placed(job, record)
