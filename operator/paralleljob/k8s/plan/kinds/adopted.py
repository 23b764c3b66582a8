"""The adopted pod group kind: another controller's pods (an Indexed Job, a JobSet, a PyTorchJob), gang-placed
through an adopting ParallelJob with ``spec.podGroup`` (docs/pod-groups.md).

The operator never creates, re-creates or deletes such pods: it waits until the group is complete, annotates
each pod with its slot's GPUs and binds it (``podgroups.finish_group`` drops whatever else the shared decisions
asked for). Its pods are not named after their slots, so a failure names them through the node ranks; a
repair moves the slot and waits for the owner to replace the pod; it is never moved for a better placement;
once all its pods are gone with their owner it is complete. Its pods take whole NVL72 trays only when each
pod asks for a whole tray's GPUs (``traygroups.tray_width``). The parse refuses an elastic pod group (its size
is its controller's), so this kind is always rigid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from paralleljob.core.lifecycle import Event, Phase
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.queues import parse_time
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.plan.actions import JobActions
from paralleljob.k8s.plan.context import HeldJob, PassContext
from paralleljob.k8s.plan.groups.groupranks import finished_group_ranks, observe_group
from paralleljob.k8s.plan.groups.podgroups import finish_group, hold_until_complete, live_pods, slot_pods
from paralleljob.k8s.plan.groups.traygroups import tray_width
from paralleljob.k8s.plan.pods.podsync import SyncResult


class AdoptedGroup:
    name = "pod group"
    renders_pods = False

    def queued(
        self, ctx: PassContext, actions: JobActions, job: JobObject, pods: Sequence[PodInfo]
    ) -> JobRequest | None:
        request = job.request
        assert request is not None
        since = parse_time(str(actions.draft.data.get("queuedAt") or job.queued_at)) or ctx.now_s
        if not hold_until_complete(actions, request, pods, ctx.now, ctx.now_s, since):
            return None
        if not self.claims_ready(ctx, actions, job):
            return None
        width = tray_width(request.spec, live_pods(pods))  # pods of a whole tray each: NVLink trays
        return replace(request, tray_pod_gpus=width) if width else request

    def claims_ready(self, ctx: PassContext, actions: JobActions, job: JobObject) -> bool:
        return True  # an adopted group's pods bring no claims of their own to wait for

    def finished_ranks(
        self, record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, recorded: Mapping[str, int]
    ) -> dict[str, int]:
        return finished_group_ranks(record, pods, recorded)

    def observe(
        self, record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, finished: Mapping[str, int]
    ) -> SyncResult:
        return observe_group(record, [pod for _, pod in slot_pods(record, pods)], finished)

    def owner_gone(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo]) -> bool:
        draft = actions.draft
        if draft.phase is not Phase.RUNNING or pods:
            return False
        # every pod of the group is gone (its owner was deleted or cleaned up): nothing holds the GPUs now
        draft.apply(Event.COMPLETED, "PodGroupGone", "all pods of the group are gone", ctx.now)
        draft.set(completionTime=ctx.now)
        ctx.view.state.release(actions.job.key)
        return True

    def pod_names(self, record: PlacementRecord, pods: Sequence[PodInfo]) -> Mapping[str, str] | None:
        held = zip(record.pod_slots, slot_pods(record, pods), strict=True)
        return {slot.name: pod.name for slot, (_, pod) in held if pod is not None}

    def sync(self, ctx: PassContext, held: HeldJob, record: PlacementRecord) -> None:
        return None  # another controller's pods: only annotated and bound, by finish

    def repaired(self, record: PlacementRecord, moved: Sequence[PodSlot], strategy: str, maintenance: bool) -> str:
        # The operator creates no pod of a group (docs/pod-groups.md): it can only move the slot and wait.
        ranks = [f"node rank {record.node_rank(s)}" for s in moved]
        return (
            f"{strategy} repair: the slot of {', '.join(ranks)} moved to healthy GPUs; the operator"
            " re-creates no pod of a group: it waits for the pods' owner to replace the pod(s) on the broken"
            " hardware and binds the replacement to the new slot"
        )

    def may_take_trays(self, request: JobRequest) -> bool:
        return request.tray_pod_gpus > 0

    def finish(self, ctx: PassContext, actions: JobActions, pods: Sequence[PodInfo], active: bool) -> None:
        finish_group(actions, pods, active, ctx.view.nodes, ctx.now)


ADOPTED_GROUP = AdoptedGroup()
