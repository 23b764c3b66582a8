"""Pods as the operator needs them, parsed at the edge from raw Pod objects (plain dicts).

Three kinds matter: our workers (labelled with their job, annotated with their GPU indices), the pods of
pod groups (another controller's pods that ask for our scheduler; their node rank, shape and constraints are
read here, see podgroups.py), and everybody else's pods that hold GPUs on a node, which the placer must
treat as used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.edge.constants import (
    CHECKPOINT_REQUESTED_ANNOTATION,
    COST_MODEL_ANNOTATION,
    GPU_INDICES_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    GPU_RESOURCE,
    INCARNATION_ANNOTATION,
    JOB_LABEL,
    KIND,
    PARALLELISM_ANNOTATION,
    POD_GROUP_LABEL,
    POD_GROUP_TIMEOUT_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_ANNOTATION,
    RANK_ORDER_ANNOTATION,
    SCHEDULER_NAME,
    TARGET_NODE_ANNOTATION,
    object_key,
)
from paralleljob.k8s.edge.parse.migdevices import MIG_RESOURCE_PREFIX
from paralleljob.k8s.edge.parse.noderank import node_rank_of
from paralleljob.k8s.edge.parse.quantity import parse_count
from paralleljob.k8s.edge.parse.template import InvalidTemplate, PodConstraints, effective_requests, parse_constraints
from paralleljob.k8s.edge.render.computedomain import CLAIM_NAME

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
GROUP_DECLARATION_KEYS = frozenset(
    {
        PARALLELISM_ANNOTATION,
        RANK_ORDER_ANNOTATION,
        COST_MODEL_ANNOTATION,
        GPU_MEMORY_ANNOTATION,
        QUEUE_ANNOTATION,
        PRIORITY_ANNOTATION,
        POD_GROUP_TIMEOUT_ANNOTATION,
    }
)


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    node: str  # spec.nodeName: empty until bound
    phase: str
    gpus: int
    job: str | None  # the ParallelJob (same namespace) this worker belongs to
    owner_uid: str | None
    gpu_indices: tuple[int, ...] | None
    target_node: str
    incarnation: int
    deleting: bool
    failure: str = ""  # why it failed, for lastFailure and events
    checkpoint_requested: str = ""  # the preemption deadline it was told about, if any
    requests: tuple[tuple[str, int], ...] = ()  # what it reserves on its node besides GPUs (scheduler units)
    # Pod groups (docs/pod-groups.md): set only on pods of another controller that ask for our scheduler.
    group: str | None = None
    native: bool = False  # the group is a scheduling.k8s.io PodGroup (spec.schedulingGroup), not our label
    group_rank: int | None = None  # its node rank in the group; None when it declares none (or a bad one)
    group_rank_error: str = ""
    first_container_gpus: int = 0
    mig_requests: tuple[str, ...] = ()  # the nvidia.com/mig-<profile> resources its containers ask for
    declaration: tuple[tuple[str, str], ...] = ()  # the group's paralleljob.dev/* annotations on this pod
    controller: tuple[tuple[str, str], ...] = ()  # its controller's ownerReference (apiVersion, kind, name, uid)
    constraints: PodConstraints | None = None  # what it asks of a node; None: unreadable (constraints_error)
    constraints_error: str = ""
    # the claim template its first container's ``nvlink-channel`` claim comes from ("" when it has none):
    # what a group on NVLink trays must name (``computedomain.group_channel_template``)
    channel_template: str = ""
    job_key: str | None = None  # namespace/job: worked out once here, read for every pod on every pass

    @property
    def key(self) -> str:
        return object_key(self.namespace, self.name)

    @property
    def bound(self) -> bool:
        return bool(self.node)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def holds_gpus(self) -> bool:
        """A bound pod that has not finished keeps its GPUs, even while it is being deleted."""
        return self.bound and not self.terminal and self.gpus > 0


def _container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(GPU_RESOURCE)
        if value is not None:
            return parse_count(value) or 0
    return 0


def pod_gpu_request(spec: Mapping[str, Any]) -> int:
    """What the scheduler would reserve: the sum over containers, or the largest init container if more."""
    containers = sum(_container_gpus(c) for c in spec.get("containers") or [] if isinstance(c, Mapping))
    init = max((_container_gpus(c) for c in spec.get("initContainers") or [] if isinstance(c, Mapping)), default=0)
    return max(containers, init)


def pod_requests(spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The pod's effective non-GPU requests, as the scheduler counts them against its node."""
    try:
        requests = effective_requests(spec)
    except InvalidTemplate:
        return ()  # the API validated it; a shape we cannot read holds nothing we can count
    requests.pop(GPU_RESOURCE, None)
    return tuple(sorted(requests.items()))


FAILURE_MESSAGE_CHARS = 300  # of a container's termination message carried into lastFailure and the Event


def _last_words(message: Any) -> str:
    """The end of a container's termination message (``/dev/termination-log``, or its log's tail with
    ``FallbackToLogsOnError``) on one line: what the program said about why it stopped."""
    text = " ".join(str(message or "").split())
    return text if len(text) <= FAILURE_MESSAGE_CHARS else "..." + text[-FAILURE_MESSAGE_CHARS:]


def _failure(status: Mapping[str, Any]) -> str:
    for cs in status.get("containerStatuses") or []:
        terminated = ((cs or {}).get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            code, reason = terminated.get("exitCode"), terminated.get("reason", "")
            said = _last_words(terminated.get("message"))
            return f"container {cs.get('name')} exited with code {code} ({reason})" + (f": {said}" if said else "")
    return str(status.get("message") or status.get("reason") or "")


def parse_pod(body: Mapping[str, Any]) -> PodInfo:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    owner_uid = None
    for ref in metadata.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == KIND and ref.get("controller"):
            owner_uid = str(ref.get("uid"))
    job = labels.get(JOB_LABEL) if owner_uid is not None else None
    indices: tuple[int, ...] | None = None
    raw = annotations.get(GPU_INDICES_ANNOTATION)
    if isinstance(raw, str):
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            indices = tuple(int(p) for p in parts)
    try:
        incarnation = int(annotations.get(INCARNATION_ANNOTATION, "0"))
    except ValueError:
        incarnation = -1
    phase = str(status.get("phase") or "Pending")
    group = labels.get(POD_GROUP_LABEL)
    native = False
    if not isinstance(group, str):
        # Kubernetes' own gang API: the pod names its PodGroup (nativegroups.py); our label wins when both
        group, native = _scheduling_group(spec), True
    if owner_uid is not None or spec.get("schedulerName") != SCHEDULER_NAME or not isinstance(group, str):
        group, native = None, False  # our own workers, or pods another scheduler places
    return PodInfo(
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        phase=phase,
        gpus=pod_gpu_request(spec),
        job=str(job) if job else None,
        owner_uid=owner_uid,
        gpu_indices=indices,
        target_node=str(annotations.get(TARGET_NODE_ANNOTATION, "")),
        incarnation=incarnation,
        deleting=bool(metadata.get("deletionTimestamp")),
        failure=_failure(status) if phase == "Failed" else "",
        checkpoint_requested=str(annotations.get(CHECKPOINT_REQUESTED_ANNOTATION, "")),
        requests=pod_requests(spec) if spec.get("nodeName") and phase not in TERMINAL_PHASES else (),
        **(_group_fields(group, metadata, spec) if group else {}),
        native=native,
        job_key=object_key(str(metadata.get("namespace", "")), str(job)) if job else None,
    )


def _scheduling_group(spec: Mapping[str, Any]) -> str | None:
    """``spec.schedulingGroup.podGroupName`` (Kubernetes 1.36+), if the pod names a PodGroup."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


def _group_fields(group: str, metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    rank, error = node_rank_of(metadata)
    annotations = metadata.get("annotations") or {}
    declaration = tuple(sorted((k, str(v)) for k, v in annotations.items() if k in GROUP_DECLARATION_KEYS))
    controller: tuple[tuple[str, str], ...] = ()
    for ref in metadata.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            controller = tuple((k, str(ref.get(k, ""))) for k in ("apiVersion", "kind", "name", "uid"))
    containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    first_gpus = _container_gpus(containers[0]) if containers else 0
    mig = {
        name
        for c in (*containers, *(c for c in spec.get("initContainers") or [] if isinstance(c, Mapping)))
        for section in ("limits", "requests")
        for name in ((c.get("resources") or {}).get(section) or {})
        if str(name).startswith(MIG_RESOURCE_PREFIX)
    }
    # what it asks of a node, read as a ParallelJob's template is; nodeName and restartPolicy are its
    # controller's business here (the pod is bound by the operator, restarted by its owner)
    readable = {k: v for k, v in spec.items() if k not in ("nodeName", "restartPolicy")}
    constraints_error = ""
    try:
        constraints: PodConstraints | None = parse_constraints(readable, first_gpus)
    except InvalidTemplate as exc:
        constraints, constraints_error = None, str(exc)
    return {
        "group": group,
        "group_rank": rank,
        "group_rank_error": error,
        "first_container_gpus": first_gpus,
        "mig_requests": tuple(sorted(mig)),
        "constraints": constraints,
        "constraints_error": constraints_error,
        "channel_template": _channel_template(spec, containers),
        "declaration": declaration,
        "controller": controller,
    }


def _channel_template(spec: Mapping[str, Any], containers: list[Mapping[str, Any]]) -> str:
    """The template of the pod's ``nvlink-channel`` claim, when its first container uses that claim."""
    used = ((containers[0].get("resources") or {}).get("claims") or []) if containers else []
    if not any(isinstance(c, Mapping) and c.get("name") == CLAIM_NAME for c in used):
        return ""
    for entry in spec.get("resourceClaims") or []:
        if isinstance(entry, Mapping) and entry.get("name") == CLAIM_NAME:
            return str(entry.get("resourceClaimTemplateName") or "")
    return ""
