"""Rigid sizing: the job runs at ``spec.parallelism.data`` replicas or not at all."""

from __future__ import annotations

from collections.abc import Mapping

from paralleljob.core.elastic import ElasticRange, Resize
from paralleljob.core.job import JobSpec
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.status import StatusDraft


class Rigid:
    name = "rigid"
    resizes = False

    def write_status(self, draft: StatusDraft, request: JobRequest, running: int) -> None:
        return None  # no replica counts: the shape says the size

    def smallest(self, request: JobRequest) -> JobSpec:
        return request.spec

    def at_minimum(self, request: JobRequest) -> JobRequest:
        return request

    def min_gpus(self, request: JobRequest) -> int | None:
        return None

    def at_admitted_size(self, request: JobRequest, data: int) -> JobRequest:
        return request

    def admitted(self, ctx: PassContext, actions: JobActions, request: JobRequest) -> None:
        return None

    def resize(self, ctx: PassContext, held: HeldJob) -> PlacementRecord | None:
        return None

    def as_placed(self, job: JobObject, record: PlacementRecord) -> JobObject:
        return job

    def dropped(self, ctx: PassContext, held: HeldJob, drop: Resize, message: str) -> PlacementRecord:
        raise ValueError(f"{held.job.key}: a rigid job has no replica to drop (the core drops none without a range)")

    def range(self, request: JobRequest) -> ElasticRange | None:
        return None

    def may_take_trays(self, request: JobRequest) -> bool:
        return True

    def pod_env(
        self, job: JobObject, request: JobRequest, record: PlacementRecord, slot: PodSlot
    ) -> Mapping[str, str | None]:
        return {}  # torchrun's static rendezvous, as ``manifests.worker_env`` writes it

    def pod_labels(self, job: JobObject, slot: PodSlot) -> Mapping[str, str]:
        return {}


RIGID = Rigid()
