"""Which slots of an adopted pod group hold their pod, and which of its ranks have finished for good.

A pod group's pods are its controller's, and a finished one may not stay: a Job counts a finished index
through its tracking finalizer and never makes it again, then kube-controller-manager's pod GC may delete the
pod long before the group ends. So a rank seen Succeeded on its slot is written down in the adopting job's
``status.succeededPods`` (slot name -> incarnation), as the operator does for its own workers
(``podsync.finished_ranks``); from then on the slot counts as done with or without its pod: the group completes
when the others finish, and hardware failing under the finished rank moves nothing, since no replacement pod
would ever come to take the moved slot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.edge.status.trayrecords import TraySlot
from paralleljob.k8s.plan.groups.traygroups import slot_rank
from paralleljob.k8s.plan.pods.podsync import SyncResult, is_finished


def holds_slot(pod: PodInfo, slot: PodSlot | TraySlot) -> bool:
    """Whether the pod sits where the slot says: bound to its node, on its GPUs."""
    return pod.node == slot.node and pod.gpu_indices == slot.gpu_indices


def finished_group_ranks(
    record: PlacementRecord, pods: Sequence[PodInfo], recorded: Mapping[str, int]
) -> dict[str, int]:
    """The record's finished ranks: those ``recorded`` whose slot kept its incarnation, and those with a pod of
    their node rank Succeeded on the slot now (one being deleted too: the pod GC waits for no one)."""
    succeeded: dict[int, list[PodInfo]] = {}
    for pod in pods:
        if pod.phase == "Succeeded" and pod.group_rank is not None:
            succeeded.setdefault(pod.group_rank, []).append(pod)
    out: dict[str, int] = {}
    for slot in record.pod_slots:
        done_here = any(holds_slot(p, slot) for p in succeeded.get(slot_rank(record, slot), ()))
        if done_here or is_finished(slot, recorded):
            out[slot.name] = slot.incarnation
    return out


def observe_group(
    record: PlacementRecord, slot_pods: Sequence[PodInfo | None], finished: Mapping[str, int]
) -> SyncResult:
    """How many slots hold their pod (``slot_pods``: the live pod of each slot, in record order), a finished
    rank's slot counting as held and succeeded. A failed pod is its owner's to replace, never a failure here."""
    bound = succeeded = 0
    for slot, pod in zip(record.pod_slots, slot_pods, strict=True):
        if is_finished(slot, finished):
            bound += 1
            succeeded += 1
        elif pod is not None and holds_slot(pod, slot):
            bound += 1
            succeeded += pod.phase == "Succeeded"
    return SyncResult(bound, succeeded, (), len(record.pod_slots))
