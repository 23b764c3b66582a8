"""The ParallelJob kind: the operator renders, re-creates and deletes the gang's pods itself.

Its queued job hands its request to admission as it is (a pod left from an earlier placement is deleted
first); its pods are named after their slots, so a failure names them directly; a repair re-creates the pods
whose GPUs changed. It may take whole NVL72 trays (one pod per tray, ``kinds/nvl72``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.pods.podsync import SyncResult, delete_all, finished_ranks, observe, sync_pods


class ParallelJobPods:
    name = "ParallelJob"
    renders_pods = True

    def queued(
        self, ctx: PassContext, actions: JobActions, job: JobObject, pods: Sequence[PodInfo]
    ) -> JobRequest | None:
        delete_all(actions, pods, ctx.view.nodes, "leftover of an earlier placement")
        return job.request

    def finished_ranks(
        self, record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, recorded: Mapping[str, int]
    ) -> dict[str, int]:
        return finished_ranks(record, pods, job_uid, recorded)

    def observe(
        self, record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, finished: Mapping[str, int]
    ) -> SyncResult:
        return observe(record, pods, job_uid, finished)

    def owner_gone(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo]) -> bool:
        return False  # the job owns its pods: a missing one is re-created

    def pod_names(self, record: PlacementRecord, pods: Sequence[PodInfo]) -> Mapping[str, str] | None:
        return None  # each pod is named after its slot

    def sync(self, ctx: PassContext, held: HeldJob, record: PlacementRecord) -> None:
        sync_pods(
            held.actions, held.job, held.request, record, held.pods, ctx.view.nodes, ctx.gpu_holders, held.finished
        )

    def repaired(self, record: PlacementRecord, moved: Sequence[PodSlot], strategy: str, maintenance: bool) -> str:
        what = "moved off the drained GPUs" if maintenance else f"{strategy} repair"
        return f"{what}: {len(moved)} pod(s) re-created ({', '.join(s.name for s in moved)})"

    def may_take_trays(self, request: JobRequest) -> bool:
        return True

    def finish(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo], active: bool) -> None:
        return None  # the shared decisions are this kind's own


PARALLEL_JOB = ParallelJobPods()
