"""A job's :class:`~.base.Gang`: its kind and sizing (``kinds/picker``) with the layout its record has.

A record of tray pods has the NVL72 layout, a record of MIG slices the slice layout, of MPS shares the share
layout; any other record, and a
job not placed yet, the HGX layout until admission places it over trays or slices. Every combination is
one of :data:`GANGS`, built once, so picking is a dictionary look-up: cheaper than keeping each job's for
the pass (which would tie ``PassContext`` to this package's types, and this package's protocols already name
``PassContext``).
"""

from __future__ import annotations

from itertools import product

from paralleljob.k8s.edge.parse.specs import JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord
from paralleljob.k8s.plan.kinds.base import Gang, Layout
from paralleljob.k8s.plan.kinds.hgx import HGX
from paralleljob.k8s.plan.kinds.migslices import SLICES
from paralleljob.k8s.plan.kinds.mpsshares import SHARES
from paralleljob.k8s.plan.kinds.nvl72 import TRAYS
from paralleljob.k8s.plan.kinds.picker import KINDS, kind_of
from paralleljob.k8s.plan.kinds.sizings import SIZINGS, sizing_of

LAYOUTS: tuple[Layout, ...] = (HGX, TRAYS, SLICES, SHARES)
GANGS: dict[tuple[str, str, str], Gang] = {
    (kind.name, layout.name, sizing.name): Gang(kind, layout, sizing)
    for kind, layout, sizing in product(KINDS, LAYOUTS, SIZINGS)
}


def layout_of(record: PlacementRecord | None) -> Layout:
    if record is not None and record.sliced:
        return SLICES
    if record is not None and record.shared:
        return SHARES
    return TRAYS if record is not None and record.trays else HGX


def gang_of(request: JobRequest, record: PlacementRecord | None = None, native: bool = False) -> Gang:
    """The gang ``request`` (placed as ``record``, if it is) is; ``native``: a Kubernetes PodGroup declared it."""
    return GANGS[(kind_of(request, native).name, layout_of(record).name, sizing_of(request).name)]
