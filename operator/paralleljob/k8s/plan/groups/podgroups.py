"""Pod groups: gang-place pods that another controller (an Indexed Job, a JobSet) creates, through an
adopting ParallelJob of the group's name with ``spec.podGroup`` (docs/pod-groups.md says why).

Pure decisions on parsed pods:
- which groups need their adopting ParallelJob created, and its manifest (from the pods' annotations);
- whether a group is complete (every node rank has a live, well-formed pod) or why it waits;
- which pod holds which slot of a recorded placement: node rank -> (replica, stage) under the rank order;
- the only writes the operator makes to such pods: the GPU-indices annotation, then the binding. Whatever
  the shared decision code asked for (deletes, creates), :func:`finish_group` drops: these pods are never
  the operator's to delete or create;
- during a repair, which old pods hold up the group (still bound where their slot no longer is) and what
  must happen to them, for the ``Bound`` condition and a ``PodMustGo`` event (docs/pod-groups.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from paralleljob.core.job import JobSpec
from paralleljob.core.lifecycle import Phase
from paralleljob.k8s.edge.constants import (
    API_VERSION,
    COST_MODEL_ANNOTATION,
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_RESOURCE,
    KIND,
    MANAGED_LABEL,
    MANAGED_VALUE,
    PARALLELISM_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_TIMEOUT_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_ANNOTATION,
    RANK_ORDER_ANNOTATION,
    TARGET_NODE_ANNOTATION,
    object_key,
)
from paralleljob.k8s.edge.parse.dra import ClaimInfo
from paralleljob.k8s.edge.parse.nativegroups import NativeGroup, WorkloadInfo, declaration_of
from paralleljob.k8s.edge.parse.nodes import NodeInfo
from paralleljob.k8s.edge.parse.pods import PodInfo
from paralleljob.k8s.edge.parse.specs import JobObject, JobRequest
from paralleljob.k8s.edge.parse.template import PodConstraints
from paralleljob.k8s.edge.status.records import MalformedRecord, PlacementRecord, record_from_status
from paralleljob.k8s.plan.actions import JobActions, PodAnnotate, PodBind, added
from paralleljob.k8s.plan.groups.groupclaims import WAITING_FOR_CLAIM, and_terms, claim_terms, claim_wait
from paralleljob.k8s.plan.groups.traygroups import expected_pods, group_domains, slot_rank, tray_problems, tray_width

DEFAULT_TIMEOUT_S = 60.0
READY_CONDITION = "PodGroupReady"
_PARALLELISM = re.compile(r"^\s*(?:tp)?(\d+)\s*x\s*(?:pp)?(\d+)\s*x\s*(?:dp)?(\d+)\s*$", re.IGNORECASE)


class GroupDeclarationError(ValueError):
    """The pods' annotations do not declare a group the operator can adopt."""


MAX_LABEL_VALUE = 63


def parse_parallelism(text: str) -> tuple[int, int, int]:
    """``TPxPPxDP`` as ``4x2x2`` or ``TP4xPP2xDP2``."""
    match = _PARALLELISM.match(text)
    if match is None or any(int(g) < 1 for g in match.groups()):
        raise GroupDeclarationError(f"{PARALLELISM_ANNOTATION}={text!r} must read TPxPPxDP, e.g. 4x2x2 or TP4xPP2xDP2")
    tp, pp, dp = (int(g) for g in match.groups())
    return tp, pp, dp


def by_group(pods: Iterable[PodInfo]) -> dict[str, list[PodInfo]]:
    """Pods of groups, keyed ``namespace/group`` (the key of the adopting ParallelJob)."""
    groups: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if pod.group is not None:
            groups.setdefault(object_key(pod.namespace, pod.group), []).append(pod)
    return groups


def adopting_manifest(
    namespace: str,
    group: str,
    pods: Sequence[PodInfo],
    native: NativeGroup | None = None,
    workloads: Mapping[str, WorkloadInfo] | None = None,
) -> dict[str, Any]:
    """The ParallelJob that makes the group visible and schedulable, from its oldest-named live pod's
    annotations; owned (not controlled) by the pods' controller, so deleting the Job deletes it too.
    A Kubernetes PodGroup (``native``) declares the group instead: its annotations, then its Workload's, then
    the pods'; without a parallelism annotation the shape is TP = the pod's GPUs, PP = 1, DP = minCount.
    Such a ParallelJob is owned by the PodGroup (or the CompositePodGroup whose children it places as one
    gang), which the Job controller (or the user) owns in turn."""
    live = sorted((p for p in pods if not p.deleting), key=lambda p: p.name) or sorted(pods, key=lambda p: p.name)
    pod = live[0]
    declared = dict(pod.declaration)
    if pod.native:
        if native is None:
            raise GroupDeclarationError(f"its pods name PodGroup {group}, which does not exist (yet)")
        if native.problem:  # a composite that is not one gang we place (plan/groups/composites.py)
            raise GroupDeclarationError(native.problem)
        if native.min_count is None:
            raise GroupDeclarationError(
                f"PodGroup {group} has no gang policy (schedulingPolicy.gang.minCount); since Kubernetes 1.37 a"
                " Job's PodGroup is a gang only when the Job asks: spec.scheduling.schedulingPolicy.gang.minCount"
            )
        declared = declaration_of(native, workloads or {}, pod.declaration)
        if PARALLELISM_ANNOTATION not in declared:
            declared[PARALLELISM_ANNOTATION] = f"{pod.first_container_gpus}x1x{native.min_count}"
    if PARALLELISM_ANNOTATION not in declared:
        raise GroupDeclarationError(f"pod {pod.name} has no {PARALLELISM_ANNOTATION} annotation (TPxPPxDP)")
    tp, pp, dp = parse_parallelism(declared[PARALLELISM_ANNOTATION])
    if native is not None:
        _check_min_count(group, native, JobSpec(group, tp, pp, dp, 0.0), live, declared[PARALLELISM_ANNOTATION])
    # Never a preemption victim: preempting a group means deleting pods the operator does not own.
    spec: dict[str, Any] = {
        "podGroup": group,
        "parallelism": {"tensor": tp, "pipeline": pp, "data": dp},
        "preemptible": False,
    }
    optional = (
        (RANK_ORDER_ANNOTATION, "rankOrder", str),
        (COST_MODEL_ANNOTATION, "costModel", str),
        (GPU_MEMORY_ANNOTATION, "gpuMemoryGiB", float),
        (QUEUE_ANNOTATION, "queue", str),
        (PRIORITY_ANNOTATION, "priority", int),
    )
    for annotation, field_name, kind in optional:
        if annotation in declared:
            try:
                spec[field_name] = kind(declared[annotation])
            except ValueError:
                raise GroupDeclarationError(
                    f"pod {pod.name}: {annotation}={declared[annotation]!r} is not valid"
                ) from None
    labels = {POD_GROUP_LABEL: group, MANAGED_LABEL: MANAGED_VALUE}
    if len(group) > MAX_LABEL_VALUE:
        # a Job controller's PodGroup name (<job>-<hash>-<job>-pgt-0-<hash>) outgrows a label value; the
        # object is found by its name, the label only lets `kubectl get pj -l` list groups
        del labels[POD_GROUP_LABEL]
    metadata: dict[str, Any] = {"name": group, "namespace": namespace, "labels": labels}
    if POD_GROUP_TIMEOUT_ANNOTATION in declared:
        metadata["annotations"] = {POD_GROUP_TIMEOUT_ANNOTATION: declared[POD_GROUP_TIMEOUT_ANNOTATION]}
    owner = dict(pod.controller)
    if native is not None and native.uid:
        owner = {"apiVersion": native.api_version, "kind": native.kind, "name": native.name, "uid": native.uid}
    if owner.get("uid"):
        metadata["ownerReferences"] = [{**owner, "controller": False, "blockOwnerDeletion": False}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _check_min_count(group: str, native: NativeGroup, spec: JobSpec, pods: Sequence[PodInfo], declared: str) -> None:
    """A PodGroup's gang is the whole group: ``minCount`` must be its pod count, one per TP group or, on NVLink
    trays, one per tray (``traygroups``). A smaller one is kube-scheduler's elastic gang (at least ``minCount``
    of more pods), which paralleljob-scheduler does not place: it binds a gang only whole."""
    width = tray_width(spec, pods)
    wanted = expected_pods(spec, width)
    if native.min_count == wanted:
        return
    if width:
        count = f"TP x PP x DP / {width} = {wanted} (one pod per tray of {width} GPUs)"
    else:
        count = f"PP x DP = {wanted} (one pod per TP group)"
    elastic = (
        "; a gang smaller than its pods (an elastic gang) is not placed: paralleljob-scheduler binds a gang only whole"
        if native.min_count is not None and native.min_count < wanted
        else ""
    )
    raise GroupDeclarationError(
        f"PodGroup {group}: gang.minCount {native.min_count} is not {count} of {PARALLELISM_ANNOTATION}={declared}"
        f"{elastic}"
    )


def successors(owners: Sequence[tuple[str, str, str]], pods: Sequence[PodInfo]) -> list[PodInfo]:
    """Pods of the group made by a *replacement* of the adopting ParallelJob's owner: a controller of the
    same kind and name as an owner but another UID (JobSet's restart deletes and recreates its child Jobs
    under the same names). Such pods are not this ParallelJob's: it is garbage once its owner is gone, and
    binding them into its old slots would strand the successor's gang (the successor's ParallelJob is
    created, from those pods, once the garbage collector has removed this one)."""
    replaced = {(kind, name): uid for kind, name, uid in owners if uid}
    if not replaced:
        return []  # created by a user, not adopted: every pod of the group is its own
    out = []
    for pod in pods:
        controller = dict(pod.controller)
        uid = replaced.get((controller.get("kind", ""), controller.get("name", "")))
        if uid is not None and controller.get("uid") and controller["uid"] != uid:
            out.append(pod)
    return out


@dataclass(frozen=True, slots=True)
class GroupState:
    ready: bool
    reason: str  # PodsReady | WaitingForPods | InvalidPodGroup | MIGSlicesNotSupported
    message: str
    by_rank: Mapping[int, PodInfo]


def live_pods(pods: Iterable[PodInfo]) -> list[PodInfo]:
    return sorted((p for p in pods if not p.deleting and not p.terminal), key=lambda p: p.name)


def group_state(request: JobRequest, pods: Sequence[PodInfo]) -> GroupState:
    """Complete when each node rank 0..pp*dp-1 has exactly one live pod asking for one TP group's GPUs, or,
    for a group on NVLink trays (plan/groups/traygroups.py), each rank 0..tp*pp*dp/w-1 one pod of a whole tray."""
    spec = request.spec
    width = tray_width(spec, live_pods(pods))
    total = expected_pods(spec, width)
    problems: list[str] = []
    by_rank: dict[int, PodInfo] = {}
    sliced = [pod for pod in live_pods(pods) if pod.mig_requests]
    if sliced:
        return GroupState(False, SLICES_NOT_SUPPORTED, slices_refusal(sliced), {})
    for pod in live_pods(pods):
        declared = dict(pod.declaration).get(PARALLELISM_ANNOTATION)
        try:
            shape = parse_parallelism(declared) if declared is not None else None
        except GroupDeclarationError as exc:
            problems.append(f"pod {pod.name}: {exc}")
            continue
        if shape is not None and shape != (spec.tp, spec.pp, spec.dp):
            problems.append(f"pod {pod.name} declares {declared}, the group is {spec.tp}x{spec.pp}x{spec.dp}")
        if width:
            problems.extend(tray_problems(pod, spec, width, request.pod_group))
        elif pod.first_container_gpus != spec.tp or pod.gpus != spec.tp:
            problems.append(
                f"pod {pod.name} must request {GPU_RESOURCE}: {spec.tp} on its first container and no other GPUs"
                f" (one pod is one TP group); it requests {pod.first_container_gpus} there, {pod.gpus} in all"
            )
        if pod.constraints is None:
            problems.append(f"pod {pod.name}: its pod spec cannot be read for placement: {pod.constraints_error}")
        if pod.group_rank is None:
            problems.append(f"pod {pod.name}: {pod.group_rank_error}")
        elif pod.group_rank >= total:
            problems.append(f"pod {pod.name} has node rank {pod.group_rank}, outside 0..{total - 1}")
        elif pod.group_rank in by_rank:
            problems.append(f"pods {by_rank[pod.group_rank].name} and {pod.name} both have node rank {pod.group_rank}")
        else:
            by_rank[pod.group_rank] = pod
    if problems:
        return GroupState(False, "InvalidPodGroup", "; ".join(problems[:4]), by_rank)
    missing = [r for r in range(total) if r not in by_rank]
    if missing:
        shown = ", ".join(str(r) for r in missing[:8]) + (", ..." if len(missing) > 8 else "")
        message = f"{len(by_rank)} of {total} pods exist (missing node ranks {shown})"
        return GroupState(False, "WaitingForPods", message, by_rank)
    return GroupState(True, "PodsReady", f"all {total} pods exist", by_rank)


SLICES_NOT_SUPPORTED = "MIGSlicesNotSupported"


def slices_refusal(sliced: Sequence[PodInfo]) -> str:
    """Why a group whose pods ask for MIG slices of the device plugin waits: placing a pod group on slices is
    not built (its pods would be bound by node and profile, as a slice job's are, and repaired by the group's
    policy), and treating a slice as a whole GPU would be wrong; the fix the user has today."""
    names = ", ".join(p.name for p in sliced[:3]) + (", ..." if len(sliced) > 3 else "")
    asked = ", ".join(sorted({r for p in sliced for r in p.mig_requests}))
    return (
        f"pod(s) {names} ask for {asked}: pod groups on MIG slices are not supported yet; run the work as a"
        " ParallelJob with spec.gpuSharing.migProfile (one slice per rank), or ask for whole GPUs"
        f" ({GPU_RESOURCE}: TP on the first container)"
    )


def group_constraints(pods: Sequence[PodInfo]) -> PodConstraints | None:
    """What the group's pods ask of a node (they share a template; the first readable live pod speaks)."""
    return next((p.constraints for p in live_pods(pods) if p.constraints is not None), None)


def timeout_of(job: JobObject) -> float:
    try:
        return max(0.0, float(job.annotations.get(POD_GROUP_TIMEOUT_ANNOTATION, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def hold_until_complete(
    actions: JobActions, request: JobRequest, pods: Sequence[PodInfo], now: str, now_s: float, since_s: float
) -> bool:
    """True when the group may be admitted; otherwise the condition (and, past the timeout, a Warning
    event, once) says why it waits, and ``actions.wake_at`` asks for a pass when the timeout ends."""
    state = group_state(request, pods)
    job = actions.job
    previous: Mapping[str, Any] = next((c for c in job.status.conditions if c.get("type") == READY_CONDITION), {})
    if state.ready:
        actions.draft.condition(READY_CONDITION, "True", state.reason, state.message, now)
        return True
    reason, message = state.reason, state.message
    deadline = since_s + timeout_of(job)
    if reason == "WaitingForPods":
        if now_s >= deadline:
            reason = "PodGroupTimeout"
            message = f"{message}; waited {now_s - since_s:.0f} s, longer than {timeout_of(job):g} s"
        else:
            actions.wake_at = deadline
    if reason != previous.get("reason"):
        actions.note("Warning" if reason != "WaitingForPods" else "Normal", reason, message)
    actions.draft.condition(READY_CONDITION, "False", reason, message, now)
    return False


def hold_for_claims(actions: JobActions, group: NativeGroup, claims: Mapping[str, ClaimInfo], now: str) -> bool:
    """True when the PodGroup's shared ResourceClaims let it be placed (plan/groups/groupclaims.py); otherwise
    ``PodGroupReady`` says which claim it waits for (and a Normal event, once, when it starts waiting)."""
    waiting = claim_wait(group, claims)
    if not waiting:
        return True
    previous: Mapping[str, Any] = actions.job.status.condition(READY_CONDITION)
    if previous.get("reason") != WAITING_FOR_CLAIM:
        actions.note("Normal", WAITING_FOR_CLAIM, waiting)
    actions.draft.condition(READY_CONDITION, "False", WAITING_FOR_CLAIM, waiting, now)
    return False


def slot_pods(record: PlacementRecord, pods: Sequence[PodInfo]) -> list[tuple[int, PodInfo | None]]:
    """Per slot (in record order): its node rank under the record's rank order, and the live pod with it."""
    by_rank: dict[int, PodInfo] = {}
    for pod in pods:
        if pod.group_rank is not None and not pod.deleting and pod.phase != "Failed":
            by_rank.setdefault(pod.group_rank, pod)
    out: list[tuple[int, PodInfo | None]] = []
    for slot in record.pod_slots:
        rank = slot_rank(record, slot)
        out.append((rank, by_rank.get(rank)))
    return out


def stuck_pods(
    record: PlacementRecord, pods: Sequence[PodInfo], nodes: Mapping[str, NodeInfo]
) -> list[tuple[PodInfo, str]]:
    """Pods still bound where their node rank's slot no longer is (it moved off broken hardware) while no pod
    of that rank is bound on the slot, each with what must happen to it. The owner (a Job) makes the
    replacement only once the old pod is gone, and the operator deletes no pod it does not own."""
    out: list[tuple[PodInfo, str]] = []
    for slot in record.pod_slots:
        rank = slot_rank(record, slot)
        same = [p for p in pods if p.group_rank == rank and not p.terminal]
        if any(p.bound and p.node == slot.node for p in same):
            continue
        out.extend((p, _why_stuck(p, nodes.get(p.node))) for p in same if p.bound and p.node != slot.node)
    return out


GOING = "it is terminating; its replacement is bound to the new slot once it is gone"


def _why_stuck(pod: PodInfo, node: NodeInfo | None) -> str:
    delete = f"kubectl delete pod -n {pod.namespace} {pod.name}"
    if node is None:
        return (
            f"node {pod.node} is gone; kube-controller-manager's pod garbage collector deletes pods bound to a"
            f" node that no longer exists (or: {delete}), then the owner creates the replacement"
        )
    if not node.ready:
        return (
            f"node {pod.node} is NotReady ({node.not_ready_reason or 'Unknown'}): a pod there is not removed until"
            " the node's kubelet confirms it stopped (deleted, it stays Terminating); if the node is down for"
            f" good, force-delete it ({delete} --grace-period=0 --force) so that the owner creates the replacement"
        )
    if pod.deleting:
        return GOING
    return f"its GPUs on {pod.node} are out of service: delete it ({delete}) so that the owner creates the replacement"


def note_stuck(
    actions: JobActions, record: PlacementRecord, pods: Sequence[PodInfo], nodes: Mapping[str, NodeInfo], now: str
) -> None:
    """During a repair: the ``Bound`` condition names the old pods that must go and why, and a Warning event
    (``PodMustGo``) says so whenever that changes, unless every such pod is already terminating on its own."""
    stuck = stuck_pods(record, pods, nodes)
    if not stuck:
        return
    message = (
        "; ".join(f"pod {p.name} (node rank {p.group_rank}) must go: {why}" for p, why in stuck)
        + ". The operator re-creates and deletes no pod of a group: it binds the owner's replacement to the"
        " new slot"
    )
    previous = next((c.get("message") for c in actions.job.status.conditions if c.get("type") == "Bound"), None)
    actions.draft.condition("Bound", "False", "WaitingForOwner", message, now)
    # A pod that is already going by itself needs nothing from anyone: a Warning that it "must go" would
    # contradict the delete the user just made. The condition still says where things stand.
    if message != previous and any(why != GOING for _, why in stuck):
        actions.note("Warning", "PodMustGo", message)


def finish_group(
    actions: JobActions,
    pods: Sequence[PodInfo],
    active: bool,
    nodes: Mapping[str, NodeInfo] | None = None,
    now: str = "",
) -> None:
    """Replace whatever the shared code asked for by the group's own writes: annotate each unbound pod with
    its slot's GPUs, then bind it. Never a delete, a create or a Service for pods the operator does not own.
    With ``nodes``, a repair waiting for old pods to go says which (:func:`note_stuck`)."""
    actions.deletes = ()
    actions.creates = ()
    actions.binds = ()
    actions.annotates = ()
    actions.service = None
    if not active:
        return
    try:
        record = record_from_status(actions.draft.data)
    except MalformedRecord:
        return
    if record is None:
        return
    if nodes is not None and actions.draft.phase is Phase.RECOVERING:
        note_stuck(actions, record, pods, nodes, now)
    # a group on trays: its clique's ComputeDomain before the binds (the driver makes the pods' template)
    actions.compute_domains = group_domains(actions.job, record)
    for slot, (rank, pod) in zip(record.pod_slots, slot_pods(record, pods), strict=True):
        if pod is None or pod.terminal:
            continue
        indices = ",".join(str(i) for i in slot.gpu_indices)
        annotate = PodAnnotate(
            pod.namespace, pod.name, pod.uid, {GPU_INDICES_ANNOTATION: indices, TARGET_NODE_ANNOTATION: slot.node}
        )
        if pod.bound:
            if pod.node == slot.node and pod.gpu_indices != slot.gpu_indices:
                actions.annotates = added(
                    actions.annotates, annotate
                )  # bound, but the annotation did not land: write it again
            continue  # bound elsewhere (a slot moved off broken hardware): its owner must replace it
        if any(p.deleting and p.group_rank == rank and p.node == slot.node and not p.terminal for p in pods):
            continue  # its predecessor still runs there: bind once it is gone
        actions.annotates = added(actions.annotates, annotate)
        actions.binds = added(actions.binds, PodBind(pod.namespace, pod.name, pod.uid, slot.node))


class GroupRequests(Mapping[str, JobRequest]):
    """Every job's request, a group's with its pods' node constraints (an adopting job has no template)
    and, for a Kubernetes PodGroup, its topology key (the whole gang inside one domain of that label) and
    the nodes its shared claims' allocations can be used from (on top of the pods' own node affinity).
    Worked out per job when asked: a pass asks for the jobs it places and those holding GPUs, not for the
    thousands that wait untouched."""

    def __init__(
        self,
        jobs: Mapping[str, JobObject],
        groups: Mapping[str, Sequence[PodInfo]],
        native: Mapping[str, NativeGroup] | None = None,
        claims: Mapping[str, ClaimInfo] | None = None,
    ) -> None:
        self._jobs, self._groups, self._native, self._claims = jobs, groups, native or {}, claims or {}
        self._done: dict[str, JobRequest] = {}

    def __getitem__(self, key: str) -> JobRequest:
        done = self._done.get(key)
        if done is None:
            job = self._jobs.get(key)
            if job is None or job.request is None:
                raise KeyError(key)
            done = self._done[key] = self._group_request(key, job.request) if job.request.pod_group else job.request
        return done

    def __contains__(self, key: object) -> bool:
        job = self._jobs.get(key) if isinstance(key, str) else None
        return job is not None and job.request is not None

    def __iter__(self) -> Iterator[str]:
        return (key for key, job in self._jobs.items() if job.request is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _group_request(self, key: str, request: JobRequest) -> JobRequest:
        width = tray_width(request.spec, live_pods(self._groups.get(key, ())))
        if width:
            request = replace(request, tray_pod_gpus=width)
        constraints = group_constraints(self._groups.get(key, ()))
        pod_group = self._native.get(key)
        if pod_group is not None and pod_group.topology_key:
            constraints = replace(constraints or request.constraints, topology_key=pod_group.topology_key)
        terms = claim_terms(pod_group, self._claims) if pod_group is not None and pod_group.resource_claims else None
        if terms is not None:
            base = constraints or request.constraints
            constraints = replace(base, affinity=and_terms([base.affinity, terms]))
        return request if constraints is None else replace(request, constraints=constraints)
