"""The one place a job's sizing is read from its parsed request (:func:`sizing_of`): ``minData``/``maxData``
make it elastic, anything else rigid.

Apart from ``kinds/picker`` because it loads no kind: the pod renderer (``plan/pods/podsync``), which the kinds
themselves build on, asks the sizing for a worker pod's environment and labels without an import cycle. For
the same reason it names the two sizings' own classes, not ``base.Sizing`` (whose protocols name
``podsync.SyncResult``); each answers that protocol (``tests/k8s/test_gang_kinds.py``).
"""

from __future__ import annotations

from paralleljob.k8s.edge.parse.specs import JobRequest
from paralleljob.k8s.plan.kinds.elasticity import ELASTIC, Elastic
from paralleljob.k8s.plan.kinds.rigid import RIGID, Rigid

SIZINGS: tuple[Rigid | Elastic, ...] = (RIGID, ELASTIC)


def sizing_of(request: JobRequest) -> Rigid | Elastic:
    return RIGID if request.elastic is None else ELASTIC
