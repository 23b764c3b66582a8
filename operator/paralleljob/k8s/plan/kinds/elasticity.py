"""Elastic sizing: the job runs between ``minData`` and ``maxData`` replicas (``core/elastic.py`` decides, the
same functions the simulator calls; ``kinds/resizing`` turns its resizes into records and statuses).

It is admitted at the largest size that fits down to its minimum, grows toward its desired size while no rigid
job at its priority or higher waits, drops a broken replica instead of a repair with no room, and is decided
on every pass (GPUs freed anywhere may let it grow). It never takes NVL72 trays: a replica is added or dropped
one TP-group pod at a time, which the tray layout's whole-tray pods cannot express.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from paralleljob.core.elastic import ElasticRange, Resize, min_gpus, resized
from paralleljob.core.job import JobSpec
from paralleljob.k8s.edge.constants import REPLICA_GROUP_LABEL
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.render.elasticenv import elastic_env, replica_group_id
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.kinds.resizing import drop_on_failure, resize_running, write_status
from paralleljob.k8s.plan.status import StatusDraft


def _range(request: JobRequest) -> ElasticRange:
    rng = request.elastic
    assert rng is not None, f"{request.queue}: an elastic sizing picked for a rigid request"
    return rng


class Elastic:
    name = "elastic"
    resizes = True

    def write_status(self, draft: StatusDraft, request: JobRequest, running: int) -> None:
        write_status(draft, _range(request), running, None)

    def smallest(self, request: JobRequest) -> JobSpec:
        return resized(request.spec, _range(request).min)

    def at_minimum(self, request: JobRequest) -> JobRequest:
        # Gated and queued at its minimum (all its quota may count on); the core admits it at the largest size
        # that fits and it grows once running (kinds/resizing).
        return replace(request, spec=self.smallest(request))

    def min_gpus(self, request: JobRequest) -> int | None:
        return min_gpus(request.spec, _range(request))

    def at_admitted_size(self, request: JobRequest, data: int) -> JobRequest:
        return replace(request, spec=resized(request.spec, data))

    def admitted(self, ctx: PassContext, actions: JobActions, request: JobRequest) -> None:
        write_status(actions.draft, _range(request), request.spec.dp, None)  # admitted at the size that fit

    def resize(self, ctx: PassContext, held: HeldJob) -> PlacementRecord | None:
        return resize_running(ctx, held, ctx.rigid_waiting())

    def as_placed(self, job: JobObject, record: PlacementRecord) -> JobObject:
        request = job.request
        assert request is not None
        rng = _range(request)
        if record.dp == request.spec.dp or record.pp != request.spec.pp:
            return job
        if not rng.min <= record.dp <= rng.max:
            return job  # a record outside the range is not this job's: the usual checks report it
        return replace(job, request=replace(request, spec=resized(request.spec, record.dp)))

    def dropped(self, ctx: PassContext, held: HeldJob, drop: Resize, message: str) -> PlacementRecord:
        return drop_on_failure(ctx, held, drop, message)

    def range(self, request: JobRequest) -> ElasticRange | None:
        return request.elastic

    def may_take_trays(self, request: JobRequest) -> bool:
        return False

    def pod_env(
        self, job: JobObject, request: JobRequest, record: PlacementRecord, slot: PodSlot
    ) -> Mapping[str, str | None]:
        # c10d numbers the nodes itself: no fixed node rank, MIN:MAX nodes, a rendezvous on a stable name
        rng, restarts = _range(request), request.failure.max_restarts
        return {"PET_NODE_RANK": None, **elastic_env(job, record, slot, rng.min, rng.max, restarts)}

    def pod_labels(self, job: JobObject, slot: PodSlot) -> Mapping[str, str]:
        # the rendezvous Service selects its host by these (``edge/render/elasticenv``)
        return {REPLICA_GROUP_LABEL: str(replica_group_id(slot, job.name))}


ELASTIC = Elastic()
