"""The one place a job's kind is read from its parsed request and record: :func:`gang_of`.

``spec.podGroup`` picks the kind (a native PodGroup when Kubernetes' own gang object declared it), the record's
layout picks the layout (whole trays when it records tray pods; a job not placed yet has the HGX layout until
admission places it over trays), and ``minData``/``maxData`` pick elastic sizing. Every combination is one of
:data:`GANGS`, built once, so picking is a dictionary look-up.
"""

from __future__ import annotations

from itertools import product

from paralleljob.k8s.edge.records import PlacementRecord
from paralleljob.k8s.edge.specs import JobRequest
from paralleljob.k8s.plan.kinds.adopted import ADOPTED_GROUP
from paralleljob.k8s.plan.kinds.base import Gang, GangKind, Layout, Sizing
from paralleljob.k8s.plan.kinds.elasticity import ELASTIC
from paralleljob.k8s.plan.kinds.hgx import HGX
from paralleljob.k8s.plan.kinds.native import NATIVE_GROUP
from paralleljob.k8s.plan.kinds.nvl72 import TRAYS
from paralleljob.k8s.plan.kinds.operated import PARALLEL_JOB
from paralleljob.k8s.plan.kinds.rigid import RIGID

KINDS: tuple[GangKind, ...] = (PARALLEL_JOB, ADOPTED_GROUP, NATIVE_GROUP)
LAYOUTS: tuple[Layout, ...] = (HGX, TRAYS)
SIZINGS: tuple[Sizing, ...] = (RIGID, ELASTIC)
GANGS: dict[tuple[str, bool, bool], Gang] = {
    (kind.name, layout.on_trays, sizing.resizes): Gang(kind, layout, sizing)
    for kind, layout, sizing in product(KINDS, LAYOUTS, SIZINGS)
}


def gang_of(request: JobRequest, record: PlacementRecord | None = None, native: bool = False) -> Gang:
    """The gang ``request`` (placed as ``record``, if it is) is; ``native``: a Kubernetes PodGroup declared it."""
    kind = PARALLEL_JOB if not request.pod_group else NATIVE_GROUP if native else ADOPTED_GROUP
    on_trays = record is not None and bool(record.trays)
    return GANGS[(kind.name, on_trays, request.elastic is not None)]
