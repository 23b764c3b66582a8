"""The one place a job's kind and sizing are read from its parsed request: :func:`kind_of`, :func:`sizing_of`
(``kinds/gangs`` adds the layout, read from the record, and composes the three).

``spec.podGroup`` picks the kind (a native PodGroup when Kubernetes' own gang object declared it) and
``minData``/``maxData`` pick elastic sizing. This module loads no layout, so the NVL72 admission
(``plan/trayadmission``), which the tray layout itself builds on, may ask :func:`may_take_trays`.
"""

from __future__ import annotations

from paralleljob.k8s.edge.specs import JobRequest
from paralleljob.k8s.plan.kinds.adopted import ADOPTED_GROUP
from paralleljob.k8s.plan.kinds.base import GangKind, Sizing
from paralleljob.k8s.plan.kinds.elasticity import ELASTIC
from paralleljob.k8s.plan.kinds.native import NATIVE_GROUP
from paralleljob.k8s.plan.kinds.operated import PARALLEL_JOB
from paralleljob.k8s.plan.kinds.rigid import RIGID

KINDS: tuple[GangKind, ...] = (PARALLEL_JOB, ADOPTED_GROUP, NATIVE_GROUP)
SIZINGS: tuple[Sizing, ...] = (RIGID, ELASTIC)


def kind_of(request: JobRequest, native: bool = False) -> GangKind:
    """Who makes ``request``'s pods; ``native``: a Kubernetes PodGroup declared the group."""
    if not request.pod_group:
        return PARALLEL_JOB
    return NATIVE_GROUP if native else ADOPTED_GROUP


def sizing_of(request: JobRequest) -> Sizing:
    return RIGID if request.elastic is None else ELASTIC


def may_take_trays(request: JobRequest) -> bool:
    """Whether admission may place ``request`` over whole NVL72 trays: its kind's and its sizing's answer."""
    return kind_of(request).may_take_trays(request) and sizing_of(request).may_take_trays(request)
