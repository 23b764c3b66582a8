"""Bring a job's pods in line with its recorded placement: create what is missing, bind what is unbound,
delete what no longer belongs. Idempotent: on a second call with the same inputs it asks for nothing new.

A pod *matches* its slot when it is the job's own (owner UID), carries the slot's GPU indices and
incarnation, and sits on (or, unbound, is meant for) the slot's node. Anything else with the slot's name
is stale and is deleted before the slot's pod is created again — pod names are fixed, so the old one must
be gone first. Pods are never re-bound: a bound pod on the wrong node is deleted, never moved. A record of whole trays
(``layout: trays``) is synced the same way, one pod per tray, after its ComputeDomains (one per clique).

A rank that exited 0 is *finished* for its slot's incarnation (:func:`finished_ranks`, kept in
``status.succeededPods``): its slot counts as done whether or not its pod still exists, and is never
created again. Its pod can go before the job ends: kube-controller-manager's pod GC deletes the oldest
terminated pods of a cluster over ``--terminated-pod-gc-threshold`` (12,500 by default), and a long job's
early-finished ranks are among the oldest; a re-created rank would run its training again alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from paralleljob.core.failure.checkpoint import checkpointable_boundary
from paralleljob.k8s.edge.constants import object_key
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.render.claims import DeviceClaim, claim_name, with_claim, with_mig_resource
from paralleljob.k8s.edge.render.computedomain import with_channel_claim
from paralleljob.k8s.edge.render.manifests import headless_service, worker_pod
from paralleljob.k8s.edge.render.mpsclaims import mps_claim
from paralleljob.k8s.edge.render.traymanifests import compute_domains, job_domains, tray_pod
from paralleljob.k8s.edge.status.records import PlacementRecord, PodSlot
from paralleljob.k8s.edge.status.trayrecords import TraySlot
from paralleljob.k8s.plan.actions import JobActions, PodBind, PodCreate, PodDelete, added
from paralleljob.k8s.plan.kinds.sizings import sizing_of


def matches(pod: PodInfo, slot: PodSlot | TraySlot, job_uid: str) -> bool:
    node_ok = pod.node == slot.node if pod.bound else pod.target_node == slot.node
    return (
        pod.owner_uid == job_uid
        and node_ok
        and pod.gpu_indices == slot.gpu_indices
        and pod.incarnation == slot.incarnation
    )


def mismatch(pod: PodInfo, slot: PodSlot | TraySlot, job_uid: str) -> str:
    """Why a pod of the slot's name is stale, in the words a person reading the log needs."""
    if pod.owner_uid != job_uid:
        return "left by an earlier ParallelJob of the same name"
    where = pod.node if pod.bound else pod.target_node
    if where == slot.node and pod.gpu_indices == slot.gpu_indices:
        return f"incarnation {pod.incarnation}, the record wants {slot.incarnation}: its gang restarts"
    return (
        f"on {where or '(no node)'} {list(pod.gpu_indices or ())}, the record places it on"
        f" {slot.node} {list(slot.gpu_indices)}"
    )


def must_force(pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> bool:
    """Graceful deletion needs a kubelet to confirm it; on a missing or down node nobody will."""
    if not pod.bound:
        return True
    info = nodes.get(pod.node)
    return info is None or not info.runs_work


@dataclass(frozen=True, slots=True)
class SyncResult:
    bound: int  # slots whose pod is bound where it belongs
    succeeded: int  # slots whose pod finished successfully
    failed: tuple[PodInfo, ...]  # matching pods that failed
    total: int


def delete(actions: JobActions, pod: PodInfo, nodes: Mapping[str, NodeInfo], why: str) -> None:
    if not pod.deleting or must_force(pod, nodes):
        actions.deletes = added(
            actions.deletes, PodDelete(pod.namespace, pod.name, pod.uid, must_force(pod, nodes), why)
        )


def is_finished(slot: PodSlot | TraySlot, finished: Mapping[str, int]) -> bool:
    """Whether the slot's rank exited 0 in its current incarnation (a repair or move gives it a new one)."""
    return finished.get(slot.name, -1) == slot.incarnation


def is_ending(actions: JobActions) -> bool:
    """Whether some of the job's ranks have finished, as this pass leaves its status (``succeededPods``, which
    ``jobdecision`` writes from ``finished_ranks`` before anything else looks): such a job is not moved, grown
    or shrunk, since each re-creates pods and a finished rank's would run its training again."""
    return bool(actions.draft.data.get("succeededPods"))


def finished_ranks(
    record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, recorded: Mapping[str, int]
) -> dict[str, int]:
    """The record's finished ranks, pod name -> incarnation: those ``recorded`` in the status whose slot has
    not been given a new incarnation since, and those whose matching pod is Succeeded now."""
    by_name = {p.name: p for p in pods}
    out: dict[str, int] = {}
    for slot in record.pod_slots:
        pod = by_name.get(slot.name)
        if is_finished(slot, recorded) or (
            pod is not None and pod.phase == "Succeeded" and pod.bound and matches(pod, slot, job_uid)
        ):
            out[slot.name] = slot.incarnation
    return out


def observe(
    record: PlacementRecord, pods: Sequence[PodInfo], job_uid: str, finished: Mapping[str, int] | None = None
) -> SyncResult:
    """``finished``: :func:`finished_ranks` (a finished rank's slot is done, its pod there or not)."""
    by_name = {p.name: p for p in pods}
    bound = succeeded = 0
    failed = []
    for slot in record.pod_slots:
        if finished and is_finished(slot, finished):
            bound += 1
            succeeded += 1
            continue
        pod = by_name.get(slot.name)
        if pod is None or pod.deleting or not matches(pod, slot, job_uid) or not pod.bound:
            continue
        bound += 1
        if pod.phase == "Succeeded":
            succeeded += 1
        elif pod.phase == "Failed":
            failed.append(pod)
    return SyncResult(bound, succeeded, tuple(failed), len(record.pod_slots))


def sync_pods(  # params: the job, what it should be (request, record), what is (pods, nodes, GPU holders, finished)
    actions: JobActions,
    job: JobObject,
    request: JobRequest,
    record: PlacementRecord,
    pods: Sequence[PodInfo],
    nodes: Mapping[str, NodeInfo],
    holders: Mapping[tuple[str, int], str] | None = None,
    finished: Mapping[str, int] | None = None,
) -> None:
    """Append the deletes, creates and binds that move the job's pods toward ``record``. ``holders``: the
    pass's :func:`gpu_holders` of every pod (default: of the job's own pods); ``finished``: the job's
    finished ranks, whose slots are left as they are (their pod kept, or not created again)."""
    by_name = {p.name: p for p in pods}
    wanted = {slot.name for slot in record.pod_slots}
    boundary = checkpointable_boundary(record.pp)
    if holders is None:
        holders = gpu_holders(pods, nodes)
    for extra in pods:
        if extra.name not in wanted:
            delete(actions, extra, nodes, "not part of the job's placement")
    for slot in record.pod_slots:
        if finished and is_finished(slot, finished):
            continue
        pod = by_name.get(slot.name)
        if pod is not None and pod.deleting:
            if must_force(pod, nodes):
                delete(actions, pod, nodes, "stuck terminating on a node that is down")
            continue  # wait until it is gone; its name is needed
        if pod is not None and not matches(pod, slot, job.uid):
            delete(actions, pod, nodes, mismatch(pod, slot, job.uid))
            if must_force(pod, nodes) and not _waits_for_gpus(slot, job.namespace, holders):
                # a forced delete removes it at once: the replacement can follow in the same pass
                actions.creates = added(actions.creates, _create(job, request, record, slot, boundary, nodes))
            continue
        if pod is None:
            if not _waits_for_gpus(slot, job.namespace, holders):  # else once the pod on its GPUs is gone
                actions.creates = added(actions.creates, _create(job, request, record, slot, boundary, nodes))
        elif not pod.bound:
            actions.binds = added(
                actions.binds, PodBind(pod.namespace, pod.name, pod.uid, slot.node, device_claim(slot, nodes))
            )
    if actions.creates:
        actions.service = headless_service(job)
        # a tray pod's channel claim comes from its clique's ComputeDomain: created before the pods
        actions.compute_domains = compute_domains(job, record)


def gpu_holders(pods: Iterable[PodInfo], nodes: Mapping[str, NodeInfo]) -> dict[tuple[str, int], str]:
    """Which pod (namespace/name) runs on each GPU (node, index), by the pods' GPU annotations: every bound,
    unfinished pod on a live node. Pods on a down node do not count: they are force-deleted."""
    holders: dict[tuple[str, int], str] = {}
    for pod in pods:
        if pod.bound and not pod.terminal and pod.gpu_indices and not must_force(pod, nodes):
            for index in pod.gpu_indices:
                holders[(pod.node, index)] = object_key(pod.namespace, pod.name)
    return holders


def _waits_for_gpus(slot: PodSlot | TraySlot, namespace: str, holders: Mapping[tuple[str, int], str]) -> bool:
    """Whether another pod still runs on the slot's GPUs. A re-placement may hand GPUs whose pods are only
    now being deleted to another slot or job (a repair releases a job's GPUs for the rest of its pass);
    a kubelet gives a device to a new pod only once the pod holding it has terminated, and refuses the new
    pod at admission otherwise, so the slot's pod is created in the pass after that pod is gone."""
    if isinstance(slot, PodSlot) and (slot.mig is not None or slot.mps is not None):
        return False  # a slice or share shares its GPU with the other slices' or shares' pods
    own = object_key(namespace, slot.name)
    return any(holders.get((slot.node, index), own) != own for index in slot.gpu_indices)


def device_claim(slot: PodSlot | TraySlot, nodes: Mapping[str, NodeInfo]) -> DeviceClaim | None:
    """The claim the slot's pod needs when its node's GPUs are DRA devices (None: a device-plugin node)."""
    info = nodes.get(slot.node)
    if info is None or info.dra is None:
        return None
    if isinstance(slot, PodSlot) and slot.mig is not None:
        return mig_claim(slot, info)
    if isinstance(slot, PodSlot) and slot.mps is not None:
        return mps_claim(slot, info)
    devices = info.dra.device_names(slot.gpu_indices)
    if devices is None:
        return None  # the record names GPUs the node no longer has; the view reports that job as broken
    return DeviceClaim(claim_name(slot.name), info.dra.driver, info.dra.pool, info.dra.device_class, devices)


def mig_claim(slot: PodSlot, info: NodeInfo) -> DeviceClaim | None:
    """The claim of a rank's MIG slice: the exact MIG device its driver publishes for the slot's GPU, profile
    and start (None: the node publishes no such device any more, which the slice layout repairs as a GPU
    failure in the same pass, ``kinds/migslices``)."""
    offer, grant = info.mig, slot.mig
    if info.dra is None or offer is None or grant is None or grant.start is None:
        return None
    if not slot.gpu_indices or not 0 <= slot.gpu_indices[0] < len(offer.gpus):
        return None
    device = offer.gpus[slot.gpu_indices[0]].device(grant.profile, grant.start)
    if device is None:
        return None
    return DeviceClaim(claim_name(slot.name), info.dra.driver, info.dra.pool, offer.device_class, (device,))


def _create(
    job: JobObject,
    request: JobRequest,
    record: PlacementRecord,
    slot: PodSlot | TraySlot,
    boundary: int,
    nodes: Mapping[str, NodeInfo],
) -> PodCreate:
    claim = device_claim(slot, nodes)
    if isinstance(slot, TraySlot):
        manifest = tray_pod(job, request, record, slot)
        if claim is not None:  # the GPUs' claim replaces the pod's claims: the channel claim goes back on
            manifest = with_channel_claim(with_claim(manifest, claim.name), job_domains(job.name, record)[slot.clique])
        return PodCreate(manifest, slot.node, claim)
    manifest = worker_pod(job, request, record, slot, boundary, sizing_of(request))
    if claim is not None:
        manifest = with_claim(manifest, claim.name)
    elif slot.mig is not None:
        manifest = with_mig_resource(manifest, slot.mig.profile)
    return PodCreate(manifest, slot.node, claim)


def delete_all(actions: JobActions, pods: Sequence[PodInfo], nodes: Mapping[str, NodeInfo], why: str) -> None:
    """Every pod of the job that still runs or waits (finished pods stay for their logs)."""
    for pod in pods:
        if not pod.terminal or pod.deleting:
            delete(actions, pod, nodes, why)
